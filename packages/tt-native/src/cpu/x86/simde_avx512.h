// AVX-512 emulated on an AVX2 CPU, for tests only (the KEEPQUANT_EMULATE_AVX512 build, never the shipped
// addon): SIMDe (Debian's libsimde-dev) implements every _mm512_* intrinsic the AVX-512 kernels use with
// AVX2 code over 256-bit halves, with the same integer and IEEE float results (fused multiply-adds stay
// fused: the TU is compiled with -mfma, so SIMDe's 256-bit halves are the native instructions). GCC's
// <immintrin.h> declares the 512-bit vector types whatever the target flags, and SIMDe takes those types.
#pragma once

#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "the emulated AVX-512 level needs -mavx2 -mfma -mf16c (native 256-bit halves, fused multiply-adds)"
#endif
#if defined(__AVX512F__)
#error "the emulated AVX-512 level is compiled without -mavx512*: with them it would be the real one"
#endif

#include <immintrin.h>

#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>

// SIMDe 0.7.4 aliases the two-operand _mm512_madd_epi16 with the masked form's four parameters.
#undef _mm512_madd_epi16
#define _mm512_madd_epi16(a, b) simde_mm512_madd_epi16(a, b)
// Not in SIMDe 0.7.4: the 256 -> 512-bit zero extension.
#define _mm512_zextsi256_si512(a) simde_mm512_inserti64x4(simde_mm512_setzero_si512(), (a), 0)
// Not in SIMDe 0.7.4: the int32 -> float conversion (exact per lane, as vcvtdq2ps: two 256-bit halves give the
// same results), the upper or lower 8 floats, and the 128-bit-lane shuffle of 64-bit pairs (the same selection
// as the 32x4 one, which SIMDe has; only the mask granularity differs, and these calls have no mask).
static inline simde__m512 kqEmuCvtepi32Ps(simde__m512i a) {
  simde__m512i_private a_ = simde__m512i_to_private(a);
  simde__m512_private r_;
  r_.m256[0] = _mm256_cvtepi32_ps(a_.m256i[0]);
  r_.m256[1] = _mm256_cvtepi32_ps(a_.m256i[1]);
  return simde__m512_from_private(r_);
}
static inline __m256 kqEmuExtractf32x8Ps(simde__m512 a, int imm8) { return simde__m512_to_private(a).m256[imm8 & 1]; }
#define _mm512_cvtepi32_ps(a) kqEmuCvtepi32Ps(a)
#define _mm512_extractf32x8_ps(a, imm8) kqEmuExtractf32x8Ps((a), (imm8))
#define _mm512_shuffle_i64x2(a, b, imm8) simde_mm512_shuffle_i32x4((a), (b), (imm8))
