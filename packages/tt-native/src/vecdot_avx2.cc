// AVX2 + FMA + F16C kernels (compiled with -mavx2 -mfma -mf16c; selected at run time).
#define KQ_ISA_NS avx2
#include "simd_x86.inc"

namespace kq {
void fillAvx2VecDot(VecDotFn* table) { avx2::fillTable(table); }
DotF32Fn avx2DotF32() { return avx2::dotContract; }
}  // namespace kq
