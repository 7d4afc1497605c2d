/**
 * The analytic bf16 envelope of the keep-quant contract, for provider tests.
 *
 * A provider decodes each weight w_k to f32, rounds it once to bf16 (b_k), multiplies by x_k in f32
 * and accumulates in f32, in any order. Against the exact y_ref = sum_k x_k w_k:
 *
 *   |y - y_ref| <= |sum_k x_k (b_k - w_k)| + |fl(sum_k x_k b_k) - sum_k x_k b_k|
 *              <= 2^-8 S + gamma_K (1 + 2^-8) S + U
 *
 * with S = sum_k |x_k| |w_k|, u = 2^-24 (f32 unit roundoff), gamma_K = K u / (1 - K u) (K roundings
 * on any path through a K-term sum of rounded products: one multiply, at most K - 1 adds; fused
 * multiply-adds only remove roundings), |b_k| <= (1 + 2^-8) |w_k| (bf16 keeps 8 significant bits,
 * so RNE is within 2^-8 relative), and an underflow term U = 2^-134 sum_k |x_k| (bf16 subnormal
 * half-spacing) + (K + 1) 2^-149 (f32 subnormal products and sums), which only matters for tiny
 * values. y_ref and S are computed in f64; their own error (K 2^-53 S) is added too.
 * The ratio |y - y_ref| / bound must stay below 1 for every output.
 */

export const BF16_UNIT_ROUNDOFF = 2 ** -8;
export const F32_UNIT_ROUNDOFF = 2 ** -24;

export interface EnvelopeInput {
  /** [Pa, M, K] activations */
  x: Float32Array;
  xGroups: number;
  m: number;
  /** decoded f32 weights (no bf16 rounding), [E, N, K] */
  decoded: Float32Array;
  groups: number;
  n: number;
  k: number;
  /** [P] group ids (ignored when groups = 1) */
  ids?: Int32Array | readonly number[];
  p: number;
  /** the provider's output, [P, M, N] */
  y: Float32Array;
}

export interface EnvelopeWorst {
  p: number;
  m: number;
  n: number;
  y: number;
  yRef: number;
  error: number;
  bound: number;
}

export interface EnvelopeReport {
  /** |y - y_ref| / bound per output, [P, M, N] (Infinity where y is not finite but y_ref is) */
  ratios: Float64Array;
  worstRatio: number;
  worst: EnvelopeWorst;
}

/** gamma_K slack factor plus the bf16 term: the multiplier of S in the bound. */
export function envelopeFactor(k: number): number {
  const ku = k * F32_UNIT_ROUNDOFF;
  const gamma = ku / (1 - ku);
  return BF16_UNIT_ROUNDOFF + gamma * (1 + BF16_UNIT_ROUNDOFF) + k * 2 ** -53;
}

export function envelopeReport(input: EnvelopeInput): EnvelopeReport {
  const { x, xGroups, m, decoded, groups, n, k, p, y } = input;
  if (decoded.length !== groups * n * k)
    throw new Error(`envelopeReport: decoded has ${decoded.length} values, expected ${groups * n * k}`);
  if (x.length !== xGroups * m * k) throw new Error(`envelopeReport: x has ${x.length} values, expected ${xGroups * m * k}`);
  if (y.length !== p * m * n) throw new Error(`envelopeReport: y has ${y.length} values, expected ${p * m * n}`);
  const factor = envelopeFactor(k);
  const ratios = new Float64Array(p * m * n);
  let worst: EnvelopeWorst = { p: 0, m: 0, n: 0, y: Number.NaN, yRef: Number.NaN, error: 0, bound: 0 };
  let worstRatio = -1;
  for (let pi = 0; pi < p; pi++) {
    const g = groups === 1 ? 0 : Number(input.ids?.[pi] ?? Number.NaN);
    if (!(g >= 0 && g < groups)) throw new Error(`envelopeReport: ids[${pi}] = ${g} is outside [0, ${groups})`);
    const xGroup = xGroups === 1 ? 0 : pi;
    for (let mi = 0; mi < m; mi++) {
      const xBase = (xGroup * m + mi) * k;
      for (let r = 0; r < n; r++) {
        const wBase = (g * n + r) * k;
        let yRef = 0;
        let s = 0;
        let sx = 0;
        for (let kk = 0; kk < k; kk++) {
          const xv = x[xBase + kk]!;
          const wv = decoded[wBase + kk]!;
          yRef += xv * wv;
          s += Math.abs(xv * wv);
          sx += Math.abs(xv);
        }
        const bound = factor * s + 2 ** -134 * sx + (k + 1) * 2 ** -149;
        const yi = y[(pi * m + mi) * n + r]!;
        const error = Math.abs(yi - yRef);
        const ratio = Number.isNaN(error) ? Number.POSITIVE_INFINITY : error / bound;
        ratios[(pi * m + mi) * n + r] = ratio;
        if (ratio > worstRatio) {
          worstRatio = ratio;
          worst = { p: pi, m: mi, n: r, y: yi, yRef, error, bound };
        }
      }
    }
  }
  return { ratios, worstRatio: Math.max(0, worstRatio), worst };
}
