#include "tt/tt_arm.h"

namespace kq {

TtStatus ttStatus() {
#if defined(KEEPQUANT_WITH_TT)
  // Built against tt-metal, but the device provider (MatmulBTQuantGrouped kernels, device
  // discovery, residency) is not written yet: see src/tt/README.md and docs/usage/tt-native.md.
  return TtStatus{true, false, "built with KEEPQUANT_TT=ON but no device kernels are compiled in yet"};
#else
  return TtStatus{false, false,
                  "not built: the addon was compiled without KEEPQUANT_TT=ON (needs a tt-metal install)"};
#endif
}

}  // namespace kq
