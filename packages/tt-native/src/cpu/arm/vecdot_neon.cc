// arm64: NEON kernels are not written yet; the generic kernels serve arm64 (the dispatcher
// reports level "generic" there). This file is the registration point for them.
#include "cpu/kernels.h"

namespace kq {
void fillNeonVecDot(VecDotFn*) {}
}  // namespace kq
