import { GgmlType, LAYER_KINDS, type MixerOp, type ModelDims, type Qwen35Config } from "@keepquant/gguf";
import { matmulDense } from "@keepquant/quant";
import { F16_TO_F32, f32BitsToF16Bits } from "../numerics/half.js";
import {
  GGML_F32_LANES,
  ggmlDecayDot,
  ggmlMadDot,
  ggmlSiluScalar,
  ggmlSoftMaxSum,
  ggmlVExpf,
  ggmlVSilu,
  ggmlVecDotF32,
  setScalarExpf,
} from "../numerics/ggml-expf.js";
import { fmaf } from "../numerics/fma.js";
import { ggmlArgsortDesc } from "../numerics/ggml-argsort.js";
import { l2NormInPlace } from "../numerics/l2-norm.js";
import type { PagedKvCache } from "../kv/paged-kv.js";
import type { GdnStatePool } from "../kv/state-pool.js";
import { modelDescription, trunkCacheIndex } from "./config.js";
import { allocateForwardScratch, forwardScratchWidths, type ForwardScratch, type ForwardScratchName } from "./scratch.js";
import { decodeRow, type DequantizeRow, type MatmulProvider, type Numerics } from "./matmul.js";
import type { AttentionWeights, GdnWeights, LayerWeights, ModelWeights, MoeFfnWeights, PackedMatrix } from "./weights.js";

const fround = Math.fround;

/** One sequence's share of a forward step: a prefill chunk or a single decode token. */
export interface StepEntry {
  /** Tokens of this chunk, at positions startPos, startPos + 1, ... */
  readonly tokens: ArrayLike<number>;
  readonly startPos: number;
  /** Block table covering positions [0, startPos + tokens.length). */
  readonly blockTable: readonly number[];
  /** GDN state slot of the sequence. */
  readonly stateSlot: number;
  /** Which rows of this chunk need logits. */
  readonly logits: "none" | "last" | "all";
  /** Explicit rows (indices into this chunk, ascending) that need logits; overrides `logits`. */
  readonly logitRows?: readonly number[];
  /**
   * Every row of this chunk goes through the last layer and its post-norm hidden state (llama.cpp's
   * `h_nextn`, the MTP drafter's input) is kept (`Qwen35Forward.hiddenRows`). Otherwise only the
   * logit rows' hidden states are.
   */
  readonly hidden?: boolean;
  /**
   * After this row (an index into the chunk) the sequence's GDN state, every layer's conv window
   * and recurrent state, is copied to the same slot of the forward's `snapshots` pool (speculative
   * decoding keeps the state at the last known token of a verification step).
   */
  readonly snapshotRow?: number;
  /**
   * Rows of this chunk whose input is an embedding row instead of a token's (an image's tokens):
   * ascending chunk indices and their [rows, n_embd] f32 values. Their `tokens` entries are
   * placeholders and are not looked up.
   */
  readonly embeddings?: { readonly rows: readonly number[]; readonly data: Float32Array };
  /**
   * Rotary positions of each row as (t, h, w) triples (multimodal RoPE: an image token sits at
   * (t, t + row, t + column)). Absent: row i is at startPos + i in all three, as text is.
   */
  readonly ropePositions?: Int32Array;
}

/**
 * One sequence's share of a drafter step: rows at positions startPos, startPos + 1, ... Row i pairs
 * `tokens[i]` with the hidden state of the previous position (qwen35.md section 12), given in the
 * step's hidden input; its K/V go to the drafter's KV layer through the block table.
 */
export interface DrafterEntry {
  readonly tokens: ArrayLike<number>;
  readonly startPos: number;
  readonly blockTable: readonly number[];
  /** Rows (indices into this chunk, ascending) that need logits and the drafter's own hidden state. */
  readonly logitRows: readonly number[];
}

/** Rows of each entry whose hidden state the step keeps: all of them with `hidden`, else the logit rows. */
export function keptRows(e: StepEntry): readonly number[] {
  return e.hidden ? Array.from({ length: e.tokens.length }, (_, i) => i) : outputRows(e);
}

function outputRows(e: StepEntry): readonly number[] {
  if (e.logitRows) return e.logitRows;
  const n = e.tokens.length;
  if (e.logits === "all") return Array.from({ length: n }, (_, i) => i);
  if (e.logits === "last") return [n - 1];
  return [];
}

/** Query rows at or above which llama.cpp's CPU flash attention switches to its tiled f32 path. */
export const FLASH_ATTN_TILED_MIN_ROWS = 64;
const FLASH_ATTN_KV_TILE = 64;

/** One query head of one row, attending over its sequence's cache (what the three `attend*` paths take). */
interface AttendedHead {
  kPlane: Uint16Array | Float32Array;
  vPlane: Uint16Array | Float32Array;
  /** Whether the planes hold f16 bits (else f32). */
  f16: boolean;
  blockTable: readonly number[];
  /** The row's position: it attends over positions 0..pos. */
  pos: number;
  kvHead: number;
  /** Offset of the head's query in `q` and of its output in `attnOut`. */
  outOffset: number;
  /** 1/sqrt(Dh), f32. */
  scale: number;
}

/** f32 RMSNorm exactly as ggml_rms_norm then ggml_mul (f64 sum of f32 squares). */
function rmsNorm(
  x: Float32Array,
  xOffset: number,
  weight: Float32Array,
  out: Float32Array,
  outOffset: number,
  n: number,
  eps: number,
): void {
  let sum = 0;
  for (let i = 0; i < n; i++) {
    const v = x[xOffset + i]!;
    sum += fround(v * v);
  }
  const mean = fround(sum / n);
  const scale = fround(1 / fround(Math.sqrt(fround(mean + eps))));
  for (let i = 0; i < n; i++) out[outOffset + i] = fround(x[xOffset + i]! * scale) * weight[i]!;
}

/** The MoE FFN's work buffers, sized for a step's token budget. */
interface MoeScratch {
  logits: Float32Array; // [T, E]
  probs: Float32Array; // [T, E]
  ids: Int32Array; // [T, k]: the selected experts, highest probability first
  order: Int32Array; // [E]: ggml_argsort's order of one row (ties only)
  weights: Float32Array; // [T, k]
  slotOf: Int32Array; // rows of one expert's batch -> t * k + s
  expertId: Int32Array; // [1]
  xRows: Float32Array; // [T, D]: one expert's input rows (an expert takes each row at most once)
  gate: Float32Array; // [T, n_ff_exp]
  up: Float32Array; // [T, n_ff_exp]
  gateUp: Float32Array; // [T, 2 n_ff_exp] (merged gate/up tensors)
  down: Float32Array; // [T, D]
  experts: Float32Array; // [T, k, D]: each selected expert's weighted output
  sharedGate: Float32Array; // [T, n_ff_shexp]
  sharedUp: Float32Array; // [T, n_ff_shexp]
  shared: Float32Array; // [T, D]
  moeOut: Float32Array; // [T, D]: the routed experts' sum (observed by taps)
  gateLogit: Float32Array; // [T]: the shared expert's gate before the sigmoid
}

function allocateMoeScratch(c: Qwen35Config, T: number): MoeScratch {
  const m = c.moe!;
  const D = c.embeddingLength;
  const E = m.expertCount;
  const K = m.expertUsedCount;
  const F = m.expertFeedForwardLength;
  const S = m.sharedFeedForwardLength;
  return {
    logits: new Float32Array(T * E),
    probs: new Float32Array(T * E),
    ids: new Int32Array(T * K),
    order: new Int32Array(E),
    weights: new Float32Array(T * K),
    slotOf: new Int32Array(T),
    expertId: new Int32Array(1),
    xRows: new Float32Array(T * D),
    gate: new Float32Array(T * F),
    up: new Float32Array(T * F),
    gateUp: new Float32Array(T * 2 * F),
    down: new Float32Array(T * D),
    experts: new Float32Array(T * K * D),
    sharedGate: new Float32Array(T * S),
    sharedUp: new Float32Array(T * S),
    shared: new Float32Array(T * D),
    moeOut: new Float32Array(T * D),
    gateLogit: new Float32Array(T),
  };
}

/**
 * One output of an F32 mul_mat as llamafile's tinyBLAS computes it on AVX2 (the haswell variant):
 * one 8-lane f32 fused multiply-add accumulator over K (lane = k % 8), then its horizontal sum
 * ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)). K is a multiple of 8.
 */
