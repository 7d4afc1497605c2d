/**
 * The committed goldens are reproducible: llama.cpp (the oracle, in a child process) regenerates
 * one quantized fixture's goldens byte for byte from the sha256-pinned fixture file.
 */
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { llamaUnavailableReason, runOracle } from "@keepquant/oracle";
import { readGoldensFile, readParityManifest, serializeGoldens } from "@keepquant/engine/parity";
import { ensureFixture, fixtureTokenizerFromJson, parityFixture } from "@keepquant/fixtures";
import { regenerateGoldens } from "./oracle-goldens.js";

const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const GOLDENS_DIR = path.join(REPO_ROOT, "goldens", "parity");
const CACHE_DIR = process.env.KEEPQUANT_FIXTURE_CACHE ?? path.join(REPO_ROOT, ".cache", "fixtures");
const reason = llamaUnavailableReason();

describe.skipIf(reason !== undefined)(`parity goldens${reason ? ` (skipped: ${reason})` : ""}`, () => {
  it("regenerate bit-identically from the oracle (tied-4l-q4_k_m)", async () => {
    const name = "tied-4l-q4_k_m";
    const manifest = readParityManifest(path.join(GOLDENS_DIR, "manifest.json"));
    const entry = manifest.fixtures.find((f) => f.name === name)!;
    const tokenizer = fixtureTokenizerFromJson(JSON.parse(fs.readFileSync(path.join(REPO_ROOT, manifest.tokenizer.file), "utf8")));
    const file = await ensureFixture(parityFixture(name), {
      cacheDir: CACHE_DIR,
      tokenizer,
      quantize: async (input, output, weightType) => {
        await runOracle({ kind: "quantize", input, output, ftype: weightType, nthread: 2 });
      },
      expectedSha256: Object.fromEntries(manifest.fixtures.map((f) => [f.name, f.sha256])),
    });
    const committedFile = path.join(GOLDENS_DIR, entry.goldens);
    const committed = readGoldensFile(committedFile);
    const regenerated = await regenerateGoldens(file, committed);
    expect(regenerated.prompts.map((p) => p.tokens)).toEqual(committed.prompts.map((p) => p.tokens));
    const { cpuVariant } = await runOracle({ kind: "info", model: file });
    if (cpuVariant === committed.oracle.cpuVariant) {
      expect(serializeGoldens(regenerated)).toBe(fs.readFileSync(committedFile, "utf8"));
    } else {
      // Another ggml CPU variant sums in another order: same tokens, logits equal to a few ulps only.
      console.log(`note: oracle CPU variant ${cpuVariant}, goldens made with ${committed.oracle.cpuVariant}: compared tokens only`);
    }
  });
});
