import type { ModelDimName, TensorTemplate } from "../qwen35/tensors.js";

/**
 * The token mixer qwen3 brings, registered in ../kinds.ts: full causal attention with per-head Q/K
 * RMSNorm and no output gate (attn_q is [D, H Dh]: qDim = H Dh here, where qwen35's gated attention
 * has 2 H Dh).
 */
export const QWEN3_TOKEN_MIXERS = {
  attention_ungated: [
    { slot: "attn_norm", field: "attnNorm", dims: ["nEmbd"] },
    { slot: "attn_q", field: "q", dims: ["nEmbd", "qDim"] },
    { slot: "attn_k", field: "k", dims: ["nEmbd", "kvDim"] },
    { slot: "attn_v", field: "v", dims: ["nEmbd", "kvDim"] },
    { slot: "attn_q_norm", field: "qNorm", dims: ["headDim"] },
    { slot: "attn_k_norm", field: "kNorm", dims: ["headDim"] },
    { slot: "attn_output", field: "o", dims: ["attnOutDim", "nEmbd"] },
  ],
} as const satisfies Record<string, readonly TensorTemplate[]>;

/**
 * The FFN qwen3 brings: qwen35's dense SwiGLU under llama.cpp's usual name for its norm, `ffn_norm`
 * (qwen35 files call it `post_attention_norm`); it binds the same field and runs the same op.
 */
export const QWEN3_FFNS = {
  dense_ffn_norm: [
    { slot: "ffn_norm", field: "postAttnNorm", dims: ["nEmbd"] },
    { slot: "ffn_gate", field: "ffnGate", dims: ["nEmbd", "nFf"] },
    { slot: "ffn_up", field: "ffnUp", dims: ["nEmbd", "nFf"] },
    { slot: "ffn_down", field: "ffnDown", dims: ["nFf", "nEmbd"] },
  ],
} as const satisfies Record<string, readonly TensorTemplate[]>;

/**
 * Its scratch: the gated attention's buffers (attn_q rows into `qg`, of width qDim = H Dh here; the
 * normed and roped queries in `q`; `kRows`, `vRows`, `attnOut`), which every model allocates; the FFN's are the dense FFN's (`ffnGate`, `ffnUp`), allocated on every model too.
 */
export const QWEN3_SCRATCH = { mixers: { attention_ungated: {} }, ffns: { dense_ffn_norm: {} } } as const satisfies {
  mixers: Record<string, Record<string, ModelDimName>>;
  ffns: Record<string, Record<string, ModelDimName>>;
};