function tinyBlasDotF32(w: Float32Array, wOffset: number, x: Float32Array, xOffset: number, k: number): number {
  let l0 = 0;
  let l1 = 0;
  let l2 = 0;
  let l3 = 0;
  let l4 = 0;
  let l5 = 0;
  let l6 = 0;
  let l7 = 0;
  for (let i = 0; i < k; i += 8) {
    l0 = fmaf(w[wOffset + i]!, x[xOffset + i]!, l0);
    l1 = fmaf(w[wOffset + i + 1]!, x[xOffset + i + 1]!, l1);
    l2 = fmaf(w[wOffset + i + 2]!, x[xOffset + i + 2]!, l2);
    l3 = fmaf(w[wOffset + i + 3]!, x[xOffset + i + 3]!, l3);
    l4 = fmaf(w[wOffset + i + 4]!, x[xOffset + i + 4]!, l4);
    l5 = fmaf(w[wOffset + i + 5]!, x[xOffset + i + 5]!, l5);
    l6 = fmaf(w[wOffset + i + 6]!, x[xOffset + i + 6]!, l6);
    l7 = fmaf(w[wOffset + i + 7]!, x[xOffset + i + 7]!, l7);
  }
  return fround(fround(fround(l0 + l4) + fround(l2 + l6)) + fround(fround(l1 + l5) + fround(l3 + l7)));
}

/**
 * ggml_soft_max over one row of `n` (no mask, scale 1): max, then ggml_vec_soft_max_f32's AVX2 body
 * (full 8-lane vectors through ggml_v_expf with an f32 horizontal sum each, the tail through expf,
 * all added in f64), then every value times (float)(1 / sum).
 */
function ggmlSoftMaxRow(x: Float32Array, y: Float32Array, n: number): void {
  let max = Number.NEGATIVE_INFINITY;
  for (let i = 0; i < n; i++) max = Math.max(max, x[i]!);
  let sum = 0;
  const simd = n - (n % GGML_F32_LANES);
  for (let g = 0; g < simd; g += 8) {
    for (let i = 0; i < 8; i++) y[g + i] = ggmlVExpf(fround(x[g + i]! - max));
    const t0 = fround(y[g]! + y[g + 4]!);
    const t1 = fround(y[g + 1]! + y[g + 5]!);
    const t2 = fround(y[g + 2]! + y[g + 6]!);
    const t3 = fround(y[g + 3]! + y[g + 7]!);
    sum += fround(fround(t0 + t2) + fround(t1 + t3));
  }
  for (let i = simd; i < n; i++) {
    y[i] = libm.expf(fround(x[i]! - max));
    sum += y[i]!;
  }
  const scale = fround(1 / sum);
  for (let i = 0; i < n; i++) y[i] = fround(y[i]! * scale);
}

/**
 * ggml_argsort_top_k's first `k` of `values`: the indices in ggml_argsort's descending order
 * (numerics/ggml-argsort.ts). Without a tie that touches the selection (a selected value equal to any
 * other, or a NaN) that order is the unique descending one, found by selection; otherwise the row is
 * sorted as ggml sorts it (`order`: scratch of values.length indices), where equal values need not
 * come out lower index first.
 */
function topK(values: Float32Array, k: number, out: Int32Array, order: Int32Array): void {
  const n = values.length;
  for (let s = 0; s < k; s++) {
    let best = -1;
    for (let i = 0; i < n; i++) {
      let taken = false;
      for (let j = 0; j < s; j++) if (out[j] === i) taken = true;
      if (taken) continue;
      if (best < 0 || values[i]! > values[best]!) best = i;
    }
    out[s] = best;
  }
  let tie = false;
  for (let s = 0; s < k && !tie; s++) {
    const value = values[out[s]!]!;
    if (Number.isNaN(value)) tie = true;
    for (let i = 0; i < n && !tie; i++) tie = i !== out[s] && (values[i] === value || Number.isNaN(values[i]!));
  }
  if (!tie) return;
  ggmlArgsortDesc(values, order, n);
  for (let s = 0; s < k; s++) out[s] = order[s]!;
}

/** ggml_vec_swiglu_f32 in place: gate[i] = silu(gate[i]) * up[i] over one row (SIMD silu on full vectors). */
function swigluRow(gate: Float32Array, up: Float32Array, offset: number, n: number): void {
  const simd = n - (n % GGML_F32_LANES);
  for (let i = 0; i < simd; i++) gate[offset + i] = fround(ggmlVSilu(gate[offset + i]!) * up[offset + i]!);
  for (let i = simd; i < n; i++) gate[offset + i] = fround(ggmlSiluScalar(gate[offset + i]!) * up[offset + i]!);
}

/** ggml_vec_silu_f32 in place over one row. */
function siluRow(x: Float32Array, offset: number, n: number): void {
  const simd = n - (n % GGML_F32_LANES);
  for (let i = 0; i < simd; i++) x[offset + i] = ggmlVSilu(x[offset + i]!);
  for (let i = simd; i < n; i++) x[offset + i] = ggmlSiluScalar(x[offset + i]!);
}

/**
 * libm entry points (f32 in, f32 out) used by sigmoid, softplus, the GDN decay, the attention
 * softmax, SiLU's scalar tail and RoPE: every transcendental of the forward goes through here.
 * JavaScript's Math is correctly rounded far more often than glibc: e.g. glibc's logf differs in
 * about 9% of softplus outputs near 1 on our fixtures. `setLibm` swaps them process-wide; the
 * native step calls the C library, so pinning these to it (tt-native's `nativeLibm`) makes this
 * forward bit-identical to the native one.
 */
export const libm = {
  expf: (x: number): number => fround(Math.exp(x)),
  logf: (x: number): number => fround(Math.log(x)),
  cosf: (x: number): number => fround(Math.cos(x)),
  sinf: (x: number): number => fround(Math.sin(x)),
  powf: (x: number, y: number): number => fround(Math.pow(x, y)),
};

/** Replaces some libm entry points for this process (see `libm`). */
export function setLibm(overrides: Partial<typeof libm>): void {
  Object.assign(libm, overrides);
  setScalarExpf(libm.expf);
}

function sigmoid(x: number): number {
  return fround(1 / fround(1 + libm.expf(-x)));
}

function softplus(x: number): number {
  return x > 20 ? x : libm.logf(fround(1 + libm.expf(x)));
}

/**
 * A debug tap: receives an op's result right after the op wrote it into its scratch buffer,
 * named as llama.cpp's eval callback names the same tensor (`attn_norm-3`, `conv_output_silu-0`,
 * ...). `data` is `[rows, width]` row-major, valid only during the call (copy what you keep).
 */
export type ActivationTap = (name: string, data: Float32Array, rows: number, width: number) => void;

/** Op classes reported by Engine.stats(): which provider ran each. */
export interface OpProviders {
  [opClass: string]: string;
}

/**
 * The qwen35 forward over a batch of sequences (qwen35.md sections 4-9). All activations are f32;
 * big matmuls go through the selected providers; everything else runs here in TypeScript.
 * Scratch is preallocated for `maxBatchTokens` rows; the logits buffer grows on demand.
 */
export class Qwen35Forward {
  /** the load plan's hyperparameters (ModelWeights.config) */
  readonly config: Qwen35Config;
  readonly maxBatchTokens: number;
  /** the description's named dimensions (the widths and head counts every op reads) */
  private readonly dims: ModelDims;
  /** layer -> its KV cache layer (attention) or state pool layer (GDN) */
  private readonly cacheIndex: Int32Array;
  /** full-attention trunk layers (KV planes before the drafter's), from the description */
  private readonly trunkKvLayers: number;
  private readonly eps: number;

