/**
 * Reference quantizers, bit-exact against ggml's `quantize_row_<type>_ref`. They are written from
 * the block formats and ggml's published algorithm, with every float operation of the C code done
 * in f32 (Math.fround after each step, in C's evaluation order) and ggml's `nearest_int` rounding
 * helper reproduced through the f32 bit pattern. Q8_K and Q8_0 are the activation formats of
 * llama.cpp's CPU dots, so the engine relies on these being exact.
 */
import { GgmlType, GGML_TYPE_TRAITS, ggmlTypeLabel } from "@keepquant/gguf";
import { QuantArgumentError, UnsupportedGgmlTypeError } from "./errors.js";
import { FP16_TO_FP32, fp32BitsToFp16Bits } from "./fp.js";

const fround = Math.fround;
const scratch = new Float32Array(1);
const scratchBits = new Uint32Array(scratch.buffer);

/** f32 value -> f16 bits (round to nearest even), without a second trip through a number. */
function toF16(value: number): number {
  scratch[0] = value;
  return fp32BitsToFp16Bits(scratchBits[0]!);
}

/**
 * ggml's nearest_int: add 1.5 * 2^23 in f32 and read the low mantissa bits. Round-half-even for
 * |v| <= 2^22; outside that range it returns the same wrapped value C does.
 */
export function nearestInt(value: number): number {
  scratch[0] = value + 12582912;
  return (scratchBits[0]! & 0x007fffff) - 0x00400000;
}

/** C's roundf: half away from zero. */
function roundf(value: number): number {
  return value < 0 ? -Math.round(-value) : Math.round(value);
}

function writeF16(dst: Uint8Array, offset: number, bits: number): void {
  dst[offset] = bits & 0xff;
  dst[offset + 1] = bits >>> 8;
}

const GROUP_MAX_EPS = fround(1e-15);

function writeU32(dst: Uint8Array, offset: number, bits: number): void {
  dst[offset] = bits & 0xff;
  dst[offset + 1] = (bits >>> 8) & 0xff;
  dst[offset + 2] = (bits >>> 16) & 0xff;
  dst[offset + 3] = bits >>> 24;
}

/** The first of x[o..o+n) with the largest magnitude (0 when all are 0): ggml's `max` beside `amax`. */
function absMaxValue(x: Float32Array, o: number, n: number): number {
  let amax = 0;
  let max = 0;
  for (let j = 0; j < n; j++) {
    const v = x[o + j]!;
    if (Math.abs(v) > amax) {
      amax = Math.abs(v);
      max = v;
    }
  }
  return max;
}

/** Q4_0 / Q5_0 header: d = max / divisor (max the value of largest magnitude) as f16; returns 1 / d (0 for d 0). */
function writeSymmetricDelta(x: Float32Array, xo: number, divisor: number, dst: Uint8Array, yo: number): number {
  const d = fround(absMaxValue(x, xo, 32) / divisor);
  writeF16(dst, yo, toF16(d));
  return d !== 0 ? fround(1 / d) : 0;
}

/** Q4_1 / Q5_1 header: d = (max - min) / nmax and m = min as f16; out gets [min, 1 / d (0 for d 0)]. */
function writeDeltaMin(x: Float32Array, xo: number, nmax: number, dst: Uint8Array, yo: number, out: Float32Array): void {
  let min = 3.4028234663852886e38;
  let max = -3.4028234663852886e38;
  for (let j = 0; j < 32; j++) {
    const v = x[xo + j]!;
    if (v < min) min = v;
    if (v > max) max = v;
  }
  const d = fround(fround(max - min) / nmax);
  writeF16(dst, yo, toF16(d));
  writeF16(dst, yo + 2, toF16(min));
  out[0] = min;
  out[1] = d !== 0 ? fround(1 / d) : 0;
}
const deltaMin = new Float32Array(2);

// ---------------------------------------------------------------- 32-element blocks

/** Q4_0: d = max / -8 where max is the value of largest magnitude; q = min(15, trunc(x / d + 8.5)) */
function quantizeQ4_0(x: Float32Array, dst: Uint8Array, nb: number): void {
  for (let i = 0; i < nb; i++) {
    const xo = i * 32;
    const yo = i * 18;
    const id = writeSymmetricDelta(x, xo, -8, dst, yo);
    for (let j = 0; j < 16; j++) {
      const x0 = fround(x[xo + j]! * id);
      const x1 = fround(x[xo + 16 + j]! * id);
      const xi0 = Math.min(15, (truncToInt32(fround(x0 + 8.5)) << 24) >> 24) & 0xff;
      const xi1 = Math.min(15, (truncToInt32(fround(x1 + 8.5)) << 24) >> 24) & 0xff;
      dst[yo + 2 + j] = (xi0 | (xi1 << 4)) & 0xff;
    }
  }
}

/** cvttss2si: truncation toward zero; NaN and out-of-range give INT32_MIN. */
function truncToInt32(value: number): number {
  if (!(value > -2147483649 && value < 2147483648)) return -2147483648;
  return Math.trunc(value) | 0;
}

