/**
 * The element-wise ops of the vision encoder as ggml's CPU backend computes them (the haswell
 * build the oracle runs): LayerNorm (`ggml_norm` then `ggml_mul`, `ggml_add`), GELU through ggml's
 * f16 table, and the soft max of one attention row. Written from ggml's published algorithms.
 */
import { f32BitsToF16Bits, F16_TO_F32 } from "../../numerics/half.js";
import { ggmlSoftMaxSum, ggmlVExpf } from "../../numerics/ggml-expf.js";

const fround = Math.fround;
const bits = new Uint32Array(1);
const asFloat = new Float32Array(bits.buffer);

function toF16Bits(x: number): number {
  asFloat[0] = x;
  return f32BitsToF16Bits(bits[0]!);
}

const GELU_COEF_A = fround(0.044715);
const SQRT_2_OVER_PI = fround(0.7978845608028654);

/** ggml_gelu_f32: 0.5 x (1 + tanh(sqrt(2/pi) x (1 + 0.044715 x^2))), each step in f32. */
function geluF32(x: number): number {
  const inner = fround(fround(SQRT_2_OVER_PI * x) * fround(1 + fround(fround(GELU_COEF_A * x) * x)));
  return fround(fround(fround(0.5 * x) * fround(1 + fround(Math.tanh(inner)))));
}

let geluTable: Float32Array | undefined;

/** ggml_table_gelu_f16 as f32 values: gelu of every f16 input, rounded to f16. */
function table(): Float32Array {
  if (geluTable) return geluTable;
  const t = new Float32Array(65536);
  for (let i = 0; i < 65536; i++) {
    const x = F16_TO_F32[i]!;
    t[i] = Number.isFinite(x) ? F16_TO_F32[toF16Bits(geluF32(x))]! : x;
  }
  geluTable = t;
  return t;
}

/**
 * ggml_vec_gelu_f32 (GGML_GELU_FP16 builds, every CPU build): x <= -10 gives 0, x >= 10 gives x,
 * otherwise the f16 table entry of x rounded to f16.
 */
export function geluRow(x: Float32Array, offset: number, n: number): void {
  const t = table();
  for (let i = offset; i < offset + n; i++) {
    const v = x[i]!;
    if (v <= -10) x[i] = 0;
    else if (v < 10) x[i] = t[toF16Bits(v)]!;
  }
}

/**
 * ggml_norm (mean, then the variance of the centred row with an f64 sum of per-vector f32 sums,
 * as ggml_vec_cvar_f32's AVX2 body), then `* w + b`. Writes `out[outOffset, +n)`.
 */
export function layerNorm(
  x: Float32Array,
  xOffset: number,
  w: Float32Array,
  b: Float32Array,
  out: Float32Array,
  outOffset: number,
  n: number,
  eps: number,
): void {
  // ggml_vec_sum_f32: an f64 accumulation of f32 values (the non-Accelerate build)
  let sum = 0;
  for (let i = 0; i < n; i++) sum += x[xOffset + i]!;
  const mean = fround(fround(sum) / n);
  let variance = 0;
  let i = 0;
  for (; i + 8 <= n; i += 8) {
    const d = new Array<number>(8);
    for (let l = 0; l < 8; l++) {
      const v = fround(x[xOffset + i + l]! - mean);
      out[outOffset + i + l] = v;
      d[l] = fround(v * v);
    }
    // (hi + lo) over four lanes, then the movehl and movehdup adds
    const a0 = fround(d[0]! + d[4]!);
    const a1 = fround(d[1]! + d[5]!);
    const a2 = fround(d[2]! + d[6]!);
    const a3 = fround(d[3]! + d[7]!);
    variance += fround(fround(a0 + a2) + fround(a1 + a3));
  }
  for (; i < n; i++) {
    const v = fround(x[xOffset + i]! - mean);
    out[outOffset + i] = v;
    variance += fround(v * v);
  }
  const scale = fround(1 / fround(Math.sqrt(fround(fround(variance / n) + eps))));
  for (let k = 0; k < n; k++) {
    const o = outOffset + k;
    out[o] = fround(fround(fround(out[o]! * scale) * w[k]!) + b[k]!);
  }
}

/**
 * ggml_soft_max_ext of one row with no mask: scale, subtract the max, ggml_v_expf, the AVX2 sum,
 * then multiply by the reciprocal of the sum. In place over `scores[0, n)`.
 */
export function softMaxRow(scores: Float32Array, n: number, scale: number): void {
  let max = -Infinity;
  for (let j = 0; j < n; j++) {
    const s = fround(scores[j]! * scale);
    scores[j] = s;
    if (s > max) max = s;
  }
  for (let j = 0; j < n; j++) scores[j] = ggmlVExpf(fround(scores[j]! - max));
  const inv = fround(1 / ggmlSoftMaxSum(scores, n));
  for (let j = 0; j < n; j++) scores[j] = fround(scores[j]! * inv);
}
