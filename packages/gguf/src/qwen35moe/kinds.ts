import type { ArchitectureKinds } from "../layer-kind.js";

/** The FFN kind qwen35moe brings (its token mixers are qwen35's), registered with the folder. */
export const kinds = {
  mixers: {},
  ffns: {
    moe: {
      op: "moe",
      title: "MoE",
      // as llama.cpp's load_block_trunk / load_block_mtp: the router, E stacked experts (gate and up
      // split, or merged into one [n_embd, 2 n_ff_exp, E] tensor), and a shared expert behind a scalar gate
      tensors: [
        { slot: "post_attention_norm", field: "postAttnNorm", dims: ["nEmbd"] },
        { slot: "ffn_gate_inp", field: "moe.router", dims: ["nEmbd", "nExpert"] },
        { slot: "ffn_gate_exps", field: "moe.gateExps", dims: ["nEmbd", "nFfExp", "nExpert"], requiredUnless: "ffn_gate_up_exps" },
        { slot: "ffn_up_exps", field: "moe.upExps", dims: ["nEmbd", "nFfExp", "nExpert"], requiredUnless: "ffn_gate_up_exps" },
        { slot: "ffn_gate_up_exps", field: "moe.gateUpExps", dims: ["nEmbd", "nFfExpGateUp", "nExpert"], optional: true },
        { slot: "ffn_down_exps", field: "moe.downExps", dims: ["nFfExp", "nEmbd", "nExpert"] },
        { slot: "ffn_gate_inp_shexp", field: "moe.sharedGate", dims: ["nEmbd"] },
        { slot: "ffn_gate_shexp", field: "moe.sharedGateProj", dims: ["nEmbd", "nFfShexp"] },
        { slot: "ffn_up_shexp", field: "moe.sharedUp", dims: ["nEmbd", "nFfShexp"] },
        { slot: "ffn_down_shexp", field: "moe.sharedDown", dims: ["nFfShexp", "nEmbd"] },
      ],
      /**
       * none in the shared table: its work buffers (router logits, the gathered expert rows) are sized
       * from the expert counts by the FFN's own code (the engine's allocateMoeScratch, tt-native's moe.cc)
       */
      scratch: {},
    },
  },
} as const satisfies ArchitectureKinds;
