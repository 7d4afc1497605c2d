/**
 * f16 <-> f32 and bf16 <-> f32 conversions, bit-exact against ggml's scalar helpers
 * (ggml_fp16_to_fp32, ggml_fp32_to_fp16, ggml_bf16_to_fp32, ggml_fp32_to_bf16).
 *
 * Values cross the JS number boundary as f64, which keeps f32 NaN payloads on x86 but not
 * everywhere; the `*Bits` functions work on raw bit patterns and are the exact ones.
 */

const scratch = new ArrayBuffer(4);
const scratchF32 = new Float32Array(scratch);
const scratchU32 = new Uint32Array(scratch);

export function f32ToBits(value: number): number {
  scratchF32[0] = value;
  return scratchU32[0]!;
}

export function bitsToF32(bits: number): number {
  scratchU32[0] = bits >>> 0;
  return scratchF32[0]!;
}

/** f16 bits -> f32 bits. NaNs come out quiet (bit 22 set) with the payload kept, as ggml's converter. */
export function fp16BitsToFp32Bits(h: number): number {
  const sign = (h & 0x8000) << 16;
  const exponent = (h >> 10) & 0x1f;
  const mantissa = h & 0x3ff;
  if (exponent === 0x1f) {
    if (mantissa === 0) return (sign | 0x7f800000) >>> 0;
    return (sign | 0x7fc00000 | (mantissa << 13)) >>> 0;
  }
  if (exponent !== 0) return (sign | ((exponent + 112) << 23) | (mantissa << 13)) >>> 0;
  if (mantissa === 0) return sign >>> 0;
  // subnormal f16: normalize into an f32 normal
  let e = 113;
  let m = mantissa;
  while ((m & 0x400) === 0) {
    m <<= 1;
    e -= 1;
  }
  return (sign | (e << 23) | ((m & 0x3ff) << 13)) >>> 0;
}

/** The 65536-entry f16 -> f32 table every kernel reads scales through (NaN payloads included). */
export const FP16_TO_FP32_BITS: Uint32Array = (() => {
  const table = new Uint32Array(65536);
  for (let h = 0; h < 65536; h++) table[h] = fp16BitsToFp32Bits(h);
  return table;
})();
export const FP16_TO_FP32: Float32Array = new Float32Array(FP16_TO_FP32_BITS.buffer);

export function fp16ToFp32(h: number): number {
  return FP16_TO_FP32[h & 0xffff]!;
}

/**
 * f32 bits -> f16 bits, round to nearest even; overflow goes to infinity; any NaN becomes
 * sign | 0x7e00 (ggml's scalar converter).
 */
export function fp32BitsToFp16Bits(bits: number): number {
  const w = bits >>> 0;
  const sign = (w >>> 16) & 0x8000;
  const abs = w & 0x7fffffff;
  if (abs > 0x7f800000) return sign | 0x7e00;
  if (abs >= 0x47800000) {
    // >= 65536 in magnitude: overflow unless it rounds down to 65504 (max f16 = 0x477fe000)
    return sign | 0x7c00;
  }
  if (abs >= 0x38800000) {
    // normal f16 range (>= 2^-14): drop 13 mantissa bits with RNE; a carry may bump to infinity
    const rounded = abs + 0xfff + ((abs >>> 13) & 1);
    return sign | ((rounded - 0x38000000) >>> 13);
  }
  // subnormal or zero in f16: value = abs_f32 / 2^-24, rounded to nearest even integer
  if (abs < 0x33000000) return sign; // < 2^-25: rounds to zero (2^-25 ties to even zero)
  const exponent = abs >>> 23;
  const mantissa = (abs & 0x7fffff) | 0x800000;
  // value = mantissa * 2^(exponent - 150); in units of 2^-24 that is mantissa >> (126 - exponent)
  const shift = 126 - exponent; // 14..24 here
  const quotient = mantissa >>> shift;
  const remainder = mantissa & ((1 << shift) - 1);
  const half = 1 << (shift - 1);
  let result = quotient;
  if (remainder > half || (remainder === half && (quotient & 1) === 1)) result += 1;
  return sign | result;
}

export function fp32ToFp16(value: number): number {
  return fp32BitsToFp16Bits(f32ToBits(value));
}

/** bf16 bits -> f32 value (exact: the bits shifted up). */
export function bf16ToFp32(h: number): number {
  return bitsToF32((h & 0xffff) << 16);
}

/**
 * f32 bits -> bf16 bits, round to nearest even, as ggml_fp32_to_bf16: NaNs keep their top
 * payload bits and are forced quiet (bit 6 of the bf16); subnormals are kept (no flush).
 */
export function fp32BitsToBf16Bits(bits: number): number {
  const u = bits >>> 0;
  if ((u & 0x7fffffff) > 0x7f800000) return ((u >>> 16) | 64) & 0xffff;
  return ((u + (0x7fff + ((u >>> 16) & 1))) >>> 16) & 0xffff;
}

export function fp32ToBf16(value: number): number {
  return fp32BitsToBf16Bits(f32ToBits(value));
}

/** Rounds every f32 in `values[start, end)` to bf16 precision in place (RNE, same rule as fp32ToBf16). */
export function roundToBf16InPlace(values: Float32Array, start = 0, end = values.length): void {
  const bits = new Uint32Array(values.buffer, values.byteOffset, values.length);
  for (let i = start; i < end; i++) {
    const u = bits[i]!;
    if ((u & 0x7fffffff) > 0x7f800000) bits[i] = (((u >>> 16) | 64) << 16) >>> 0;
    else bits[i] = (((u + 0x7fff + ((u >>> 16) & 1)) >>> 16) << 16) >>> 0;
  }
}