/** Q8_0: d = amax / 127; q = roundf(x / d) */
function quantizeQ8_0(x: Float32Array, dst: Uint8Array, nb: number): void {
  for (let i = 0; i < nb; i++) {
    const xo = i * 32;
    const yo = i * 34;
    let amax = 0;
    for (let j = 0; j < 32; j++) {
      const a = Math.abs(x[xo + j]!);
      amax = amax > a ? amax : a; // ggml MAX(a, b) = a > b ? a : b
    }
    const d = fround(amax / 127);
    const id = d !== 0 ? fround(1 / d) : 0;
    writeF16(dst, yo, toF16(d));
    for (let j = 0; j < 32; j++) dst[yo + 2 + j] = truncToInt32(roundf(fround(x[xo + j]! * id))) & 0xff;
  }
}

// ---------------------------------------------------------------- K-quant helpers

/**
 * ggml make_qkx2_quants on two independent groups of n values at once: for each, the asymmetric
 * (scale, min) fit to levels [0, nmax] minimising the weighted error (squared, or absolute with
 * useMad), trying nstep + 1 scales. x at xa and xb, their weights at weights[0, n) and [n, 2n), levels
 * to L at la and lb, candidates in Laux[0, 2n); out gets [scale A, -min A, scale B, -min B]. Every f32
 * operation of a group is C's, in C's order, whatever the other group does. Two at once because each
 * f32 sum is a chain of fround(s + t) steps (about 11 cycles each in V8: the add and two conversions),
 * and two groups' chains run side by side (the Q4_K quantizer takes 0.82x the time).
 */
function makeQkx2QuantsPair(
  n: number,
  nmax: number,
  x: Float32Array,
  xa: number,
  xb: number,
  weights: Float32Array,
  L: Uint8Array,
  la: number,
  lb: number,
  Laux: Uint8Array,
  rmin: number,
  rdelta: number,
  nstep: number,
  out: Float32Array,
  useMad = false,
): void {
  let minA = x[xa]!;
  let maxA = minA;
  let minB = x[xb]!;
  let maxB = minB;
  let sumWA = weights[0]!;
  let sumWB = weights[n]!;
  let sumXA = fround(sumWA * minA);
  let sumXB = fround(sumWB * minB);
  for (let i = 1; i < n; i++) {
    const va = x[xa + i]!;
    const vb = x[xb + i]!;
    if (va < minA) minA = va;
    if (va > maxA) maxA = va;
    if (vb < minB) minB = vb;
    if (vb > maxB) maxB = vb;
    const wa = weights[i]!;
    const wb = weights[n + i]!;
    sumWA = fround(sumWA + wa);
    sumWB = fround(sumWB + wb);
    sumXA = fround(sumXA + fround(wa * va));
    sumXB = fround(sumXB + fround(wb * vb));
  }
  if (minA > 0) minA = 0;
  if (minB > 0) minB = 0;
  // a group of equal values: levels 0, scale 0 (C's early return); its arithmetic below runs on and is ignored
  const flatA = maxA === minA;
  const flatB = maxB === minB;
  let iscaleA = fround(nmax / fround(maxA - minA));
  let iscaleB = fround(nmax / fround(maxB - minB));
  let scaleA = fround(1 / iscaleA);
  let scaleB = fround(1 / iscaleB);
  let bestA = 0;
  let bestB = 0;
  for (let i = 0; i < n; i++) {
    const va = x[xa + i]!;
    const vb = x[xb + i]!;
    const qa = nearestInt(fround(iscaleA * fround(va - minA)));
    const qb = nearestInt(fround(iscaleB * fround(vb - minB)));
    const lA = qa < 0 ? 0 : qa > nmax ? nmax : qa;
    const lB = qb < 0 ? 0 : qb > nmax ? nmax : qb;
    L[la + i] = lA;
    L[lb + i] = lB;
    const da = fround(fround(fround(scaleA * lA) + minA) - va);
    const db = fround(fround(fround(scaleB * lB) + minB) - vb);
    bestA = fround(bestA + fround(weights[i]! * (useMad ? Math.abs(da) : fround(da * da))));
    bestB = fround(bestB + fround(weights[n + i]! * (useMad ? Math.abs(db) : fround(db * db))));
  }
  for (let is = 0; nstep >= 1 && is <= nstep; is++) {
    // each group's min moves when its candidate wins, and its later candidates use the new range
    const shift = fround(fround(rmin + fround(rdelta * is)) + nmax);
    iscaleA = fround(shift / fround(maxA - minA));
    iscaleB = fround(shift / fround(maxB - minB));
    let sumLA = 0;
    let sumL2A = 0;
    let sumXLA = 0;
    let sumLB = 0;
    let sumL2B = 0;
    let sumXLB = 0;
    for (let i = 0; i < n; i++) {
      const va = x[xa + i]!;
      const vb = x[xb + i]!;
      const qa = nearestInt(fround(iscaleA * fround(va - minA)));
      const qb = nearestInt(fround(iscaleB * fround(vb - minB)));
      const lA = qa < 0 ? 0 : qa > nmax ? nmax : qa;
      const lB = qb < 0 ? 0 : qb > nmax ? nmax : qb;
      Laux[i] = lA;
      Laux[n + i] = lB;
      const wlA = fround(weights[i]! * lA);
      const wlB = fround(weights[n + i]! * lB);
      sumLA = fround(sumLA + wlA);
      sumLB = fround(sumLB + wlB);
      sumL2A = fround(sumL2A + fround(wlA * lA));
      sumL2B = fround(sumL2B + fround(wlB * lB));
      sumXLA = fround(sumXLA + fround(wlA * va));
      sumXLB = fround(sumXLB + fround(wlB * vb));
    }
    const DA = fround(fround(sumWA * sumL2A) - fround(sumLA * sumLA));
    const DB = fround(fround(sumWB * sumL2B) - fround(sumLB * sumLB));
    let thisScaleA = 0;
    let thisMinA = 0;
    let thisScaleB = 0;
    let thisMinB = 0;
    if (DA > 0) {
      thisScaleA = fround(fround(fround(sumWA * sumXLA) - fround(sumXA * sumLA)) / DA);
      thisMinA = fround(fround(fround(sumL2A * sumXA) - fround(sumLA * sumXLA)) / DA);
      if (thisMinA > 0) {
        thisMinA = 0;
        thisScaleA = fround(sumXLA / sumL2A);
      }
    }
    if (DB > 0) {
      thisScaleB = fround(fround(fround(sumWB * sumXLB) - fround(sumXB * sumLB)) / DB);
      thisMinB = fround(fround(fround(sumL2B * sumXB) - fround(sumLB * sumXLB)) / DB);
      if (thisMinB > 0) {
        thisMinB = 0;
        thisScaleB = fround(sumXLB / sumL2B);
      }
    }
    // both errors side by side (a group with D <= 0 has no candidate: its error is computed and ignored)
    let errA = 0;
    let errB = 0;
    for (let i = 0; i < n; i++) {
      const da = fround(fround(fround(thisScaleA * Laux[i]!) + thisMinA) - x[xa + i]!);
      const db = fround(fround(fround(thisScaleB * Laux[n + i]!) + thisMinB) - x[xb + i]!);
      errA = fround(errA + fround(weights[i]! * (useMad ? Math.abs(da) : fround(da * da))));
      errB = fround(errB + fround(weights[n + i]! * (useMad ? Math.abs(db) : fround(db * db))));
    }
    if (!flatA && DA > 0 && errA < bestA) {
      for (let i = 0; i < n; i++) L[la + i] = Laux[i]!;
      bestA = errA;
      scaleA = thisScaleA;
      minA = thisMinA;
    }
    if (!flatB && DB > 0 && errB < bestB) {
      for (let i = 0; i < n; i++) L[lb + i] = Laux[n + i]!;
      bestB = errB;
      scaleB = thisScaleB;
      minB = thisMinB;
    }
  }
  if (flatA) L.fill(0, la, la + n);
  if (flatB) L.fill(0, lb, lb + n);
  out[0] = flatA ? 0 : scaleA;
  out[1] = -minA;
  out[2] = flatB ? 0 : scaleB;
  out[3] = -minB;
}

