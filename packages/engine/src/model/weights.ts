import type { GgmlType, Qwen35Config } from "@keepquant/gguf";
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
  readonly groups: 1;
  /** N (output features) */
  readonly rows: number;
  /** K (inputs) */
  readonly cols: number;
  readonly rowBytes: number;
  /** The packed words: a view of the memory-mapped file (or a copy read from it). */
  readonly data: Uint8Array;
}

export interface AttentionWeights {
  readonly kind: "attention";
  readonly attnNorm: Float32Array; // [D]
  readonly postAttnNorm: Float32Array; // [D]
  readonly q: PackedMatrix; // [2 H Dh, D]: per head [q_h | gate_h]
  readonly k: PackedMatrix; // [Hkv Dh, D]
  readonly v: PackedMatrix; // [Hkv Dh, D]
  readonly o: PackedMatrix; // [D, H Dh]
  readonly qNorm: Float32Array; // [Dh]
  readonly kNorm: Float32Array; // [Dh]
  readonly ffnGate: PackedMatrix; // [n_ff, D]
  readonly ffnUp: PackedMatrix; // [n_ff, D]
  readonly ffnDown: PackedMatrix; // [D, n_ff]
}

export interface GdnWeights {
  readonly kind: "gdn";
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
  readonly ffnGate: PackedMatrix;
  readonly ffnUp: PackedMatrix;
  readonly ffnDown: PackedMatrix;
}

export type LayerWeights = AttentionWeights | GdnWeights;

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
