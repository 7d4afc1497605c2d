// Shared definitions of the keepquant native arm: ggml block layouts, half/bfloat conversions.
// Everything here is `static inline`, constexpr data or a plain type: this header is included by translation units
// compiled with different ISA flags, and no out-of-line copy may be shared between them.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace kq {

// ggml type ids (ggml.h of the oracle build).
enum TypeId : int {
  T_F32 = 0, T_F16 = 1, T_Q4_0 = 2, T_Q4_1 = 3, T_Q5_0 = 6, T_Q5_1 = 7, T_Q8_0 = 8, T_Q8_1 = 9,
  T_Q2_K = 10, T_Q3_K = 11, T_Q4_K = 12, T_Q5_K = 13, T_Q6_K = 14, T_Q8_K = 15,
  T_IQ4_NL = 20, T_IQ4_XS = 23, T_BF16 = 30, T_MXFP4 = 39,
  T_Q4_2_RETIRED = 4,  // a retired id: never a type (typeTraits maps ids out of range to it)
};
constexpr int kTypeCount = 43;

constexpr int QK = 32;     // small-block length
constexpr int QKK = 256;   // super-block length

#pragma pack(push, 1)
struct BlockQ4_0 { uint16_t d; uint8_t qs[16]; };
struct BlockQ4_1 { uint16_t d; uint16_t m; uint8_t qs[16]; };
struct BlockQ5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[16]; };
struct BlockQ5_1 { uint16_t d; uint16_t m; uint8_t qh[4]; uint8_t qs[16]; };
struct BlockQ8_0 { uint16_t d; int8_t qs[32]; };
struct BlockQ8_1 { uint16_t d; uint16_t s; int8_t qs[32]; };
struct BlockQ2_K { uint8_t scales[16]; uint8_t qs[64]; uint16_t d; uint16_t dmin; };
struct BlockQ3_K { uint8_t hmask[32]; uint8_t qs[64]; uint8_t scales[12]; uint16_t d; };
struct BlockQ4_K { uint16_t d; uint16_t dmin; uint8_t scales[12]; uint8_t qs[128]; };
struct BlockQ5_K { uint16_t d; uint16_t dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; };
struct BlockQ6_K { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint16_t d; };
struct BlockQ8_K { float d; int8_t qs[256]; int16_t bsums[16]; };
struct BlockIQ4_NL { uint16_t d; uint8_t qs[16]; };
struct BlockIQ4_XS { uint16_t d; uint16_t scales_h; uint8_t scales_l[4]; uint8_t qs[128]; };
struct BlockMXFP4 { uint8_t e; uint8_t qs[16]; };
#pragma pack(pop)

static_assert(sizeof(BlockQ4_0) == 18, "q4_0");
static_assert(sizeof(BlockQ4_1) == 20, "q4_1");
static_assert(sizeof(BlockQ5_0) == 22, "q5_0");
static_assert(sizeof(BlockQ5_1) == 24, "q5_1");
static_assert(sizeof(BlockQ8_0) == 34, "q8_0");
static_assert(sizeof(BlockQ8_1) == 36, "q8_1");
static_assert(sizeof(BlockQ2_K) == 84, "q2_K");
static_assert(sizeof(BlockQ3_K) == 110, "q3_K");
static_assert(sizeof(BlockQ4_K) == 144, "q4_K");
static_assert(sizeof(BlockQ5_K) == 176, "q5_K");
static_assert(sizeof(BlockQ6_K) == 210, "q6_K");
static_assert(sizeof(BlockQ8_K) == 292, "q8_K");
static_assert(sizeof(BlockIQ4_NL) == 18, "iq4_nl");
static_assert(sizeof(BlockIQ4_XS) == 136, "iq4_xs");
static_assert(sizeof(BlockMXFP4) == 17, "mxfp4");

static const int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                        1,    13,   25,  38,  53,  69,  89,  113};
static const int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

static inline float bitsToF32(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline uint32_t f32ToBits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

// IEEE half -> float, exact (every half is a float); NaNs come out quiet with their payload.
// In translation units built with F16C this is one vcvtph2ps, which gives the same bits.
static inline float halfToF32(uint16_t h) {
#if defined(__F16C__)
  return _cvtsh_ss(h);
#endif
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0) {
    if (man == 0) return bitsToF32(sign);
    // subnormal: man * 2^-24
    float v = (float)man * bitsToF32(0x33800000u);
    return sign ? -v : v;
  }
  if (exp == 31) return bitsToF32(sign | (man ? 0x7fc00000u : 0x7f800000u) | (man << 13));  // NaN comes out quiet
  return bitsToF32(sign | ((exp + 112) << 23) | (man << 13));
}

// float -> IEEE half, round to nearest even (as ggml_compute_fp32_to_fp16 / F16C).
static inline uint16_t f32ToHalf(float f) {
  const uint32_t x = f32ToBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u));
  if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  // rounds to >= 65520 -> inf
  if (ax < 0x38800000u) {
    // result is subnormal or zero: value / 2^-24, rounded to nearest even
    if (ax < 0x33000000u) return (uint16_t)sign;             // < 2^-25: rounds to 0
    const uint32_t e = ax >> 23;                             // biased exponent
    const uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - e + 0u;                    // m * 2^(e-150) / 2^-24 = m >> (126 - e)
    const uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    uint32_t r = q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
    return (uint16_t)(sign | r);
  }
  // normal
  uint32_t r = ax + 0x0fffu + ((ax >> 13) & 1u);
  r = r - (112u << 23);
  return (uint16_t)(sign | (r >> 13));
}

