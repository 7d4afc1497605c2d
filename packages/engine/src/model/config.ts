import { describeQwen35, type ModelDescription, type PlannedTensor } from "@keepquant/gguf";
import type { ModelWeights } from "./weights.js";

/**
 * The engine has one model description: the load plan's (the gguf package derived it from the
 * hyperparameters it parsed and validated; qwen35.md sections 2-3). Sizes, cache planes and the
 * native table are read from it, never derived again.
 */

/**
 * The description the weights were bound from: the load plan's copy. Weights built by hand (tests
 * that assemble a model in memory) carry none; theirs is described here once from their config.
 */
export function modelDescription(weights: Pick<ModelWeights, "config" | "vocab" | "description">): ModelDescription {
  return weights.description ?? describeQwen35(weights.config, weights.vocab);
}

/** Each trunk layer's index in its cache (the KV cache for attention, the state pool for GDN), as the description assigns it. */
export function trunkCacheIndex(description: ModelDescription): Int32Array {
  return Int32Array.from(description.layers.filter((l) => l.role === "trunk").map((l) => l.cacheIndex));
}

/**
 * Tensors read as f32 vectors rather than kept packed for a matmul: every 1-D tensor (norms,
 * ssm_a, ssm_dt) and those the plan marks `requiresF32` (ssm_conv1d). The loader and the residency
 * planner both classify by this rule.
 */
export function isVectorTensor(tensor: Pick<PlannedTensor, "ne" | "requiresF32">): boolean {
  return tensor.ne.length < 2 || tensor.requiresF32 === true;
}