/**
 * The levels l = clamp(nearest_int(iscale * x), -nmax, nmax - 1) of n values, written as l + nmax to
 * L[lo..lo+n), with the x^2-weighted sums ggml's make_qx_quants and make_q3_quants fit the scale by:
 * sums gets [sum w x l, sum w l^2] (w = x^2).
 */
function symmetricLevels(
  n: number,
  nmax: number,
  x: Float32Array,
  xo: number,
  iscale: number,
  L: Uint8Array,
  lo: number,
  sums: Float32Array,
): void {
  let sumlx = 0;
  let suml2 = 0;
  for (let i = 0; i < n; i++) {
    const v = x[xo + i]!;
    const l = Math.max(-nmax, Math.min(nmax - 1, nearestInt(fround(iscale * v))));
    L[lo + i] = l + nmax;
    const w = fround(v * v);
    sumlx = fround(sumlx + fround(fround(w * v) * l));
    suml2 = fround(suml2 + fround(fround(w * l) * l));
  }
  sums[0] = sumlx;
  sums[1] = suml2;
}
const levelSums = new Float32Array(2);

/**
 * The first fit of make_qx_quants and make_q3_quants: symmetricLevels at iscale = -nmax / max, max the
 * value of largest magnitude, which it returns; 0 (and zero levels) when that magnitude is below GROUP_MAX_EPS.
 */
function firstSymmetricFit(n: number, nmax: number, x: Float32Array, xo: number, L: Uint8Array, lo: number, sums: Float32Array): number {
  const max = absMaxValue(x, xo, n);
  if (Math.abs(max) < GROUP_MAX_EPS) {
    L.fill(0, lo, lo + n);
    return 0;
  }
  symmetricLevels(n, nmax, x, xo, fround(-nmax / max), L, lo, sums);
  return max;
}

/**
 * ggml make_qx_quants with rmse_type 1 and no importance weights (w = x^2): symmetric fit of n
 * values to [-nmax, nmax - 1], trying 18 scales around nmax / max. Writes L = l + nmax; returns scale.
 * Laux holds a candidate's levels (n of them).
 */
