import type { PlannedTensor, Qwen35Config } from "@keepquant/gguf";

/**
 * The engine has one model description: the load plan's `Qwen35Config` (the gguf package parsed and
 * validated it; qwen35.md section 2) and the plan's vocabulary. What follows only indexes it.
 */

/** Trunk layers by kind, and each layer's index in its cache (KV cache for attention, state pool for GDN). */
export interface LayerCaches {
  /** attention layers, in layer order */
  readonly attentionLayers: readonly number[];
  /** GDN layers, in layer order */
  readonly gdnLayers: readonly number[];
  /** layer -> its index among the layers of its kind */
  readonly cacheIndex: Int32Array;
}

export function layerCaches(config: Qwen35Config): LayerCaches {
  const attentionLayers: number[] = [];
  const gdnLayers: number[] = [];
  const cacheIndex = new Int32Array(config.nLayer);
  config.layerKinds.forEach((kind, il) => {
    const list = kind === "gdn" ? gdnLayers : attentionLayers;
    cacheIndex[il] = list.length;
    list.push(il);
  });
  return { attentionLayers, gdnLayers, cacheIndex };
}

/**
 * Tensors read as f32 vectors rather than kept packed for a matmul: every 1-D tensor (norms,
 * ssm_a, ssm_dt) and those the plan marks `requiresF32` (ssm_conv1d). The loader and the residency
 * planner both classify by this rule.
 */
export function isVectorTensor(tensor: Pick<PlannedTensor, "ne" | "requiresF32">): boolean {
  return tensor.ne.length < 2 || tensor.requiresF32 === true;
}
