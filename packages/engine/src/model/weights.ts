import { type GgmlType, LAYER_KINDS, type MixerOfOp, type ModelDescription, type Qwen35Config } from "@keepquant/gguf";
import type { PackedWeight } from "@keepquant/quant";

/**
 * A matmul weight kept in its file encoding: `rows` output features of `cols` inputs each,
 * `rowBytes` per row, exactly as stored in the GGUF (never transposed). It is the dense (E = 1)
 * weight of @keepquant/quant's MatmulBTQuantGrouped, so every provider takes it as it is.
 */
export interface PackedMatrix extends PackedWeight {
  readonly name: string;
  readonly type: GgmlType;
  readonly typeName: string;
  /** E: 1 for a matrix; the stacked experts of an MoE tensor ([N, K] each, expert-major) */
  readonly groups: number;
  /** N (output features; per expert when groups > 1) */
  readonly rows: number;
  /** K (inputs) */
  readonly cols: number;
  readonly rowBytes: number;
  /** The packed words: a view of the memory-mapped file (or a copy read from it). */
  readonly data: Uint8Array;
}

/**
 * The MoE FFN of a qwen35moe layer (llama.cpp's build_moe_ffn with the shared expert): a router,
 * E stacked experts (gate and up split, or merged) and a shared expert behind a scalar gate.
 */
export interface MoeFfnWeights {
  /** ffn_gate_inp [E, D] (llama.cpp keeps it F32) */
  readonly router: PackedMatrix;
  /** ffn_gate_exps / ffn_up_exps: groups E of [n_ff_exp, D] (absent when merged) */
  readonly gateExps: PackedMatrix | undefined;
  readonly upExps: PackedMatrix | undefined;
  /** ffn_gate_up_exps: groups E of [2 n_ff_exp, D], gate rows then up rows (absent when split) */
  readonly gateUpExps: PackedMatrix | undefined;
  /** ffn_down_exps: groups E of [D, n_ff_exp] */
  readonly downExps: PackedMatrix;
  /** ffn_gate_inp_shexp [D]: the shared expert's scalar gate */
  readonly sharedGate: Float32Array;
  readonly sharedGateProj: PackedMatrix; // ffn_gate_shexp [n_ff_shexp, D]
  readonly sharedUp: PackedMatrix; // ffn_up_shexp [n_ff_shexp, D]
  readonly sharedDown: PackedMatrix; // ffn_down_shexp [D, n_ff_shexp]
}

export interface AttentionWeights {
  /**
   * Any registered token mixer of the attention family (gguf's LAYER_KINDS): gated (qwen35's
   * `attention`, attn_q [2 H Dh, D]) or not (qwen3's `attention_ungated`, attn_q [H Dh, D]).
   */
  readonly kind: MixerOfOp<"attention">;
  readonly attnNorm: Float32Array; // [D]
  readonly postAttnNorm: Float32Array; // [D]
  readonly q: PackedMatrix; // [qDim, D]: per head [q_h | gate_h] (gated), q_h (ungated)
  readonly k: PackedMatrix; // [Hkv Dh, D]
  readonly v: PackedMatrix; // [Hkv Dh, D]
  readonly o: PackedMatrix; // [D, H Dh]
  readonly qNorm: Float32Array; // [Dh]
  readonly kNorm: Float32Array; // [Dh]
  /** The dense FFN (qwen35); on a qwen35moe layer these are absent and `moe` holds the FFN. */
  readonly ffnGate: PackedMatrix; // [n_ff, D]
  readonly ffnUp: PackedMatrix; // [n_ff, D]
  readonly ffnDown: PackedMatrix; // [D, n_ff]
  readonly moe?: MoeFfnWeights;
}

export interface GdnWeights {
  /** Any registered token mixer of the Gated DeltaNet family. */
  readonly kind: MixerOfOp<"gdn">;
  readonly attnNorm: Float32Array; // [D]
  readonly postAttnNorm: Float32Array; // [D]
  readonly qkv: PackedMatrix; // [conv_dim, D]
  readonly gate: PackedMatrix; // [value_dim, D]
  readonly beta: PackedMatrix; // [Hv, D]
  readonly alpha: PackedMatrix; // [Hv, D]
  readonly conv: Float32Array; // [conv_dim, K]
  readonly dtBias: Float32Array; // [Hv]
  readonly a: Float32Array; // [Hv], -exp(A_log)
  readonly norm: Float32Array; // [Dv], raw
  readonly out: PackedMatrix; // [D, value_dim]
  /** The dense FFN (qwen35); absent on a qwen35moe layer (see `moe`). */
  readonly ffnGate: PackedMatrix;
  readonly ffnUp: PackedMatrix;
  readonly ffnDown: PackedMatrix;
  readonly moe?: MoeFfnWeights;
}

