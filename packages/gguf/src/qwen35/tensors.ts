import type { Qwen35Config } from "./config.js";

export type Qwen35TensorRole = "global" | "trunk" | "mtp";

/**
 * What a tensor is, independent of its layer: the GGUF name without `blk.N.` and without the
 * `.weight` / `.bias` suffix (qwen35.md section 3). The engine binds weights by slot.
 */
export type Qwen35TensorSlot =
  | "token_embd"
  | "output_norm"
  | "output"
  | "attn_norm"
  | "post_attention_norm"
  | "attn_q"
  | "attn_k"
  | "attn_v"
  | "attn_q_norm"
  | "attn_k_norm"
  | "attn_output"
  | "ffn_gate"
  | "ffn_up"
  | "ffn_down"
  | "attn_qkv"
  | "attn_gate"
  | "ssm_beta"
  | "ssm_alpha"
  | "ssm_conv1d"
  | "ssm_dt"
  | "ssm_a"
  | "ssm_norm"
  | "ssm_out"
  | "nextn.eh_proj"
  | "nextn.enorm"
  | "nextn.hnorm"
  | "nextn.shared_head_norm"
  | "nextn.embed_tokens"
  | "nextn.shared_head_head";

/** One tensor a qwen35 file may hold, with its expected ggml `ne`. */
export interface Qwen35ExpectedTensor {
  name: string;
  slot: Qwen35TensorSlot;
  ne: number[];
  role: Qwen35TensorRole;
  /** Layer index for `blk.N.*` tensors. */
  layer?: number;
  /** Absent is fine (e.g. `output.weight` when the head is tied). */
  optional: boolean;
  /** Must be stored as F32 (llama.cpp's CPU ssm_conv asserts 4-byte elements). */
  requiresF32?: boolean;
}

/**
 * Every tensor name and shape of qwen35.md section 3 for this config and vocabulary.
 * MTP tensors (`blk.{n_layer}.*`) are included when nextn_predict_layers = 1.
 */
/** The slot of a qwen35 tensor name (see Qwen35TensorSlot). */
export function qwen35TensorSlot(name: string): Qwen35TensorSlot {
  return name.replace(/^blk\.\d+\./, "").replace(/\.(weight|bias)$/, "") as Qwen35TensorSlot;
}

type Unslotted = Omit<Qwen35ExpectedTensor, "slot">;

export function qwen35ExpectedTensors(config: Qwen35Config, vocab: number): Qwen35ExpectedTensor[] {
  return unslottedTensors(config, vocab).map((t) => ({ ...t, slot: qwen35TensorSlot(t.name) }));
}

function unslottedTensors(config: Qwen35Config, vocab: number): Unslotted[] {
  const D = config.embeddingLength;
  const Dh = config.headDim;
  const H = config.headCount;
  const Hkv = config.headCountKv;
  const ff = config.feedForwardLength;
  const Hv = config.ssmTimeStepRank;
  const out: Unslotted[] = [
    { name: "token_embd.weight", ne: [D, vocab], role: "global", optional: false },
    { name: "output_norm.weight", ne: [D], role: "global", optional: false },
    { name: "output.weight", ne: [D, vocab], role: "global", optional: true },
  ];
  const attention = (il: number, role: Qwen35TensorRole): Unslotted[] => [
    { name: `blk.${il}.attn_norm.weight`, ne: [D], role, layer: il, optional: false },
    { name: `blk.${il}.attn_q.weight`, ne: [D, 2 * H * Dh], role, layer: il, optional: false },
    { name: `blk.${il}.attn_k.weight`, ne: [D, Hkv * Dh], role, layer: il, optional: false },
    { name: `blk.${il}.attn_v.weight`, ne: [D, Hkv * Dh], role, layer: il, optional: false },
    { name: `blk.${il}.attn_q_norm.weight`, ne: [Dh], role, layer: il, optional: false },
    { name: `blk.${il}.attn_k_norm.weight`, ne: [Dh], role, layer: il, optional: false },
    { name: `blk.${il}.attn_output.weight`, ne: [H * Dh, D], role, layer: il, optional: false },
    ...ffn(il, role),
  ];
  const ffn = (il: number, role: Qwen35TensorRole): Unslotted[] => [
    { name: `blk.${il}.post_attention_norm.weight`, ne: [D], role, layer: il, optional: false },
    { name: `blk.${il}.ffn_gate.weight`, ne: [D, ff], role, layer: il, optional: false },
    { name: `blk.${il}.ffn_up.weight`, ne: [D, ff], role, layer: il, optional: false },
    { name: `blk.${il}.ffn_down.weight`, ne: [ff, D], role, layer: il, optional: false },
  ];
  const gdn = (il: number): Unslotted[] => [
    { name: `blk.${il}.attn_norm.weight`, ne: [D], role: "trunk", layer: il, optional: false },
    { name: `blk.${il}.attn_qkv.weight`, ne: [D, config.convDim], role: "trunk", layer: il, optional: false },
    { name: `blk.${il}.attn_gate.weight`, ne: [D, config.valueDim], role: "trunk", layer: il, optional: false },
    { name: `blk.${il}.ssm_beta.weight`, ne: [D, Hv], role: "trunk", layer: il, optional: false },
    { name: `blk.${il}.ssm_alpha.weight`, ne: [D, Hv], role: "trunk", layer: il, optional: false },
    {
      name: `blk.${il}.ssm_conv1d.weight`,
      ne: [config.ssmConvKernel, config.convDim],
      role: "trunk",
      layer: il,
      optional: false,
      requiresF32: true,
    },
    { name: `blk.${il}.ssm_dt.bias`, ne: [Hv], role: "trunk", layer: il, optional: false },
    { name: `blk.${il}.ssm_a`, ne: [Hv], role: "trunk", layer: il, optional: false },
    { name: `blk.${il}.ssm_norm.weight`, ne: [config.headVDim], role: "trunk", layer: il, optional: false },
    { name: `blk.${il}.ssm_out.weight`, ne: [config.valueDim, D], role: "trunk", layer: il, optional: false },
    ...ffn(il, "trunk"),
  ];
  config.layerKinds.forEach((kind, il) => out.push(...(kind === "gdn" ? gdn(il) : attention(il, "trunk"))));
  for (let il = config.nLayer; il < config.blockCount; il++) {
    out.push(
      ...attention(il, "mtp"),
      { name: `blk.${il}.nextn.eh_proj.weight`, ne: [2 * D, D], role: "mtp", layer: il, optional: false },
      { name: `blk.${il}.nextn.enorm.weight`, ne: [D], role: "mtp", layer: il, optional: false },
      { name: `blk.${il}.nextn.hnorm.weight`, ne: [D], role: "mtp", layer: il, optional: false },
      { name: `blk.${il}.nextn.shared_head_norm.weight`, ne: [D], role: "mtp", layer: il, optional: false },
      { name: `blk.${il}.nextn.embed_tokens.weight`, ne: [D, vocab], role: "mtp", layer: il, optional: true },
      { name: `blk.${il}.nextn.shared_head_head.weight`, ne: [D, vocab], role: "mtp", layer: il, optional: true },
    );
  }
  return out;
}
