// Generic level of the MoE kernels (plain x86-64 / armv8-a).
#define KQ_MOE_NS moegeneric
#include "model/moe_ops.inc"

namespace kq {
const MoeOps& genericMoeOps() { return moegeneric::kMoeOps; }
}  // namespace kq
