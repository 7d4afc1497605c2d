import { GgmlType } from "../ggml-type.js";
import type { Qwen35ExpectedTensor } from "../qwen35/tensors.js";

/** Picks the ggml type of each tensor of a header-only file (tensor data is never written). */
export type Qwen35TensorTypeMix = (tensor: Qwen35ExpectedTensor) => GgmlType;

/**
 * llama.cpp's "use more bits" layer rule of its K-quant mixes (`llama-quant.cpp`): the first and
 * last eighth of the layers, and every third layer in between.
 */
export function useMoreBits(layer: number, layers: number): boolean {
  const eighth = Math.floor(layers / 8);
  return layer < eighth || layer >= Math.floor((7 * layers) / 8) || (layer - eighth) % 3 === 2;
}

/**
 * A Q4_K_M-class mix for qwen35 header-only files: what llama.cpp's `llama-quantize ... Q4_K_M`
 * chooses per tensor (llama-quant.cpp, `llama_tensor_get_type_impl`, no imatrix, no overrides):
 *
 * - F32: every 1-D tensor (norms, `ssm_a`, `ssm_dt.bias`) and `ssm_conv1d` (never quantized);
 * - Q6_K: `output.weight`, or `token_embd.weight` when the head is tied (the output rule);
 * - F32 too: the MoE router `ffn_gate_inp` (llama.cpp leaves it unquantized);
 * - Q6_K: `attn_v` and `attn_qkv` (one "attn_v-like" tensor per layer) and `ffn_down` (and the MoE
 *   `ffn_down_exps` / `ffn_down_shexp`) of the layers
 *   where `useMoreBits(layer, blockCount)` holds (llama.cpp counts them in layer order);
 * - Q4_K: every other matrix (`token_embd` when untied, `attn_q`/`attn_k`/`attn_output`,
 *   `attn_gate`, `ssm_alpha`/`ssm_beta`, `ssm_out`, `ffn_gate`/`ffn_up`, the MTP `nextn.*` matrices).
 *
 * `blockCount` is `qwen35.block_count` (trunk plus MTP layers), llama.cpp's `n_layer_all`.
 */
export function qwen35Q4KMClassMix(blockCount: number, tiedHead: boolean): Qwen35TensorTypeMix {
  return (tensor) => {
    // llama.cpp never quantizes the MoE router (ffn_gate_inp)
    if (tensor.ne.length < 2 || tensor.name.endsWith(".ssm_conv1d.weight") || tensor.name.endsWith(".ffn_gate_inp.weight"))
      return GgmlType.F32;
    if (tensor.name === "output.weight" || (tiedHead && tensor.name === "token_embd.weight")) return GgmlType.Q6_K;
    const moreBits = tensor.layer !== undefined && useMoreBits(tensor.layer, blockCount);
    if (/\.(attn_v|attn_qkv|ffn_down|ffn_down_exps|ffn_down_shexp)\.weight$/.test(tensor.name) && moreBits) return GgmlType.Q6_K;
    return GgmlType.Q4_K;
  };
}
