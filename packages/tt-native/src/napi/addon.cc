// Node-API surface of the keepquant native addon. Mirrored by src/native-types.ts.
#include <napi.h>

#include <string>
#include <vector>

#include "cpu/dispatch.h"
#include "cpu/kernels.h"
#include "core/map_file_range.h"
#include "cpu/matmul.h"
#include "cpu/tuning.h"
#include "core/profile.h"
#include "core/threadpool.h"
#include "model/forward_ops.h"
#include "tt/tt_arm.h"

namespace kq {
void registerModelExports(Napi::Env env, Napi::Object exports);
void registerVisionExports(Napi::Env env, Napi::Object exports);
}

namespace {

// Bump when any exported function's signature or semantics change; checked by the TS loader.
constexpr int kAbiVersion = 11;

struct Bytes {
  const uint8_t* data;
  size_t length;
};

Bytes bytesArg(const Napi::CallbackInfo& info, size_t i, const char* name) {
  if (i >= info.Length() || !info[i].IsTypedArray())
    throw Napi::TypeError::New(info.Env(), std::string(name) + " must be a typed array");
  Napi::TypedArray t = info[i].As<Napi::TypedArray>();
  Napi::ArrayBuffer ab = t.ArrayBuffer();
  return Bytes{static_cast<const uint8_t*>(ab.Data()) + t.ByteOffset(), t.ByteLength()};
}

Napi::Float32Array f32Arg(const Napi::CallbackInfo& info, size_t i, const char* name) {
  if (i >= info.Length() || !info[i].IsTypedArray() ||
      info[i].As<Napi::TypedArray>().TypedArrayType() != napi_float32_array)
    throw Napi::TypeError::New(info.Env(), std::string(name) + " must be a Float32Array");
  return info[i].As<Napi::Float32Array>();
}

int64_t intArg(const Napi::CallbackInfo& info, size_t i, const char* name, int64_t min) {
  if (i >= info.Length() || !info[i].IsNumber())
    throw Napi::TypeError::New(info.Env(), std::string(name) + " must be a number");
  const double v = info[i].As<Napi::Number>().DoubleValue();
  if (v != (double)(int64_t)v || v < (double)min)
    throw Napi::RangeError::New(info.Env(), std::string(name) + " must be an integer >= " + std::to_string(min));
  return (int64_t)v;
}

std::string str(int64_t v) { return std::to_string(v); }

int typeArg(const Napi::CallbackInfo& info, size_t i) {
  const int64_t t = intArg(info, i, "type", 0);
  if (t >= kq::kTypeCount || kq::typeTraits((int)t).blockSize == 0)
    throw Napi::RangeError::New(info.Env(), "ggml type id " + str(t) + " is not supported by the native arm");
  return (int)t;
}

void checkK(Napi::Env env, int type, int64_t k) {
  const int bs = kq::typeTraits(type).blockSize;
  if (k % bs != 0) throw Napi::RangeError::New(env, "K=" + str(k) + " is not a multiple of the block size " + str(bs));
}

// ---- info -----------------------------------------------------------------------------------

Napi::Value AbiVersion(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), kAbiVersion); }

Napi::Value BuildInfo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object o = Napi::Object::New(env);
  o.Set("abiVersion", kAbiVersion);
#if defined(__clang__)
  o.Set("compiler", std::string("clang ") + __clang_version__);
#elif defined(__GNUC__)
  o.Set("compiler", std::string("gcc ") + __VERSION__);
#else
  o.Set("compiler", "unknown");
#endif
#if defined(KEEPQUANT_X86)
  o.Set("arch", "x64");
#elif defined(KEEPQUANT_ARM64)
  o.Set("arch", "arm64");
#else
  o.Set("arch", "other");
#endif
  Napi::Array levels = Napi::Array::New(env);
  uint32_t idx = 0;
  for (kq::IsaLevel l : kq::availableIsaLevels()) levels.Set(idx++, kq::isaName(l));
  o.Set("isaAvailable", levels);
  o.Set("isaBest", kq::isaName(kq::bestIsaLevel()));
  const kq::TtStatus tt = kq::ttStatus();
  Napi::Object t = Napi::Object::New(env);
  t.Set("built", tt.built);
  t.Set("loaded", tt.loaded);
  t.Set("reason", tt.reason);
  o.Set("tt", t);
  return o;
}

