// AVX-512 (F, BW, VL, DQ, VNNI) kernels: the AVX2 kernels with VNNI's vpdpbusd for the u8 x s8
// dots (bit-identical integer results) and EVEX encodings, then the 512-bit ones (zmm::); selected
// at run time.
#define KQ_ISA_NS avx512
#define KQ_VNNI 1
#include "cpu/x86/simd_x86.inc"
#include "cpu/x86/simd_avx512.inc"
#define KQ_GEN_NS avx512gen
#include "cpu/portable/dequant.inc"
#include "cpu/portable/vecdot_generic.inc"

namespace kq {
namespace {
constexpr CpuTypeTraitsTable makeAvx512TypeTraits() {
  CpuTypeTraitsTable t = avx512gen::portableTypeTraits();
  avx512::setX86TypeTraits(t);
  avx512::zmm::setZmmTypeTraits(t);
  return t;
}
constexpr CpuTypeTraitsTable kAvx512TypeTraits = makeAvx512TypeTraits();
}  // namespace

// sumWords is the AVX2 level's (dispatch.cc): the probe is memory-bound.
KernelSet avx512Kernels() { return KernelSet{kAvx512TypeTraits.data(), avx512::vec_dot_f32_contract, nullptr}; }
}  // namespace kq
