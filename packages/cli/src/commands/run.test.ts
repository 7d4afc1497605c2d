import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readGoldensFile } from "@keepquant/engine";

const bin = fileURLToPath(new URL("../../dist/keepquant.js", import.meta.url));
const repoRoot = fileURLToPath(new URL("../../../../", import.meta.url));
const cache = mkdtempSync(path.join(tmpdir(), "kq-run-"));
const manifest = JSON.parse(readFileSync(path.join(repoRoot, "goldens", "parity", "manifest.json"), "utf8")) as {
  fixtures: { name: string; sha256: string }[];
};

beforeAll(() => {
  if (!existsSync(bin)) throw new Error(`${bin} is missing: run \`pnpm --filter @keepquant/cli build\` first`);
});
afterAll(() => rmSync(cache, { recursive: true, force: true }));

function run(...args: string[]) {
  const result = spawnSync(process.execPath, [bin, ...args], {
    encoding: "utf8",
    env: { ...process.env, KEEPQUANT_CACHE_DIR: cache, KEEPQUANT_DEBUG: "", CI: "1" },
  });
  return { code: result.status, stdout: result.stdout, stderr: result.stderr };
}

interface RunDocument {
  synthetic: boolean;
  promptTokens: number[];
  tokens: number[];
  text: string;
  stopReason: string;
  stats: { prefillTokensPerSecond: number; decodeTokensPerSecond: number; residentBytes: { packed: number; f32: number } };
  providers: Record<string, string>;
}

describe("keepquant run", () => {
  it("without a model generates the synthetic default deterministically and greedy-matches llama.cpp's goldens", () => {
    // tied-4l-f32 is the default model. Prompt 15 of its goldens (16 raw ids) has no near tie
    // (every top-1/top-2 gap >= 54 mnats), so run's default f16 K/V cache cannot flip a token.
    const golden = readGoldensFile(path.join(repoRoot, "goldens", "parity", "tied-4l-f32.json")).prompts[15]!;
    const r = run("run", "--prompt-ids", golden.ids.join(","), "--max-tokens", "16", "--json");
    expect(r.code, r.stderr).toBe(0);
    const doc = JSON.parse(r.stdout) as RunDocument;
    expect(doc.synthetic).toBe(true);
    expect(doc.promptTokens).toEqual(golden.ids);
    expect(doc.tokens.length).toBeGreaterThan(0);
    expect(doc.tokens).toEqual(golden.tokens.slice(0, doc.tokens.length));
    expect(["max_tokens", "length", "eog"]).toContain(doc.stopReason);
    expect(doc.stats.prefillTokensPerSecond).toBeGreaterThan(0);
    expect(doc.stats.residentBytes.packed).toBeGreaterThan(1_000_000);
    expect(Object.keys(doc.providers)).toContain("embedding");
    // The default model file is the parity fixture, bit for bit.
    const file = path.join(cache, "tied-4l-f32.gguf");
    const sha = createHash("sha256").update(readFileSync(file)).digest("hex");
    expect(sha).toBe(manifest.fixtures.find((f) => f.name === "tied-4l-f32")!.sha256);
  });

  it("streams text to stdout and says the default model is synthetic", () => {
    const r = run("run", "--prompt", "The quick brown fox", "--max-tokens", "6");
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout.trim().length).toBeGreaterThan(0);
    expect(r.stderr).toMatch(/SYNTHETIC/);
    expect(r.stderr).toMatch(/prefill [\d.]+ tok\/s, decode [\d.]+ tok\/s/);
  });

  it("--prompt is plain text: special-token texts stay text unless --parse-special", () => {
    const prompt = "<|im_start|>user\nhi<|im_end|>";
    const plain = JSON.parse(run("run", "--prompt", prompt, "--max-tokens", "1", "--json").stdout) as RunDocument;
    const special = JSON.parse(run("run", "--prompt", prompt, "--parse-special", "--max-tokens", "1", "--json").stdout) as RunDocument;
    const vocab = JSON.parse(readFileSync(path.join(repoRoot, "goldens", "tokenizer", "vocab.json"), "utf8")) as { tokens: string[] };
    const imStart = vocab.tokens.indexOf("<|im_start|>");
    expect(imStart).toBeGreaterThan(0);
    expect(plain.promptTokens).not.toContain(imStart);
    expect(special.promptTokens[0]).toBe(imStart);
    expect(special.promptTokens.length).toBeLessThan(plain.promptTokens.length);
  });

  it("samples reproducibly with a seed, from an explicit model file, in bf16 numerics", () => {
    const file = path.join(cache, "tied-4l-f32.gguf");
    const args = ["run", file, "--prompt-ids", "5,6,7", "--max-tokens", "8", "--temperature", "0.9", "--top-k", "40", "--top-p", "0.95", "--numerics", "bf16", "--json"];
    const a = run(...args, "--seed", "7");
    const b = run(...args, "--seed", "7");
    expect(a.code, a.stderr).toBe(0);
    const first = JSON.parse(a.stdout) as RunDocument;
    expect(first.synthetic).toBe(false);
    expect(first.tokens).toEqual((JSON.parse(b.stdout) as RunDocument).tokens);
  });

  it("refuses bad command lines with exit 2 and a missing model with exit 1", () => {
    expect(run("run", "--prompt", "a", "--prompt-ids", "1").code).toBe(2);
    expect(run("run", "--max-tokens", "3").code).toBe(2);
    const badIds = run("run", "--prompt-ids", "1,x");
    expect(badIds.code).toBe(2);
    expect(badIds.stderr).toMatch(/--prompt-ids/);
    expect(run("run", "--prompt", "a", "--numerics", "fp8").code).toBe(2);
    expect(run("run", "--prompt", "a", "--top-p", "0").code).toBe(2);
    const missing = run("run", "/nonexistent/model.gguf", "--prompt", "a");
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/MODEL_NOT_FOUND: model file not found/);
  });
});
