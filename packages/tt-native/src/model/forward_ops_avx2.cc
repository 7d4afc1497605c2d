// AVX2 + FMA + F16C level of the forward-step kernels (compiled with those flags; chosen at run time).
#define KQ_FWD_NS fwdavx2
#include "model/forward_ops.inc"

namespace kq {
const ForwardOps& avx2ForwardOps() { return fwdavx2::kOps; }
}  // namespace kq
