// The portable level: generic dot kernels and dequantizers compiled for the baseline ISA.
#define KQ_GEN_NS portable
#include "cpu/portable/dequant.inc"
#include "cpu/portable/vecdot_generic.inc"

namespace kq {
bool dequantSupported(int type) { return portable::dequantSupportedImpl(type); }
bool dequantizeRow(int type, const void* src, float* dst, int64_t k) {
  return portable::dequantizeRowImpl(type, src, dst, k);
}
VecDotFn genericVecDot(int weightType) { return portable::portableVecDot(weightType); }
}  // namespace kq