// kernelMenu(): per ISA level this CPU and build run (buildInfo().isaAvailable, in that order), read from
// that level's kernel table (CpuTypeTraits): the weight types with decode row kernels (vec_dot_rows, what a
// one-row matmul dispatches to; `weightRows` and `prefetch` act only there) and with the block kernels'
// register form (vec_dot_block_regs, what batchKernel / prefillKernel = 1 dispatch to). Ascending type ids:
// [{ isa, rows: [type], registers: [type] }]. The decode tuner times only what this lists.
Napi::Value KernelMenu(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Array out = Napi::Array::New(env);
  uint32_t idx = 0;
  for (kq::IsaLevel l : kq::availableIsaLevels()) {
    const kq::KernelSet& set = kq::kernelsAt(l);
    Napi::Array rows = Napi::Array::New(env);
    Napi::Array registers = Napi::Array::New(env);
    uint32_t nRows = 0, nRegisters = 0;
    for (int t = 0; t < kq::kTypeCount; ++t) {
      if (set.type[t].vec_dot_rows) rows.Set(nRows++, t);
      if (set.type[t].vec_dot_block_regs) registers.Set(nRegisters++, t);
    }
    Napi::Object o = Napi::Object::New(env);
    o.Set("isa", kq::isaName(l));
    o.Set("rows", rows);
    o.Set("registers", registers);
    out.Set(idx++, o);
  }
  return out;
}

Napi::Value GetIsa(const Napi::CallbackInfo& info) {
  return Napi::String::New(info.Env(), kq::isaName(kq::currentIsaLevel()));
}

Napi::Value SetIsa(const Napi::CallbackInfo& info) {
  if (info.Length() < 1 || !info[0].IsString()) throw Napi::TypeError::New(info.Env(), "level must be a string");
  const std::string err = kq::selectIsaLevel(info[0].As<Napi::String>().Utf8Value());
  if (!err.empty()) throw Napi::Error::New(info.Env(), err);
  return info.Env().Undefined();
}

Napi::Value SetThreads(const Napi::CallbackInfo& info) {
  kq::setThreadCount((int)intArg(info, 0, "threads", 0));
  return info.Env().Undefined();
}

Napi::Value GetThreads(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), kq::threadCount()); }

Napi::Value HardwareThreads(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), kq::hardwareThreads());
}

// ---- the types this arm supports (its per-type table and the current level's kernels) -----------

// The activation encoding of a matmul against `type`, -1 when the current level has no dot kernel.
int llamaActType(int type) {
  if (kq::typeTraits(type).blockSize == 0 || kq::kernels().type[type].vec_dot == nullptr) return -1;
  return kq::typeTraits(type).vecDotType;
}

// True when quantizeActivations encodes to `type` (an activation quantizer exists).
bool isActivationEncoding(int type) {
  return kq::typeTraits(type).blockSize != 0 && kq::kernels().type[type].from_float != nullptr;
}

Napi::Value VecDotType(const Napi::CallbackInfo& info) {
  const int64_t t = intArg(info, 0, "type", 0);
  return Napi::Number::New(info.Env(), t < kq::kTypeCount ? llamaActType((int)t) : -1);
}

Napi::Value DequantSupported(const Napi::CallbackInfo& info) {
  const int64_t t = intArg(info, 0, "type", 0);
  return Napi::Boolean::New(info.Env(), t < kq::kTypeCount && kq::dequantSupported((int)t));
}

// supportedTypes(): one entry per type of the arm's table, ascending ids, with the current level's
// kernels: { type, name, blockSize, typeSize, vecDotType (the table's; -1 none), registered,
// dequantize, vecDot, activation }.
Napi::Value SupportedTypes(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Array out = Napi::Array::New(env);
  uint32_t idx = 0;
  for (int t = 0; t < kq::kTypeCount; ++t) {
    const kq::TypeTraits& tt = kq::typeTraits(t);
    if (tt.blockSize == 0) continue;
    Napi::Object o = Napi::Object::New(env);
    o.Set("type", t);
    o.Set("name", tt.name);
    o.Set("blockSize", tt.blockSize);
    o.Set("typeSize", tt.typeSize);
    o.Set("vecDotType", tt.vecDotType);
    o.Set("registered", tt.registered);
    o.Set("dequantize", kq::dequantSupported(t));
    o.Set("vecDot", llamaActType(t) >= 0);
    o.Set("activation", isActivationEncoding(t));
    out.Set(idx++, o);
  }
  return out;
}

