/**
 * f16 / bf16 helpers for the hot loops: round-to-nearest-even conversions on raw f32 bits
 * (the same rules as ggml's scalar converters) and a 64 Ki-entry f16 -> f32 table.
 */
const scratch = new ArrayBuffer(4);
const scratchF32 = new Float32Array(scratch);
const scratchU32 = new Uint32Array(scratch);

function fp16BitsToF32(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exponent = (h >> 10) & 0x1f;
  const mantissa = h & 0x3ff;
  if (exponent === 0x1f) return mantissa === 0 ? sign * Infinity : NaN;
  if (exponent === 0) return sign * mantissa * 2 ** -24;
  return sign * (1 + mantissa / 1024) * 2 ** (exponent - 15);
}

/** f16 bits -> f32 value. */
export const F16_TO_F32: Float32Array = (() => {
  const table = new Float32Array(65536);
  for (let h = 0; h < 65536; h++) table[h] = fp16BitsToF32(h);
  return table;
})();

/** f32 bits -> f16 bits, round to nearest even; overflow -> inf; NaN -> sign | 0x7e00. */
export function f32BitsToF16Bits(bits: number): number {
  const w = bits >>> 0;
  const sign = (w >>> 16) & 0x8000;
  const abs = w & 0x7fffffff;
  if (abs > 0x7f800000) return sign | 0x7e00;
  if (abs >= 0x47800000) return sign | 0x7c00;
  if (abs >= 0x38800000) {
    const rounded = abs + 0xfff + ((abs >>> 13) & 1);
    return sign | ((rounded - 0x38000000) >>> 13);
  }
  if (abs < 0x33000000) return sign;
  const exponent = abs >>> 23;
  const mantissa = (abs & 0x7fffff) | 0x800000;
  const shift = 126 - exponent;
  const quotient = mantissa >>> shift;
  const remainder = mantissa & ((1 << shift) - 1);
  const half = 1 << (shift - 1);
  let result = quotient;
  if (remainder > half || (remainder === half && (quotient & 1) === 1)) result += 1;
  return sign | result;
}

export function f32ToF16Bits(value: number): number {
  scratchF32[0] = value;
  return f32BitsToF16Bits(scratchU32[0]!);
}

/** Rounds an f32 value to f16 precision (returned as a number). */
export function roundF16(value: number): number {
  return F16_TO_F32[f32ToF16Bits(value)]!;
}

/** f32 bits -> bf16 bits (RNE; NaN kept quiet), as ggml_fp32_to_bf16. */
export function f32BitsToBf16Bits(bits: number): number {
  const u = bits >>> 0;
  if ((u & 0x7fffffff) > 0x7f800000) return ((u >>> 16) | 64) & 0xffff;
  return ((u + (0x7fff + ((u >>> 16) & 1))) >>> 16) & 0xffff;
}

/** Rounds `src[0, n)` to f16 precision into `dst` (both f32 arrays). */
export function roundRowF16(src: Float32Array, srcOffset: number, dst: Float32Array, dstOffset: number, n: number): void {
  const bits = new Uint32Array(src.buffer, src.byteOffset, src.length);
  for (let i = 0; i < n; i++) dst[dstOffset + i] = F16_TO_F32[f32BitsToF16Bits(bits[srcOffset + i]!)]!;
}

/** Rounds `src[0, n)` to bf16 precision into `dst`. */
export function roundRowBf16(src: Float32Array, srcOffset: number, dst: Float32Array, dstOffset: number, n: number): void {
  const bits = new Uint32Array(src.buffer, src.byteOffset, src.length);
  const out = new Uint32Array(dst.buffer, dst.byteOffset, dst.length);
  for (let i = 0; i < n; i++) out[dstOffset + i] = f32BitsToBf16Bits(bits[srcOffset + i]!) << 16;
}