function makeQxQuants(n: number, nmax: number, x: Float32Array, xo: number, L: Uint8Array, lo: number, Laux: Uint8Array): number {
  const max = firstSymmetricFit(n, nmax, x, xo, L, lo, levelSums);
  if (max === 0) return 0;
  let sumlx = levelSums[0]!;
  let suml2 = levelSums[1]!;
  let scale = suml2 !== 0 ? fround(sumlx / suml2) : 0;
  let best = fround(scale * sumlx);
  const tenth = fround(0.1);
  for (let is = -9; is <= 9; is++) {
    if (is === 0) continue;
    symmetricLevels(n, nmax, x, xo, fround(-fround(nmax + fround(tenth * is)) / max), Laux, 0, levelSums);
    sumlx = levelSums[0]!;
    suml2 = levelSums[1]!;
    if (suml2 > 0 && fround(sumlx * sumlx) > fround(best * suml2)) {
      L.set(Laux.subarray(0, n), lo);
      scale = fround(sumlx / suml2);
      best = fround(scale * sumlx);
    }
  }
  return scale;
}

/** Packs 8 six-bit scales and mins into the 12-byte Q4_K/Q5_K layout. */
function packScalesK4(dst: Uint8Array, so: number, ls: Uint8Array, lm: Uint8Array): void {
  for (let j = 0; j < 8; j++) {
    if (j < 4) {
      dst[so + j] = ls[j]!;
      dst[so + j + 4] = lm[j]!;
    } else {
      dst[so + j + 4] = (ls[j]! & 0x0f) | ((lm[j]! & 0x0f) << 4);
      dst[so + j - 4] = dst[so + j - 4]! | ((ls[j]! >> 4) << 6);
      dst[so + j] = dst[so + j]! | ((lm[j]! >> 4) << 6);
    }
  }
}
function scaleK4(q: Uint8Array, so: number, j: number): number {
  return j < 4 ? q[so + j]! & 63 : (q[so + j + 4]! & 0x0f) | ((q[so + j - 4]! >> 6) << 4);
}
function minK4(q: Uint8Array, so: number, j: number): number {
  return j < 4 ? q[so + j + 4]! & 63 : (q[so + j + 4]! >> 4) | ((q[so + j]! >> 6) << 4);
}

/** quantizeKScalesMins' scratch (every entry is written before it is read, per call). */
const kScratch = {
  weights: new Float32Array(64),
  Laux: new Uint8Array(64),
  scales: new Float32Array(8),
  mins: new Float32Array(8),
  fit: new Float32Array(4),
  ls: new Uint8Array(8),
  lm: new Uint8Array(8),
};

/** Shared body of Q4_K (nmax 15) and Q5_K (nmax 31): scales, mins and the 0..nmax levels in L. */
function quantizeKScalesMins(
  x: Float32Array,
  xo: number,
  dst: Uint8Array,
  yo: number,
  nmax: number,
  rmin: number,
  nstep: number,
  L: Uint8Array,
): void {
  const { weights, Laux, scales, mins, fit } = kScratch;
  // the 8 sub-blocks' fits two at a time (independent: makeQkx2QuantsPair), then ggml's running maxima in sub-block order
  for (let j = 0; j < 8; j += 2) {
    const oa = xo + 32 * j;
    const ob = oa + 32;
    let sumA = 0;
    let sumB = 0;
    for (let l = 0; l < 32; l++) {
      sumA = fround(sumA + fround(x[oa + l]! * x[oa + l]!));
      sumB = fround(sumB + fround(x[ob + l]! * x[ob + l]!));
    }
    const avA = fround(Math.sqrt(fround(sumA / 32)));
    const avB = fround(Math.sqrt(fround(sumB / 32)));
    for (let l = 0; l < 32; l++) {
      weights[l] = fround(avA + Math.abs(x[oa + l]!));
      weights[32 + l] = fround(avB + Math.abs(x[ob + l]!));
    }
    makeQkx2QuantsPair(32, nmax, x, oa, ob, weights, L, 32 * j, 32 * j + 32, Laux, rmin, fround(0.1), nstep, fit);
    scales[j] = fit[0]!;
    mins[j] = fit[1]!;
    scales[j + 1] = fit[2]!;
    mins[j + 1] = fit[3]!;
  }
  let maxScale = 0;
  let maxMin = 0;
  for (let j = 0; j < 8; j++) {
    if (scales[j]! > maxScale) maxScale = scales[j]!;
    if (mins[j]! > maxMin) maxMin = mins[j]!;
  }
  const invScale = maxScale > 0 ? fround(63 / maxScale) : 0;
  const invMin = maxMin > 0 ? fround(63 / maxMin) : 0;
  const { ls, lm } = kScratch;
  for (let j = 0; j < 8; j++) {
    ls[j] = Math.min(63, nearestInt(fround(invScale * scales[j]!)) & 0xff);
    lm[j] = Math.min(63, nearestInt(fround(invMin * mins[j]!)) & 0xff);
  }
  packScalesK4(dst, yo + 4, ls, lm);
  writeF16(dst, yo, toF16(fround(maxScale / 63)));
  writeF16(dst, yo + 2, toF16(fround(maxMin / 63)));
  const dAll = FP16_TO_FP32[dst[yo]! | (dst[yo + 1]! << 8)]!;
  const mAll = FP16_TO_FP32[dst[yo + 2]! | (dst[yo + 3]! << 8)]!;
  for (let j = 0; j < 8; j++) {
    const d = fround(dAll * scaleK4(dst, yo + 4, j));
    if (d === 0) continue; // keeps the fit's levels, as C's `if (!d) continue`
    const dm = fround(mAll * minK4(dst, yo + 4, j));
    for (let ii = 0; ii < 32; ii++) {
      const l = nearestInt(fround(fround(x[xo + 32 * j + ii]! + dm) / d));
      L[32 * j + ii] = Math.max(0, Math.min(nmax, l));
    }
  }
}

