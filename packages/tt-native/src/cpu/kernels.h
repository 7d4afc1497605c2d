// Internal kernel interfaces of the CPU-native arm.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/common.h"

namespace kq {

// Dequantize `k` elements of `type` from `src` (whole blocks) into `dst`. Returns false when the
// type is not supported. Bit-exact with ggml's dequantize_row_<type>.
bool dequantizeRow(int type, const void* src, float* dst, int64_t k);
bool dequantSupported(int type);

// Activation encodings used by llama.cpp's CPU matmul (the weight type's vec_dot_type).
int vecDotType(int weightType);  // -1 when the weight type has no dot kernel here
size_t actRowBytes(int actType, int64_t k);
// Quantize one activation row of k floats to actType (Q8_K, Q8_0, Q8_1, F16, BF16 or F32).
void quantizeActRow(int actType, const float* x, void* dst, int64_t k);

// One dot product: n elements of weight row `w` (type) against activation row `a` (vecDotType).
typedef float (*VecDotFn)(int n, const void* w, const void* a);

// Generic (portable C++) kernels, in exactly ggml's reference arithmetic.
VecDotFn genericVecDot(int weightType);

// One weight row against `rows` (1..4) activation rows `as` bytes apart; out[r * os]. Gives the
// same bits per row as the VecDotFn of the same level.
typedef void (*VecDotMultiFn)(int n, const void* w, const uint8_t* a, size_t as, int rows, float* out, size_t os);
constexpr int kMultiRows = 4;  // the default; a level may take more rows per call for some types

// One activation row against `rows` consecutive weight rows `ws` bytes apart: out[0..rows). Gives the
// same bits per weight row as the VecDotFn of the same level (decode: independent chains per row).
typedef void (*VecDotRowsFn)(int n, const uint8_t* w, size_t ws, int rows, const uint8_t* a, float* out);

// `wrows` consecutive weight rows (`ws` bytes apart) against `arows` activation rows (`as` bytes
// apart): out[ar * os + wr]. Gives the same bits per output as the VecDotFn of the same level
// (prefill: a level may prepare the activation tile once for a whole block of weight rows).
typedef void (*VecDotBlockFn)(int n, const uint8_t* w, size_t ws, int wrows, const uint8_t* a, size_t as, int arows, float* out,
                              size_t os);

typedef bool (*DequantFn)(int type, const void* src, float* dst, int64_t k);

// ISA-specific tables: fill `table[type]` for every type (the portable kernels recompiled for the
// ISA, then hand-written ones where they exist).
void fillAvx2VecDot(VecDotFn* table, VecDotMultiFn* multi);
void fillAvx512VecDot(VecDotFn* table, VecDotMultiFn* multi, int* multiRows, VecDotRowsFn* rowsFn, int* weightRows,
                      VecDotBlockFn* blockFn);
DequantFn avx2Dequant();
// Wrapping sum of `words` 8-byte words (the memory-bandwidth probe's inner loop).
typedef uint64_t (*SumWordsFn)(const uint8_t* p, size_t words);
SumWordsFn avx2SumWords();
DequantFn avx512Dequant();
void fillNeonVecDot(VecDotFn* table);
// bf16 contract dot: x (f32) . w (f32 values already rounded to bf16), f32 accumulation.
typedef float (*DotF32Fn)(int n, const float* x, const float* w);
DotF32Fn avx2DotF32();
DotF32Fn avx512DotF32();

}  // namespace kq
