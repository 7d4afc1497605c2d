// AVX-512 (F, BW, VL, DQ, VNNI) kernels: the AVX2 kernels with VNNI's vpdpbusd for the u8 x s8
// dots (bit-identical integer results) and EVEX encodings; selected at run time.
#define KQ_ISA_NS avx512
#define KQ_VNNI 1
#include "cpu/x86/simd_x86.inc"
#include "cpu/x86/simd_avx512.inc"
#define KQ_GEN_NS avx512gen
#include "cpu/portable/dequant.inc"
#include "cpu/portable/vecdot_generic.inc"

namespace kq {
void fillAvx512VecDot(VecDotFn* table, VecDotMultiFn* multi, int* multiRows, VecDotRowsFn* rowsFn, int* weightRows,
                      VecDotBlockFn* blockFn) {
  for (int t = 0; t < kTypeCount; ++t) table[t] = avx512gen::portableVecDot(t);
  avx512::fillTable(table);
  avx512::fillMultiTable(multi);
  avx512::fill512(table, multi, multiRows, rowsFn, weightRows, blockFn);
}
static bool avx512DequantRow(int type, const void* src, float* dst, int64_t k) {
  return avx512::dequantSimd(type, src, dst, k, avx512gen::dequantizeRowImpl);
}
DequantFn avx512Dequant() { return avx512DequantRow; }
DotF32Fn avx512DotF32() { return avx512::dotContract; }
}  // namespace kq