/** Q4_K: 8 sub-blocks of 32 with 6-bit scale and min each; levels 0..15 */
function quantizeQ4_K(x: Float32Array, dst: Uint8Array, nb: number): void {
  const L = new Uint8Array(256);
  for (let i = 0; i < nb; i++) {
    const xo = i * 256;
    const yo = i * 144;
    quantizeKScalesMins(x, xo, dst, yo, 15, -1, 20, L);
    let q = yo + 16;
    for (let j = 0; j < 256; j += 64, q += 32) {
      for (let l = 0; l < 32; l++) dst[q + l] = L[j + l]! | (L[j + l + 32]! << 4);
    }
  }
}

/** Q5_K: as Q4_K with levels 0..31, the fifth bit in qh */
function quantizeQ5_K(x: Float32Array, dst: Uint8Array, nb: number): void {
  const L = new Uint8Array(256);
  for (let i = 0; i < nb; i++) {
    const xo = i * 256;
    const yo = i * 176;
    quantizeKScalesMins(x, xo, dst, yo, 31, fround(-0.5), 15, L);
    const qh = yo + 16;
    let ql = yo + 48;
    dst.fill(0, qh, qh + 32);
    let m1 = 1;
    let m2 = 2;
    for (let n = 0; n < 256; n += 64, ql += 32) {
      for (let j = 0; j < 32; j++) {
        let l1 = L[n + j]!;
        if (l1 > 15) {
          l1 -= 16;
          dst[qh + j] = dst[qh + j]! | m1;
        }
        let l2 = L[n + j + 32]!;
        if (l2 > 15) {
          l2 -= 16;
          dst[qh + j] = dst[qh + j]! | m2;
        }
        dst[ql + j] = l1 | (l2 << 4);
      }
      m1 <<= 2;
      m2 <<= 2;
    }
  }
}

/** Q6_K: 16 sub-blocks of 16 with an int8 scale each; levels -32..31 */
function quantizeQ6_K(x: Float32Array, dst: Uint8Array, nb: number): void {
  const L = new Uint8Array(256);
  const Laux = new Uint8Array(16);
  const scales = new Float32Array(16);
  for (let i = 0; i < nb; i++) {
    const xo = i * 256;
    const yo = i * 210;
    let maxScale = 0;
    let maxAbsScale = 0;
    for (let ib = 0; ib < 16; ib++) {
      const scale = makeQxQuants(16, 32, x, xo + 16 * ib, L, 16 * ib, Laux);
      scales[ib] = scale;
      const abs = Math.abs(scale);
      if (abs > maxAbsScale) {
        maxAbsScale = abs;
        maxScale = scale;
      }
    }
    if (maxAbsScale < GROUP_MAX_EPS) {
      dst.fill(0, yo, yo + 210);
      continue;
    }
    const iscale = fround(-128 / maxScale);
    writeF16(dst, yo + 208, toF16(fround(1 / iscale)));
    for (let ib = 0; ib < 16; ib++) dst[yo + 192 + ib] = Math.min(127, nearestInt(fround(iscale * scales[ib]!))) & 0xff;
    const dAll = FP16_TO_FP32[dst[yo + 208]! | (dst[yo + 209]! << 8)]!;
    for (let j = 0; j < 16; j++) {
      const d = fround(dAll * ((dst[yo + 192 + j]! << 24) >> 24));
      if (d === 0) continue;
      for (let ii = 0; ii < 16; ii++) {
        const l = nearestInt(fround(x[xo + 16 * j + ii]! / d));
        L[16 * j + ii] = Math.max(-32, Math.min(31, l)) + 32;
      }
    }
    let ql = yo;
    let qh = yo + 128;
    for (let j = 0; j < 256; j += 128, ql += 64, qh += 32) {
      for (let l = 0; l < 32; l++) {
        const q1 = L[j + l]!;
        const q2 = L[j + l + 32]!;
        const q3 = L[j + l + 64]!;
        const q4 = L[j + l + 96]!;
        dst[ql + l] = (q1 & 0x0f) | ((q3 & 0x0f) << 4);
        dst[ql + l + 32] = (q2 & 0x0f) | ((q4 & 0x0f) << 4);
        dst[qh + l] = (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6);
      }
    }
  }
}

