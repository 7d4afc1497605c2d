// AVX2 + FMA level of the MoE kernels (compiled with those flags; chosen at run time).
#define KQ_MOE_NS moeavx2
#include "model/moe_ops.inc"

namespace kq {
const MoeOps& avx2MoeOps() { return moeavx2::kMoeOps; }
}  // namespace kq
