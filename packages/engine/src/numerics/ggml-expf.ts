/**
 * ggml's vectorized expf (`ggml_v_expf`, the SIMD path of ggml_vec_silu_f32 / ggml_vec_swiglu_f32 on
 * x86 AVX2 and ARM NEON) emulated in f32: a range reduction by ln 2 and a degree-5 polynomial,
 * every step rounded to f32 and the fused multiply-adds rounded once (`fmaf`, exact).
 * Written from the published algorithm, so SiLU matches llama.cpp's bit for bit on typical inputs:
 * a one-ulp SiLU difference can flip a Q8 activation quantization step downstream.
 */
import { fmaf } from "./fma.js";

const fround = Math.fround;
/** A C hex-float literal `0x<mantissa>p<exponent>` as a number. */
function hexFloat(mantissa: string, exponent: number): number {
  const [whole, fraction = ""] = mantissa.split(".");
  return (parseInt(whole! + fraction, 16) / 16 ** fraction.length) * 2 ** exponent;
}

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

const SHIFT = fround(hexFloat("1.8", 23)); // 1.5 * 2^23 rounding constant
const LOG2E = fround(hexFloat("1.715476", 0));
const LN2_HI = fround(hexFloat("1.62e4", -1));
const LN2_LO = fround(hexFloat("1.7f7d1c", -20));
const C1 = fround(hexFloat("1.ffffec", -1));
const C2 = fround(hexFloat("1.fffdb6", -2));
const C3 = fround(hexFloat("1.555e66", -3));
const C4 = fround(hexFloat("1.573e2e", -5));
const C5 = fround(hexFloat("1.0e4020", -7));

function bitsOf(x: number): number {
  f32[0] = x;
  return u32[0]!;
}
function fromBits(bits: number): number {
  u32[0] = bits >>> 0;
  return f32[0]!;
}

/** 2^n for n in [-126, 126] (the reconstruction scale `k` of the normal path). */
const POW2 = Float64Array.from({ length: 253 }, (_, i) => 2 ** (i - 126));

/** ggml_v_expf for one lane. */
export function ggmlVExpf(x: number): number {
  const z = fmaf(x, LOG2E, SHIFT);
  const n = fround(z - SHIFT);
  const b = fmaf(-n, LN2_LO, fmaf(-n, LN2_HI, x));
  const u = fround(b * b);
  const j = fmaf(fmaf(fmaf(C5, b, C4), u, fmaf(C3, b, C2)), u, fround(C1 * b));
  if (n >= -126 && n <= 126) {
    // bits(z) << 23 puts n in the exponent field: k = 2^n exactly
    const k = POW2[n + 126]!;
    return fmaf(j, k, k);
  }
  if (!(Math.abs(n) > 126)) return NaN; // NaN input
  // overflow / underflow lanes
  const e = (bitsOf(z) << 23) >>> 0;
  const d = n <= 0 ? 0x82000000 : 0;
  const s1 = fromBits((d + 0x7f000000) >>> 0);
  const s2 = fromBits((e - d) >>> 0);
  if (Math.abs(n) > 192) return fround(s1 * s1);
  return fround(fmaf(s2, j, s2) * s1);
}

/** ggml_v_silu: x / (1 + ggml_v_expf(-x)). */
export function ggmlVSilu(x: number): number {
  return fround(x / fround(1 + ggmlVExpf(-x)));
}

/** ggml_silu_f32 (scalar tail): x / (1 + expf(-x)), expf from `expf` (the libm in use; see forward.ts). */
export function ggmlSiluScalar(x: number): number {
  return fround(x / fround(1 + libmExpf(-x)));
}

/** The f32 expf used by the scalar kernels; forward.ts points it at its `libm`. */
let libmExpf = (x: number): number => fround(Math.exp(x));
export function setScalarExpf(expf: (x: number) => number): void {
  libmExpf = expf;
}

/** SIMD lanes of the CPU path being emulated (8 on AVX2). Elements past the last full vector use the scalar form. */
export const GGML_F32_LANES = 8;

/** ggml_vec_silu_f32 over `n` elements of `src` at `offset` into `dst`. */
export function ggmlVecSilu(src: Float32Array, srcOffset: number, dst: Float32Array, dstOffset: number, n: number): void {
  const simd = n - (n % GGML_F32_LANES);
  for (let i = 0; i < simd; i++) dst[dstOffset + i] = ggmlVSilu(src[srcOffset + i]!);
  for (let i = simd; i < n; i++) dst[dstOffset + i] = ggmlSiluScalar(src[srcOffset + i]!);
}

/**
 * The sum ggml_vec_soft_max_f32's AVX2 body returns for `p[0..n)` (values past n count as 0, as masked
 * cells do): each 8-lane vector's f32 horizontal sum ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)),
 * added to an f64 sum.
 */