/** Q8_K: f32 d = max / -127 over 256 values, int8 levels, int16 sums of each 16 */
function quantizeQ8_K(x: Float32Array, dst: Uint8Array, nb: number): void {
  for (let i = 0; i < nb; i++) {
    const xo = i * 256;
    const yo = i * 292;
    const max = absMaxValue(x, xo, 256);
    if (max === 0) {
      // C writes d = 0 and zero levels and leaves the block sums as they were
      dst.fill(0, yo, yo + 260);
      continue;
    }
    const iscale = fround(-127 / max);
    for (let j = 0; j < 256; j++) {
      const v = nearestInt(fround(iscale * x[xo + j]!));
      dst[yo + 4 + j] = Math.min(127, v) & 0xff;
    }
    for (let j = 0; j < 16; j++) {
      let sum = 0;
      for (let ii = 0; ii < 16; ii++) sum += (dst[yo + 4 + j * 16 + ii]! << 24) >> 24;
      dst[yo + 260 + 2 * j] = sum & 0xff;
      dst[yo + 261 + 2 * j] = (sum >> 8) & 0xff;
    }
    scratch[0] = 1 / iscale;
    writeU32(dst, yo, scratchBits[0]!);
  }
}

/** (int8_t) then (uint8_t) of a float in C: truncation toward zero, low 8 bits. */
function truncToUint8(value: number): number {
  return truncToInt32(value) & 0xff;
}

/** Q4_1: d = (max - min) / 15, m = min; q = min(15, trunc((x - min) / d + 0.5)) */
function quantizeQ4_1(x: Float32Array, dst: Uint8Array, nb: number): void {
  for (let i = 0; i < nb; i++) {
    const xo = i * 32;
    const yo = i * 20;
    writeDeltaMin(x, xo, 15, dst, yo, deltaMin);
    const min = deltaMin[0]!;
    const id = deltaMin[1]!;
    for (let j = 0; j < 16; j++) {
      const x0 = fround(fround(x[xo + j]! - min) * id);
      const x1 = fround(fround(x[xo + 16 + j]! - min) * id);
      const xi0 = Math.min(15, (truncToInt32(fround(x0 + 0.5)) << 24) >> 24) & 0xff;
      const xi1 = Math.min(15, (truncToInt32(fround(x1 + 0.5)) << 24) >> 24) & 0xff;
      dst[yo + 4 + j] = (xi0 | (xi1 << 4)) & 0xff;
    }
  }
}

/**
 * Q5_0 / Q5_1: 32 levels (byte values) packed as their low nibbles at qs (levels j and j + 16 share
 * byte j) and their fifth bits as the u32 qh at `qhOffset` (bit j for level j).
 */
function pack5Bit(levels: Uint8Array, dst: Uint8Array, qhOffset: number, qs: number): void {
  let qh = 0;
  for (let j = 0; j < 16; j++) {
    const xi0 = levels[j]!;
    const xi1 = levels[16 + j]!;
    dst[qs + j] = (xi0 & 0x0f) | ((xi1 & 0x0f) << 4);
    qh |= ((xi0 & 0x10) >>> 4) << j;
    qh |= ((xi1 & 0x10) >>> 4) << (j + 16);
  }
  writeU32(dst, qhOffset, qh);
}
const levels5 = new Uint8Array(32);

/** Q5_0: d = max / -16; q = min(31, trunc(x / d + 16.5)), fifth bits in qh */
function quantizeQ5_0(x: Float32Array, dst: Uint8Array, nb: number): void {
  for (let i = 0; i < nb; i++) {
    const xo = i * 32;
    const yo = i * 22;
    const id = writeSymmetricDelta(x, xo, -16, dst, yo);
    for (let j = 0; j < 32; j++) levels5[j] = Math.min(31, (truncToInt32(fround(fround(x[xo + j]! * id) + 16.5)) << 24) >> 24) & 0xff;
    pack5Bit(levels5, dst, yo + 2, yo + 6);
  }
}

/** Q5_1: d = (max - min) / 31, m = min; q = trunc((x - min) / d + 0.5), fifth bits in qh */
function quantizeQ5_1(x: Float32Array, dst: Uint8Array, nb: number): void {
  for (let i = 0; i < nb; i++) {
    const xo = i * 32;
    const yo = i * 24;
    writeDeltaMin(x, xo, 31, dst, yo, deltaMin);
    const min = deltaMin[0]!;
    const id = deltaMin[1]!;
    for (let j = 0; j < 32; j++) levels5[j] = truncToUint8(fround(fround(fround(x[xo + j]! - min) * id) + 0.5));
    pack5Bit(levels5, dst, yo + 4, yo + 8);
  }
}

/** Packs 256 two-bit levels as Q2_K/Q3_K do: byte j/4 + l holds levels l, l+32, l+64, l+96 of each 128. */
function pack2Bit(L: Uint8Array, dst: Uint8Array, qs: number): void {
  for (let j = 0; j < 256; j += 128) {
    for (let l = 0; l < 32; l++) {
      dst[qs + j / 4 + l] = (L[j + l]! | (L[j + l + 32]! << 2) | (L[j + l + 64]! << 4) | (L[j + l + 96]! << 6)) & 0xff;
    }
  }
}

