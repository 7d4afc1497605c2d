// mapFileRange: one byte range of a file memory-mapped as an external ArrayBuffer, for files larger
// than the largest external ArrayBuffer Node accepts (2^32 bytes on Node 20).
#pragma once
#include <napi.h>

#include <cstddef>

namespace kq {
void registerMapFileRangeExports(Napi::Env env, Napi::Object exports);

// Faults every page of a fresh private file mapping in read-only (MADV_POPULATE_READ where the
// kernel has it: shared with the page cache, copy-on-write intact; else WILLNEED and a touch per page).
void populateMapping(void* base, size_t length);
}  // namespace kq
