/**
 * The parity gate on every committed fixture: our Engine against llama.cpp's goldens.
 * Fixtures are regenerated into the cache (KEEPQUANT_FIXTURE_CACHE, default <repo>/.cache/fixtures)
 * when absent and must match the manifest's sha256 bit for bit.
 */
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { llamaUnavailableReason, runOracle } from "@keepquant/oracle";
import { Engine } from "../engine.js";
import { PARITY_ENGINE_OPTIONS, engineParityRunner } from "./engine-runner.js";
import { ensureFixture, fixtureTokenizerFromJson, parityFixture, type FixtureQuantizer } from "./fixtures.js";
import { formatParityReport, runParityGate, type ParityNumerics, type ParityReport } from "./gate.js";
import { readGoldensFile } from "./goldens.js";
import { readParityManifest } from "./manifest.js";

const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "..");
const GOLDENS_DIR = path.join(REPO_ROOT, "goldens", "parity");
const CACHE_DIR = process.env.KEEPQUANT_FIXTURE_CACHE ?? path.join(REPO_ROOT, ".cache", "fixtures");
const manifest = readParityManifest(path.join(GOLDENS_DIR, "manifest.json"));
const tokenizer = fixtureTokenizerFromJson(JSON.parse(fs.readFileSync(path.join(REPO_ROOT, manifest.tokenizer.file), "utf8")));
const expectedSha256 = Object.fromEntries(manifest.fixtures.map((f) => [f.name, f.sha256]));
const oracleReason = llamaUnavailableReason();
const quantize: FixtureQuantizer | undefined = oracleReason
  ? undefined
  : async (input, output, weightType) => {
      await runOracle({ kind: "quantize", input, output, ftype: weightType, nthread: 2 });
    };

/** Why a fixture cannot be produced here, or undefined. */
function skipReason(name: string): string | undefined {
  const fixture = parityFixture(name);
  if (fs.existsSync(path.join(CACHE_DIR, fixture.file))) return undefined;
  if (fixture.weightType !== "F32" && oracleReason) return `fixture ${name} is not cached and llama.cpp's quantizer is unavailable: ${oracleReason}`;
  return undefined;
}

function describeFailures(report: ParityReport): string {
  const lines = report.prompts
    .filter((p) => p.status !== "strict")
    .map((p) => `  prompt ${p.index}: ${p.status} at step ${p.divergedAt} (oracle ${p.oracleToken}, ours ${p.ourToken}, gap ${Math.round((p.gapNats ?? 0) * 1000)} mnats)`);
  return [formatParityReport(report), ...lines].join("\n");
}

async function gate(name: string, numerics: ParityNumerics): Promise<ParityReport> {
  const file = await ensureFixture(parityFixture(name), { cacheDir: CACHE_DIR, tokenizer, ...(quantize ? { quantize } : {}), expectedSha256 });
  const engine = await Engine.load(file, { ...PARITY_ENGINE_OPTIONS, numerics });
  try {
    const report = await runParityGate(readGoldensFile(path.join(GOLDENS_DIR, `${name}.json`)), engineParityRunner(engine), { numerics });
    console.log(formatParityReport(report));
    return report;
  } finally {
    engine.dispose();
  }
}

describe("parity gate vs llama.cpp goldens", () => {
  for (const entry of manifest.fixtures) {
    const reason = skipReason(entry.name);
    if (reason) console.log(`SKIP: parity ${entry.name}: ${reason}`);
    it.skipIf(reason !== undefined)(`${entry.name}: llama numerics pass the gate`, async () => {
      const report = await gate(entry.name, "llama");
      expect(report.passed, describeFailures(report)).toBe(true);
    });
    it.skipIf(reason !== undefined)(`${entry.name}: bf16 numerics have 0 forward-divergent prompts`, async () => {
      const report = await gate(entry.name, "bf16");
      expect(report.forwardDivergent, describeFailures(report)).toBe(0);
    });
  }
});
