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
#include <functional>
#include <string>
#include <thread>

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

size_t indexArg(const Napi::CallbackInfo& info, size_t i, const char* name, const char* op = "mapFileRange") {
  if (info.Length() <= i || !info[i].IsNumber())
    throw Napi::TypeError::New(info.Env(), std::string(op) + ": " + name + " must be a number");
  const double value = info[i].As<Napi::Number>().DoubleValue();
  if (!(value >= 0) || value != std::floor(value) || value > 9007199254740991.0)
    throw Napi::RangeError::New(info.Env(), std::string(op) + ": " + name + " must be a non-negative integer");
  return (size_t)value;
}

// The arguments (path, offset, length) of `op` checked and the file opened read-only: the descriptor, or a
// thrown error naming the path (not a regular file, bytes past its end, a length outside [1, 2^32]).
struct OpenRange {
  std::string path;
  size_t offset, length;
  int fd;
};
OpenRange openRange(const Napi::CallbackInfo& info, const char* op) {
  Napi::Env env = info.Env();
  const std::string name(op);
  if (info.Length() < 1 || !info[0].IsString()) throw Napi::TypeError::New(env, name + ": path must be a string");
  OpenRange r{info[0].As<Napi::String>().Utf8Value(), indexArg(info, 1, "offset", op), indexArg(info, 2, "length", op), -1};
  if (r.length == 0 || (double)r.length > kMaxRangeBytes)
    throw Napi::RangeError::New(env, name + ": length " + std::to_string(r.length) + " is not in [1, 4294967296]");
  r.fd = ::open(r.path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // a FIFO must not block the open
  if (r.fd < 0) throw Napi::Error::New(env, name + ": cannot open " + r.path + ": " + std::strerror(errno));
  struct stat st;
  if (::fstat(r.fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(r.fd);
    throw Napi::Error::New(env, name + ": " + r.path + " is not a regular file");
  }
  if (r.offset > (size_t)st.st_size || r.length > (size_t)st.st_size - r.offset) {
    ::close(r.fd);
    throw Napi::RangeError::New(env, name + ": bytes [" + std::to_string(r.offset) + ", " + std::to_string(r.offset + r.length) +
                                         ") lie past the end of " + r.path + " (" + std::to_string((long long)st.st_size) + " B)");
  }
  return r;
}

// An external ArrayBuffer of `length` bytes at `data` inside the mapping [base, base + mapped), which its finalizer
// unmaps (mapFileRange's file mapping, readFileRange's anonymous memory).
Napi::ArrayBuffer rangeBuffer(Napi::Env env, void* base, size_t mapped, uint8_t* data, size_t length) {
  RangeMapping* mapping = new RangeMapping{base, mapped};
  return Napi::ArrayBuffer::New(env, data, length, [](Napi::Env, void*, RangeMapping* m) {
    ::munmap(m->base, m->length);
    delete m;
  }, mapping);
}

Napi::Value MapFileRange(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const OpenRange r = openRange(info, "mapFileRange");
  const bool populate = info.Length() > 3 && info[3].ToBoolean().Value();
  const size_t page = (size_t)::sysconf(_SC_PAGESIZE);
  const size_t start = r.offset - r.offset % page;
  const size_t mapped = r.length + (r.offset - start);
  void* base = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE, r.fd, (off_t)start);
  const int mapError = errno;
  ::close(r.fd);
  if (base == MAP_FAILED) throw Napi::Error::New(env, "mapFileRange: mmap of " + r.path + " failed: " + std::strerror(mapError));
  if (populate) populateMapping(base, mapped);
  return rangeBuffer(env, base, mapped, static_cast<uint8_t*>(base) + (r.offset - start), r.length);
}

// readFileRange(path, offset, length): bytes [offset, offset + length) of a file read into fresh anonymous memory
// (private to this process, not the page cache's) that the kernel is asked to back with transparent huge pages
// (madvise MADV_HUGEPAGE): a decode step streams its weights through far fewer TLB entries and physically contiguous
// 2 MiB runs. Returns { buffer, hugePages } (hugePages: the advice was taken). The buffer starts at the same offset
// within a page as `offset` does (views keep the file's alignment); the finalizer unmaps it. A read error or a short
// file is an Error naming the path and the byte; nothing is left mapped. On the Zen 4 VM of docs/benchmarks/engine.md
// the two readers loaded the 0.8B Q8_0 file in 0.3-1.2 s where one took 1.4-2.5.
Napi::Value ReadFileRange(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const OpenRange r = openRange(info, "readFileRange");
  const size_t page = (size_t)::sysconf(_SC_PAGESIZE);
  const size_t lead = r.offset % page;
  const size_t mapped = r.length + lead;
  void* base = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) {
    const int error = errno;
    ::close(r.fd);
    throw Napi::Error::New(env, "readFileRange: cannot allocate " + std::to_string(mapped) + " bytes: " + std::strerror(error));
  }
  bool huge = false;
#if defined(MADV_HUGEPAGE)
  huge = ::madvise(base, mapped, MADV_HUGEPAGE) == 0;
#endif
  uint8_t* dst = static_cast<uint8_t*>(base) + lead;
  // two readers over the halves: the huge-page faults (zeroing, and compaction where memory is fragmented) take
  // most of the time, and they run side by side
  struct Part {
    size_t begin, end, done;
    int error;  // errno, or -1 for an early end of file
  };
  const size_t half = r.length / 2 / page * page;
  Part parts[2] = {{0, half, 0, 0}, {half, r.length, half, 0}};
  auto readPart = [&](Part& p) {
    p.done = p.begin;
    while (p.done < p.end) {
      const ssize_t n = ::pread(r.fd, dst + p.done, p.end - p.done, (off_t)(r.offset + p.done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        p.error = n < 0 ? errno : -1;
        return;
      }
      p.done += (size_t)n;
    }
  };
  if (half > 0) {
    std::thread second(readPart, std::ref(parts[1]));
    readPart(parts[0]);
    second.join();
  } else {
    readPart(parts[1]);
  }
  ::close(r.fd);
  for (const Part& p : parts) {
    if (p.error == 0) continue;
    ::munmap(base, mapped);
    const std::string why = p.error < 0 ? "the file ended early" : std::strerror(p.error);
    throw Napi::Error::New(env, "readFileRange: reading " + r.path + " at byte " + std::to_string(r.offset + p.done) + " failed: " + why);
  }
  Napi::Object result = Napi::Object::New(env);
  result.Set("buffer", rangeBuffer(env, base, mapped, dst, r.length));
  result.Set("hugePages", Napi::Boolean::New(env, huge));
  return result;
}

}  // namespace

void registerMapFileRangeExports(Napi::Env env, Napi::Object exports) {
  exports.Set("mapFileRange", Napi::Function::New(env, MapFileRange));
  exports.Set("readFileRange", Napi::Function::New(env, ReadFileRange));
}

}  // namespace kq
