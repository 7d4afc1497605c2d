/**
 * Test models built the way the engine loads any file: the gguf package synthesizes a qwen35 GGUF
 * (its calm initialisation, F32), builds the load plan, and the loader binds the plan. No second
 * table of tensor names, shapes or hyperparameters lives here.
 */
import { assertLoadable, buildLoadPlan, mulberry32, QWEN35_TINY_SHAPE, readGguf, synthesizeQwen35, type Qwen35Spec } from "@keepquant/gguf";
import { loadQwen35Weights, readTensorSource } from "../model/load.js";
import type { Numerics } from "../model/matmul.js";
import type { ModelWeights } from "../model/weights.js";

/** Small deterministic PRNG for test data: mulberry32 of @keepquant/gguf, the sequence every package uses. */
export const seededRandom: (seed: number) => () => number = mulberry32;

/** The tiny qwen35 of the engine's unit tests (the gguf package's preset): 4 layers, D 64, vocab 97. */
export const TINY_SPEC: Qwen35Spec = QWEN35_TINY_SHAPE;

export interface SyntheticModelOptions {
  /** PRNG seed of the weights (default: the spec's, else 1) */
  seed?: number;
  /** tied head (default: the spec's) */
  tied?: boolean;
  /** numerics the weights are loaded for (default "llama") */
  numerics?: Numerics;
}

/** The weights of `synthesizeQwen35(spec)` as `Engine.load` would bind them (through the load plan). */
export async function syntheticWeights(spec: Qwen35Spec, options: SyntheticModelOptions = {}): Promise<ModelWeights> {
  const bytes = synthesizeQwen35({ ...spec, seed: options.seed ?? spec.seed ?? 1, tied: options.tied ?? spec.tied });
  const plan = buildLoadPlan(await readGguf(bytes));
  assertLoadable(plan);
  return (await loadQwen35Weights(plan, readTensorSource(bytes), options.numerics ?? "llama")).weights;
}