// ---- dequantize -----------------------------------------------------------------------------

// dequantizeRows(type, src, dst, rows, roundBf16)
Napi::Value DequantizeRows(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const int type = typeArg(info, 0);
  const Bytes src = bytesArg(info, 1, "src");
  Napi::Float32Array dst = f32Arg(info, 2, "dst");
  const int64_t rows = intArg(info, 3, "rows", 1);
  const bool round = info.Length() > 4 && info[4].ToBoolean().Value();
  if (!kq::dequantSupported(type)) throw Napi::RangeError::New(env, "dequantize: type " + str(type) + " is not supported");
  const int64_t total = (int64_t)dst.ElementLength();
  if (total % rows != 0) throw Napi::RangeError::New(env, "dst length " + str(total) + " is not rows * K");
  int64_t k = total / rows;
  checkK(env, type, k);
  int64_t r = rows;
  // One long row: split it into segments so the pool can share it (blocks are independent).
  const int64_t bs = kq::typeTraits(type).blockSize;
  if (r == 1 && k >= bs * 256 && (k / bs) % 64 == 0) {
    r = 64;
    k = k / 64;
  }
  const size_t need = kq::rowBytes(type, k) * (size_t)r;
  if (src.length < need)
    throw Napi::RangeError::New(env, "src holds " + str((int64_t)src.length) + " bytes, need " + str((int64_t)need));
  kq::dequantizeRows(type, src.data, r, k, dst.Data(), round);
  return env.Undefined();
}

// quantizeActivations(actType, x, dst): one or more rows of K (dst sized rows * actRowBytes)
Napi::Value QuantizeActivations(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const int act = typeArg(info, 0);
  Napi::Float32Array x = f32Arg(info, 1, "x");
  const Bytes dst = bytesArg(info, 2, "dst");
  const int64_t rows = intArg(info, 3, "rows", 1);
  if (!isActivationEncoding(act))
    throw Napi::RangeError::New(env, "type " + str(act) + " is not an activation encoding");
  const int64_t total = (int64_t)x.ElementLength();
  if (total % rows != 0) throw Napi::RangeError::New(env, "x length is not rows * K");
  const int64_t k = total / rows;
  checkK(env, act, k);
  const size_t rb = kq::actRowBytes(act, k);
  if (dst.length < rb * (size_t)rows) throw Napi::RangeError::New(env, "dst is too small");
  for (int64_t r = 0; r < rows; ++r)
    kq::quantizeActRow(act, x.Data() + r * k, const_cast<uint8_t*>(dst.data) + r * rb, k);
  return env.Undefined();
}

// ---- matmuls --------------------------------------------------------------------------------

struct LlamaArgs {
  int type;
  const uint8_t* w;
  int64_t n, k, m;
  const float* x;
  float* y;
};

