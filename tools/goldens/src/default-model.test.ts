/**
 * The parity gate on the embedded default model (a trained qwen35, Q4_K_M; recipe in tools/train):
 * the committed file matches its pinned sha256, loads, and our Engine meets llama.cpp's goldens in
 * both numerics modes: `llama` (the gate's rule for quantized files: >= 14/16 STRICT and 0
 * forward-divergent) and `bf16` (the keep-quant contract: 0 forward-divergent).
 */
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { llamaUnavailableReason, runOracle } from "@keepquant/oracle";
import { Engine } from "@keepquant/engine";
import {
  defaultModelGoldensDir,
  describeParityFailures,
  engineParityRunner,
  PARITY_ENGINE_OPTIONS,
  readDefaultModelManifest,
  readGoldensFile,
  runParityGate,
  serializeGoldens,
  type ParityNumerics,
  type ParityReport,
} from "@keepquant/engine/parity";
import { sha256File } from "@keepquant/fixtures";
import { regenerateGoldens } from "./oracle-goldens.js";

const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const dir = defaultModelGoldensDir(REPO_ROOT);
const manifest = readDefaultModelManifest(path.join(dir, "manifest.json"));
const modelFile = path.join(REPO_ROOT, manifest.model.file);
const goldens = readGoldensFile(path.join(dir, manifest.goldens));
const reason = fs.existsSync(modelFile) ? undefined : `the default model file ${manifest.model.file} is not there`;

async function gate(numerics: ParityNumerics): Promise<ParityReport> {
  const engine = await Engine.load(modelFile, { ...PARITY_ENGINE_OPTIONS, numerics });
  try {
    const report = await runParityGate(goldens, engineParityRunner(engine), { numerics });
    console.log(describeParityFailures(report));
    return report;
  } finally {
    engine.dispose();
  }
}

describe.skipIf(reason !== undefined)(`the embedded default model vs llama.cpp's goldens${reason ? ` (skipped: ${reason})` : ""}`, () => {
  it("the file is the one the manifest and the goldens pin (sha256, bytes)", () => {
    expect(fs.statSync(modelFile).size).toBe(manifest.model.bytes);
    expect(sha256File(modelFile)).toBe(manifest.model.sha256);
    expect(goldens.modelSha256).toBe(manifest.model.sha256);
    expect(goldens.prompts).toHaveLength(16);
  });

  it("llama numerics pass the gate (>= 14/16 STRICT, 0 forward-divergent)", async () => {
    const report = await gate("llama");
    expect(report.passed, describeParityFailures(report)).toBe(true);
    expect(report.forwardDivergent).toBe(0);
  });

  it("bf16 numerics (the keep-quant contract) have 0 forward-divergent prompts", async () => {
    const report = await gate("bf16");
    expect(report.forwardDivergent, describeParityFailures(report)).toBe(0);
  });
});

const oracleReason = reason ?? llamaUnavailableReason();

describe.skipIf(oracleReason !== undefined)(`the default model's goldens${oracleReason ? ` (skipped: ${oracleReason})` : ""}`, () => {
  it("regenerate from the oracle: same tokens; byte-identical on the goldens' CPU variant", async () => {
    const regenerated = await regenerateGoldens(modelFile, goldens);
    expect(regenerated.prompts.map((p) => p.tokens)).toEqual(goldens.prompts.map((p) => p.tokens));
    const { cpuVariant } = await runOracle({ kind: "info", model: modelFile });
    if (cpuVariant === goldens.oracle.cpuVariant) {
      expect(serializeGoldens(regenerated)).toBe(fs.readFileSync(path.join(dir, manifest.goldens), "utf8"));
    } else {
      console.log(`note: oracle CPU variant ${cpuVariant}, goldens made with ${goldens.oracle.cpuVariant}: compared tokens only`);
    }
  });
});
