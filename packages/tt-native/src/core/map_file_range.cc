// mapFileRange(path, offset, length, populate): bytes [offset, offset + length) of a file mapped
// copy-on-write (the pages are the page cache's, writes through a view stay private) as an external
// ArrayBuffer of exactly `length` bytes. The mapping starts at the page boundary at or below
// `offset`; the finalizer unmaps it. With `populate`, every page is faulted in before this returns.
#include "core/map_file_range.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

namespace kq {

void populateMapping(void* base, size_t length) {
#if defined(MADV_POPULATE_READ)
  if (::madvise(base, length, MADV_POPULATE_READ) == 0) return;
#endif
  ::madvise(base, length, MADV_WILLNEED);
  const size_t page = (size_t)::sysconf(_SC_PAGESIZE);
  volatile const uint8_t* p = static_cast<const uint8_t*>(base);
  uint8_t sink = 0;
  for (size_t i = 0; i < length; i += page) sink ^= p[i];
  (void)sink;
}

namespace {

struct RangeMapping {
  void* base;  // page-aligned start of the mapping
  size_t length;  // bytes mapped from `base`
};

// The largest external ArrayBuffer Node 20 creates (napi_create_external_arraybuffer refuses more).
constexpr double kMaxRangeBytes = 4294967296.0;

size_t indexArg(const Napi::CallbackInfo& info, size_t i, const char* name) {
  if (info.Length() <= i || !info[i].IsNumber())
    throw Napi::TypeError::New(info.Env(), std::string("mapFileRange: ") + name + " must be a number");
  const double value = info[i].As<Napi::Number>().DoubleValue();
  if (!(value >= 0) || value != std::floor(value) || value > 9007199254740991.0)
    throw Napi::RangeError::New(info.Env(), std::string("mapFileRange: ") + name + " must be a non-negative integer");
  return (size_t)value;
}

Napi::Value MapFileRange(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsString()) throw Napi::TypeError::New(env, "mapFileRange: path must be a string");
  const std::string path = info[0].As<Napi::String>().Utf8Value();
  const size_t offset = indexArg(info, 1, "offset");
  const size_t length = indexArg(info, 2, "length");
  const bool populate = info.Length() > 3 && info[3].ToBoolean().Value();
  if (length == 0 || (double)length > kMaxRangeBytes)
    throw Napi::RangeError::New(env, "mapFileRange: length " + std::to_string(length) + " is not in [1, 4294967296]");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // a FIFO must not block the open
  if (fd < 0) throw Napi::Error::New(env, "mapFileRange: cannot open " + path + ": " + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Napi::Error::New(env, "mapFileRange: " + path + " is not a regular file");
  }
  if (offset > (size_t)st.st_size || length > (size_t)st.st_size - offset) {
    ::close(fd);
    throw Napi::RangeError::New(env, "mapFileRange: bytes [" + std::to_string(offset) + ", " + std::to_string(offset + length) +
                                         ") lie past the end of " + path + " (" + std::to_string((long long)st.st_size) + " B)");
  }
  const size_t page = (size_t)::sysconf(_SC_PAGESIZE);
  const size_t start = offset - offset % page;
  const size_t mapped = length + (offset - start);
  void* base = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, (off_t)start);
  const int mapError = errno;
  ::close(fd);
  if (base == MAP_FAILED) throw Napi::Error::New(env, "mapFileRange: mmap of " + path + " failed: " + std::strerror(mapError));
  if (populate) populateMapping(base, mapped);
  RangeMapping* mapping = new RangeMapping{base, mapped};
  return Napi::ArrayBuffer::New(env, static_cast<uint8_t*>(base) + (offset - start), length, [](Napi::Env, void*, RangeMapping* m) {
    ::munmap(m->base, m->length);
    delete m;
  }, mapping);
}

}  // namespace

void registerMapFileRangeExports(Napi::Env env, Napi::Object exports) {
  exports.Set("mapFileRange", Napi::Function::New(env, MapFileRange));
}

}  // namespace kq