// The llama-numerics matmuls' arguments, checked: (type, w, n, k, x) at 0 .. 4, y at `yAt`, M at `mAt` (when
// `mOptional`, absent or undefined is 1 and M is at most kTimedMaxRows). `op` names the call in errors.
LlamaArgs parseLlamaArgs(const Napi::CallbackInfo& info, const char* op, int yAt, int mAt, bool mOptional) {
  Napi::Env env = info.Env();
  LlamaArgs a;
  a.type = typeArg(info, 0);
  const Bytes w = bytesArg(info, 1, "weight");
  a.n = intArg(info, 2, "N", 1);
  a.k = intArg(info, 3, "K", 1);
  Napi::Float32Array x = f32Arg(info, 4, "x");
  a.m = 1;
  if (!mOptional || (info.Length() > (size_t)mAt && !info[mAt].IsUndefined())) a.m = intArg(info, mAt, "M", 1);
  if (mOptional && a.m > kq::kTimedMaxRows)
    throw Napi::RangeError::New(env, std::string(op) + ": M must be 1 .. " + str(kq::kTimedMaxRows) + ", got " + str(a.m));
  Napi::Float32Array y = f32Arg(info, yAt, "y");
  const int act = llamaActType(a.type);
  if (act < 0) throw Napi::RangeError::New(env, std::string(op) + ": ggml type " + str(a.type) + " has no vec_dot kernel");
  checkK(env, a.type, a.k);
  checkK(env, act, a.k);
  if (w.length < kq::rowBytes(a.type, a.k) * (size_t)a.n)
    throw Napi::RangeError::New(env, "weight holds " + str((int64_t)w.length) + " bytes, [N=" + str(a.n) + ", K=" + str(a.k) +
                                         "] needs " + str((int64_t)(kq::rowBytes(a.type, a.k) * a.n)));
  if ((int64_t)x.ElementLength() < a.m * a.k) throw Napi::RangeError::New(env, "x is shorter than M * K");
  if ((int64_t)y.ElementLength() < a.m * a.n) throw Napi::RangeError::New(env, "y is shorter than M * N");
  a.w = w.data;
  a.x = x.Data();
  a.y = y.Data();
  return a;
}

// (type, w, n, k, x, m, y)
LlamaArgs parseLlama(const Napi::CallbackInfo& info) { return parseLlamaArgs(info, "matmulLlama", 6, 5, false); }

// (type, w, n, k, x, y, variant, [m]): one activation row unless M (2 .. 8: a batched decode step, more: a prefill)
LlamaArgs parseLlamaRow(const Napi::CallbackInfo& info) { return parseLlamaArgs(info, "matmulDecodeVariant", 5, 7, true); }

Napi::Value MatmulLlama(const Napi::CallbackInfo& info) {
  const LlamaArgs a = parseLlama(info);
  kq::matmulLlama(a.type, a.w, a.n, a.k, a.x, a.m, a.y);
  return info.Env().Undefined();
}

struct Bf16Args {
  int type;
  const uint8_t* w;
  int64_t k, rowStart, rowCount, m, ldy, yOffset;
  const float* x;
  float* y;
};

// (type, w, k, rowStart, rowCount, x, m, y, ldy, yOffset): w holds at least rowStart + rowCount rows
Bf16Args parseBf16(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Bf16Args a;
  a.type = typeArg(info, 0);
  const Bytes w = bytesArg(info, 1, "weight");
  a.k = intArg(info, 2, "K", 1);
  a.rowStart = intArg(info, 3, "rowStart", 0);
  a.rowCount = intArg(info, 4, "rowCount", 1);
  Napi::Float32Array x = f32Arg(info, 5, "x");
  a.m = intArg(info, 6, "M", 1);
  Napi::Float32Array y = f32Arg(info, 7, "y");
  a.ldy = intArg(info, 8, "ldy", 1);
  a.yOffset = intArg(info, 9, "yOffset", 0);
  if (!kq::dequantSupported(a.type)) throw Napi::RangeError::New(env, "type " + str(a.type) + " cannot be decoded");
  checkK(env, a.type, a.k);
  if (w.length < kq::rowBytes(a.type, a.k) * (size_t)(a.rowStart + a.rowCount))
    throw Napi::RangeError::New(env, "weight is shorter than rowStart + rowCount rows");
  if ((int64_t)x.ElementLength() < a.m * a.k) throw Napi::RangeError::New(env, "x is shorter than M * K");
  if (a.yOffset + a.rowCount > a.ldy) throw Napi::RangeError::New(env, "yOffset + rowCount exceeds ldy");
  if ((int64_t)y.ElementLength() < (a.m - 1) * a.ldy + a.yOffset + a.rowCount)
    throw Napi::RangeError::New(env, "y is too short");
  a.w = w.data;
  a.x = x.Data();
  a.y = y.Data();
  return a;
}

Napi::Value MatmulBf16(const Napi::CallbackInfo& info) {
  const Bf16Args a = parseBf16(info);
  kq::matmulBf16Rows(a.type, a.w, a.k, a.rowStart, a.rowCount, a.x, a.m, a.y, a.ldy, a.yOffset);
  return info.Env().Undefined();
}