export function ggmlSoftMaxSum(p: Float32Array, n: number): number {
  let sum = 0;
  for (let g = 0; g < n; g += 8) {
    const lane = (i: number): number => (g + i < n ? p[g + i]! : 0);
    const t0 = fround(lane(0) + lane(4));
    const t1 = fround(lane(1) + lane(5));
    const t2 = fround(lane(2) + lane(6));
    const t3 = fround(lane(3) + lane(7));
    sum += fround(fround(t0 + t2) + fround(t1 + t3));
  }
  return sum;
}

const sumLanes = new Float32Array(32);

/**
 * ggml_vec_dot_f32 as its AVX2 path computes it: four 8-lane f32 accumulators over blocks of 32
 * (fused multiply-add), reduced (acc0+acc2, acc1+acc3, then those two; high half + low half;
 * two horizontal adds), then the tail in f32.
 */
export function ggmlVecDotF32(x: Float32Array, xOffset: number, y: Float32Array, yOffset: number, n: number): number {
  const np = n & ~31;
  const acc = sumLanes;
  acc.fill(0);
  for (let i = 0; i < np; i += 32) {
    for (let l = 0; l < 32; l++) acc[l] = fmaf(x[xOffset + i + l]!, y[yOffset + i + l]!, acc[l]!);
  }
  // acc[j*8 + lane]: j-th accumulator
  for (let l = 0; l < 8; l++) {
    acc[l] = acc[l]! + acc[16 + l]!;
    acc[8 + l] = acc[8 + l]! + acc[24 + l]!;
  }
  for (let l = 0; l < 8; l++) acc[l] = acc[l]! + acc[8 + l]!;
  const t0 = fround(acc[0]! + acc[4]!);
  const t1 = fround(acc[1]! + acc[5]!);
  const t2 = fround(acc[2]! + acc[6]!);
  const t3 = fround(acc[3]! + acc[7]!);
  // bit-exact for n a multiple of 32 (every GDN head size here); the tail order is approximate
  let sum = fround(fround(t0 + t1) + fround(t2 + t3));
  for (let i = np; i < n; i++) sum = fround(sum + fround(x[xOffset + i]! * y[yOffset + i]!));
  return sum;
}

const laneSums = new Float32Array(32);

/** The final reduction of ggml_vec_dot_f32's four 8-lane accumulators held in `lanes[0..32)`. */
function reduceLanes(lanes: Float32Array): number {
  for (let l = 0; l < 8; l++) {
    lanes[l] = lanes[l]! + lanes[16 + l]!;
    lanes[8 + l] = lanes[8 + l]! + lanes[24 + l]!;
  }
  for (let l = 0; l < 8; l++) lanes[l] = lanes[l]! + lanes[8 + l]!;
  return fround(
    fround(fround(lanes[0]! + lanes[4]!) + fround(lanes[1]! + lanes[5]!)) +
      fround(fround(lanes[2]! + lanes[6]!) + fround(lanes[3]! + lanes[7]!)),
  );
}

/**
 * Fused GDN row kernels with ggml_vec_dot_f32's exact lane order (lane l of a 32-wide block
 * accumulates elements l, l+32, l+64, ... with one rounding per fused multiply-add). Each lane is
 * summed in its own strided pass, which keeps one accumulator live: several times faster in V8
 * than 32 live accumulators. `n` must be a multiple of 32 (GDN head sizes are).
 * `ggmlDecayDot`: x[i] *= decay (stored), returns dot(x, y).
 * `ggmlMadDot`: x[i] += k[i] * delta (one rounding, ggml_vec_mad_f32), returns dot(x, y).
 */
export function ggmlDecayDot(x: Float32Array, xOffset: number, y: Float32Array, yOffset: number, n: number, decay: number): number {
  if (n % 32 !== 0) {
    for (let i = 0; i < n; i++) x[xOffset + i] = x[xOffset + i]! * decay;
    return ggmlVecDotF32(x, xOffset, y, yOffset, n);
  }
  for (let l = 0; l < 32; l++) {
    let acc = 0;
    for (let e = l; e < n; e += 32) {
      const s = fround(x[xOffset + e]! * decay);
      x[xOffset + e] = s;
      acc = fmaf(s, y[yOffset + e]!, acc);
    }
    laneSums[l] = acc;
  }
  return reduceLanes(laneSums);
}

export function ggmlMadDot(
  x: Float32Array,
  xOffset: number,
  y: Float32Array,
  yOffset: number,
  n: number,
  k: Float32Array,
  kOffset: number,
  delta: number,
): number {
  if (n % 32 !== 0) {
    for (let i = 0; i < n; i++) x[xOffset + i] = fmaf(k[kOffset + i]!, delta, x[xOffset + i]!);
    return ggmlVecDotF32(x, xOffset, y, yOffset, n);
  }
  for (let l = 0; l < 32; l++) {
    let acc = 0;
    for (let e = l; e < n; e += 32) {
      const s = fround(x[xOffset + e]! + k[kOffset + e]! * delta);
      x[xOffset + e] = s;
      acc = fmaf(s, y[yOffset + e]!, acc);
    }
    laneSums[l] = acc;
  }
  return reduceLanes(laneSums);
}
