import type { ModelConfig } from "./config.js";

/**
 * A matmul weight kept in its file encoding: `rows` output features of `cols` inputs each,
 * `rowBytes` per row, exactly as stored in the GGUF (never transposed).
 */
export interface PackedMatrix {
  readonly name: string;
  /** ggml type id */
  readonly type: number;
  readonly typeName: string;
  /** N (output features) */
  readonly rows: number;
  /** K (inputs) */
  readonly cols: number;
  readonly rowBytes: number;
  /** The packed words: a view of the memory-mapped file (or a copy read from it). */
  readonly data: Uint8Array;
  /** Scratch slot for providers to cache a handle (e.g. a native weight object). */
  providerHandle?: unknown;
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

export interface ModelWeights {
  readonly config: ModelConfig;
  /** token_embd [n_vocab, D], packed */
  readonly tokenEmbd: PackedMatrix;
  /** bf16 twin of token_embd for gathers (bf16 numerics only); undefined in llama numerics. */
  readonly tokenEmbdTwin: Uint16Array | undefined;
  readonly outputNorm: Float32Array;
  /** output.weight, or token_embd itself when tied. */
  readonly output: PackedMatrix;
  readonly tied: boolean;
  readonly layers: readonly LayerWeights[];
}

/** Copies bytes into a fresh 64-byte-aligned buffer so typed-array views of any element width work. */
export function alignedCopy(bytes: Uint8Array): Uint8Array {
  const buffer = new ArrayBuffer(Math.ceil(bytes.byteLength / 64) * 64 + 64);
  const out = new Uint8Array(buffer, 0, bytes.byteLength);
  out.set(bytes);
  return out;
}
