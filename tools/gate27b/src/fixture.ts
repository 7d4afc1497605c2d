/**
 * The 27B gate's model: the real Qwen3.5-27B shape (qwen35.md 13.2) written directly in llama.cpp's
 * Q4_K_M type mix by `writeQuantizedQwen35` (~16.5 GB, no F32 intermediate).
 *
 * Where: $KEEPQUANT_GATE27B_DIR (default <repo>/.cache/gate-27b). The file is named by the recipe's
 * hash (shape, seed, pool size, recipe version); beside it `<file>.sha256` records its sha256. The
 * sha256 of the first generation is pinned in gate27b.json: a later generation that differs is an
 * error (a changed recipe or quantizer), not a silent new baseline. An interrupted run resumes.
 *
 *   pnpm fixtures:27b            # generate (or verify the cached file), print its path
 *   pnpm fixtures:27b --verify   # also re-hash a cached file (about a minute)
 */
import { QWEN35_27B_SHAPE } from "@keepquant/gguf";
import { gateFixture, isMainModule, runGateFixtureCommand } from "./gate-fixture.js";
import type { PooledQwen35Spec } from "./quantized-qwen35.js";

export { REPO_ROOT } from "./gate-fixture.js";

/**
 * The gate's model: the 27B shape, seed 27, no MTP block, and calm scales: token embedding std 1
 * and residual gain 0.5, so the residual stream is dominated by the embedding and 64 layers do not
 * amplify last-bit differences (with the synthesizer's default scales, embedding std 3/sqrt(D) and
 * gain 4, a 64-layer model's logits move by up to 0.57 between two implementations that differ in
 * the last bits; with these, 0.05: measured on the 64-layer test shape).
 */
export const GATE_27B_SPEC: PooledQwen35Spec = {
  ...QWEN35_27B_SHAPE,
  seed: 27,
  name: "synthetic-qwen35-27b-q4km",
  residualGain: 0.5,
  embeddingStd: 1,
};

export const GATE_27B = gateFixture({
  name: "27b",
  title: "27B",
  spec: GATE_27B_SPEC,
  fileStem: "qwen35-27b-Q4_K_M",
  fixtureName: "qwen35-27b-synthetic",
  // free disk asked for before generating the file: the file plus ~3.5 GB of slack (~20 GB)
  minFreeDiskBytes: 20e9,
  planFromHeaderFirst: false,
});

if (isMainModule(import.meta.url)) await runGateFixtureCommand(GATE_27B);