// Async: runs on a libuv worker thread; keeps the JS buffers alive until done.
class MatmulWorker : public Napi::AsyncWorker {
 public:
  MatmulWorker(Napi::Env env, const Napi::CallbackInfo& info, bool llama)
      : Napi::AsyncWorker(env), deferred_(Napi::Promise::Deferred::New(env)), llama_(llama) {
    for (size_t i = 0; i < info.Length(); ++i)
      if (info[i].IsObject()) refs_.push_back(Napi::Persistent(info[i].As<Napi::Object>()));
    if (llama) lArgs_ = parseLlama(info);
    else bArgs_ = parseBf16(info);
  }
  Napi::Promise Promise() { return deferred_.Promise(); }

 protected:
  void Execute() override {
    if (llama_) kq::matmulLlama(lArgs_.type, lArgs_.w, lArgs_.n, lArgs_.k, lArgs_.x, lArgs_.m, lArgs_.y);
    else kq::matmulBf16Rows(bArgs_.type, bArgs_.w, bArgs_.k, bArgs_.rowStart, bArgs_.rowCount, bArgs_.x, bArgs_.m,
                            bArgs_.y, bArgs_.ldy, bArgs_.yOffset);
  }
  void OnOK() override {
    refs_.clear();
    deferred_.Resolve(Env().Undefined());
  }
  void OnError(const Napi::Error& e) override {
    refs_.clear();
    deferred_.Reject(e.Value());
  }

 private:
  Napi::Promise::Deferred deferred_;
  bool llama_;
  LlamaArgs lArgs_{};
  Bf16Args bArgs_{};
  std::vector<Napi::ObjectReference> refs_;
};

Napi::Value MatmulLlamaAsync(const Napi::CallbackInfo& info) {
  MatmulWorker* w = new MatmulWorker(info.Env(), info, true);
  Napi::Promise p = w->Promise();
  w->Queue();
  return p;
}

Napi::Value MatmulBf16Async(const Napi::CallbackInfo& info) {
  MatmulWorker* w = new MatmulWorker(info.Env(), info, false);
  Napi::Promise p = w->Promise();
  w->Queue();
  return p;
}

// argmaxF32(x): greedy sampling's argmax over a logits row (forward_ops.h argmaxF32), on the calling thread
Napi::Value ArgmaxF32(const Napi::CallbackInfo& info) {
  Napi::Float32Array x = f32Arg(info, 0, "x");
  return Napi::Number::New(info.Env(), (double)kq::forwardOps().argmaxF32(x.Data(), (int64_t)x.ElementLength()));
}

// sumWords(buf): wrapping sum of the buffer's 8-byte words as a bigint (read-bandwidth probe)
Napi::Value SumWords(const Napi::CallbackInfo& info) {
  const Bytes b = bytesArg(info, 0, "buffer");
  return Napi::BigInt::New(info.Env(), kq::sumWords(b.data, b.length));
}

// ---- decode tuning (cpu/tuning.h) and the step profile (core/profile.h) -------------------------

int roleArg(const Napi::CallbackInfo& info, size_t i) {
  if (i >= info.Length() || !info[i].IsString()) throw Napi::TypeError::New(info.Env(), "role must be \"layer\" or \"head\"");
  const std::string r = info[i].As<Napi::String>().Utf8Value();
  if (r == "layer") return kq::kRoleLayer;
  if (r == "head") return kq::kRoleHead;
  throw Napi::RangeError::New(info.Env(), "role must be \"layer\" or \"head\", got \"" + r + "\"");
}

