// AVX-512 (F, BW, VL, DQ, VNNI) kernels: the AVX2 kernels with VNNI's vpdpbusd for the u8 x s8
// dots (bit-identical integer results) and EVEX encodings; selected at run time.
#define KQ_ISA_NS avx512
#define KQ_VNNI 1
#include "simd_x86.inc"

namespace kq {
void fillAvx512VecDot(VecDotFn* table) { avx512::fillTable(table); }
DotF32Fn avx512DotF32() { return avx512::dotContract; }
}  // namespace kq
