// AVX2 + FMA + F16C kernels (compiled with -mavx2 -mfma -mf16c; selected at run time).
#define KQ_ISA_NS avx2
#include "cpu/x86/simd_x86.inc"
#define KQ_GEN_NS avx2gen
#include "cpu/portable/dequant.inc"
#include "cpu/portable/vecdot_generic.inc"

namespace kq {
void fillAvx2VecDot(VecDotFn* table, VecDotMultiFn* multi) {
  for (int t = 0; t < kTypeCount; ++t) table[t] = avx2gen::portableVecDot(t);
  avx2::fillTable(table);
  avx2::fillMultiTable(multi);
}
static bool avx2DequantRow(int type, const void* src, float* dst, int64_t k) {
  return avx2::dequantSimd(type, src, dst, k, avx2gen::dequantizeRowImpl);
}
DequantFn avx2Dequant() { return avx2DequantRow; }
SumWordsFn avx2SumWords() { return avx2::sumWordsSimd; }
DotF32Fn avx2DotF32() { return avx2::dotContract; }
}  // namespace kq