  // activation scratch, [rows, width]: views of the named buffers of scratch.ts
  private readonly scratch: ForwardScratch;
  private readonly scratchWidths: Readonly<Record<ForwardScratchName, number>>;
  private readonly hidden: Float32Array; // [T, D]
  private readonly normed: Float32Array; // [T, D]
  private readonly branch: Float32Array; // [T, D]
  private readonly qg: Float32Array; // [T, 2 H Dh]
  private readonly q: Float32Array; // [T, H Dh]
  private readonly kRows: Float32Array; // [T, Hkv Dh]
  private readonly vRows: Float32Array; // [T, Hkv Dh]
  private readonly attnOut: Float32Array; // [T, H Dh]
  private readonly mixed: Float32Array; // [T, conv_dim]
  private readonly convOut: Float32Array; // [T, conv_dim]
  private readonly zRows: Float32Array; // [T, value_dim]
  private readonly betaRows: Float32Array; // [T, Hv]
  private readonly alphaRows: Float32Array; // [T, Hv]
  private readonly gdnOut: Float32Array; // [T, value_dim]
  private readonly ffnGate: Float32Array; // [T, n_ff]
  private readonly ffnUp: Float32Array; // [T, n_ff]
  /** The MoE FFN's work buffers (qwen35moe only). */
  private readonly moeScratch: MoeScratch | undefined;
  private readonly headDimScratch: Float32Array; // [Dh] query as seen by the kernel
  private readonly kRowScratch: Float32Array; // [Dh] one K row decoded to f32
  private readonly qBits: Uint32Array; // bit view of q
  private readonly accScratch: Float32Array; // [Dh] V accumulator
  private readonly vLanes: Float32Array; // [Dh, 8] V accumulator lanes (non-flash path)
  private readonly ropeCos: Float32Array; // [nRot/2]
  private readonly ropeSin: Float32Array;
  private readonly ropeThetaScale: number;
  private scoreScratch = new Float32Array(FLASH_ATTN_KV_TILE);
  private outHidden = new Float32Array(0);
  private logitsBuffer = new Float32Array(0);
  private readonly rowSeq: Int32Array; // row -> entry index
  private readonly rowPos: Int32Array; // row -> position
  private readonly rowRope: Int32Array; // row -> rotary (t, h, w)
  /** The rotary section each dimension pair turns with: 0 = t, 1 = h, 2 = w (interleaved M-RoPE). */
  private readonly ropeSection: Uint8Array;

  constructor(
    readonly weights: ModelWeights,
    readonly kv: PagedKvCache,
    readonly states: GdnStatePool,
    private readonly providers: ReadonlyMap<PackedMatrix, MatmulProvider>,
    readonly numerics: Numerics,
    private readonly dequantize: DequantizeRow | undefined,
    maxBatchTokens: number,
    /** llama.cpp's flash attention (its CPU default); false = mul_mat + soft_max_ext + mul_mat. */
    readonly flashAttention = true,
  ) {
    const c = weights.config;
    this.config = c;
    this.maxBatchTokens = maxBatchTokens;
    this.eps = fround(c.rmsEps);
    this.moeScratch = c.moe ? allocateMoeScratch(c, maxBatchTokens) : undefined;
    const description = modelDescription(weights);
    this.dims = description.dims;
    this.cacheIndex = trunkCacheIndex(description);
    this.trunkKvLayers = description.attentionLayers;
    const T = maxBatchTokens;
    this.scratchWidths = forwardScratchWidths(description.dims);
    const scratch = allocateForwardScratch(description.dims, T);
    this.scratch = scratch;
    this.hidden = scratch.hidden;
    this.normed = scratch.normed;
    this.branch = scratch.branch;
    this.qg = scratch.qg;
    this.q = scratch.q;
    this.kRows = scratch.kRows;
    this.vRows = scratch.vRows;
    this.attnOut = scratch.attnOut;
    this.mixed = scratch.mixed;
    this.convOut = scratch.convOut;
    this.zRows = scratch.zRows;
    this.betaRows = scratch.betaRows;
    this.alphaRows = scratch.alphaRows;
    this.gdnOut = scratch.gdnOut;
    this.ffnGate = scratch.ffnGate;
    this.ffnUp = scratch.ffnUp;
    this.headDimScratch = new Float32Array(this.dims.headDim);
    this.kRowScratch = new Float32Array(this.dims.headDim);
    this.qBits = new Uint32Array(this.q.buffer, this.q.byteOffset, this.q.length);
    this.accScratch = new Float32Array(this.dims.headDim);
    this.vLanes = new Float32Array(this.dims.headDim * 8);
    this.ropeCos = new Float32Array(this.dims.nRot / 2);
    this.ropeSin = new Float32Array(this.dims.nRot / 2);
    this.ropeThetaScale = libm.powf(fround(c.ropeFreqBase), fround(-2 / this.dims.nRot));
    this.rowSeq = new Int32Array(T);
    this.rowPos = new Int32Array(T);
    this.rowRope = new Int32Array(3 * T);
    this.ropeSection = imropeSections(c.ropeSections ?? [0, 0, 0, 0], this.dims.nRot / 2);
  }

  /**
   * Debug tap (see ActivationTap): observes scratch buffers after the ops that wrote them. The
   * forward computes the same values whether or not a tap is set; a tap only reads.
   */
  tap: ActivationTap | undefined;

  /** Where `StepEntry.snapshotRow` copies a sequence's GDN state (same layout and slots as `states`). */
  snapshots: GdnStatePool | undefined;

  /** Bytes of preallocated activation scratch. */
  get scratchBytes(): number {
    const arrays = [...Object.values(this.scratch), this.outHidden, this.logitsBuffer];
    return arrays.reduce((sum, a) => sum + a.byteLength, 0);
  }

  /**
   * Hands `rows` rows of scratch buffer `buffer` to the tap as `<name>-<il>`: all of each row, or
   * `width` values from `column` (packed into a copy, since the tap reads [rows, width]).
   */
  private observe(name: string, il: number, buffer: ForwardScratchName, rows: number, column = 0, width?: number): void {
    const tap = this.tap;
    if (!tap) return;
    const data = this.scratch[buffer];
    const stride = this.scratchWidths[buffer];
    const w = width ?? stride;
    if (column === 0 && w === stride) {
      tap(`${name}-${il}`, data.subarray(0, rows * w), rows, w);
      return;
    }
    const packed = new Float32Array(rows * w);
    for (let r = 0; r < rows; r++) packed.set(data.subarray(r * stride + column, r * stride + column + w), r * w);
    tap(`${name}-${il}`, packed, rows, w);
  }

  /**
   * The op of each token mixer family (gguf's MIXER_OPS; a family without an op is a compile error).
   * A layer runs its kind's family (LAYER_KINDS), so a new kind of an existing family needs no entry.
   */
  private readonly mixerOps: Readonly<
    Record<MixerOp, (il: number, layer: LayerWeights, entries: readonly StepEntry[], T: number) => void>
  > = {
    attention: (il, layer, entries, T) => this.attention(il, layer as AttentionWeights, entries, T),
    gdn: (il, layer, entries, T) => this.gatedDeltaNet(il, layer as GdnWeights, entries, T),
  };

  private matmul(weight: PackedMatrix, x: Float32Array, m: number, y: Float32Array): void {
    const provider = this.providers.get(weight);
    if (!provider) throw new Error(`no provider selected for ${weight.name}`);
    matmulDense(provider, weight, x, m, y);
  }

