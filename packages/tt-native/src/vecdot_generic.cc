// Portable dot kernels: ggml's generic vec_dot_<w>_<act> arithmetic, operation for operation
// (integer dots inside a block, the same float products in the same order across blocks).
#include "kernels.h"

namespace kq {
namespace {

float dotQ4_0(int n, const void* vw, const void* va) {
  const BlockQ4_0* x = static_cast<const BlockQ4_0*>(vw);
  const BlockQ8_0* y = static_cast<const BlockQ8_0*>(va);
  float sumf = 0;
  for (int ib = 0; ib < n / QK; ++ib) {
    int s0 = 0, s1 = 0;
    for (int j = 0; j < 16; ++j) {
      s0 += ((x[ib].qs[j] & 0x0F) - 8) * y[ib].qs[j];
      s1 += ((x[ib].qs[j] >> 4) - 8) * y[ib].qs[j + 16];
    }
    const int sumi = s0 + s1;
    sumf += sumi * halfToF32(x[ib].d) * halfToF32(y[ib].d);
  }
  return sumf;
}

float dotQ4_1(int n, const void* vw, const void* va) {
  const BlockQ4_1* x = static_cast<const BlockQ4_1*>(vw);
  const BlockQ8_1* y = static_cast<const BlockQ8_1*>(va);
  float sumf = 0;
  for (int ib = 0; ib < n / QK; ++ib) {
    int s0 = 0, s1 = 0;
    for (int j = 0; j < 16; ++j) {
      s0 += (x[ib].qs[j] & 0x0F) * y[ib].qs[j];
      s1 += (x[ib].qs[j] >> 4) * y[ib].qs[j + 16];
    }
    const int sumi = s0 + s1;
    sumf += (halfToF32(x[ib].d) * halfToF32(y[ib].d)) * sumi + halfToF32(x[ib].m) * halfToF32(y[ib].s);
  }
  return sumf;
}

float dotQ5_0(int n, const void* vw, const void* va) {
  const BlockQ5_0* x = static_cast<const BlockQ5_0*>(vw);
  const BlockQ8_0* y = static_cast<const BlockQ8_0*>(va);
  float sumf = 0;
  for (int ib = 0; ib < n / QK; ++ib) {
    uint32_t qh;
    std::memcpy(&qh, x[ib].qh, 4);
    int s0 = 0, s1 = 0;
    for (int j = 0; j < 16; ++j) {
      const int h0 = ((qh >> j) << 4) & 0x10;
      const int h1 = (qh >> (j + 12)) & 0x10;
      s0 += (((x[ib].qs[j] & 0x0F) | h0) - 16) * y[ib].qs[j];
      s1 += (((x[ib].qs[j] >> 4) | h1) - 16) * y[ib].qs[j + 16];
    }
    const int sumi = s0 + s1;
    sumf += (halfToF32(x[ib].d) * halfToF32(y[ib].d)) * sumi;
  }
  return sumf;
}

float dotQ5_1(int n, const void* vw, const void* va) {
  const BlockQ5_1* x = static_cast<const BlockQ5_1*>(vw);
  const BlockQ8_1* y = static_cast<const BlockQ8_1*>(va);
  float sumf = 0;
  for (int ib = 0; ib < n / QK; ++ib) {
    uint32_t qh;
    std::memcpy(&qh, x[ib].qh, 4);
    int s0 = 0, s1 = 0;
    for (int j = 0; j < 16; ++j) {
      const int h0 = ((qh >> j) << 4) & 0x10;
      const int h1 = (qh >> (j + 12)) & 0x10;
      s0 += ((x[ib].qs[j] & 0x0F) | h0) * y[ib].qs[j];
      s1 += ((x[ib].qs[j] >> 4) | h1) * y[ib].qs[j + 16];
    }
    const int sumi = s0 + s1;
    sumf += (halfToF32(x[ib].d) * halfToF32(y[ib].d)) * sumi + halfToF32(x[ib].m) * halfToF32(y[ib].s);
  }
  return sumf;
}

float dotQ8_0(int n, const void* vw, const void* va) {
  const BlockQ8_0* x = static_cast<const BlockQ8_0*>(vw);
  const BlockQ8_0* y = static_cast<const BlockQ8_0*>(va);
  float sumf = 0;
  for (int ib = 0; ib < n / QK; ++ib) {
    int sumi = 0;
    for (int j = 0; j < QK; ++j) sumi += x[ib].qs[j] * y[ib].qs[j];
    sumf += sumi * (halfToF32(x[ib].d) * halfToF32(y[ib].d));
  }
  return sumf;
}

float dotIQ4_NL(int n, const void* vw, const void* va) {
  const BlockIQ4_NL* x = static_cast<const BlockIQ4_NL*>(vw);
  const BlockQ8_0* y = static_cast<const BlockQ8_0*>(va);
  float sumf = 0;
  for (int ib = 0; ib < n / QK; ++ib) {
    const float d = halfToF32(y[ib].d) * halfToF32(x[ib].d);
    int s1 = 0, s2 = 0;
    for (int j = 0; j < 16; ++j) {
      s1 += y[ib].qs[j] * kIq4nlValues[x[ib].qs[j] & 0xf];
      s2 += y[ib].qs[j + 16] * kIq4nlValues[x[ib].qs[j] >> 4];
    }
    sumf += d * (s1 + s2);
  }
  return sumf;
}

float dotMXFP4(int n, const void* vw, const void* va) {
  const BlockMXFP4* x = static_cast<const BlockMXFP4*>(vw);
  const BlockQ8_0* y = static_cast<const BlockQ8_0*>(va);
  float sumf = 0;
  for (int ib = 0; ib < n / QK; ++ib) {
    const float d = halfToF32(y[ib].d) * e8m0ToF32Half(x[ib].e);
    int s1 = 0, s2 = 0;
    for (int j = 0; j < 16; ++j) {
      s1 += y[ib].qs[j] * kMxfp4Values[x[ib].qs[j] & 0xf];
      s2 += y[ib].qs[j + 16] * kMxfp4Values[x[ib].qs[j] >> 4];
    }
    sumf += d * (s1 + s2);
  }
  return sumf;
}

float dotQ2_K(int n, const void* vw, const void* va) {
  const BlockQ2_K* x = static_cast<const BlockQ2_K*>(vw);
  const BlockQ8_K* y = static_cast<const BlockQ8_K*>(va);
  float sumf = 0;
  for (int i = 0; i < n / QKK; ++i) {
    const uint8_t* q2 = x[i].qs;
    const int8_t* q8 = y[i].qs;
    const uint8_t* sc = x[i].scales;
    int summs = 0;
    for (int j = 0; j < 16; ++j) summs += y[i].bsums[j] * (sc[j] >> 4);
    const float dall = y[i].d * halfToF32(x[i].d);
    const float dmin = y[i].d * halfToF32(x[i].dmin);
    int isum = 0, is = 0;
    for (int k = 0; k < QKK / 128; ++k) {
      int shift = 0;
      for (int j = 0; j < 4; ++j) {
        int d = sc[is++] & 0xF;
        int isuml = 0;
        for (int l = 0; l < 16; ++l) isuml += q8[l] * ((q2[l] >> shift) & 3);
        isum += d * isuml;
        d = sc[is++] & 0xF;
        isuml = 0;
        for (int l = 16; l < 32; ++l) isuml += q8[l] * ((q2[l] >> shift) & 3);
        isum += d * isuml;
        shift += 2;
        q8 += 32;
      }
      q2 += 32;
    }
    sumf += dall * isum - dmin * summs;
  }
  return sumf;
}

// Shared tail of the K-quant kernels that use 8 float lanes: a[] holds the 256 weight quants
// (already offset), scale(j) the per-16 scale; returns the per-lane int32 sums.
inline void laneSums16(const int8_t* a, const int8_t* q8, const int* scale16, int32_t* aux32) {
  for (int l = 0; l < 8; ++l) aux32[l] = 0;
  for (int j = 0; j < QKK / 16; ++j) {
    const int scale = scale16[j];
    for (int h = 0; h < 2; ++h) {
      for (int l = 0; l < 8; ++l) aux32[l] += scale * (int16_t)(q8[l] * a[l]);
      q8 += 8;
      a += 8;
    }
  }
}

float dotQ3_K(int n, const void* vw, const void* va) {
  const BlockQ3_K* x = static_cast<const BlockQ3_K*>(vw);
  const BlockQ8_K* y = static_cast<const BlockQ8_K*>(va);
  float sums[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int i = 0; i < n / QKK; ++i) {
    int8_t a[QKK];
    const uint8_t* q3 = x[i].qs;
    const uint8_t* hm = x[i].hmask;
    int8_t* p = a;
    uint8_t m = 1;
    for (int j = 0; j < QKK; j += 128) {
      for (int s = 0; s < 8; s += 2) {
        for (int l = 0; l < 32; ++l) p[l] = (int8_t)(((q3[l] >> s) & 3) - (hm[l] & m ? 0 : 4));
        p += 32;
        m <<= 1;
      }
      q3 += 32;
    }
    int8_t packed[16];
    {
      const uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f;
      uint32_t aux[4];
      std::memcpy(aux, x[i].scales, 12);
      const uint32_t tmp = aux[2];
      aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
      aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
      aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
      aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
      std::memcpy(packed, aux, 16);
    }
    int scale16[16];
    for (int j = 0; j < 16; ++j) scale16[j] = packed[j] - 32;
    int32_t aux32[8];
    laneSums16(a, y[i].qs, scale16, aux32);
    const float d = halfToF32(x[i].d) * y[i].d;
    for (int l = 0; l < 8; ++l) sums[l] += d * aux32[l];
  }
  float sumf = 0;
  for (int l = 0; l < 8; ++l) sumf += sums[l];
  return sumf;
}

inline void unpackK4Scales(const uint8_t* packed, uint8_t* scales8, uint8_t* mins8) {
  for (int j = 0; j < 8; ++j) scaleMinK4(j, packed, &scales8[j], &mins8[j]);
}

float dotQ4_K(int n, const void* vw, const void* va) {
  const BlockQ4_K* x = static_cast<const BlockQ4_K*>(vw);
  const BlockQ8_K* y = static_cast<const BlockQ8_K*>(va);
  float sums[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  float sumf = 0;
  for (int i = 0; i < n / QKK; ++i) {
    int8_t a[QKK];
    const uint8_t* q4 = x[i].qs;
    for (int j = 0; j < QKK / 64; ++j) {
      for (int l = 0; l < 32; ++l) a[j * 64 + l] = (int8_t)(q4[l] & 0xF);
      for (int l = 0; l < 32; ++l) a[j * 64 + 32 + l] = (int8_t)(q4[l] >> 4);
      q4 += 32;
    }
    uint8_t sc8[8], mn8[8];
    unpackK4Scales(x[i].scales, sc8, mn8);
    int sumi = 0;
    for (int j = 0; j < 16; ++j) sumi += y[i].bsums[j] * mn8[j / 2];
    int scale16[16];
    for (int j = 0; j < 16; ++j) scale16[j] = sc8[j / 2];
    int32_t aux32[8];
    laneSums16(a, y[i].qs, scale16, aux32);
    const float d = halfToF32(x[i].d) * y[i].d;
    for (int l = 0; l < 8; ++l) sums[l] += d * aux32[l];
    const float dmin = halfToF32(x[i].dmin) * y[i].d;
    sumf -= dmin * sumi;
  }
  for (int l = 0; l < 8; ++l) sumf += sums[l];
  return sumf;
}

float dotQ5_K(int n, const void* vw, const void* va) {
  const BlockQ5_K* x = static_cast<const BlockQ5_K*>(vw);
  const BlockQ8_K* y = static_cast<const BlockQ8_K*>(va);
  float sums[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  float sumf = 0;
  for (int i = 0; i < n / QKK; ++i) {
    int8_t a[QKK];
    const uint8_t* q4 = x[i].qs;
    const uint8_t* hm = x[i].qh;
    uint8_t m = 1;
    for (int j = 0; j < QKK / 64; ++j) {
      for (int l = 0; l < 32; ++l) a[j * 64 + l] = (int8_t)((q4[l] & 0xF) + (hm[l] & m ? 16 : 0));
      m <<= 1;
      for (int l = 0; l < 32; ++l) a[j * 64 + 32 + l] = (int8_t)((q4[l] >> 4) + (hm[l] & m ? 16 : 0));
      m <<= 1;
      q4 += 32;
    }
    uint8_t sc8[8], mn8[8];
    unpackK4Scales(x[i].scales, sc8, mn8);
    int sumi = 0;
    for (int j = 0; j < 16; ++j) sumi += y[i].bsums[j] * mn8[j / 2];
    int scale16[16];
    for (int j = 0; j < 16; ++j) scale16[j] = sc8[j / 2];
    int32_t aux32[8];
    laneSums16(a, y[i].qs, scale16, aux32);
    const float d = halfToF32(x[i].d) * y[i].d;
    for (int l = 0; l < 8; ++l) sums[l] += d * aux32[l];
    const float dmin = halfToF32(x[i].dmin) * y[i].d;
    sumf -= dmin * sumi;
  }
  for (int l = 0; l < 8; ++l) sumf += sums[l];
  return sumf;
}

float dotQ6_K(int n, const void* vw, const void* va) {
  const BlockQ6_K* x = static_cast<const BlockQ6_K*>(vw);
  const BlockQ8_K* y = static_cast<const BlockQ8_K*>(va);
  float sums[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int i = 0; i < n / QKK; ++i) {
    int8_t a[QKK];
    const uint8_t* q4 = x[i].ql;
    const uint8_t* qh = x[i].qh;
    for (int j = 0; j < QKK; j += 128) {
      for (int l = 0; l < 32; ++l) {
        a[j + l + 0] = (int8_t)((q4[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        a[j + l + 32] = (int8_t)((q4[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        a[j + l + 64] = (int8_t)((q4[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        a[j + l + 96] = (int8_t)((q4[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      }
      q4 += 64;
      qh += 32;
    }
    int scale16[16];
    for (int j = 0; j < 16; ++j) scale16[j] = x[i].scales[j];
    int32_t aux32[8];
    laneSums16(a, y[i].qs, scale16, aux32);
    const float d = halfToF32(x[i].d) * y[i].d;
    for (int l = 0; l < 8; ++l) sums[l] += d * aux32[l];
  }
  float sumf = 0;
  for (int l = 0; l < 8; ++l) sumf += sums[l];
  return sumf;
}

float dotIQ4_XS(int n, const void* vw, const void* va) {
  const BlockIQ4_XS* x = static_cast<const BlockIQ4_XS*>(vw);
  const BlockQ8_K* y = static_cast<const BlockQ8_K*>(va);
  float sumf = 0;
  for (int ibl = 0; ibl < n / QKK; ++ibl) {
    const float d4d8 = halfToF32(x[ibl].d) * y[ibl].d;
    uint16_t h = x[ibl].scales_h;
    const uint8_t* qs = x[ibl].qs;
    const int8_t* q8 = y[ibl].qs;
    for (int ib = 0; ib < 8; ib += 2) {
      const uint8_t ls1 = (x[ibl].scales_l[ib / 2] & 0xf) | ((h << 4) & 0x30);
      const uint8_t ls2 = (x[ibl].scales_l[ib / 2] >> 4) | ((h << 2) & 0x30);
      h >>= 4;
      const float d1 = d4d8 * (ls1 - 32);
      const float d2 = d4d8 * (ls2 - 32);
      int s1 = 0, s2 = 0;
      for (int j = 0; j < 16; ++j) {
        s1 += q8[j] * kIq4nlValues[qs[j] & 0xf];
        s2 += q8[j + 16] * kIq4nlValues[qs[j] >> 4];
      }
      sumf += d1 * (s1 + s2);
      qs += 16;
      q8 += 32;
      s1 = s2 = 0;
      for (int j = 0; j < 16; ++j) {
        s1 += q8[j] * kIq4nlValues[qs[j] & 0xf];
        s2 += q8[j + 16] * kIq4nlValues[qs[j] >> 4];
      }
      sumf += d2 * (s1 + s2);
      qs += 16;
      q8 += 32;
    }
  }
  return sumf;
}

// Float weights: exact products (f16*f16 and bf16*bf16 fit in a float), summed in double.
float dotF32(int n, const void* vw, const void* va) {
  const float* x = static_cast<const float*>(vw);
  const float* y = static_cast<const float*>(va);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += (double)(x[i] * y[i]);
  return (float)sum;
}

float dotF16(int n, const void* vw, const void* va) {
  const uint16_t* x = static_cast<const uint16_t*>(vw);
  const uint16_t* y = static_cast<const uint16_t*>(va);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += (double)(halfToF32(x[i]) * halfToF32(y[i]));
  return (float)sum;
}

float dotBF16(int n, const void* vw, const void* va) {
  const uint16_t* x = static_cast<const uint16_t*>(vw);
  const uint16_t* y = static_cast<const uint16_t*>(va);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += (double)(bf16ToF32(x[i]) * bf16ToF32(y[i]));
  return (float)sum;
}

}  // namespace

VecDotFn genericVecDot(int w) {
  switch (w) {
    case T_F32: return dotF32;
    case T_F16: return dotF16;
    case T_BF16: return dotBF16;
    case T_Q4_0: return dotQ4_0;
    case T_Q4_1: return dotQ4_1;
    case T_Q5_0: return dotQ5_0;
    case T_Q5_1: return dotQ5_1;
    case T_Q8_0: return dotQ8_0;
    case T_Q2_K: return dotQ2_K;
    case T_Q3_K: return dotQ3_K;
    case T_Q4_K: return dotQ4_K;
    case T_Q5_K: return dotQ5_K;
    case T_Q6_K: return dotQ6_K;
    case T_IQ4_NL: return dotIQ4_NL;
    case T_IQ4_XS: return dotIQ4_XS;
    case T_MXFP4: return dotMXFP4;
    default: return nullptr;
  }
}

}  // namespace kq
