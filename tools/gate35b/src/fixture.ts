/**
 * The 35B-A3B gate's model: the real Qwen3.5-35B-A3B shape (`qwen35moe`: 40 layers, hidden 2048, 256
 * experts of width 512 with 8 used, a 512-wide shared expert, vocabulary 248,320) written directly in
 * llama.cpp's Q4_K_M type mix by the 27B gate's `writeQuantizedQwen35` (~21.7 GB): every tensor is
 * streamed from pre-quantized super-block pools, so no F32 or bf16 intermediate is ever written (the
 * F32 file would be ~140 GB).
 *
 * Where: $KEEPQUANT_GATE35B_DIR (default <repo>/.cache/gate-35b). The file is named by the recipe's
 * hash; beside it `<file>.sha256` records its sha256. The sha256 of the first generation is pinned in
 * gate35b.json: a later generation that differs is an error, not a silent new baseline. An
 * interrupted run resumes.
 *
 *   pnpm fixtures:35b            # generate (or verify the cached file), print its path
 *   pnpm fixtures:35b --verify   # also re-hash a cached file
 */
import { QWEN35_35B_A3B_SHAPE } from "@keepquant/gguf";
import { gateFixture, isMainModule, runGateFixtureCommand } from "../../gate27b/src/gate-fixture.js";
import type { PooledQwen35Spec } from "../../gate27b/src/quantized-qwen35.js";

export { REPO_ROOT } from "../../gate27b/src/gate-fixture.js";

/**
 * The gate's model: the 35B-A3B shape, seed 35, no MTP block, and the 27B gate's calm scales (token
 * embedding std 1, residual gain 0.5 on attn_output / ssm_out / the experts' and shared expert's down
 * projections), so 40 layers do not amplify last-bit differences.
 */
export const GATE_35B_SPEC: PooledQwen35Spec = {
  ...QWEN35_35B_A3B_SHAPE,
  mtp: false,
  seed: 35,
  name: "synthetic-qwen35moe-35b-a3b-q4km",
  residualGain: 0.5,
  embeddingStd: 1,
};

export const GATE_35B = gateFixture({
  name: "35b",
  title: "35B-A3B",
  spec: GATE_35B_SPEC,
  fileStem: "qwen35moe-35b-a3b-Q4_K_M",
  fixtureName: "qwen35moe-35b-a3b-synthetic",
  // free disk asked for before generating the file: the file (~21.7 GB) plus ~3.3 GB of slack
  minFreeDiskBytes: 25e9,
  planFromHeaderFirst: true,
});

export const gate35bFileSize = (spec?: PooledQwen35Spec): number => GATE_35B.fileSize(spec);

if (isMainModule(import.meta.url)) await runGateFixtureCommand(GATE_35B);
