/**
 * f16 / bf16 helpers for the engine's hot loops. The conversions themselves (round to nearest even,
 * ggml's NaN rules, the 64 Ki-entry f16 -> f32 table) are the quant package's, bit-exact against
 * ggml; this file only adds the row-rounding loops the forward pass needs.
 */
import { FP16_TO_FP32, fp32BitsToBf16Bits, fp32BitsToFp16Bits } from "@keepquant/quant";

/** f16 bits -> f32 value. */
export const F16_TO_F32: Float32Array = FP16_TO_FP32;

/** f32 bits -> f16 bits, round to nearest even; overflow -> inf; NaN -> sign | 0x7e00. */
export const f32BitsToF16Bits: (bits: number) => number = fp32BitsToFp16Bits;

/** f32 bits -> bf16 bits (RNE; NaN kept quiet), as ggml_fp32_to_bf16. */
export const f32BitsToBf16Bits: (bits: number) => number = fp32BitsToBf16Bits;

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