  /**
   * Runs one step. Returns logits `[nOut, vocab]` for the requested rows, in entry order then row
   * order; the view is valid until the next call.
   */
  forward(entries: readonly StepEntry[]): Float32Array {
    const c = this.config;
    const D = this.dims.nEmbd;
    const vocab = this.weights.vocab;
    let T = 0;
    for (const e of entries) T += e.tokens.length;
    if (T > this.maxBatchTokens) throw new Error(`step has ${T} tokens, more than maxBatchTokens ${this.maxBatchTokens}`);
    if (T === 0) return new Float32Array(0);

    // 1. embeddings
    this.embed(entries, this.weights.tokenEmbd, this.weights.tokenEmbdTwin);

    // rows that go on after the last mixer (kept) and, among them, the rows that need logits
    const outRows: number[] = [];
    const logitAmongKept: number[] = [];
    let row = 0;
    for (const e of entries) {
      const logitRows = new Set(outputRows(e));
      for (const i of keptRows(e)) {
        if (logitRows.has(i)) logitAmongKept.push(outRows.length);
        outRows.push(row + i);
      }
      row += e.tokens.length;
    }
    const nOut = outRows.length;
    this.nHidden = 0;

    // 2. layers
    for (let il = 0; il < c.nLayer; il++) {
      const layer = this.weights.layers[il]!;
      for (let r = 0; r < T; r++) rmsNorm(this.hidden, r * D, layer.attnNorm, this.normed, r * D, D, this.eps);
      this.observe("attn_norm", il, "normed", T);
      this.mixerOps[LAYER_KINDS.mixers[layer.kind].op](il, layer, entries, T);
      this.observe("mixer_out", il, "branch", T);
      let rows = T;
      if (il === c.nLayer - 1) {
        // as llama.cpp: after the last mixer only the output rows go on (its FFN matmuls then see
        // m = nOut, which selects the same kernels as llama.cpp's)
        if (nOut === 0) return new Float32Array(0);
        for (let k = 0; k < nOut; k++) {
          const from = outRows[k]!;
          if (from !== k) {
            this.hidden.copyWithin(k * D, from * D, (from + 1) * D);
            this.branch.copyWithin(k * D, from * D, (from + 1) * D);
          }
        }
        rows = nOut;
      }
      for (let i = 0; i < rows * D; i++) this.hidden[i] = this.hidden[i]! + this.branch[i]!;
      for (let r = 0; r < rows; r++) rmsNorm(this.hidden, r * D, layer.postAttnNorm, this.normed, r * D, D, this.eps);
      this.ffn(layer, rows, il);
      for (let i = 0; i < rows * D; i++) this.hidden[i] = this.hidden[i]! + this.branch[i]!;
      this.observe("l_out", il, "hidden", rows);
    }

    // 3. output norm over the kept rows (now rows 0 .. nOut-1), the head over the logit rows
    if (this.outHidden.length < nOut * D) this.outHidden = new Float32Array(nOut * D);
    for (let k = 0; k < nOut; k++) rmsNorm(this.hidden, k * D, this.weights.outputNorm, this.outHidden, k * D, D, this.eps);
    this.nHidden = nOut;
    return this.head(this.weights.output, this.outHidden, logitAmongKept, nOut, vocab);
  }

  /** Kept hidden rows of the last step (see `hiddenRows`). */
  private nHidden = 0;
  private headInput = new Float32Array(0);
  private concatScratch = new Float32Array(0);

  /**
   * The post-norm hidden states of the last `forward` (llama.cpp's `h_nextn`: every row of the
   * entries with `hidden`, the logit rows of the others, in entry then row order), or of the last
   * `draft` (its logit rows: the drafter's own hidden state, for chaining). Valid until the next step.
   */
  get hiddenRows(): Float32Array {
    return this.outHidden.subarray(0, this.nHidden * this.dims.nEmbd);
  }

  /** The head over rows `rows` of `normed` ([nKept, D]); the logits view is valid until the next step. */
  private head(weight: PackedMatrix, normed: Float32Array, rows: readonly number[], nKept: number, vocab: number): Float32Array {
    const D = this.dims.nEmbd;
    const nLogits = rows.length;
    if (this.logitsBuffer.length < nLogits * vocab) this.logitsBuffer = new Float32Array(nLogits * vocab);
    const logits = this.logitsBuffer.subarray(0, nLogits * vocab);
    if (nLogits === 0) return logits;
    let input = normed;
    if (nLogits !== nKept) {
      // llama.cpp's get_rows of the logit rows before the head
      if (this.headInput.length < nLogits * D) this.headInput = new Float32Array(nLogits * D);
      rows.forEach((r, k) => this.headInput.set(normed.subarray(r * D, (r + 1) * D), k * D));
      input = this.headInput;
    }
    this.matmul(weight, input, nLogits, logits);
    return logits;
  }

  /** Embedding rows of every entry into `hidden`; records each row's entry, position and rotary position. */
  private embed(
    entries: readonly Pick<StepEntry, "tokens" | "startPos" | "embeddings" | "ropePositions">[],
    table: PackedMatrix,
    twin: Uint16Array | undefined,
  ): void {
    const D = this.dims.nEmbd;
    const vocab = this.weights.vocab;
    const twinBits = new Uint32Array(this.hidden.buffer);
    let row = 0;
    for (let ei = 0; ei < entries.length; ei++) {
      const e = entries[ei]!;
      const media = e.embeddings;
      if (media && media.data.length !== media.rows.length * D) {
        throw new Error(`embedding rows: expected ${media.rows.length} x ${D} values, got ${media.data.length}`);
      }
      if (e.ropePositions && e.ropePositions.length !== 3 * e.tokens.length) {
        throw new Error(
          `rotary positions: expected ${3 * e.tokens.length} values for ${e.tokens.length} rows, got ${e.ropePositions.length}`,
        );
      }
      let next = 0;
      for (let i = 0; i < e.tokens.length; i++, row++) {
        this.rowSeq[row] = ei;
        this.rowPos[row] = e.startPos + i;
        for (let k = 0; k < 3; k++) this.rowRope[3 * row + k] = e.ropePositions ? e.ropePositions[3 * i + k]! : e.startPos + i;
        if (media && media.rows[next] === i) {
          this.hidden.set(media.data.subarray(next * D, (next + 1) * D), row * D);
          next++;
          continue;
        }
        const token = e.tokens[i]!;
        if (!(token >= 0 && token < vocab)) throw new Error(`token id ${token} out of range [0, ${vocab})`);
        if (twin) {
          for (let d = 0; d < D; d++) twinBits[row * D + d] = twin[token * D + d]! << 16;
        } else {
          decodeRow(table, token, this.hidden.subarray(row * D, (row + 1) * D), this.dequantize);
        }
      }
    }
  }

  /**
   * One step of the MTP drafter block (qwen35.md section 12, llama.cpp's `graph_mtp`): per row,
   * u = eh_proj [rms(e) * enorm | rms(h) * hnorm], then a full-attention block with its own KV layer
   * (the cache's last layer) and the FFN over every row, then the head norm and the shared head
   * over the logit rows. `hiddenIn` is [rows, D] in entry then row order. Returns the logits
   * `[nOut, drafter head rows]` (the vocabulary, or a prefix of it); `hiddenRows` then holds the
   * logit rows' post-norm hidden states (for chaining).
   */
  draft(entries: readonly DrafterEntry[], hiddenIn: Float32Array): Float32Array {
    const w = this.weights.drafter;
    if (!w) throw new Error('this model has no MTP drafter block bound (load it with speculative method "mtp")');
    const c = this.config;
    const trunkKvLayers = this.trunkKvLayers;
    if (this.kv.numLayers !== trunkKvLayers + 1) {
      throw new Error(
        `drafter step: the KV cache has ${this.kv.numLayers} layers, the drafter needs its own after the trunk's ${trunkKvLayers}`,
      );
    }
    const D = this.dims.nEmbd;
    let T = 0;
    for (const e of entries) T += e.tokens.length;
    if (T > this.maxBatchTokens) throw new Error(`drafter step has ${T} tokens, more than maxBatchTokens ${this.maxBatchTokens}`);
    if (hiddenIn.length < T * D)
      throw new Error(`drafter step: hidden input holds ${hiddenIn.length} values, ${T} rows x ${D} need ${T * D}`);
    this.nHidden = 0;
    if (T === 0) return new Float32Array(0);
    const il = c.nLayer;
    // embeddings: nextn.embed_tokens when present (decoded exactly), else the trunk's token_embd
    if (w.embedTokens) this.embed(entries, w.embedTokens, undefined);
    else this.embed(entries, this.weights.tokenEmbd, this.weights.tokenEmbdTwin);
    if (this.concatScratch.length < T * 2 * D) this.concatScratch = new Float32Array(this.maxBatchTokens * 2 * D);
    const concat = this.concatScratch;
    // concat(rms(e) * enorm, rms(h) * hnorm): embedding first, hidden second
    for (let r = 0; r < T; r++) {
      rmsNorm(this.hidden, r * D, w.enorm, concat, r * 2 * D, D, this.eps);
      rmsNorm(hiddenIn, r * D, w.hnorm, concat, r * 2 * D + D, D, this.eps);
    }
    this.matmul(w.ehProj, concat, T, this.hidden);
    this.observe("mtp_eh_proj", il, "hidden", T);
    const stepEntries: StepEntry[] = entries.map((e) => ({ ...e, stateSlot: -1, logits: "none" }));
    for (let r = 0; r < T; r++) rmsNorm(this.hidden, r * D, w.attnNorm, this.normed, r * D, D, this.eps);
    this.attention(il, w, stepEntries, T, this.kv.numLayers - 1);
    for (let i = 0; i < T * D; i++) this.hidden[i] = this.branch[i]! + this.hidden[i]!;
    for (let r = 0; r < T; r++) rmsNorm(this.hidden, r * D, w.postAttnNorm, this.normed, r * D, D, this.eps);
    this.ffn(w, T, il);
    for (let i = 0; i < T * D; i++) this.hidden[i] = this.branch[i]! + this.hidden[i]!;
    this.observe("mtp_post_ffn", il, "hidden", T);
    // head norm (h_nextn) over the logit rows, then the shared head
    const outRows: number[] = [];
    let row = 0;
    for (const e of entries) {
      for (const i of e.logitRows) outRows.push(row + i);
      row += e.tokens.length;
    }
    const nOut = outRows.length;
    if (this.outHidden.length < nOut * D) this.outHidden = new Float32Array(nOut * D);
    outRows.forEach((r, k) => rmsNorm(this.hidden, r * D, w.headNorm, this.outHidden, k * D, D, this.eps));
    this.nHidden = nOut;
    // the drafter's head: the vocabulary, or a prefix of its rows (speculative.draftVocab)
    return this.head(
      w.head,
      this.outHidden,
      outRows.map((_, k) => k),
      nOut,
      w.head.rows,
    );
  }

