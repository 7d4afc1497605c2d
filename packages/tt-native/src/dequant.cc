// Bit-exact dequantization (same arithmetic, operation by operation, as ggml's dequantize_row_*).
#include "kernels.h"

namespace kq {
namespace {

void deqQ4_0(const BlockQ4_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = halfToF32(x[i].d);
    for (int j = 0; j < 16; ++j) {
      y[i * 32 + j] = ((x[i].qs[j] & 0x0F) - 8) * d;
      y[i * 32 + j + 16] = ((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void deqQ4_1(const BlockQ4_1* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = halfToF32(x[i].d), m = halfToF32(x[i].m);
    for (int j = 0; j < 16; ++j) {
      y[i * 32 + j] = (x[i].qs[j] & 0x0F) * d + m;
      y[i * 32 + j + 16] = (x[i].qs[j] >> 4) * d + m;
    }
  }
}

void deqQ5_0(const BlockQ5_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = halfToF32(x[i].d);
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, 4);
    for (int j = 0; j < 16; ++j) {
      const uint8_t h0 = ((qh >> j) << 4) & 0x10;
      const uint8_t h1 = (qh >> (j + 12)) & 0x10;
      const int32_t v0 = ((x[i].qs[j] & 0x0F) | h0) - 16;
      const int32_t v1 = ((x[i].qs[j] >> 4) | h1) - 16;
      y[i * 32 + j] = v0 * d;
      y[i * 32 + j + 16] = v1 * d;
    }
  }
}

void deqQ5_1(const BlockQ5_1* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = halfToF32(x[i].d), m = halfToF32(x[i].m);
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, 4);
    for (int j = 0; j < 16; ++j) {
      const uint8_t h0 = ((qh >> j) << 4) & 0x10;
      const uint8_t h1 = (qh >> (j + 12)) & 0x10;
      const int v0 = (x[i].qs[j] & 0x0F) | h0;
      const int v1 = (x[i].qs[j] >> 4) | h1;
      y[i * 32 + j] = v0 * d + m;
      y[i * 32 + j + 16] = v1 * d + m;
    }
  }
}

void deqQ8_0(const BlockQ8_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = halfToF32(x[i].d);
    for (int j = 0; j < 32; ++j) y[i * 32 + j] = x[i].qs[j] * d;
  }
}

void deqQ8_1(const BlockQ8_1* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = halfToF32(x[i].d);
    for (int j = 0; j < 32; ++j) y[i * 32 + j] = x[i].qs[j] * d;
  }
}

void deqQ2_K(const BlockQ2_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = halfToF32(x[i].d), mn = halfToF32(x[i].dmin);
    const uint8_t* q = x[i].qs;
    int is = 0;
    for (int n = 0; n < QKK; n += 128) {
      int shift = 0;
      for (int j = 0; j < 4; ++j) {
        uint8_t sc = x[i].scales[is++];
        float dl = d * (sc & 0xF), ml = mn * (sc >> 4);
        for (int l = 0; l < 16; ++l) *y++ = dl * (int8_t)((q[l] >> shift) & 3) - ml;
        sc = x[i].scales[is++];
        dl = d * (sc & 0xF);
        ml = mn * (sc >> 4);
        for (int l = 0; l < 16; ++l) *y++ = dl * (int8_t)((q[l + 16] >> shift) & 3) - ml;
        shift += 2;
      }
      q += 32;
    }
  }
}

// Q3_K's 12 bytes of packed 6-bit scales -> 16 signed bytes (before the -32 offset).
void unpackQ3Scales(const uint8_t* packed, int8_t* out) {
  const uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f;
  uint32_t aux[4];
  std::memcpy(aux, packed, 12);
  const uint32_t tmp = aux[2];
  aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
  aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
  aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
  aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
  std::memcpy(out, aux, 16);
}

