// The portable level of the forward-step kernels (scalar; std::fma for fused multiply-adds).
#define KQ_FWD_NS fwdgeneric
#include "model/forward_ops.inc"

namespace kq {
const ForwardOps& genericForwardOps() { return fwdgeneric::kOps; }
}  // namespace kq