  private ffn(layer: AttentionWeights | GdnWeights, T: number, il: number): void {
    if (layer.moe) {
      this.moeFfn(layer.moe, T, il);
      return;
    }
    const nFf = this.config.feedForwardLength;
    this.matmul(layer.ffnGate, this.normed, T, this.ffnGate);
    this.matmul(layer.ffnUp, this.normed, T, this.ffnUp);
    // ggml_vec_swiglu_f32 per row: SIMD silu (ggml_v_expf) on full vectors, scalar expf on the tail
    for (let r = 0; r < T; r++) swigluRow(this.ffnGate, this.ffnUp, r * nFf, nFf);
    this.matmul(layer.ffnDown, this.ffnGate, T, this.branch);
  }

  /**
   * The MoE FFN over `T` rows of `normed` into `branch`, as llama.cpp's build_moe_ffn (softmax gating,
   * top-k, weights normalized to sum 1) plus the shared expert behind its sigmoid gate (qwen35moe's
   * build_layer_ffn); docs/usage/engine.md, "qwen35moe", gives the arithmetic op by op. The routed
   * experts go through the keep-quant contract's E = N form, one call per expert over the rows that
   * chose it (ggml's mul_mat_id groups rows the same way; each row's arithmetic is a dense row's).
   */
  private moeFfn(moe: MoeFfnWeights, T: number, il: number): void {
    const c = this.config;
    const m = c.moe!;
    const w = this.moeScratch!;
    const D = this.dims.nEmbd;
    const E = m.expertCount;
    const K = m.expertUsedCount;
    const F = m.expertFeedForwardLength;
    const S = m.sharedFeedForwardLength;
    const x = this.normed;
    // 1. router logits [T, E]: an F32 weight against contiguous f32 rows runs llamafile's tinyBLAS, but
    //    only from 2 rows on (llamafile_sgemm returns false for n < 2): a one-row step (a single decode
    //    token) takes ggml's vec_dot path, ggml_vec_dot_f32 per expert
    if (T === 1 && moe.router.type === GgmlType.F32 && this.numerics !== "exact") {
      const router = new Float32Array(moe.router.data.buffer, moe.router.data.byteOffset, E * D);
      for (let e = 0; e < E; e++) w.logits[e] = ggmlVecDotF32(router, e * D, x, 0, D);
    } else this.f32Matmul(moe.router, x, T, w.logits);
    this.tap?.(`ffn_moe_logits-${il}`, w.logits.subarray(0, T * E), T, E);
    // 2. per row: softmax over the experts, the top k (ggml_argsort's order: see topK), their
    //    probabilities normalized to sum 1 (ggml_sum_rows in f64, one f32 division each)
    for (let t = 0; t < T; t++) {
      const row = w.logits.subarray(t * E, (t + 1) * E);
      const probs = w.probs.subarray(t * E, (t + 1) * E);
      ggmlSoftMaxRow(row, probs, E);
      const ids = w.ids.subarray(t * K, (t + 1) * K);
      topK(probs, K, ids, w.order);
      let sum = 0;
      for (let s = 0; s < K; s++) sum += probs[ids[s]!]!;
      const total = fround(sum);
      for (let s = 0; s < K; s++) w.weights[t * K + s] = fround(probs[ids[s]!]! / total);
    }
    this.tap?.(`ffn_moe_probs-${il}`, w.probs.subarray(0, T * E), T, E);
    this.tap?.(`ffn_moe_weights_norm-${il}`, w.weights.subarray(0, T * K), T, K);
    // 3. routed experts, expert by expert over the rows that chose it (ascending row order)
    const gateUp = moe.gateUpExps;
    for (let e = 0; e < E; e++) {
      let rows = 0;
      for (let t = 0; t < T; t++) {
        for (let s = 0; s < K; s++) {
          if (w.ids[t * K + s] !== e) continue;
          w.slotOf[rows] = t * K + s;
          w.xRows.set(x.subarray(t * D, (t + 1) * D), rows * D);
          rows++;
        }
      }
      if (rows === 0) continue;
      const ids = w.expertId;
      ids[0] = e;
      const xRows = w.xRows.subarray(0, rows * D);
      if (gateUp) {
        // one merged [2 n_ff_exp] product per row: gate rows first, then up
        this.expertMatmul(gateUp, xRows, rows, ids, w.gateUp.subarray(0, rows * 2 * F));
        for (let r = 0; r < rows; r++) {
          w.gate.set(w.gateUp.subarray(r * 2 * F, r * 2 * F + F), r * F);
          w.up.set(w.gateUp.subarray(r * 2 * F + F, (r + 1) * 2 * F), r * F);
        }
      } else {
        this.expertMatmul(moe.gateExps!, xRows, rows, ids, w.gate.subarray(0, rows * F));
        this.expertMatmul(moe.upExps!, xRows, rows, ids, w.up.subarray(0, rows * F));
      }
      for (let r = 0; r < rows; r++) swigluRow(w.gate, w.up, r * F, F);
      this.expertMatmul(moe.downExps, w.gate.subarray(0, rows * F), rows, ids, w.down.subarray(0, rows * D));
      // ggml_mul(experts, weights): each expert output row scaled by its routing weight
      for (let r = 0; r < rows; r++) {
        const slot = w.slotOf[r]!;
        const weight = w.weights[slot]!;
        for (let i = 0; i < D; i++) w.experts[slot * D + i] = fround(w.down[r * D + i]! * weight);
      }
    }
    // 4. the shared expert over every row, and its scalar gate sigmoid(ffn_gate_inp_shexp . x)
    this.matmul(moe.sharedGateProj, x, T, w.sharedGate);
    this.matmul(moe.sharedUp, x, T, w.sharedUp);
    for (let t = 0; t < T; t++) swigluRow(w.sharedGate, w.sharedUp, t * S, S);
    this.matmul(moe.sharedDown, w.sharedGate, T, w.shared);
    this.tap?.(`ffn_shexp-${il}`, w.shared.subarray(0, T * D), T, D);
    // 5. branch = (expert 0 + expert 1 + ... in top-k order) + shared * gate
    // a one-row F32 mul_mat: ggml_vec_dot_f32 (its four 8-lane accumulators), not tinyBLAS (checked
    // against llama.cpp's shared_expert_gate layer by layer)
    for (let t = 0; t < T; t++) w.gateLogit[t] = ggmlVecDotF32(moe.sharedGate, 0, x, t * D, D);
    this.tap?.(`shared_expert_gate-${il}`, w.gateLogit.subarray(0, T), T, 1);
    for (let t = 0; t < T; t++) {
      const gate = sigmoid(w.gateLogit[t]!);
      for (let i = 0; i < D; i++) {
        let sum = w.experts[t * K * D + i]!;
        for (let s = 1; s < K; s++) sum = fround(sum + w.experts[(t * K + s) * D + i]!);
        w.moeOut[t * D + i] = sum;
        this.branch[t * D + i] = fround(sum + fround(w.shared[t * D + i]! * gate));
      }
    }
    this.tap?.(`ffn_moe_out-${il}`, w.moeOut.subarray(0, T * D), T, D);
  }

