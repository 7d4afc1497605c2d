// mapFileRange: one byte range of a file memory-mapped as an external ArrayBuffer, for files larger
// than the largest external ArrayBuffer Node accepts (2^32 bytes on Node 20).
#pragma once
#include <napi.h>

namespace kq {
void registerMapFileRangeExports(Napi::Env env, Napi::Object exports);
}  // namespace kq