export type LayerWeights = AttentionWeights | GdnWeights;

/** Whether a layer's token mixer is of the attention family (its kind's op in gguf's LAYER_KINDS). */
export function isAttention(layer: LayerWeights): layer is AttentionWeights {
  return LAYER_KINDS.mixers[layer.kind].op === "attention";
}

/**
 * The MTP/NextN drafter block `blk.{n_layer}.*` (qwen35.md section 12): one full-attention decoder
 * block (its own KV layer) behind an input projection of [embedding | target hidden], and the
 * shared head.
 */
export interface DrafterWeights extends AttentionWeights {
  readonly ehProj: PackedMatrix; // [D, 2D]: input [rms(e) * enorm | rms(h) * hnorm]
  readonly enorm: Float32Array; // [D]
  readonly hnorm: Float32Array; // [D]
  /** nextn.shared_head_norm (or output_norm when absent) */
  readonly headNorm: Float32Array; // [D]
  /** nextn.embed_tokens, or undefined: the trunk's token_embd is used */
  readonly embedTokens: PackedMatrix | undefined;
  /** nextn.shared_head_head, or the trunk's head (output, or token_embd when tied) */
  readonly head: PackedMatrix; // [vocab, D]
}

export interface ModelWeights {
  /** The load plan's hyperparameters, as the gguf package typed and validated them (no second parse). */
  readonly config: Qwen35Config;
  /** The load plan's vocabulary: rows of token_embd and of the head. */
  readonly vocab: number;
  /**
   * The load plan's model description (dims, layers, cache planes), which these weights were bound
   * from. Absent only on weights assembled by hand; read it through `modelDescription`.
   */
  readonly description?: ModelDescription;
  /** token_embd [n_vocab, D], packed */
  readonly tokenEmbd: PackedMatrix;
  /** bf16 twin of token_embd for gathers (bf16 numerics only); undefined in llama numerics. */
  readonly tokenEmbdTwin: Uint16Array | undefined;
  readonly outputNorm: Float32Array;
  /** output.weight, or token_embd itself when tied. */
  readonly output: PackedMatrix;
  readonly tied: boolean;
  readonly layers: readonly LayerWeights[];
  /** The MTP drafter block, bound only when the load plan keeps it (speculative method "mtp"). */
  readonly drafter?: DrafterWeights;
}

/**
 * The weights with the drafter's head cut to its first `rows` rows (speculative.draftVocab): a view
 * of the same packed bytes (rows are contiguous), so nothing is copied and the target's head is
 * untouched. `rows` equal to the head's leaves the weights as they are.
 */
export function withDrafterHeadRows(weights: ModelWeights, rows: number): ModelWeights {
  const d = weights.drafter;
  if (!d) throw new Error("withDrafterHeadRows: these weights have no MTP drafter block");
  if (!Number.isInteger(rows) || rows < 1 || rows > d.head.rows) {
    throw new RangeError(`withDrafterHeadRows: ${rows} rows, expected 1 .. ${d.head.rows}`);
  }
  if (rows === d.head.rows) return weights;
  const head: PackedMatrix = {
    ...d.head,
    name: `${d.head.name}[0:${rows}]`,
    rows,
    data: d.head.data.subarray(0, rows * d.head.rowBytes),
  };
  return { ...weights, drafter: { ...d, head } };
}

/** Copies bytes into a fresh 64-byte-aligned buffer so typed-array views of any element width work. */
export function alignedCopy(bytes: Uint8Array): Uint8Array {
  const buffer = new ArrayBuffer(Math.ceil(bytes.byteLength / 64) * 64 + 64);
  const out = new Uint8Array(buffer, 0, bytes.byteLength);
  out.set(bytes);
  return out;
}