  /** y [m, N] = x [m, K] . W^T for an F32 weight as ggml's CPU mul_mat computes it (tinyBLAS); other types through the provider. */
  private f32Matmul(weight: PackedMatrix, x: Float32Array, m: number, y: Float32Array): void {
    if (weight.type !== GgmlType.F32 || this.numerics === "exact" || weight.cols % 8 !== 0) {
      this.matmul(weight, x, m, y);
      return;
    }
    const K = weight.cols;
    const N = weight.rows;
    const w = new Float32Array(weight.data.buffer, weight.data.byteOffset, N * K);
    for (let t = 0; t < m; t++) for (let n = 0; n < N; n++) y[t * N + n] = tinyBlasDotF32(w, n * K, x, t * K, K);
  }

  /** y [rows, N] = rows of x against expert `ids[0]` of a stacked expert weight: the contract's E = N arm, P = 1. */
  private expertMatmul(weight: PackedMatrix, x: Float32Array, rows: number, ids: Int32Array, y: Float32Array): void {
    const provider = this.providers.get(weight);
    if (!provider) throw new Error(`no provider selected for ${weight.name}`);
    provider.matmulBTQuantGrouped({ x, xGroups: 1, m: rows, weight, ids, p: 1, out: y });
  }

  private rope(x: Float32Array, offset: number): void {
    const half = this.dims.nRot / 2;
    for (let i = 0; i < half; i++) {
      const x0 = x[offset + i]!;
      const x1 = x[offset + i + half]!;
      const cos = this.ropeCos[i]!;
      const sin = this.ropeSin[i]!;
      // as ggml's haswell build compiles rotate_pairs (GCC contracts each expression): the second
      // product rounded to f32, then one fused multiply-add
      x[offset + i] = fmaf(x0, cos, -fround(x1 * sin));
      x[offset + i + half] = fmaf(x0, sin, fround(x1 * cos));
    }
  }

  /**
   * cos/sin of every rotated pair for row `r`: ggml's M-RoPE cache, one theta per section, each
   * multiplied by the scale at every pair, the pair taking its section's (text rows have all three
   * equal, which is plain NeoX RoPE).
   */
  private ropeTables(r: number): void {
    const theta = [fround(this.rowRope[3 * r]!), fround(this.rowRope[3 * r + 1]!), fround(this.rowRope[3 * r + 2]!)];
    for (let i = 0; i < this.dims.nRot / 2; i++) {
      const t = theta[this.ropeSection[i]!]!;
      this.ropeCos[i] = libm.cosf(t);
      this.ropeSin[i] = libm.sinf(t);
      for (let k = 0; k < 3; k++) theta[k] = fround(theta[k]! * this.ropeThetaScale);
    }
  }

  private attention(il: number, w: AttentionWeights, entries: readonly StepEntry[], T: number, layer = this.cacheIndex[il]!): void {
    const H = this.dims.nHead;
    const Hkv = this.dims.nHeadKv;
    const Dh = this.dims.headDim;
    const eps = this.eps;
    // gated (qwen35): attn_q rows are per head [q_h | gate_h], qDim = 2 H Dh; an ungated kind: q_h only, qDim = H Dh
    const gated = LAYER_KINDS.mixers[w.kind].gated;
    const qDim = this.dims.qDim;
    const qHeadStride = qDim / H;
    this.matmul(w.q, this.normed, T, this.qg);
    this.matmul(w.k, this.normed, T, this.kRows);
    this.matmul(w.v, this.normed, T, this.vRows);
    const kPlane = this.kv.k[layer]!;
    const vPlane = this.kv.v[layer]!;
    const f16 = this.kv.kvType === "f16";
    const kBits = new Uint32Array(this.kRows.buffer);
    const vBits = new Uint32Array(this.vRows.buffer);
    const kvStride = Hkv * Dh;
    for (let r = 0; r < T; r++) {
      const pos = this.rowPos[r]!;
      this.ropeTables(r);
      for (let h = 0; h < H; h++) {
        // q_h (of [q_h | gate_h] when gated) normed over Dh, then roped
        rmsNorm(this.qg, r * qDim + h * qHeadStride, w.qNorm, this.q, (r * H + h) * Dh, Dh, eps);
        this.rope(this.q, (r * H + h) * Dh);
      }
      for (let j = 0; j < Hkv; j++) {
        const off = r * kvStride + j * Dh;
        rmsNorm(this.kRows, off, w.kNorm, this.kRows, off, Dh, eps);
        this.rope(this.kRows, off);
      }
      // append K/V to this sequence's blocks
      const e = entries[this.rowSeq[r]!]!;
      const dst = this.kv.rowOffset(e.blockTable, pos);
      if (f16) {
        const kp = kPlane as Uint16Array;
        const vp = vPlane as Uint16Array;
        for (let i = 0; i < kvStride; i++) {
          kp[dst + i] = f32BitsToF16Bits(kBits[r * kvStride + i]!);
          vp[dst + i] = f32BitsToF16Bits(vBits[r * kvStride + i]!);
        }
      } else {
        (kPlane as Float32Array).set(this.kRows.subarray(r * kvStride, (r + 1) * kvStride), dst);
        (vPlane as Float32Array).set(this.vRows.subarray(r * kvStride, (r + 1) * kvStride), dst);
      }
    }
    const scale = fround(1 / fround(Math.sqrt(Dh)));
    const tiled = T >= FLASH_ATTN_TILED_MIN_ROWS;
    const group = H / Hkv;
    for (let r = 0; r < T; r++) {
      const e = entries[this.rowSeq[r]!]!;
      const pos = this.rowPos[r]!;
      for (let h = 0; h < H; h++) {
        const kvHead = Math.floor(h / group);
        const outOffset = (r * H + h) * Dh;
        const head: AttendedHead = { kPlane, vPlane, f16, blockTable: e.blockTable, pos, kvHead, outOffset, scale };
        if (!this.flashAttention) this.attendStandard(head);
        else if (tiled) this.attendTiled(head);
        else this.attendOneChunk(head);
      }
      if (!gated) continue;
      // o <- o * sigmoid(gate)
      for (let h = 0; h < H; h++) {
        const gOff = r * qDim + h * qHeadStride + Dh;
        const oOff = (r * H + h) * Dh;
        for (let i = 0; i < Dh; i++) this.attnOut[oOff + i] = this.attnOut[oOff + i]! * sigmoid(this.qg[gOff + i]!);
      }
    }
    this.matmul(w.o, this.attnOut, T, this.branch);
  }

  /** Offset of position `j`'s row for `kvHead` in a layer's K or V plane, through the block table. */
  private kvRowOffset(blockTable: readonly number[], j: number, kvHead: number): number {
    const bs = this.kv.blockSize;
    return (blockTable[(j / bs) | 0]! * bs + (j % bs)) * this.kv.rowStride + kvHead * this.dims.headDim;
  }

  /**
   * K row `base` of a K plane times `q`, as ggml_vec_dot_f16 (an f16 cache; the row converted exactly)
   * or ggml_vec_dot_f32 computes it: four 8-lane f32 fused multiply-add accumulators.
   */
  private kqDot(kPlane: Uint16Array | Float32Array, f16: boolean, base: number, q: Float32Array): number {
    const Dh = this.dims.headDim;
    if (!f16) return ggmlVecDotF32(kPlane as Float32Array, base, q, 0, Dh);
    const kRow = this.kRowScratch;
    for (let i = 0; i < Dh; i++) kRow[i] = F16_TO_F32[(kPlane as Uint16Array)[base + i]!]!;
    return ggmlVecDotF32(kRow, 0, q, 0, Dh);
  }

  /** Query head at `outOffset` into `headDimScratch`, rounded to f16 (K's vec_dot_type) for an f16 cache. */
  private loadQuery(f16: boolean, outOffset: number): void {
    const Dh = this.dims.headDim;
    const q = this.headDimScratch;
    if (f16) for (let i = 0; i < Dh; i++) q[i] = F16_TO_F32[f32BitsToF16Bits(this.qBits[outOffset + i]!)]!;
    else q.set(this.q.subarray(outOffset, outOffset + Dh));
  }