// { isa: "current" | level name, weightRows, prefetch, rowsPerTask, threads } (absent fields: 0 / current)
kq::DecodeVariant variantArg(const Napi::CallbackInfo& info, size_t i) {
  Napi::Env env = info.Env();
  if (i >= info.Length() || !info[i].IsObject()) throw Napi::TypeError::New(env, "variant must be an object");
  const Napi::Object o = info[i].As<Napi::Object>();
  kq::DecodeVariant v;
  const Napi::Value isa = o.Get("isa");
  if (!isa.IsUndefined()) {
    if (!isa.IsString()) throw Napi::TypeError::New(env, "variant.isa must be a string");
    const std::string name = isa.As<Napi::String>().Utf8Value();
    if (name == "current") v.isa = -1;
    else if (name == "generic") v.isa = (int)kq::IsaLevel::Generic;
    else if (name == "avx2") v.isa = (int)kq::IsaLevel::Avx2;
    else if (name == "avx512") v.isa = (int)kq::IsaLevel::Avx512;
    else if (name == "neon") v.isa = (int)kq::IsaLevel::Neon;
    else throw Napi::RangeError::New(env, "variant.isa: unknown ISA level '" + name + "' (valid: current, generic, avx2, avx512, neon)");
  }
  auto field = [&](const char* name, int* out) {
    const Napi::Value f = o.Get(name);
    if (f.IsUndefined()) return;
    if (!f.IsNumber()) throw Napi::TypeError::New(env, std::string("variant.") + name + " must be a number");
    const double d = f.As<Napi::Number>().DoubleValue();
    if (d != (double)(int)d) throw Napi::RangeError::New(env, std::string("variant.") + name + " must be an integer");
    *out = (int)d;
  };
  field("weightRows", &v.weightRows);
  field("prefetch", &v.prefetch);
  field("rowsPerTask", &v.rowsPerTask);
  field("threads", &v.threads);
  field("batchKernel", &v.batchKernel);
  field("prefillKernel", &v.prefillKernel);
  const std::string err = kq::checkDecodeVariant(v);
  if (!err.empty()) throw Napi::RangeError::New(env, "variant: " + err);
  return v;
}

Napi::Object variantObject(Napi::Env env, const kq::DecodeVariant& v) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("isa", v.isa < 0 ? "current" : kq::isaName((kq::IsaLevel)v.isa));
  o.Set("weightRows", v.weightRows);
  o.Set("prefetch", v.prefetch);
  o.Set("rowsPerTask", v.rowsPerTask);
  o.Set("threads", v.threads);
  o.Set("batchKernel", v.batchKernel);
  o.Set("prefillKernel", v.prefillKernel);
  return o;
}

int decodeTypeArg(const Napi::CallbackInfo& info, size_t i) {
  const int type = typeArg(info, i);
  if (llamaActType(type) < 0)
    throw Napi::RangeError::New(info.Env(), "ggml type " + str(type) + " has no vec_dot kernel (no decode matmul to tune)");
  return type;
}

// setDecodeVariant(role, type, variant)
Napi::Value SetDecodeVariant(const Napi::CallbackInfo& info) {
  const int role = roleArg(info, 0);
  const int type = decodeTypeArg(info, 1);
  kq::setDecodeVariant(role, type, variantArg(info, 2));
  return info.Env().Undefined();
}

Napi::Value GetDecodeVariant(const Napi::CallbackInfo& info) {
  const int role = roleArg(info, 0);
  const int type = decodeTypeArg(info, 1);
  return variantObject(info.Env(), kq::decodeVariant(role, type));
}

Napi::Value ResetDecodeVariants(const Napi::CallbackInfo& info) {
  kq::resetDecodeVariants();
  return info.Env().Undefined();
}

