import type { ArchitectureKinds } from "../layer-kind.js";

/**
 * The kinds qwen3 brings, registered with the folder. Its token mixer is full causal attention with
 * per-head Q/K RMSNorm and no output gate (attn_q is [D, H Dh]: qDim = H Dh here, where qwen35's
 * gated attention has 2 H Dh); its FFN is qwen35's dense SwiGLU under llama.cpp's usual name for its
 * norm, `ffn_norm` (qwen35 files call it `post_attention_norm`), binding the same field. Both run
 * their family's op, so neither forward names them; their scratch is their family's (the attention's
 * `qg` of width qDim, `q`, `kRows`, `vRows`, `attnOut`; the dense FFN's `ffnGate`, `ffnUp`).
 */
export const kinds = {
  mixers: {
    attention_ungated: {
      op: "attention",
      gated: false,
      title: "ungated full-attention",
      tensors: [
        { slot: "attn_norm", field: "attnNorm", dims: ["nEmbd"] },
        { slot: "attn_q", field: "q", dims: ["nEmbd", "qDim"] },
        { slot: "attn_k", field: "k", dims: ["nEmbd", "kvDim"] },
        { slot: "attn_v", field: "v", dims: ["nEmbd", "kvDim"] },
        { slot: "attn_q_norm", field: "qNorm", dims: ["headDim"] },
        { slot: "attn_k_norm", field: "kNorm", dims: ["headDim"] },
        { slot: "attn_output", field: "o", dims: ["attnOutDim", "nEmbd"] },
      ],
      scratch: {},
    },
  },
  ffns: {
    dense_ffn_norm: {
      op: "dense",
      title: "",
      tensors: [
        { slot: "ffn_norm", field: "postAttnNorm", dims: ["nEmbd"] },
        { slot: "ffn_gate", field: "ffnGate", dims: ["nEmbd", "nFf"] },
        { slot: "ffn_up", field: "ffnUp", dims: ["nEmbd", "nFf"] },
        { slot: "ffn_down", field: "ffnDown", dims: ["nFf", "nEmbd"] },
      ],
      scratch: {},
    },
  },
} as const satisfies ArchitectureKinds;