  /**
   * llama.cpp's CPU flash attention for < 64 query rows: Q converted to K's vec_dot_type (f16 for
   * an f16 cache), online softmax with expf, V accumulated in an f16 buffer for an f16 cache.
   */
  private attendOneChunk(head: AttendedHead): void {
    const { kPlane, vPlane, f16, blockTable, pos, kvHead, outOffset, scale } = head;
    const Dh = this.dims.headDim;
    const q = this.headDimScratch;
    const acc = this.accScratch;
    this.loadQuery(f16, outOffset);
    acc.fill(0);
    let M = -Infinity;
    let S = 0;
    // kq_vec_dot: ggml_vec_dot_f16 (an f16 cache) or _f32
    for (let j = 0; j <= pos; j++) {
      const base = this.kvRowOffset(blockTable, j, kvHead);
      const s = fround(this.kqDot(kPlane, f16, base, q) * scale);
      let ms = 1;
      let vs = 1;
      if (s > M) {
        const old = M;
        M = s;
        ms = libm.expf(fround(old - M));
        if (f16) for (let i = 0; i < Dh; i++) acc[i] = F16_TO_F32[f32BitsToF16Bits(toBits(fround(acc[i]! * ms)))]!;
        else for (let i = 0; i < Dh; i++) acc[i] = acc[i]! * ms;
      } else {
        vs = libm.expf(fround(s - M));
      }
      // ggml_vec_mad_f16 / _f32: one fused multiply-add per element (f16 accumulator rounded after it)
      if (f16) {
        const vp = vPlane as Uint16Array;
        for (let i = 0; i < Dh; i++) acc[i] = F16_TO_F32[f32BitsToF16Bits(toBits(fmaf(F16_TO_F32[vp[base + i]!]!, vs, acc[i]!)))]!;
      } else {
        const vp = vPlane as Float32Array;
        for (let i = 0; i < Dh; i++) acc[i] = fmaf(vp[base + i]!, vs, acc[i]!);
      }
      S = fround(fround(S * ms) + vs);
    }
    const inv = S === 0 ? 0 : fround(1 / S);
    for (let i = 0; i < Dh; i++) this.attnOut[outOffset + i] = acc[i]! * inv;
  }

  /**
   * llama.cpp without flash attention: KQ = K·Q (Q rounded to f16 for an f16 cache), soft_max_ext
   * (scale, f64 sum), then V·KQ with KQ rounded to f16 for an f16 cache.
   */
  private attendStandard(head: AttendedHead): void {
    const { kPlane, vPlane, f16, blockTable, pos, kvHead, outOffset, scale } = head;
    const Dh = this.dims.headDim;
    const q = this.headDimScratch;
    this.loadQuery(f16, outOffset);
    const n = pos + 1;
    if (this.scoreScratch.length < n) this.scoreScratch = new Float32Array(Math.max(n, 2 * this.scoreScratch.length));
    const scores = this.scoreScratch;
    // KQ = mul_mat(K, Q): Q is a permuted (non-contiguous) view, so ggml runs ggml_vec_dot_f32 per element
    let max = -Infinity;
    for (let j = 0; j < n; j++) {
      const base = this.kvRowOffset(blockTable, j, kvHead);
      const s = fround(this.kqDot(kPlane, f16, base, q) * scale);
      scores[j] = s;
      if (s > max) max = s;
    }
    // soft_max_ext (ggml_vec_soft_max_f32, AVX2 build): SIMD ggml_v_expf over 8 lanes at a time (llama's
    // KV rows are padded to whole vectors; masked positions give 0), each vector's f32 horizontal sum
    // ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)) added to an f64 sum
    for (let j = 0; j < n; j++) scores[j] = ggmlVExpf(fround(scores[j]! - max));
    const sum = ggmlSoftMaxSum(scores, n);
    const inv = fround(1 / sum);
    for (let j = 0; j < n; j++) {
      const p = fround(scores[j]! * inv);
      scores[j] = f16 ? F16_TO_F32[f32BitsToF16Bits(toBits(p))]! : p;
    }
    // KQV = mul_mat(V^T, KQ): contiguous KQ, so llamafile's tinyBLAS runs: per output one 8-lane
    // f32 FMA accumulator over KV positions (lane = position % 8), then its horizontal sum
    const lanes = this.vLanes;
    lanes.fill(0);
    for (let j = 0; j < n; j++) {
      const p = scores[j]!;
      const base = this.kvRowOffset(blockTable, j, kvHead);
      const lane = j & 7;
      if (f16) {
        const vp = vPlane as Uint16Array;
        for (let i = 0; i < Dh; i++) lanes[i * 8 + lane] = fmaf(F16_TO_F32[vp[base + i]!]!, p, lanes[i * 8 + lane]!);
      } else {
        const vp = vPlane as Float32Array;
        for (let i = 0; i < Dh; i++) lanes[i * 8 + lane] = fmaf(vp[base + i]!, p, lanes[i * 8 + lane]!);
      }
    }
    for (let i = 0; i < Dh; i++) {
      const a = i * 8;
      const t0 = fround(lanes[a]! + lanes[a + 4]!);
      const t1 = fround(lanes[a + 1]! + lanes[a + 5]!);
      const t2 = fround(lanes[a + 2]! + lanes[a + 6]!);
      const t3 = fround(lanes[a + 3]! + lanes[a + 7]!);
      this.attnOut[outOffset + i] = fround(t0 + t2) + fround(t1 + t3);
    }
  }

  /** llama.cpp's tiled CPU flash attention (>= 64 query rows): f32 Q/K/V, KV tiles of 64, f32 accumulation. */
  private attendTiled(head: AttendedHead): void {
    const { kPlane, vPlane, f16, blockTable, pos, kvHead, outOffset, scale } = head;
    const Dh = this.dims.headDim;
    const q = this.q;
    const acc = this.accScratch;
    const scores = this.scoreScratch;
    acc.fill(0);
    let M = -Infinity;
    let S = 0;
    const n = pos + 1;
    for (let t0 = 0; t0 < n; t0 += FLASH_ATTN_KV_TILE) {
      const t1 = Math.min(n, t0 + FLASH_ATTN_KV_TILE);
      let tileMax = -Infinity;
      for (let j = t0; j < t1; j++) {
        const base = this.kvRowOffset(blockTable, j, kvHead);
        // simd_gemm: one f32 fused multiply-add chain over the head dimension, from +0
        let dot = 0;
        if (f16) {
          const kp = kPlane as Uint16Array;
          for (let i = 0; i < Dh; i++) dot = fmaf(q[outOffset + i]!, F16_TO_F32[kp[base + i]!]!, dot);
        } else {
          const kp = kPlane as Float32Array;
          for (let i = 0; i < Dh; i++) dot = fmaf(q[outOffset + i]!, kp[base + i]!, dot);
        }
        const s = fround(dot * scale);
        scores[j - t0] = s;
        if (s > tileMax) tileMax = s;
      }
      const newMax = Math.max(M, tileMax);
      const ms = M === -Infinity ? 0 : libm.expf(fround(M - newMax));
      if (ms !== 1) {
        for (let i = 0; i < Dh; i++) acc[i] = acc[i]! * ms;
        S = fround(S * ms);
      }
      M = newMax;
      // ggml_vec_soft_max_f32 over the 64-cell tile (cells past the row's position weigh 0): ggml_v_expf
      // and per-vector f32 horizontal sums added in f64, the tile's sum added to S through f64
      for (let j = t0; j < t1; j++) scores[j - t0] = ggmlVExpf(fround(scores[j - t0]! - M));
      const tileSum = ggmlSoftMaxSum(scores, t1 - t0);
      S = fround(S + tileSum);
      for (let j = t0; j < t1; j++) {
        const p = scores[j - t0]!;
        const base = this.kvRowOffset(blockTable, j, kvHead);
        if (f16) {
          const vp = vPlane as Uint16Array;
          for (let i = 0; i < Dh; i++) acc[i] = fmaf(F16_TO_F32[vp[base + i]!]!, p, acc[i]!);
        } else {
          const vp = vPlane as Float32Array;
          for (let i = 0; i < Dh; i++) acc[i] = fmaf(vp[base + i]!, p, acc[i]!);
        }
      }
    }
    const inv = S === 0 ? 0 : fround(1 / S);
    for (let i = 0; i < Dh; i++) this.attnOut[outOffset + i] = acc[i]! * inv;
  }