// timeDecodeMatmul(type, K, weights: typed array[], rows: number[], variant, passes) -> Float64Array (ns per pass)
Napi::Value TimeDecodeMatmul(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const int type = decodeTypeArg(info, 0);
  const int64_t k = intArg(info, 1, "K", 1);
  checkK(env, type, k);
  checkK(env, kq::typeTraits(type).vecDotType, k);
  if (info.Length() < 4 || !info[2].IsArray() || !info[3].IsArray())
    throw Napi::TypeError::New(env, "weights and rows must be arrays");
  const Napi::Array weights = info[2].As<Napi::Array>(), rows = info[3].As<Napi::Array>();
  if (weights.Length() != rows.Length() || weights.Length() == 0)
    throw Napi::RangeError::New(env, "weights and rows must be non-empty arrays of the same length");
  std::vector<kq::TimedMatrix> matrices;
  const size_t rb = kq::rowBytes(type, k);
  for (uint32_t i = 0; i < weights.Length(); ++i) {
    const Napi::Value w = weights.Get(i), r = rows.Get(i);
    if (!w.IsTypedArray()) throw Napi::TypeError::New(env, "weights[" + str(i) + "] must be a typed array");
    if (!r.IsNumber()) throw Napi::TypeError::New(env, "rows[" + str(i) + "] must be a number");
    const Napi::TypedArray t = w.As<Napi::TypedArray>();
    const int64_t n = (int64_t)r.As<Napi::Number>().DoubleValue();
    if (n < 1) throw Napi::RangeError::New(env, "rows[" + str(i) + "] must be >= 1");
    if ((size_t)t.ByteLength() < rb * (size_t)n)
      throw Napi::RangeError::New(env, "weights[" + str(i) + "] holds " + str((int64_t)t.ByteLength()) + " bytes, " + str(n) +
                                           " rows of K=" + str(k) + " need " + str((int64_t)(rb * n)));
    matrices.push_back({static_cast<const uint8_t*>(t.ArrayBuffer().Data()) + t.ByteOffset(), n});
  }
  const kq::DecodeVariant v = variantArg(info, 4);
  const int passes = (int)intArg(info, 5, "passes", 1);
  int actRows = 1;
  if (info.Length() > 6 && !info[6].IsUndefined()) {
    actRows = (int)intArg(info, 6, "actRows", 1);
    if (actRows > kq::kTimedMaxRows)
      throw Napi::RangeError::New(env, "actRows must be 1 .. " + str(kq::kTimedMaxRows) + ", got " + str(actRows));
  }
  const std::vector<double> ns = kq::timeDecodeMatmul(type, k, matrices, v, passes, actRows);
  Napi::Float64Array out = Napi::Float64Array::New(env, ns.size());
  for (size_t i = 0; i < ns.size(); ++i) out[i] = ns[i];
  return out;
}

// matmulDecodeVariant(type, w, N, K, x, y, variant, M): M activation rows (1: decode, 2 .. 8: a batched step, more: a prefill)
Napi::Value MatmulDecodeVariant(const Napi::CallbackInfo& info) {
  const LlamaArgs a = parseLlamaRow(info);
  kq::matmulDecodeVariant(a.type, a.w, a.n, a.k, a.x, a.y, variantArg(info, 6), a.m);
  return info.Env().Undefined();
}

// setProfiling(on): the step phase timers and the pool's wait time (resets them when turned on)
Napi::Value SetProfiling(const Napi::CallbackInfo& info) {
  const bool on = info.Length() > 0 && info[0].ToBoolean().Value();
  if (on) {
    kq::resetProfile();
    kq::resetPoolStats();
  }
  kq::profileCounters().on.store(on);
  return info.Env().Undefined();
}

// profile() -> { on, phases: { name: { ns, calls } }, pool: { jobs, inlineJobs, waitNs } }
Napi::Value Profile(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  kq::ProfileCounters& c = kq::profileCounters();
  Napi::Object o = Napi::Object::New(env);
  o.Set("on", c.on.load());
  Napi::Object phases = Napi::Object::New(env);
  for (int p = 0; p < kq::kPhaseCount; ++p) {
    Napi::Object ph = Napi::Object::New(env);
    ph.Set("ns", (double)c.ns[p].load());
    ph.Set("calls", (double)c.calls[p].load());
    phases.Set(kq::profilePhaseName(p), ph);
  }
  o.Set("phases", phases);
  const kq::PoolStats s = kq::poolStats();
  Napi::Object pool = Napi::Object::New(env);
  pool.Set("jobs", (double)s.jobs);
  pool.Set("inlineJobs", (double)s.inlineJobs);
  pool.Set("waitNs", (double)s.waitNs);
  pool.Set("stalledJobs", (double)s.stalledJobs);
  pool.Set("soloJobs", (double)s.soloJobs);
  o.Set("pool", pool);
  return o;
}