void deqQ3_K(const BlockQ3_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float dall = halfToF32(x[i].d);
    const uint8_t* q = x[i].qs;
    const uint8_t* hm = x[i].hmask;
    uint8_t m = 1;
    int8_t scales[16];
    unpackQ3Scales(x[i].scales, scales);
    int is = 0;
    for (int n = 0; n < QKK; n += 128) {
      int shift = 0;
      for (int j = 0; j < 4; ++j) {
        float dl = dall * (scales[is++] - 32);
        for (int l = 0; l < 16; ++l)
          *y++ = dl * ((int8_t)((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
        dl = dall * (scales[is++] - 32);
        for (int l = 0; l < 16; ++l)
          *y++ = dl * ((int8_t)((q[l + 16] >> shift) & 3) - ((hm[l + 16] & m) ? 0 : 4));
        shift += 2;
        m <<= 1;
      }
      q += 32;
    }
  }
}

void deqQ4_K(const BlockQ4_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = halfToF32(x[i].d), mn = halfToF32(x[i].dmin);
    const uint8_t* q = x[i].qs;
    int is = 0;
    uint8_t sc, m;
    for (int j = 0; j < QKK; j += 64) {
      scaleMinK4(is + 0, x[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = mn * m;
      scaleMinK4(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = mn * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
      q += 32;
      is += 2;
    }
  }
}

void deqQ5_K(const BlockQ5_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = halfToF32(x[i].d), mn = halfToF32(x[i].dmin);
    const uint8_t* ql = x[i].qs;
    const uint8_t* qh = x[i].qh;
    int is = 0;
    uint8_t sc, m, u1 = 1, u2 = 2;
    for (int j = 0; j < QKK; j += 64) {
      scaleMinK4(is + 0, x[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = mn * m;
      scaleMinK4(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = mn * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
      ql += 32;
      is += 2;
      u1 <<= 2;
      u2 <<= 2;
    }
  }
}

void deqQ6_K(const BlockQ6_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = halfToF32(x[i].d);
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* sc = x[i].scales;
    for (int n = 0; n < QKK; n += 128) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int8_t q1 = (int8_t)((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int8_t q2 = (int8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int8_t q3 = (int8_t)((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int8_t q4 = (int8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l + 0] = d * sc[is + 0] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
      y += 128;
      ql += 64;
      qh += 32;
      sc += 8;
    }
  }
}

void deqQ8_K(const BlockQ8_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i)
    for (int j = 0; j < QKK; ++j) *y++ = x[i].d * x[i].qs[j];
}

void deqIQ4_NL(const BlockIQ4_NL* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = halfToF32(x[i].d);
    for (int j = 0; j < 16; ++j) {
      y[i * 32 + j] = d * kIq4nlValues[x[i].qs[j] & 0xf];
      y[i * 32 + j + 16] = d * kIq4nlValues[x[i].qs[j] >> 4];
    }
  }
}

void deqIQ4_XS(const BlockIQ4_XS* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = halfToF32(x[i].d);
    const uint8_t* qs = x[i].qs;
    for (int ib = 0; ib < 8; ++ib) {
      const int ls = ((x[i].scales_l[ib / 2] >> 4 * (ib % 2)) & 0xf) | (((x[i].scales_h >> 2 * ib) & 3) << 4);
      const float dl = d * (ls - 32);
      for (int j = 0; j < 16; ++j) {
        y[j] = dl * kIq4nlValues[qs[j] & 0xf];
        y[j + 16] = dl * kIq4nlValues[qs[j] >> 4];
      }
      y += 32;
      qs += 16;
    }
  }
}

void deqMXFP4(const BlockMXFP4* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = e8m0ToF32Half(x[i].e);
    for (int j = 0; j < 16; ++j) {
      y[i * 32 + j] = kMxfp4Values[x[i].qs[j] & 0xf] * d;
      y[i * 32 + j + 16] = kMxfp4Values[x[i].qs[j] >> 4] * d;
    }
  }
}

}  // namespace

bool dequantSupported(int type) {
  switch (type) {
    case T_F32: case T_F16: case T_BF16: case T_Q4_0: case T_Q4_1: case T_Q5_0: case T_Q5_1:
    case T_Q8_0: case T_Q8_1: case T_Q2_K: case T_Q3_K: case T_Q4_K: case T_Q5_K: case T_Q6_K:
    case T_Q8_K: case T_IQ4_NL: case T_IQ4_XS: case T_MXFP4:
      return true;
    default:
      return false;
  }
}

bool dequantizeRow(int type, const void* src, float* dst, int64_t k) {
  const TypeInfo ti = typeInfo(type);
  if (ti.blockSize == 0 || k % ti.blockSize != 0) return false;
  const int64_t nb = k / ti.blockSize;
  switch (type) {
    case T_F32: std::memcpy(dst, src, (size_t)k * 4); return true;
    case T_F16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < k; ++i) dst[i] = halfToF32(s[i]);
      return true;
    }
    case T_BF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < k; ++i) dst[i] = bf16ToF32(s[i]);
      return true;
    }
    case T_Q4_0: deqQ4_0(static_cast<const BlockQ4_0*>(src), dst, nb); return true;
    case T_Q4_1: deqQ4_1(static_cast<const BlockQ4_1*>(src), dst, nb); return true;
    case T_Q5_0: deqQ5_0(static_cast<const BlockQ5_0*>(src), dst, nb); return true;
    case T_Q5_1: deqQ5_1(static_cast<const BlockQ5_1*>(src), dst, nb); return true;
    case T_Q8_0: deqQ8_0(static_cast<const BlockQ8_0*>(src), dst, nb); return true;
    case T_Q8_1: deqQ8_1(static_cast<const BlockQ8_1*>(src), dst, nb); return true;
    case T_Q2_K: deqQ2_K(static_cast<const BlockQ2_K*>(src), dst, nb); return true;
    case T_Q3_K: deqQ3_K(static_cast<const BlockQ3_K*>(src), dst, nb); return true;
    case T_Q4_K: deqQ4_K(static_cast<const BlockQ4_K*>(src), dst, nb); return true;
    case T_Q5_K: deqQ5_K(static_cast<const BlockQ5_K*>(src), dst, nb); return true;
    case T_Q6_K: deqQ6_K(static_cast<const BlockQ6_K*>(src), dst, nb); return true;
    case T_Q8_K: deqQ8_K(static_cast<const BlockQ8_K*>(src), dst, nb); return true;
    case T_IQ4_NL: deqIQ4_NL(static_cast<const BlockIQ4_NL*>(src), dst, nb); return true;
    case T_IQ4_XS: deqIQ4_XS(static_cast<const BlockIQ4_XS*>(src), dst, nb); return true;
    case T_MXFP4: deqMXFP4(static_cast<const BlockMXFP4*>(src), dst, nb); return true;
    default: return false;
  }
}

}  // namespace kq
