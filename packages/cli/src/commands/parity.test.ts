import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseGoldens, serializeGoldens } from "@keepquant/engine/parity";
import { ensureFixture, fixtureTokenizerFromJson, parityFixture } from "@keepquant/fixtures";
import { spawnCli, expectBuiltCli, CLI_BIN } from "./test-support.js";

const _bin = CLI_BIN;
const repoRoot = fileURLToPath(new URL("../../../../", import.meta.url));
const goldensDir = path.join(repoRoot, "goldens", "parity");
const cacheDir = process.env.KEEPQUANT_FIXTURE_CACHE ?? path.join(repoRoot, ".cache", "fixtures");
const scratch = mkdtempSync(path.join(tmpdir(), "kq-parity-"));
let model = "";

beforeAll(async () => {
  expectBuiltCli();
  const manifest = JSON.parse(readFileSync(path.join(goldensDir, "manifest.json"), "utf8")) as {
    fixtures: { name: string; sha256: string }[];
  };
  const tokenizer = fixtureTokenizerFromJson(JSON.parse(readFileSync(path.join(repoRoot, "goldens", "tokenizer", "vocab.json"), "utf8")));
  model = await ensureFixture(parityFixture("tied-4l-f32"), {
    cacheDir,
    tokenizer,
    expectedSha256: Object.fromEntries(manifest.fixtures.map((f) => [f.name, f.sha256])),
  });
});
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

function run(...args: string[]) {
  return spawnCli(args, { ...process.env, KEEPQUANT_DEBUG: "" });
}

describe("keepquant parity", () => {
  it("passes an F32 fixture: all 16 prompts STRICT, exit 0", () => {
    const r = run("parity", model, "--goldens", goldensDir, "--json");
    expect(r.code, r.stdout + r.stderr).toBe(0);
    const report = JSON.parse(r.stdout) as { fixture: string; strict: number; total: number; forwardDivergent: number; passed: boolean };
    expect(report).toMatchObject({ fixture: "tied-4l-f32", strict: 16, total: 16, forwardDivergent: 0, passed: true });
  });

  it("exits 77 with a SKIP line when the model file is absent", () => {
    const r = run("parity", path.join(scratch, "absent.gguf"), "--goldens", goldensDir);
    expect(r.code).toBe(77);
    expect(r.stdout).toMatch(/^SKIP: model file not found: /);
  });

  it("fails (exit 1) and names the prompt when the oracle's choice is far from ours", () => {
    const goldens = parseGoldens(readFileSync(path.join(goldensDir, "tied-4l-f32.json"), "utf8"));
    const prompt = goldens.prompts[3]!;
    const ours = prompt.tokens[2]!;
    const other = (ours + 1) % 4096;
    // Pretend the oracle chose `other` at step 2 by 1000 nats; our real choice stays in its top-K.
    prompt.tokens[2] = other;
    prompt.topIds[2] = Int32Array.from([other, ...prompt.topIds[2]!.filter((id) => id !== other).slice(0, -1)]);
    prompt.topLogits[2] = Float32Array.from([1000, ...prompt.topLogits[2]!.slice(0, -1)]);
    const dir = path.join(scratch, "doctored");
    mkdirSync(dir);
    writeFileSync(path.join(dir, "tied-4l-f32.json"), serializeGoldens(goldens));
    const r = run("parity", model, "--goldens", dir);
    expect(r.code, r.stderr).toBe(1);
    expect(r.stdout).toMatch(/STRICT 15\/16 {2}NEAR-TIE 0 {2}FORWARD-DIVERGENT 1 .*FAIL/);
    expect(r.stdout).toMatch(/prompt 3: FORWARD-DIVERGENT at step 2: oracle \d+, ours \d+, gap \d+ mnats/);
  });

  it("refuses goldens made from other bytes, and a folder without goldens for the file", () => {
    const renamed = path.join(scratch, "tied-4l-f32.gguf");
    const bytes = readFileSync(model);
    bytes.writeUInt8(bytes.readUInt8(bytes.length - 1) ^ 1, bytes.length - 1);
    writeFileSync(renamed, bytes);
    const mismatch = run("parity", renamed, "--goldens", goldensDir);
    expect(mismatch.code).toBe(1);
    expect(mismatch.stderr).toMatch(/PARITY_FIXTURE_MISMATCH/);
    const other = path.join(scratch, "other.gguf");
    copyFileSync(renamed, other);
    const none = run("parity", other, "--goldens", goldensDir);
    expect(none.code).toBe(1);
    expect(none.stderr).toMatch(/PARITY_GOLDENS_NOT_FOUND/);
    expect(run("parity", model).code).toBe(2);
  });
});