static inline float bf16ToF32(uint16_t b) { return bitsToF32((uint32_t)b << 16); }

// float -> bfloat16, round to nearest even; NaN keeps a quiet NaN (as ggml_compute_fp32_to_bf16).
static inline uint16_t f32ToBf16(float f) {
  const uint32_t u = f32ToBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 64u);
  return (uint16_t)((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

static inline float roundToBf16(float f) { return bf16ToF32(f32ToBf16(f)); }

// ggml_e8m0_to_fp32_half: 2^(e-128), with the two smallest codes as subnormals.
static inline float e8m0ToF32Half(uint8_t x) {
  const uint32_t bits = x < 2 ? (0x00200000u << x) : ((uint32_t)(x - 1) << 23);
  return bitsToF32(bits);
}

// Q4_K / Q5_K packed 6-bit scales and mins of sub-block j.
static inline void scaleMinK4(int j, const uint8_t* q, uint8_t* d, uint8_t* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
  }
}

// The per-type facts of the types this arm knows, indexed by ggml type id (ggml's type_traits plus
// type_traits_cpu's vec_dot_type); a zero blockSize marks a type this arm does not know. The kernels
// of each type are in cpu/dispatch.h (one CpuTypeTraits table per ISA level). The TypeScript table
// (gguf's GGML_TYPE_TRAITS) holds the same facts; tt-native's tests check that they agree.
struct TypeTraits {
  const char* name;  // ggml's name (nullptr: not a type of this arm)
  int blockSize;     // elements per block
  int typeSize;      // bytes per block
  int vecDotType;    // ggml-cpu's vec_dot_type: the activation encoding of a matmul; -1: no vec_dot
  bool registered;   // an encoding of the keep-quant contract (its bf16 numerics)
};

namespace detail {
constexpr std::array<TypeTraits, kTypeCount> makeTypeTraits() {
  std::array<TypeTraits, kTypeCount> t{};
  for (TypeTraits& e : t) e = TypeTraits{nullptr, 0, 0, -1, false};
  t[T_F32] = {"F32", 1, 4, T_F32, false};
  t[T_F16] = {"F16", 1, 2, T_F16, false};
  t[T_BF16] = {"BF16", 1, 2, T_BF16, false};
  t[T_Q4_0] = {"Q4_0", QK, sizeof(BlockQ4_0), T_Q8_0, false};
  t[T_Q4_1] = {"Q4_1", QK, sizeof(BlockQ4_1), T_Q8_1, false};
  t[T_Q5_0] = {"Q5_0", QK, sizeof(BlockQ5_0), T_Q8_0, false};
  t[T_Q5_1] = {"Q5_1", QK, sizeof(BlockQ5_1), T_Q8_1, false};
  t[T_Q8_0] = {"Q8_0", QK, sizeof(BlockQ8_0), T_Q8_0, true};
  t[T_Q8_1] = {"Q8_1", QK, sizeof(BlockQ8_1), -1, false};  // an activation encoding only
  t[T_Q2_K] = {"Q2_K", QKK, sizeof(BlockQ2_K), T_Q8_K, false};
  t[T_Q3_K] = {"Q3_K", QKK, sizeof(BlockQ3_K), T_Q8_K, false};
  t[T_Q4_K] = {"Q4_K", QKK, sizeof(BlockQ4_K), T_Q8_K, true};
  t[T_Q5_K] = {"Q5_K", QKK, sizeof(BlockQ5_K), T_Q8_K, true};
  t[T_Q6_K] = {"Q6_K", QKK, sizeof(BlockQ6_K), T_Q8_K, true};
  t[T_Q8_K] = {"Q8_K", QKK, sizeof(BlockQ8_K), -1, false};  // an activation encoding only
  t[T_IQ4_NL] = {"IQ4_NL", QK, sizeof(BlockIQ4_NL), T_Q8_0, false};
  t[T_IQ4_XS] = {"IQ4_XS", QKK, sizeof(BlockIQ4_XS), T_Q8_K, false};
  t[T_MXFP4] = {"MXFP4", QK, sizeof(BlockMXFP4), T_Q8_0, false};
  return t;
}
}  // namespace detail

inline constexpr std::array<TypeTraits, kTypeCount> kTypeTraits = detail::makeTypeTraits();

// The traits of `type`; an id out of range or unknown here gives the zero entry (blockSize 0).
static inline const TypeTraits& typeTraits(int type) {
  return kTypeTraits[type >= 0 && type < kTypeCount ? type : (int)T_Q4_2_RETIRED];
}

// Bytes of one row of k elements of `type` (k a whole number of blocks).
static inline size_t rowBytes(int type, int64_t k) {
  const TypeTraits& t = typeTraits(type);
  return (size_t)(k / t.blockSize) * (size_t)t.typeSize;
}

}  // namespace kq
