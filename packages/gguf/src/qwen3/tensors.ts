import type { Qwen35Config } from "../qwen35/config.js";
import {
  GLOBAL_TENSORS,
  instantiateTensor,
  type LayerDescription,
  type ModelDescription,
  type ModelDims,
  qwen35Dims,
} from "../qwen35/tensors.js";
import { kinds } from "./kinds.js";

/** The named dimensions of a qwen3 config: qwen35's, with ungated queries (qDim = H Dh) and no GDN state. */
export function qwen3Dims(config: Qwen35Config, vocab = config.vocabSize ?? 0): ModelDims {
  return { ...qwen35Dims(config, vocab), qDim: config.headCount * config.headDim, convStateElements: 0, ssmStateElements: 0 };
}

/**
 * A qwen3 model as data: every layer the ungated QK-norm attention mixer plus the dense SwiGLU FFN (its norm `ffn_norm`),
 * each layer its own KV plane; no GDN layers, no MTP block.
 */
export function describeQwen3(config: Qwen35Config, vocab: number): ModelDescription {
  const dims = qwen3Dims(config, vocab);
  const templates = [...kinds.mixers.attention_ungated.tensors, ...kinds.ffns.dense_ffn_norm.tensors];
  const layers: LayerDescription[] = [];
  for (let il = 0; il < config.nLayer; il++) {
    const tensors = templates.map((t) => instantiateTensor(t, dims, "trunk", il));
    layers.push({ index: il, role: "trunk", mixer: "attention_ungated", ffn: "dense_ffn_norm", cacheIndex: il, tensors });
  }
  return {
    architecture: config.architecture,
    dims,
    global: GLOBAL_TENSORS.map((t) => instantiateTensor(t, dims, "global")),
    layers,
    attentionLayers: config.nLayer,
    gdnLayers: 0,
  };
}
