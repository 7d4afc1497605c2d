// Activation quantizers: the arithmetic of the activation quantizers (from_float) of llama.cpp's
// haswell CPU variant and its f32 -> f16/bf16 row conversions, so that integer dots see the same
// codes as llama.cpp: Q8_K is quantize_row_q8_K_ref's; Q8_0 / Q8_1 are the x86 quantize_row_q8_0 /
// q8_1 (id = 127 / amax rather than 1 / d, and codes rounded half to even), which differ from their
// _ref versions (1 / d, halves away from zero) on exact ties.
#include <cmath>

#include "cpu/kernels.h"

namespace kq {
namespace {

// ggml's nearest_int: round half to even through the 1.5 * 2^23 trick.
inline int nearestInt(float fval) {
  const float val = fval + 12582912.f;
  int32_t i;
  std::memcpy(&i, &val, 4);
  return (i & 0x007fffff) - 0x00400000;
}

// One Q8_0 / Q8_1 code as the x86 kernels make it: _mm256_round_ps to nearest (ties to even), the
// int32 conversion (out of range -> INT32_MIN) and the saturating int32 -> int16 -> int8 packs.
inline int8_t x86Q8Code(float v) {
  if (!(std::fabs(v) < 2147483648.0f)) return -128;
  const float r = std::fabs(v) < 4194304.0f ? (v + 12582912.f) - 12582912.f : v;
  const int32_t i = (int32_t)r;
  return (int8_t)(i < -128 ? -128 : i > 127 ? 127 : i);
}

}  // namespace

void quantize_row_q8_K(const float* x, void* vy, int64_t k) {
  BlockQ8_K* y = static_cast<BlockQ8_K*>(vy);
  const int64_t nb = k / QKK;
  for (int64_t i = 0; i < nb; ++i, x += QKK) {
    float max = 0, amax = 0;
    for (int j = 0; j < QKK; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    if (!amax) {
      y[i].d = 0;
      std::memset(y[i].qs, 0, QKK);
      std::memset(y[i].bsums, 0, sizeof(y[i].bsums));
      continue;
    }
    const float iscale = -127.f / max;
    for (int j = 0; j < QKK; ++j) {
      const int v = nearestInt(iscale * x[j]);
      y[i].qs[j] = (int8_t)(v < 127 ? v : 127);
    }
    for (int j = 0; j < QKK / 16; ++j) {
      int sum = 0;
      for (int ii = 0; ii < 16; ++ii) sum += y[i].qs[j * 16 + ii];
      y[i].bsums[j] = (int16_t)sum;
    }
    y[i].d = 1 / iscale;
  }
}

// One 32-value block's Q8 scale (Q8_0 and Q8_1 alike): returns d = amax / 127 in f32 (stored as f16 by
// the caller) and sets its inverse 127 / amax (0 for an all-zero block).
static inline float q8BlockScale(const float* x, float* id) {
  float amax = 0;
  for (int j = 0; j < QK; ++j) amax = std::fmax(amax, std::fabs(x[j]));
  *id = amax != 0.0f ? 127.f / amax : 0.0f;
  return amax / 127.f;
}

void quantize_row_q8_0(const float* x, void* vy, int64_t k) {
  BlockQ8_0* y = static_cast<BlockQ8_0*>(vy);
  const int64_t nb = k / QK;
  for (int64_t i = 0; i < nb; ++i) {
    float id;
    y[i].d = f32ToHalf(q8BlockScale(x + i * QK, &id));
    for (int j = 0; j < QK; ++j) y[i].qs[j] = x86Q8Code(x[i * QK + j] * id);
  }
}

void quantize_row_q8_1(const float* x, void* vy, int64_t k) {
  BlockQ8_1* y = static_cast<BlockQ8_1*>(vy);
  const int64_t nb = k / QK;
  for (int64_t i = 0; i < nb; ++i) {
    float id;
    const float d = q8BlockScale(x + i * QK, &id);
    y[i].d = f32ToHalf(d);
    int sum = 0;
    for (int j = 0; j < QK / 2; ++j) {
      const float v0 = x[i * QK + j] * id;
      const float v1 = x[i * QK + QK / 2 + j] * id;
      y[i].qs[j] = x86Q8Code(v0);
      y[i].qs[QK / 2 + j] = x86Q8Code(v1);
      sum += y[i].qs[j];
      sum += y[i].qs[QK / 2 + j];
    }
    y[i].s = f32ToHalf(sum * d);
  }
}

void quantize_row_f16(const float* x, void* dst, int64_t k) {
  uint16_t* d = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < k; ++i) d[i] = f32ToHalf(x[i]);
}

void quantize_row_bf16(const float* x, void* dst, int64_t k) {
  uint16_t* d = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < k; ++i) d[i] = f32ToBf16(x[i]);
}

void quantize_row_f32(const float* x, void* dst, int64_t k) { std::memcpy(dst, x, (size_t)k * 4); }

}  // namespace kq
