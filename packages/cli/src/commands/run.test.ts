import { spawn, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { beforeAll, describe, expect, it } from "vitest";
import { defaultModelInfo } from "@keepquant/default-model";
import { readGoldensFile } from "@keepquant/engine/parity";
import { readGguf } from "@keepquant/gguf";
import { CLI_BIN, GOLDEN_RUN_FLAGS, spawnCli, expectBuiltCli } from "./test-support.js";

const bin = CLI_BIN;
const repoRoot = fileURLToPath(new URL("../../../../", import.meta.url));
const defaultModel = defaultModelInfo();

beforeAll(() => {
  expectBuiltCli();
});

function run(...args: string[]) {
  return spawnCli(args, { ...process.env, KEEPQUANT_DEBUG: "", CI: "1" });
}

interface RunDocument {
  model: string;
  synthetic: boolean;
  contextLength: number;
  promptTokens: number[];
  tokens: number[];
  text: string;
  stopReason: string;
  stats: { prefillTokensPerSecond: number; decodeTokensPerSecond: number; residentBytes: { packed: number; f32: number } };
  providers: Record<string, string>;
}

describe("keepquant run", () => {
  it("without a model generates with the trained default deterministically and greedy-matches llama.cpp's goldens", () => {
    // the default model's goldens were made with F32 K/V and flash attention off: run the same settings
    const goldensFile = path.join(repoRoot, "goldens", "default-model", "default-q4_k_m.json");
    const golden = readGoldensFile(goldensFile).prompts[0]!;
    const r = run("run", "--prompt-ids", golden.ids.join(","), "--max-tokens", "16", ...GOLDEN_RUN_FLAGS);
    expect(r.code, r.stderr).toBe(0);
    const doc = JSON.parse(r.stdout) as RunDocument;
    expect(doc.synthetic).toBe(false);
    expect(doc.promptTokens).toEqual(golden.ids);
    expect(doc.tokens).toEqual(golden.tokens);
    expect(doc.stats.prefillTokensPerSecond).toBeGreaterThan(0);
    expect(doc.stats.residentBytes.packed).toBeGreaterThan(1_000_000);
    expect(Object.keys(doc.providers)).toContain("embedding");
    // The default model file (from @keepquant/default-model) is the file the goldens were made from.
    expect(path.resolve(doc.model)).toBe(defaultModel.file);
    const sha = createHash("sha256").update(readFileSync(doc.model)).digest("hex");
    expect(sha).toBe((JSON.parse(readFileSync(goldensFile, "utf8")) as { modelSha256: string }).modelSha256);
  });

  it("streams English-looking text to stdout and names the default model", () => {
    const r = run("run", "--prompt", "Once upon a time", "--max-tokens", "24", "--temperature", "0.8", "--seed", "4");
    expect(r.code, r.stderr).toBe(0);
    const words = r.stdout.toLowerCase().match(/[a-z]+/g) ?? [];
    expect(words.length).toBeGreaterThan(5);
    expect(words).toContain("the");
    expect(r.stderr).toMatch(new RegExp(`embedded qwen35 model ${defaultModel.name}`));
    expect(r.stderr).not.toMatch(/SYNTHETIC/);
    expect(r.stderr).toMatch(/prefill [\d.]+ tok\/s, decode [\d.]+ tok\/s/);
  });

  it("--prompt is plain text: special-token texts stay text unless --parse-special", async () => {
    const prompt = "<|im_start|>user\nhi<|im_end|>";
    const plain = JSON.parse(run("run", "--prompt", prompt, "--max-tokens", "1", "--json").stdout) as RunDocument;
    const special = JSON.parse(run("run", "--prompt", prompt, "--parse-special", "--max-tokens", "1", "--json").stdout) as RunDocument;
    const tokens = (await readGguf(defaultModel.file)).metadata.get("tokenizer.ggml.tokens")!.value as string[];
    const imStart = tokens.indexOf("<|im_start|>");
    expect(imStart).toBeGreaterThan(0);
    expect(plain.promptTokens).not.toContain(imStart);
    expect(special.promptTokens[0]).toBe(imStart);
    expect(special.promptTokens.length).toBeLessThan(plain.promptTokens.length);
  });

  it("samples reproducibly with a seed, from an explicit model file, in bf16 numerics", () => {
    const file = defaultModel.file;
    const args = [
      "run",
      file,
      "--prompt-ids",
      "5,6,7",
      "--max-tokens",
      "8",
      "--temperature",
      "0.9",
      "--top-k",
      "40",
      "--top-p",
      "0.95",
      "--numerics",
      "bf16",
      "--json",
    ];
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

  it("--speculative mtp: the default model's MTP drafter gives the goldens' greedy tokens; stats in --json; bad values exit 2", () => {
    const goldensFile = path.join(repoRoot, "goldens", "default-model", "default-q4_k_m.json");
    const golden = readGoldensFile(goldensFile).prompts[0]!;
    const args = ["run", "--prompt-ids", golden.ids.join(","), "--max-tokens", "16", "--kv-type", "f32", "--flash-attn", "off"];
    const r = run(...args, "--ignore-eog", "--json", "--speculative", "mtp", "--draft-tokens", "2");
    expect(r.code, r.stderr).toBe(0);
    const doc = JSON.parse(r.stdout) as RunDocument & {
      stats: { speculative: { method: string; draftTokens: number; drafted: number; accepted: number; tokensPerTargetStep: number } };
    };
    expect(doc.tokens).toEqual(golden.tokens);
    expect(doc.stats.speculative.method).toBe("mtp");
    expect(doc.stats.speculative.draftTokens).toBe(2);
    expect(doc.stats.speculative.drafted).toBeGreaterThan(0);
    expect(doc.stats.speculative.tokensPerTargetStep).toBeGreaterThanOrEqual(1);
    // the cheaper drafter: the same greedy tokens, its head's ids in the stats
    const reduced = run(...args, "--ignore-eog", "--json", "--speculative", "mtp", "--draft-tokens", "2", "--draft-vocab", "1024");
    expect(reduced.code, reduced.stderr).toBe(0);
    const reducedDoc = JSON.parse(reduced.stdout) as RunDocument & { stats: { speculative: { draftVocab: number; drafted: number } } };
    expect(reducedDoc.tokens).toEqual(golden.tokens);
    expect(reducedDoc.stats.speculative.draftVocab).toBe(1024);
    expect(reducedDoc.stats.speculative.drafted).toBeGreaterThan(0);
    for (const bad of [
      ["--speculative", "mtp", "--draft-tokens", "9"],
      ["--speculative", "mtp", "--draft-tokens", "0"],
      ["--draft-tokens", "2"],
      ["--speculative", "eagle"],
      ["--speculative", "mtp", "--draft-vocab", "0"],
      ["--speculative", "mtp", "--draft-vocab", "many"],
      ["--draft-vocab", "1024"],
    ]) {
      const refused = run(...args, ...bad);
      expect(refused.code, bad.join(" ")).toBe(2);
      expect(refused.stderr).toMatch(/--(draft-tokens|speculative|draft-vocab)/);
    }
    // larger than the model's vocabulary: the engine refuses it by name
    const tooWide = run(...args, "--speculative", "mtp", "--draft-vocab", "999999");
    expect(tooWide.code).not.toBe(0);
    expect(tooWide.stderr).toMatch(/draftVocab 999999 is larger than the vocabulary \(8192 tokens\)/); // the default model's vocabulary
  });

  it("--threads: a count above 4x the logical cores is a usage error naming the range, unless --force", () => {
    const max = 4 * os.availableParallelism();
    const tooMany = run("run", "--prompt-ids", "1,2", "--max-tokens", "1", "--threads", String(max + 1));
    expect(tooMany.code).toBe(2);
    expect(tooMany.stderr).toContain(`expected an integer in [1, ${max}]`);
    expect(tooMany.stderr).toContain("--force");
    expect(run("run", "--prompt-ids", "1,2", "--threads", "1000").stderr).toMatch(
      /^error: USAGE: --threads "1000": expected an integer in \[1, \d+\]/,
    );
    expect(run("run", "--prompt-ids", "1,2", "--threads", "0").code).toBe(2);
    expect(run("run", "--prompt-ids", "1,2", "--threads", "2000", "--force").code).toBe(2); // beyond the pool's hard limit
    const badEnv = spawnSync(process.execPath, [bin, "run", "--prompt-ids", "1,2"], {
      encoding: "utf8",
      env: { ...process.env, KEEPQUANT_NATIVE_THREADS: "5000" },
    });
    expect(badEnv.status).toBe(2);
    expect(badEnv.stderr).toMatch(/KEEPQUANT_NATIVE_THREADS="5000": expected an integer in \[1, \d+\]/);
    // forced: the native provider still runs (never a silent fallback to TypeScript)
    const forced = run("run", "--prompt-ids", "1,2", "--max-tokens", "2", "--threads", String(max + 1), "--force", "--json");
    expect(forced.code, forced.stderr).toBe(0);
    const providers = Object.values((JSON.parse(forced.stdout) as RunDocument).providers).join(" ");
    expect(providers).toMatch(/cpu-native/);
  });

  it("the model's context_length is the default context; --ctx changes it; a longer prompt is an error saying so", () => {
    const byDefault = JSON.parse(run("run", "--prompt-ids", "1,2", "--max-tokens", "1", "--json").stdout) as RunDocument;
    expect(byDefault.contextLength).toBe(4096); // the default model's qwen35.context_length
    const small = run("run", "--prompt-ids", "1,2,3,4,5,6,7,8", "--max-tokens", "20", "--ctx", "12", "--ignore-eog", "--json");
    expect(small.code, small.stderr).toBe(0);
    const doc = JSON.parse(small.stdout) as RunDocument;
    expect(doc.contextLength).toBe(12);
    expect(doc.tokens.length).toBe(4); // 8 prompt + 4 generated = the context
    expect(doc.stopReason).toBe("context");
    const tooLong = run("run", "--prompt-ids", "1,2,3,4,5,6,7,8", "--ctx", "8");
    expect(tooLong.code).toBe(1);
    expect(tooLong.stderr).toMatch(/^error: ENGINE_PROMPT_TOO_LONG: prompt of 8 tokens does not fit the context of 8 tokens/m);
    expect(run("run", "--prompt-ids", "1", "--ctx", "0").code).toBe(2);
  });

  it("--kv-type and --flash-attn take llama.cpp's values; anything else is a usage error", () => {
    const ids = ["run", "--prompt-ids", "5,6,7", "--max-tokens", "4", "--json"];
    const f32 = run(...ids, "--kv-type", "f32", "--flash-attn", "off");
    expect(f32.code, f32.stderr).toBe(0);
    expect((JSON.parse(f32.stdout) as RunDocument).providers.attention).toMatch(/-attn-llama-no-fa$/);
    const defaults = JSON.parse(run(...ids).stdout) as RunDocument;
    expect(defaults.providers.attention).toMatch(/-flash-attn-llama$/); // llama.cpp's default: -fa on, F16 K/V
    expect(run(...ids, "--kv-type", "q8_0").code).toBe(2);
    expect(run(...ids, "--flash-attn", "auto").code).toBe(2);
  });

  it("Ctrl-C during run stops the generation and exits 130", async () => {
    // a generation of 4000 tokens takes seconds; SIGINT is sent as soon as the first text arrives
    const child = spawn(process.execPath, [bin, "run", "--prompt-ids", "1,2,3", "--max-tokens", "4000", "--ignore-eog"], {
      env: { ...process.env, CI: "1" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stderr = "";
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
    child.stdout.once("data", () => child.kill("SIGINT"));
    const code = await new Promise<number | null>((resolve) => child.on("close", (c) => resolve(c)));
    expect(code, stderr).toBe(130);
    expect(stderr).toMatch(/stop: abort/);
  });
});
