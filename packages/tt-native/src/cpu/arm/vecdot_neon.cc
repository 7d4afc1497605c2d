// arm64: NEON kernels are not written yet; the generic kernels serve arm64 (the dispatcher
// reports level "generic" there). This file is the registration point for them: a NEON table would
// start from the portable one as the x86 levels do.
#include "cpu/kernels.h"

namespace kq {
KernelSet neonKernels() { return genericKernels(); }
}  // namespace kq