  private snapshotPool(): GdnStatePool {
    if (!this.snapshots) throw new Error("a step entry asks for a GDN state snapshot, but the forward has no snapshot pool");
    return this.snapshots;
  }

  /** Copies one slot of a state plane to the same slot of a snapshot plane. */
  private snapshotPlane(from: Float32Array, to: Float32Array, slot: number, stride: number): void {
    to.set(from.subarray(slot * stride, (slot + 1) * stride), slot * stride);
  }

  /**
   * The Gated DeltaNet mixer (qwen35.md section 7). Each op runs over every row of the step and
   * leaves its result in a named scratch buffer before the next op starts (taps observe it there);
   * rows are in entry order, so the conv state and the recurrent state advance token by token.
   */
  private gatedDeltaNet(il: number, w: GdnWeights, entries: readonly StepEntry[], T: number): void {
    const { convDim, keyDim, valueDim, headVDim: Dv } = this.dims;
    const Hk = this.dims.ssmGroupCount;
    const Hv = this.dims.nHeadV;
    const Dk = this.dims.ssmStateSize;
    const K = this.dims.convKernel;
    const eps = this.eps;
    this.matmul(w.qkv, this.normed, T, this.mixed);
    this.observe("linear_attn_qkv_mixed", il, "mixed", T);
    this.matmul(w.gate, this.normed, T, this.zRows);
    this.matmul(w.beta, this.normed, T, this.betaRows);
    this.matmul(w.alpha, this.normed, T, this.alphaRows);
    const layer = this.cacheIndex[il]!;
    const convPlane = this.states.conv[layer]!;
    const ssmPlane = this.states.ssm[layer]!;
    const y = this.convOut;
    const o = this.gdnOut;

    // causal depthwise conv over [state (K-1 raw inputs), current]; the state keeps raw inputs
    let row = 0;
    for (const e of entries) {
      const convBase = e.stateSlot * this.states.convStride;
      for (let t = 0; t < e.tokens.length; t++, row++) {
        const xOff = row * convDim;
        for (let ch = 0; ch < convDim; ch++) {
          const sOff = convBase + ch * (K - 1);
          const wOff = ch * K;
          let acc = 0;
          // ggml_ssm_conv: f32 products added in f32, oldest tap first (no fused multiply-add)
          const current = this.mixed[xOff + ch]!;
          for (let j = 0; j < K - 1; j++) acc = fround(acc + fround(convPlane[sOff + j]! * w.conv[wOff + j]!));
          acc = fround(acc + fround(current * w.conv[wOff + K - 1]!));
          for (let j = 0; j < K - 2; j++) convPlane[sOff + j] = convPlane[sOff + j + 1]!;
          if (K > 1) convPlane[sOff + K - 2] = current;
          y[xOff + ch] = acc;
        }
        if (t === e.snapshotRow) this.snapshotPlane(convPlane, this.snapshotPool().conv[layer]!, e.stateSlot, this.states.convStride);
      }
    }
    this.observe("conv_output_raw", il, "convOut", T);
    for (let r = 0; r < T; r++) siluRow(y, r * convDim, convDim);
    this.observe("conv_output_silu", il, "convOut", T);

    // L2 norms of q and k per K-head, as llama.cpp computes them (numerics/l2-norm.ts)
    for (let r = 0; r < T; r++) for (let kh = 0; kh < 2 * Hk; kh++) l2NormInPlace(y, r * convDim + kh * Dk, Dk, eps);
    this.observe("q_conv_predelta", il, "convOut", T, 0, keyDim);
    this.observe("k_conv_predelta", il, "convOut", T, keyDim, keyDim);

    // beta = sigmoid(ssm_beta x); g = softplus(ssm_alpha x + dt_bias) * a, step by step in place
    const beta = this.betaRows;
    const g = this.alphaRows;
    for (let i = 0; i < T * Hv; i++) beta[i] = sigmoid(beta[i]!);
    this.observe("beta_sigmoid", il, "betaRows", T);
    this.observe("alpha", il, "alphaRows", T);
    for (let i = 0; i < T * Hv; i++) g[i] = fround(g[i]! + w.dtBias[i % Hv]!);
    for (let i = 0; i < T * Hv; i++) g[i] = softplus(g[i]!);
    this.observe("a_softplus", il, "alphaRows", T);
    for (let i = 0; i < T * Hv; i++) g[i] = fround(g[i]! * w.a[i % Hv]!);
    this.observe("gate", il, "alphaRows", T);

    // gated delta rule per V-head; V-head h uses Q/K head h mod Hk (tiled order)
    const readoutScale = fround(1 / fround(Math.sqrt(Dv)));
    row = 0;
    for (const e of entries) {
      const ssmBase = e.stateSlot * this.states.ssmStride;
      for (let t = 0; t < e.tokens.length; t++, row++) {
        const xOff = row * convDim;
        for (let h = 0; h < Hv; h++) {
          const kh = h % Hk;
          const qOff = xOff + kh * Dk;
          const kOff = xOff + keyDim + kh * Dk;
          const vOff = xOff + 2 * keyDim + h * Dv;
          const betaH = beta[row * Hv + h]!;
          const decay = libm.expf(g[row * Hv + h]!);
          const sHead = ssmBase + h * Dv * Dk;
          const oOff = row * valueDim + h * Dv;
          for (let j = 0; j < Dv; j++) {
            // decay, kv_mem = S_j . k (ggml_vec_dot_f32), delta, S_j += k * delta (fma), o_j = S_j . q
            const sRow = sHead + j * Dk;
            // (ggml_vec_scale_f32 then ggml_vec_dot_f32, fused per row; same lanes, same results)
            const kvMem = ggmlDecayDot(ssmPlane, sRow, y, kOff, Dk, decay);
            const delta = fround(fround(y[vOff + j]! - kvMem) * betaH);
            // ggml_vec_mad_f32 (one fused multiply-add per element), then the readout dot
            o[oOff + j] = ggmlMadDot(ssmPlane, sRow, y, qOff, Dk, y, kOff, delta) * readoutScale;
          }
        }
        if (t === e.snapshotRow) this.snapshotPlane(ssmPlane, this.snapshotPool().ssm[layer]!, e.stateSlot, this.states.ssmStride);
      }
    }
    this.observe("attn_output", il, "gdnOut", T);

    // gated RMSNorm per V-head: rms(o_h) * ssm_norm (raw), times silu(z_h)
    for (let r = 0; r < T; r++) {
      for (let h = 0; h < Hv; h++) {
        const oOff = r * valueDim + h * Dv;
        rmsNorm(o, oOff, w.norm, o, oOff, Dv, eps);
        siluRow(this.zRows, oOff, Dv);
        for (let j = 0; j < Dv; j++) o[oOff + j] = o[oOff + j]! * this.zRows[oOff + j]!;
      }
    }
    this.observe("final_output", il, "gdnOut", T);
    this.matmul(w.out, o, T, this.branch);
  }
}

const bitsScratch = new Float32Array(1);
const bitsScratchU32 = new Uint32Array(bitsScratch.buffer);
function toBits(value: number): number {
  bitsScratch[0] = value;
  return bitsScratchU32[0]!;
}

/**
 * The section each rotated pair of interleaved M-RoPE (llama.cpp's IMROPE, Qwen3.5) turns with:
 * pair i is in sector i mod (sum of sections); sectors 1, 4, 7... take h while below 3 * sections[1],
 * sectors 2, 5, 8... take w while below 3 * sections[2], the rest t. (ggml's fourth section is not
 * reachable with Qwen3.5's sections; it would take t here.) No sections: every pair takes t.
 */
export function imropeSections(sections: readonly number[], pairs: number): Uint8Array {
  const out = new Uint8Array(pairs);
  const total = sections.reduce((a, b) => a + b, 0);
  if (total === 0) return out;
  for (let i = 0; i < pairs; i++) {
    const sector = i % total;
    if (sector % 3 === 1 && sector < 3 * sections[1]!) out[i] = 1;
    else if (sector % 3 === 2 && sector < 3 * sections[2]!) out[i] = 2;
  }
  return out;
}