/** Q2_K: 16 sub-blocks of 16, 4-bit scale and min each (fit by mean absolute deviation); levels 0..3 */
function quantizeQ2_K(x: Float32Array, dst: Uint8Array, nb: number): void {
  const L = new Uint8Array(256);
  const Laux = new Uint8Array(32);
  const weights = new Float32Array(32);
  const scales = new Float32Array(16);
  const mins = new Float32Array(16);
  const fit = new Float32Array(4);
  const q4scale = 15;
  for (let i = 0; i < nb; i++) {
    const xo = i * 256;
    const yo = i * 84;
    let maxScale = 0;
    let maxMin = 0;
    for (let j = 0; j < 16; j += 2) {
      for (let l = 0; l < 32; l++) weights[l] = Math.abs(x[xo + 16 * j + l]!);
      const o = xo + 16 * j;
      makeQkx2QuantsPair(16, 3, x, o, o + 16, weights, L, 16 * j, 16 * j + 16, Laux, fround(-0.5), fround(0.1), 15, fit, true);
      scales[j] = fit[0]!;
      mins[j] = fit[1]!;
      scales[j + 1] = fit[2]!;
      mins[j + 1] = fit[3]!;
    }
    for (let j = 0; j < 16; j++) {
      if (scales[j]! > maxScale) maxScale = scales[j]!;
      if (mins[j]! > maxMin) maxMin = mins[j]!;
    }
    if (maxScale > 0) {
      const iscale = fround(q4scale / maxScale);
      for (let j = 0; j < 16; j++) dst[yo + j] = nearestInt(fround(iscale * scales[j]!)) & 0xff;
      writeF16(dst, yo + 80, toF16(fround(maxScale / q4scale)));
    } else {
      dst.fill(0, yo, yo + 16);
      writeF16(dst, yo + 80, 0);
    }
    if (maxMin > 0) {
      const iscale = fround(q4scale / maxMin);
      for (let j = 0; j < 16; j++) dst[yo + j] = (dst[yo + j]! | (nearestInt(fround(iscale * mins[j]!)) << 4)) & 0xff;
      writeF16(dst, yo + 82, toF16(fround(maxMin / q4scale)));
    } else {
      writeF16(dst, yo + 82, 0);
    }
    const dAll = FP16_TO_FP32[dst[yo + 80]! | (dst[yo + 81]! << 8)]!;
    const mAll = FP16_TO_FP32[dst[yo + 82]! | (dst[yo + 83]! << 8)]!;
    for (let j = 0; j < 16; j++) {
      const d = fround(dAll * (dst[yo + j]! & 0x0f));
      if (d === 0) continue;
      const dm = fround(mAll * (dst[yo + j]! >> 4));
      for (let ii = 0; ii < 16; ii++) {
        const l = nearestInt(fround(fround(x[xo + 16 * j + ii]! + dm) / d));
        L[16 * j + ii] = Math.max(0, Math.min(3, l));
      }
    }
    pack2Bit(L, dst, yo + 16);
  }
}

/**
 * ggml make_q3_quants with rmse: symmetric fit of n values to [-nmax, nmax - 1] weighted by x^2,
 * then up to 5 passes moving single levels while the weighted fit improves. L gets l + nmax.
 */
function makeQ3Quants(n: number, nmax: number, x: Float32Array, xo: number, L: Uint8Array, lo: number): number {
  const max = firstSymmetricFit(n, nmax, x, xo, L, lo, levelSums);
  if (max === 0) return 0;
  let sumlx = levelSums[0]!;
  let suml2 = levelSums[1]!;
  for (let itry = 0; itry < 5; itry++) {
    let changed = 0;
    for (let i = 0; i < n; i++) {
      const v = x[xo + i]!;
      const w = fround(v * v);
      const li = L[lo + i]! - nmax;
      let slx = fround(sumlx - fround(fround(w * v) * li));
      if (slx > 0) {
        let sl2 = fround(suml2 - fround(fround(w * li) * li));
        const newL = Math.max(-nmax, Math.min(nmax - 1, nearestInt(fround(fround(v * sl2) / slx))));
        if (newL !== li) {
          slx = fround(slx + fround(fround(w * v) * newL));
          sl2 = fround(sl2 + fround(fround(w * newL) * newL));
          if (sl2 > 0 && fround(fround(slx * slx) * suml2) > fround(fround(sumlx * sumlx) * sl2)) {
            L[lo + i] = newL + nmax;
            sumlx = slx;
            suml2 = sl2;
            changed++;
          }
        }
      }
    }
    if (changed === 0) break;
  }
  return suml2 > 0 ? fround(sumlx / suml2) : 0;
}