// isContentionStall(waitedNs, callerWorkNs, callerTasks) -> boolean: the pool's contention-guard rule
Napi::Value IsContentionStall(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 3 || !info[0].IsNumber() || !info[1].IsNumber() || !info[2].IsNumber())
    throw Napi::TypeError::New(env, "isContentionStall(waitedNs, callerWorkNs, callerTasks): three numbers");
  return Napi::Boolean::New(env, kq::isContentionStall(info[0].As<Napi::Number>().DoubleValue(), info[1].As<Napi::Number>().DoubleValue(),
                                                       info[2].As<Napi::Number>().Int32Value()));
}

// poolStress(jobs, pauseEvery, pauseUs) -> { jobs, tasks, wrongTasks, executions, pauses }: tests only (the
// pool's claim protocol with descheduled threads simulated: core/threadpool.h)
Napi::Value PoolStress(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const int64_t jobs = intArg(info, 0, "jobs", 0);
  const int64_t every = intArg(info, 1, "pauseEvery", 0);
  const int64_t us = intArg(info, 2, "pauseUs", 0);
  if (jobs < 1 || jobs > 1000000 || us > 100000)  // intArg refuses negative values
    throw Napi::RangeError::New(env, "poolStress(jobs 1..1e6, pauseEvery >= 0, pauseUs 0..1e5)");
  const kq::PoolStressResult r = kq::poolStress((int)jobs, (int)every, (int)us);
  Napi::Object o = Napi::Object::New(env);
  o.Set("jobs", (double)r.jobs);
  o.Set("tasks", (double)r.tasks);
  o.Set("wrongTasks", (double)r.wrongTasks);
  o.Set("executions", (double)r.executions);
  o.Set("pauses", (double)r.pauses);
  return o;
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("isContentionStall", Napi::Function::New(env, IsContentionStall));
  exports.Set("poolStress", Napi::Function::New(env, PoolStress));
  exports.Set("setDecodeVariant", Napi::Function::New(env, SetDecodeVariant));
  exports.Set("getDecodeVariant", Napi::Function::New(env, GetDecodeVariant));
  exports.Set("resetDecodeVariants", Napi::Function::New(env, ResetDecodeVariants));
  exports.Set("timeDecodeMatmul", Napi::Function::New(env, TimeDecodeMatmul));
  exports.Set("matmulDecodeVariant", Napi::Function::New(env, MatmulDecodeVariant));
  exports.Set("setProfiling", Napi::Function::New(env, SetProfiling));
  exports.Set("profile", Napi::Function::New(env, Profile));
  exports.Set("sumWords", Napi::Function::New(env, SumWords));
  exports.Set("argmaxF32", Napi::Function::New(env, ArgmaxF32));
  exports.Set("abiVersion", Napi::Function::New(env, AbiVersion));
  exports.Set("buildInfo", Napi::Function::New(env, BuildInfo));
  exports.Set("kernelMenu", Napi::Function::New(env, KernelMenu));
  exports.Set("getIsa", Napi::Function::New(env, GetIsa));
  exports.Set("setIsa", Napi::Function::New(env, SetIsa));
  exports.Set("setThreads", Napi::Function::New(env, SetThreads));
  exports.Set("getThreads", Napi::Function::New(env, GetThreads));
  exports.Set("hardwareThreads", Napi::Function::New(env, HardwareThreads));
  exports.Set("vecDotType", Napi::Function::New(env, VecDotType));
  exports.Set("dequantSupported", Napi::Function::New(env, DequantSupported));
  exports.Set("supportedTypes", Napi::Function::New(env, SupportedTypes));
  exports.Set("dequantizeRows", Napi::Function::New(env, DequantizeRows));
  exports.Set("quantizeActivations", Napi::Function::New(env, QuantizeActivations));
  exports.Set("matmulLlama", Napi::Function::New(env, MatmulLlama));
  exports.Set("matmulLlamaAsync", Napi::Function::New(env, MatmulLlamaAsync));
  exports.Set("matmulBf16", Napi::Function::New(env, MatmulBf16));
  exports.Set("matmulBf16Async", Napi::Function::New(env, MatmulBf16Async));
  kq::registerModelExports(env, exports);
  kq::registerVisionExports(env, exports);
  kq::registerMapFileRangeExports(env, exports);
  return exports;
}

}  // namespace

NODE_API_MODULE(keepquant_native, Init)
