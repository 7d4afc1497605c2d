/**
 * Tests' access to the parity fixtures: the cached file of a fixture, generated on first use by our
 * synthesizer and llama.cpp's quantizer (the oracle, a devDependency) and checked against the
 * manifest's sha256. Test-only: the oracle is not a dependency of the published package.
 */
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { runOracle } from "@keepquant/oracle";
import { ensureFixture, fixtureTokenizerFromJson, type ParityFixture } from "../parity/fixtures.js";
import { readParityManifest } from "../parity/manifest.js";

export const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "..");
/** Where fixtures are cached (KEEPQUANT_FIXTURE_CACHE, default <repo>/.cache/fixtures). */
export const FIXTURE_CACHE_DIR = process.env.KEEPQUANT_FIXTURE_CACHE ?? path.join(REPO_ROOT, ".cache", "fixtures");
export const PARITY_MANIFEST = readParityManifest(path.join(REPO_ROOT, "goldens", "parity", "manifest.json"));

/** The fixture's file in the cache, made (and checked against the manifest's sha256) when absent. */
export async function parityFixtureFile(fixture: ParityFixture): Promise<string> {
  const tokenizer = fixtureTokenizerFromJson(JSON.parse(fs.readFileSync(path.join(REPO_ROOT, PARITY_MANIFEST.tokenizer.file), "utf8")));
  return ensureFixture(fixture, {
    cacheDir: FIXTURE_CACHE_DIR,
    tokenizer,
    quantize: async (input, output, weightType) =>
      void (await runOracle({ kind: "quantize", input, output, ftype: weightType, nthread: 2 })),
    expectedSha256: Object.fromEntries(PARITY_MANIFEST.fixtures.map((f) => [f.name, f.sha256])),
  });
}
