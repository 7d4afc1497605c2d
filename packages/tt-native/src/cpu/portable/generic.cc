// The portable level: generic dot kernels and dequantizers compiled for the baseline ISA.
#define KQ_GEN_NS portable
#include "cpu/portable/dequant.inc"
#include "cpu/portable/vecdot_generic.inc"

namespace kq {
namespace {
float dotF32Generic(int n, const float* x, const float* w) {
  float s = 0;
  for (int i = 0; i < n; ++i) s += x[i] * w[i];
  return s;
}

uint64_t sumWordsGeneric(const uint8_t* p, size_t words) {
  uint64_t a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  size_t i = 0;
  for (; i + 8 <= words; i += 8) {
    uint64_t v[8];
    std::memcpy(v, p + 8 * i, 64);
    for (int j = 0; j < 8; ++j) a[j] += v[j];
  }
  for (; i < words; ++i) {
    uint64_t v;
    std::memcpy(&v, p + 8 * i, 8);
    a[0] += v;
  }
  return a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
}

constexpr CpuTypeTraitsTable kGenericTypeTraits = portable::portableTypeTraits();
}  // namespace

KernelSet genericKernels() { return KernelSet{kGenericTypeTraits.data(), dotF32Generic, sumWordsGeneric}; }
}  // namespace kq
