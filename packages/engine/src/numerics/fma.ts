/**
 * Single-precision fused multiply-add, `a * b + c` rounded once to f32 (C's `fmaf`, one x86
 * `vfmadd` lane), for f32 inputs held in JS numbers.
 *
 * `a * b` of two f32 values is exact in f64; adding `c` in f64 rounds a first time and `fround` a
 * second time. That double rounding differs from one rounding only when the f64 sum lands exactly
 * on a midpoint between two f32 values (or in the f32 subnormal range), about once in 2^29 sums:
 * often enough to matter over the ~10^8 fused multiply-adds of one prefill. In those cases the f64
 * sum is redone with round-to-odd (the exact error of the sum decides the last bit), which makes
 * the second rounding exact. The native kernels use the hardware instruction; this function is
 * their bit-exact specification.
 */
const f64 = new Float64Array(1);
const u32 = new Uint32Array(f64.buffer);
const fround = Math.fround;
/** Below this magnitude an f32 result may be subnormal, where midpoints sit elsewhere. */
const F32_MIN_NORMAL = 2 ** -126;
/** Low 29 bits of an f64 mantissa at an f32 midpoint: the first dropped bit set, the rest zero. */
const MIDPOINT_MASK = 0x1fffffff;
const MIDPOINT_BITS = 0x10000000;

export function fmaf(a: number, b: number, c: number): number {
  const p = a * b;
  const s = p + c;
  f64[0] = s;
  const lo = u32[0]!;
  if ((lo & MIDPOINT_MASK) !== MIDPOINT_BITS && !(Math.abs(s) < F32_MIN_NORMAL)) return fround(s);
  return fround(roundToOdd(s, p, c));
}

/** `s = p + c` (f64) moved to its odd neighbour on the side of the exact sum when inexact and even. */
function roundToOdd(s: number, p: number, c: number): number {
  // TwoSum: the exact error of s = p + c
  const bb = s - p;
  const error = p - (s - bb) + (c - bb);
  if (!(error > 0 || error < 0)) return s; // exact (or not finite)
  f64[0] = s;
  const lo = u32[0]!;
  if ((lo & 1) !== 0) return s;
  // away from zero when the error has the sign of s, else toward zero; lo is even, so +1 never carries
  if (error > 0 === s > 0) u32[0] = lo + 1;
  else if (lo !== 0) u32[0] = lo - 1;
  else {
    u32[0] = 0xffffffff;
    u32[1] = u32[1]! - 1;
  }
  return f64[0]!;
}