/** Q3_K: 16 sub-blocks of 16 with 6-bit signed scales; levels -4..3 (high bit in hmask) */
function quantizeQ3_K(x: Float32Array, dst: Uint8Array, nb: number): void {
  const L = new Uint8Array(256);
  const scales = new Float32Array(16);
  for (let i = 0; i < nb; i++) {
    const xo = i * 256;
    const yo = i * 110;
    const sc = yo + 96;
    let maxScale = 0;
    let amax = 0;
    for (let j = 0; j < 16; j++) {
      scales[j] = makeQ3Quants(16, 4, x, xo + 16 * j, L, 16 * j);
      const scale = Math.abs(scales[j]!);
      if (scale > amax) {
        amax = scale;
        maxScale = scales[j]!;
      }
    }
    dst.fill(0, sc, sc + 12);
    if (maxScale !== 0) {
      const iscale = fround(-32 / maxScale);
      for (let j = 0; j < 16; j++) {
        let l = (nearestInt(fround(iscale * scales[j]!)) << 24) >> 24; // int8_t
        l = Math.max(-32, Math.min(31, l)) + 32;
        if (j < 8) dst[sc + j] = l & 0x0f;
        else dst[sc + j - 8] = dst[sc + j - 8]! | ((l & 0x0f) << 4);
        l >>= 4;
        dst[sc + (j % 4) + 8] = dst[sc + (j % 4) + 8]! | (l << (2 * (j >> 2)));
      }
      writeF16(dst, yo + 108, toF16(fround(1 / iscale)));
    } else {
      writeF16(dst, yo + 108, 0);
    }
    const dAll = FP16_TO_FP32[dst[yo + 108]! | (dst[yo + 109]! << 8)]!;
    for (let j = 0; j < 16; j++) {
      const low = j < 8 ? dst[sc + j]! & 0x0f : dst[sc + j - 8]! >> 4;
      const s = (low | (((dst[sc + 8 + (j % 4)]! >> (2 * (j >> 2))) & 3) << 4)) - 32;
      const d = fround(dAll * s);
      if (d === 0) continue;
      for (let ii = 0; ii < 16; ii++) {
        const l = nearestInt(fround(x[xo + 16 * j + ii]! / d));
        L[16 * j + ii] = Math.max(-4, Math.min(3, l)) + 4;
      }
    }
    dst.fill(0, yo, yo + 32);
    let m = 0;
    let hm = 1;
    const levels = new Uint8Array(256);
    for (let j = 0; j < 256; j++) {
      let l = L[j]!;
      if (l > 3) {
        dst[yo + m] = dst[yo + m]! | hm;
        l -= 4;
      }
      levels[j] = l;
      if (++m === 32) {
        m = 0;
        hm <<= 1;
      }
    }
    pack2Bit(levels, dst, yo + 32);
  }
}

type QuantizeKernel = (x: Float32Array, dst: Uint8Array, blocks: number) => void;

export const QUANTIZE_KERNELS: Readonly<Partial<Record<GgmlType, QuantizeKernel>>> = {
  [GgmlType.Q4_0]: quantizeQ4_0,
  [GgmlType.Q4_1]: quantizeQ4_1,
  [GgmlType.Q5_0]: quantizeQ5_0,
  [GgmlType.Q5_1]: quantizeQ5_1,
  [GgmlType.Q2_K]: quantizeQ2_K,
  [GgmlType.Q3_K]: quantizeQ3_K,
  [GgmlType.Q8_0]: quantizeQ8_0,
  [GgmlType.Q4_K]: quantizeQ4_K,
  [GgmlType.Q5_K]: quantizeQ5_K,
  [GgmlType.Q6_K]: quantizeQ6_K,
  [GgmlType.Q8_K]: quantizeQ8_K,
};

export const QUANTIZE_TYPES: readonly GgmlType[] = (Object.keys(QUANTIZE_KERNELS) as string[]).map((id) => Number(id) as GgmlType);

/**
 * Quantizes `src` (a whole number of blocks) into `dst` as ggml's quantize_row_<type>_ref would,
 * byte for byte. Returns dst. (Q8_K: an all-zero block leaves its block sums untouched, as C.)
 */
export function quantizeRow(type: GgmlType, src: Float32Array, dst: Uint8Array): Uint8Array {
  const kernel = QUANTIZE_KERNELS[type];
  if (!kernel)
    throw new UnsupportedGgmlTypeError(
      ggmlTypeLabel(type),
      "quantizeRow",
      QUANTIZE_TYPES.map((t) => ggmlTypeLabel(t)),
    );
  const { blockSize, typeSize, name } = GGML_TYPE_TRAITS[type];
  if (src.length % blockSize !== 0) {
    throw new QuantArgumentError(
      "quantizeRow",
      "src.length",
      `${src.length} is not a whole number of ${name} blocks (${blockSize} per block)`,
    );
  }
  const blocks = src.length / blockSize;
  if (dst.length < blocks * typeSize) {
    throw new QuantArgumentError("quantizeRow", "dst", `${blocks} ${name} blocks need ${blocks * typeSize} bytes, dst has ${dst.length}`);
  }
  kernel(src, dst, blocks);
  return dst;
}

/** Allocating form of quantizeRow. */
export function quantizeTensor(type: GgmlType, src: Float32Array): Uint8Array {
  const { blockSize, typeSize } = GGML_TYPE_TRAITS[type];
  const dst = new Uint8Array(Math.max(0, Math.floor(src.length / blockSize)) * typeSize);
  return quantizeRow(type, src, dst);
}
