import type { ArchitectureKinds } from "../layer-kind.js";
import { kinds as qwen35 } from "../qwen35/kinds.js";

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
      // qwen35's attention tensors, one for one (only the width of attn_q differs, through qDim)
      tensors: qwen35.mixers.attention.tensors,
      scratch: {},
    },
  },
  ffns: {
    dense_ffn_norm: {
      op: "dense",
      title: "",
      // qwen35's dense FFN tensors under llama.cpp's usual name for the norm
      tensors: [{ ...qwen35.ffns.dense.tensors[0], slot: "ffn_norm" }, ...qwen35.ffns.dense.tensors.slice(1)],
      scratch: {},
    },
  },
} as const satisfies ArchitectureKinds;
