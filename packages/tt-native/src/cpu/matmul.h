// Matmul drivers of the CPU-native arm. All shapes are validated by the caller (addon.cc).
#pragma once

#include <cstddef>
#include <cstdint>

namespace kq {

// llama.cpp numerics: y[m, n] = vec_dot(W row n, quantize_{vec_dot_type}(x row m)).
// w: N rows of `rowBytes`; x: [M, K] f32; y: [M, N] f32.
void matmulLlama(int type, const uint8_t* w, int64_t n, int64_t k, const float* x, int64_t m, float* y);

// The row loop of matmulLlama over activations already in the weight type's vec_dot_type
// (`act`: m rows of `actBytes`); y[mi * n + r]. Parallel over weight rows.
void matmulLlamaRows(int type, const uint8_t* w, int64_t n, int64_t k, const uint8_t* act, size_t actBytes, int64_t m,
                     float* y);

struct DecodeVariant;

// Several matmulLlamaRows in one parallel dispatch (at most 8; e.g. Q, K and V of one input). A
// one-row job (decode) runs with `variant`, or when it is null with the tuned variant of (role, type)
// (cpu/tuning.h); every variant gives the same bits.
struct LlamaRowsJob {
  int type;
  const uint8_t* w;
  int64_t n, k;
  const uint8_t* act;
  size_t actBytes;
  int64_t m;
  float* y;
  int role = 0;  // MatmulRole: kRoleLayer or kRoleHead
  const DecodeVariant* variant = nullptr;
};
void matmulLlamaRowsBatch(const LlamaRowsJob* jobs, int count);

// Contract numerics (keep-quant bf16): rows [rowStart, rowStart + rowCount) of W are decoded,
// rounded once to bf16 and dotted with x in f32. Writes y[m * ldy + (row - rowStart) + yOffset].
void matmulBf16Rows(int type, const uint8_t* w, int64_t k, int64_t rowStart, int64_t rowCount,
                    const float* x, int64_t m, float* y, int64_t ldy, int64_t yOffset);

// Dequantize `rows` rows of k elements (parallel over rows). Returns false on unsupported type.
bool dequantizeRows(int type, const uint8_t* src, int64_t rows, int64_t k, float* dst, bool roundBf16);

// Reads every 8-byte word of buf once across the pool and returns their wrapping sum (a memory
// read-bandwidth probe for benchmarks; the sum keeps the reads from being optimized away).
uint64_t sumWords(const uint8_t* buf, size_t bytes);

}  // namespace kq
