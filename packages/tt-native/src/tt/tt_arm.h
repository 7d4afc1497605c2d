// The Tenstorrent TT-Metal arm: registration point. Built only with -DKEEPQUANT_TT=ON.
#pragma once

#include <string>

namespace kq {

struct TtStatus {
  bool built;
  bool loaded;
  std::string reason;  // why it did not load (empty when loaded)
};

TtStatus ttStatus();

}  // namespace kq
