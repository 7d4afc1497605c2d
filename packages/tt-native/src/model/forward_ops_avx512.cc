// AVX-512 level of the forward-step kernels: the AVX2 level's bodies compiled with AVX-512 flags, plus the
// 512-bit gated delta rule (forward_ops.inc, under __AVX512F__); chosen at run time.
#define KQ_FWD_NS fwdavx512
#include "model/forward_ops.inc"

namespace kq {
const ForwardOps& avx512ForwardOps() { return fwdavx512::kOps; }
}  // namespace kq
