import type { ArchitectureKinds } from "../layer-kind.js";

/**
 * The layer kinds qwen35 brings (qwen35.md sections 4-6), registered with the folder: the token
 * mixers (gated full attention, a Gated DeltaNet) and the dense SwiGLU FFN, each with its tensors in
 * file order (the description instantiates them per layer) and the activation scratch it writes per
 * batch row (the engine's forward allocates it; tt-native's generated model_scratch.h too).
 */
export const kinds = {
  mixers: {
    attention: {
      op: "attention",
      gated: true,
      title: "full-attention",
      tensors: [
        { slot: "attn_norm", field: "attnNorm", dims: ["nEmbd"] },
        { slot: "attn_q", field: "q", dims: ["nEmbd", "qDim"] },
        { slot: "attn_k", field: "k", dims: ["nEmbd", "kvDim"] },
        { slot: "attn_v", field: "v", dims: ["nEmbd", "kvDim"] },
        { slot: "attn_q_norm", field: "qNorm", dims: ["headDim"] },
        { slot: "attn_k_norm", field: "kNorm", dims: ["headDim"] },
        { slot: "attn_output", field: "o", dims: ["attnOutDim", "nEmbd"] },
      ],
      /** attn_q [q_h | gate_h]; queries; attn_k and attn_v rows; the attention output */
      scratch: { qg: "qDim", q: "attnOutDim", kRows: "kvDim", vRows: "kvDim", attnOut: "attnOutDim" },
    },
    gdn: {
      op: "gdn",
      gated: false,
      title: "Gated DeltaNet",
      tensors: [
        { slot: "attn_norm", field: "attnNorm", dims: ["nEmbd"] },
        { slot: "attn_qkv", field: "qkv", dims: ["nEmbd", "convDim"] },
        { slot: "attn_gate", field: "gate", dims: ["nEmbd", "valueDim"] },
        { slot: "ssm_beta", field: "beta", dims: ["nEmbd", "nHeadV"] },
        { slot: "ssm_alpha", field: "alpha", dims: ["nEmbd", "nHeadV"] },
        { slot: "ssm_conv1d", field: "conv", dims: ["convKernel", "convDim"], requiresF32: true },
        { slot: "ssm_dt", field: "dtBias", dims: ["nHeadV"], suffix: ".bias" },
        { slot: "ssm_a", field: "a", dims: ["nHeadV"], suffix: "" },
        { slot: "ssm_norm", field: "norm", dims: ["headVDim"] },
        { slot: "ssm_out", field: "out", dims: ["valueDim", "nEmbd"] },
      ],
      /** attn_qkv and its conv output; attn_gate (z); ssm_beta and ssm_alpha; the gated delta rule's output */
      scratch: { mixed: "convDim", convOut: "convDim", zRows: "valueDim", betaRows: "nHeadV", alphaRows: "nHeadV", gdnOut: "valueDim" },
    },
  },
  ffns: {
    /** The FFN behind each mixer: the post-attention norm and the FFN's tensors. */
    dense: {
      op: "dense",
      title: "",
      tensors: [
        { slot: "post_attention_norm", field: "postAttnNorm", dims: ["nEmbd"] },
        { slot: "ffn_gate", field: "ffnGate", dims: ["nEmbd", "nFf"] },
        { slot: "ffn_up", field: "ffnUp", dims: ["nEmbd", "nFf"] },
        { slot: "ffn_down", field: "ffnDown", dims: ["nFf", "nEmbd"] },
      ],
      /** ffn_gate (then swiglu) and ffn_up */
      scratch: { ffnGate: "nFf", ffnUp: "nFf" },
    },
  },
} as const satisfies ArchitectureKinds;
