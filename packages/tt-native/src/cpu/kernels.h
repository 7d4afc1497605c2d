// Internal kernel interfaces of the CPU-native arm: the kernel signatures and the per-type kernel
// table of one ISA level (CpuTypeTraits, ggml's type_traits_cpu). Kernel names follow ggml's:
// vec_dot_<weight>_<activation> (vec_dot_q4_K_q8_K), dequantize_row_<type>, quantize_row_<type>,
// with a suffix for the shape of the work: _multi (one weight row, several activation rows), _rows
// (several weight rows, one activation row), _x2 (two weight rows in one register), _tile (one
// unpacked weight row against a tile of activation rows), _block (a block of weight rows against a
// tile of activation rows); _n<R> is the body for a compile-time count.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "core/common.h"

namespace kq {

// Decodes k elements (whole blocks) of src into dst: bit-exact with ggml's dequantize_row_<type>.
typedef void (*ToFloatFn)(const void* src, float* dst, int64_t k);
// Quantizes k floats into an activation encoding: llama.cpp's from_float (see quantize.cc).
typedef void (*FromFloatFn)(const float* x, void* dst, int64_t k);

// One dot product: n elements of weight row `w` against activation row `a` (the weight type's
// vec_dot_type).
typedef float (*VecDotFn)(int n, const void* w, const void* a);

// One weight row against `rows` activation rows `as` bytes apart; out[r * os]. Gives the same bits
// per row as the VecDotFn of the same level.
typedef void (*VecDotMultiFn)(int n, const void* w, const uint8_t* a, size_t as, int rows, float* out, size_t os);
constexpr int kMultiRows = 4;  // the default; a level may take more rows per call for some types

// One activation row against `rows` consecutive weight rows `ws` bytes apart: out[0..rows). Gives the
// same bits per weight row as the VecDotFn of the same level (decode: independent chains per row).
// A call takes a whole task's rows, so that the activation row's per-block values and the kernel's
// constants are prepared once for all of them; `width` is how many weight rows the kernel's body runs side
// by side (1, 2 or 4; 0: the level's `weight_rows`; a level may have one width only).
// `prefetch`: the software prefetch distance in weight blocks (0: the level's default); neither moves a bit.
typedef void (*VecDotRowsFn)(int n, const uint8_t* w, size_t ws, int rows, const uint8_t* a, float* out, int prefetch, int width);

// `wrows` consecutive weight rows (`ws` bytes apart) against `arows` activation rows (`as` bytes
// apart): out[ar * os + wr]. Gives the same bits per output as the VecDotFn of the same level
// (prefill: a level may prepare the activation tile once for a whole block of weight rows).
typedef void (*VecDotBlockFn)(int n, const uint8_t* w, size_t ws, int wrows, const uint8_t* a, size_t as, int arows, float* out,
                              size_t os);

// The kernels of one type at one ISA level. Null entries: the type has no such kernel here.
struct CpuTypeTraits {
  ToFloatFn to_float;           // dequantize_row_<type>
  FromFloatFn from_float;       // set for the activation encodings (the vec_dot_types)
  VecDotFn vec_dot;             // null: no matmul kernel for this weight type
  VecDotMultiFn vec_dot_multi;  // null: prefill loops over vec_dot
  int multi_rows;               // activation rows one vec_dot_multi call takes (at most)
  VecDotRowsFn vec_dot_rows;    // null: decode takes one weight row at a time
  int weight_rows;              // vec_dot_rows' default width (weight rows its body runs side by side)
  VecDotBlockFn vec_dot_block;  // null: prefill through vec_dot_multi / vec_dot
  // the same contract with register kernels for a few activation rows (a batched decode step): chosen by
  // the decode variant's batchKernel = 1; null: the type has only vec_dot_block
  VecDotBlockFn vec_dot_block_regs;
};
typedef std::array<CpuTypeTraits, kTypeCount> CpuTypeTraitsTable;

// The activation quantizers (quantize.cc), the same at every level.
void quantize_row_q8_K(const float* x, void* dst, int64_t k);
void quantize_row_q8_0(const float* x, void* dst, int64_t k);
void quantize_row_q8_1(const float* x, void* dst, int64_t k);
void quantize_row_f16(const float* x, void* dst, int64_t k);
void quantize_row_bf16(const float* x, void* dst, int64_t k);
void quantize_row_f32(const float* x, void* dst, int64_t k);

// Wrapping sum of `words` 8-byte words (the memory-bandwidth probe's inner loop).
typedef uint64_t (*SumWordsFn)(const uint8_t* p, size_t words);
// bf16 contract dot: x (f32) . w (f32 values already rounded to bf16), f32 accumulation.
typedef float (*DotF32Fn)(int n, const float* x, const float* w);

// Everything one ISA level provides.
struct KernelSet {
  const CpuTypeTraits* type;  // [kTypeCount]
  DotF32Fn dotF32;
  SumWordsFn sumWords;
};

// The levels' kernels: the portable kernels recompiled for the ISA, then hand-written ones where they
// exist. Only call an ISA's function on a CPU that runs that ISA.
KernelSet genericKernels();
KernelSet avx2Kernels();
KernelSet avx512Kernels();
KernelSet neonKernels();

// The current level's: quantize one activation row of k floats (the encoding's from_float), and
// whether a type can be decoded here.
void quantizeActRow(int actType, const float* x, void* dst, int64_t k);
size_t actRowBytes(int actType, int64_t k);
bool dequantSupported(int type);

}  // namespace kq
