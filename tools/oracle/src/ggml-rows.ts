/**
 * Row converters of the oracle's libggml-base.so (f16/bf16 <-> f32 over whole buffers), for
 * bit-exact checks that must not pass values through JS numbers (NaN payloads).
 */
import { loadGgmlBase } from "./ggml.js";

type Fn = (...args: unknown[]) => unknown;

export interface GgmlRowOracle {
  /** ggml_fp16_to_fp32_row(src, dst, n) */
  fp16ToFp32Row(src: Uint16Array, dst: Float32Array): void;
  /** ggml_fp32_to_fp16_row(src, dst, n) */
  fp32ToFp16Row(src: Float32Array, dst: Uint16Array): void;
  /** ggml_bf16_to_fp32_row(src, dst, n) */
  bf16ToFp32Row(src: Uint16Array, dst: Float32Array): void;
  /** ggml_fp32_to_bf16_row_ref(src, dst, n) (the scalar reference) */
  fp32ToBf16RowRef(src: Float32Array, dst: Uint16Array): void;
  /**
   * dequantize_row_<name> bound with plain `void *` parameters (typed arrays are passed as pointers,
   * no copies), for benchmarks; `name` is ggml's token ("q4_K").
   */
  dequantizeRowFn(name: string): (src: Uint8Array, dst: Float32Array, elements: number) => void;
}

let cached: GgmlRowOracle | undefined;

export function loadGgmlRowOracle(): GgmlRowOracle {
  if (cached) return cached;
  const lib = loadGgmlBase("ggml oracle");
  const fp16ToFp32Row = lib.func("void ggml_fp16_to_fp32_row(const uint16_t *x, _Out_ float *y, int64_t n)") as Fn;
  const fp32ToFp16Row = lib.func("void ggml_fp32_to_fp16_row(const float *x, _Out_ uint16_t *y, int64_t n)") as Fn;
  const bf16ToFp32Row = lib.func("void ggml_bf16_to_fp32_row(const uint16_t *x, _Out_ float *y, int64_t n)") as Fn;
  const fp32ToBf16RowRef = lib.func("void ggml_fp32_to_bf16_row_ref(const float *x, _Out_ uint16_t *y, int64_t n)") as Fn;
  cached = {
    fp16ToFp32Row: (src, dst) => void fp16ToFp32Row(src, dst, src.length),
    fp32ToFp16Row: (src, dst) => void fp32ToFp16Row(src, dst, src.length),
    bf16ToFp32Row: (src, dst) => void bf16ToFp32Row(src, dst, src.length),
    fp32ToBf16RowRef: (src, dst) => void fp32ToBf16RowRef(src, dst, src.length),
    dequantizeRowFn: (name) => {
      const fn = lib.func(`void dequantize_row_${name}(const void *x, void *y, int64_t k)`) as Fn;
      return (src, dst, elements) => void fn(src, dst, elements);
    },
  };
  return cached;
}
