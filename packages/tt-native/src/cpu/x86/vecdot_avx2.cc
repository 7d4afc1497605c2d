// AVX2 + FMA + F16C kernels (compiled with -mavx2 -mfma -mf16c; selected at run time).
#define KQ_ISA_NS avx2
#include "cpu/x86/simd_x86.inc"
#define KQ_GEN_NS avx2gen
#include "cpu/portable/dequant.inc"
#include "cpu/portable/vecdot_generic.inc"

namespace kq {
namespace {
// The portable kernels built for AVX2, then the hand-written ones.
constexpr CpuTypeTraitsTable makeAvx2TypeTraits() {
  CpuTypeTraitsTable t = avx2gen::portableTypeTraits();
  avx2::setX86TypeTraits(t);
  return t;
}
constexpr CpuTypeTraitsTable kAvx2TypeTraits = makeAvx2TypeTraits();
}  // namespace

KernelSet avx2Kernels() { return KernelSet{kAvx2TypeTraits.data(), avx2::vec_dot_f32_contract, avx2::sumWordsSimd}; }
}  // namespace kq
