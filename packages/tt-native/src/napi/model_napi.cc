// Node-API surface of the native model (mirrored by src/native-types.ts): NativeModel (built once
// from the engine's bound weights and storage; one async step per scheduler step), memory-mapped
// files, natively allocated storage, and the C library's libm for the TypeScript specification.
#include <fcntl.h>
#include <napi.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/common.h"
#include "core/map_file_range.h"
#include "model/model.h"

namespace kq {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

// ---- argument helpers: every failure names the field -------------------------------------------

struct Reader {
  Napi::Env env;
  std::vector<Napi::Reference<Napi::Value>>* keep;

  [[noreturn]] void typeError(const std::string& field, const std::string& what) const {
    throw Napi::TypeError::New(env, "native model spec: " + field + " must be " + what);
  }
  [[noreturn]] void rangeError(const std::string& field, const std::string& what) const {
    throw Napi::RangeError::New(env, "native model spec: " + field + " " + what);
  }
  Napi::Value get(const Napi::Object& o, const char* key) const { return o.Get(key); }
  Napi::Object object(const Napi::Value& v, const std::string& field) const {
    if (!v.IsObject()) typeError(field, "an object");
    return v.As<Napi::Object>();
  }
  int integer(const Napi::Object& o, const char* key, const std::string& field, int min = 0) const {
    const Napi::Value v = o.Get(key);
    if (!v.IsNumber()) typeError(field + "." + key, "a number");
    const double d = v.As<Napi::Number>().DoubleValue();
    if (d != std::floor(d) || d < min || d > 2147483647.0) rangeError(field + "." + key, "must be an integer >= " + str(min));
    return (int)d;
  }
  double number(const Napi::Object& o, const char* key, const std::string& field) const {
    const Napi::Value v = o.Get(key);
    if (!v.IsNumber()) typeError(field + "." + key, "a number");
    return v.As<Napi::Number>().DoubleValue();
  }
  bool boolean(const Napi::Object& o, const char* key, const std::string& field) const {
    const Napi::Value v = o.Get(key);
    if (!v.IsBoolean()) typeError(field + "." + key, "a boolean");
    return v.As<Napi::Boolean>().Value();
  }
  // A typed array kept alive for the model's lifetime; returns its data and element count.
  template <typename T>
  T* typed(const Napi::Value& v, napi_typedarray_type want, const std::string& field, const char* what, size_t minLength) const {
    if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != want) typeError(field, what);
    Napi::TypedArray t = v.As<Napi::TypedArray>();
    if (t.ElementLength() < minLength)
      rangeError(field, "has " + str((int64_t)t.ElementLength()) + " elements, needs " + str((int64_t)minLength));
    keep->push_back(Napi::Persistent(v));
    return reinterpret_cast<T*>(static_cast<uint8_t*>(t.ArrayBuffer().Data()) + t.ByteOffset());
  }
  // One tensor entry {type, rows, cols, rowBytes, data} of the table, named `name` in errors.
  WeightMatrix matrix(const Napi::Array& list, uint32_t index, const std::string& name) const {
    const Napi::Object m = object(list.Get(index), name);
    WeightMatrix w;
    w.type = integer(m, "type", name);
    w.rows = integer(m, "rows", name, 1);
    w.cols = integer(m, "cols", name, 1);
    w.rowBytes = (size_t)integer(m, "rowBytes", name, 1);
    w.groups = m.Get("groups").IsUndefined() ? 1 : integer(m, "groups", name, 1);
    const Napi::Value data = m.Get("data");
    if (!data.IsTypedArray()) typeError(name + ".data", "a Uint8Array");
    const Napi::TypedArray t = data.As<Napi::TypedArray>();
    const size_t need = w.rowBytes * (size_t)w.rows * (size_t)w.groups;
    if (t.ByteLength() < need)
      rangeError(name + ".data", "holds " + str((int64_t)t.ByteLength()) + " bytes, [" + str(w.groups * w.rows) + " rows x " +
                                     str((int64_t)w.rowBytes) + " B] needs " + str((int64_t)need));
    keep->push_back(Napi::Persistent(data));
    w.data = static_cast<const uint8_t*>(t.ArrayBuffer().Data()) + t.ByteOffset();
    return w;
  }
};

std::string stringField(const Reader& r, const Napi::Object& o, const char* key, const std::string& field) {
  const Napi::Value v = o.Get(key);
  if (!v.IsString()) r.typeError(field + "." + key, "a string");
  return v.As<Napi::String>().Utf8Value();
}

// A layer's kind by its name (model_kinds.h): its index in `names`.
template <size_t N>
int kindField(const Reader& r, const Napi::Object& o, const char* key, const std::string& field, const char* const (&names)[N]) {
  const std::string value = stringField(r, o, key, field);
  std::string expected;
  for (size_t i = 0; i < N; ++i) {
    if (value == names[i]) return (int)i;
    expected += (i == 0 ? "" : i + 1 == N ? " or " : ", ") + std::string("\"") + names[i] + "\"";
  }
  r.typeError(field + "." + key, expected);
}

// The table (the hyperparameters, layers, tensors) read generically; bindModelTable checks and binds it.
ModelTable readTable(const Reader& r, const Napi::Object& spec) {
  ModelTable t;
  // the hyperparameters in the generated order (model_hparams.h; src/model-hparams.ts encodes them)
  const Napi::Value hparamsValue = spec.Get("hparams");
  if (!hparamsValue.IsTypedArray() || hparamsValue.As<Napi::TypedArray>().TypedArrayType() != napi_float64_array)
    r.typeError("hparams", "a Float64Array (encodeNativeHparams)");
  const Napi::Float64Array hparams = hparamsValue.As<Napi::Float64Array>();
  if (hparams.ElementLength() != (size_t)hparams::kCount)
    r.rangeError("hparams", "has " + str((int64_t)hparams.ElementLength()) + " values, expected " + str(hparams::kCount));
  for (int i = 0; i < hparams::kCount; ++i) {
    const double v = hparams[i];
    if (!std::isfinite(v)) r.rangeError(std::string("hparams.") + hparams::kFields[i].name, "must be finite");
    t.hparams.push_back(v);
  }
  const Napi::Value layersValue = spec.Get("layers");
  if (!layersValue.IsArray()) r.typeError("layers", "an array");
  const Napi::Array layers = layersValue.As<Napi::Array>();
  for (uint32_t i = 0; i < layers.Length(); ++i) {
    const std::string f = "layers[" + str(i) + "]";
    const Napi::Object o = r.object(layers.Get(i), f);
    TableLayer l;
    l.index = r.integer(o, "index", f);
    l.cacheIndex = r.integer(o, "cacheIndex", f);
    const std::string role = stringField(r, o, "role", f);
    if (role != "trunk" && role != "mtp") r.typeError(f + ".role", "\"trunk\" or \"mtp\"");
    l.mtp = role == "mtp";
    l.mixer = (Mixer)kindField(r, o, "mixer", f, kinds::kMixerNames);
    l.ffn = (Ffn)kindField(r, o, "ffn", f, kinds::kFfnNames);
    t.layers.push_back(l);
  }
  const Napi::Value tensorsValue = spec.Get("tensors");
  if (!tensorsValue.IsArray()) r.typeError("tensors", "an array");
  const Napi::Array tensors = tensorsValue.As<Napi::Array>();
  for (uint32_t i = 0; i < tensors.Length(); ++i) {
    const Napi::Object o = r.object(tensors.Get(i), "tensors[" + str(i) + "]");
    TableTensor e;
    e.slot = stringField(r, o, "slot", "tensors[" + str(i) + "]");
    e.layer = r.integer(o, "layer", "tensors[" + str(i) + "]", -1);
    const std::string f = e.layer < 0 ? e.slot : "blk." + str(e.layer) + "." + e.slot;
    const Napi::Value dims = o.Get("dims");
    if (!dims.IsArray()) r.typeError(f + ".dims", "an array of hparams names");
    const Napi::Array d = dims.As<Napi::Array>();
    for (uint32_t j = 0; j < d.Length(); ++j) {
      if (!d.Get(j).IsString()) r.typeError(f + ".dims", "an array of hparams names");
      e.dims.push_back(d.Get(j).As<Napi::String>().Utf8Value());
    }
    e.w = r.matrix(tensors, i, f);
    t.tensors.push_back(std::move(e));
  }
  return t;
}

ModelSpec parseSpec(const Reader& r, const Napi::Object& spec) {
  ModelSpec m;
  try {
    bindModelTable(readTable(r, spec), m);
  } catch (const std::invalid_argument& e) {
    throw Napi::RangeError::New(r.env, std::string("native model spec: ") + e.what());
  }
  const ModelShape& c = m.shape;

  const Napi::Value numerics = spec.Get("numerics");
  const std::string mode = numerics.IsString() ? numerics.As<Napi::String>().Utf8Value() : "";
  if (mode == "llama") m.numerics = Numerics::Llama;
  else if (mode == "bf16") m.numerics = Numerics::Bf16;
  else r.typeError("numerics", "\"llama\" or \"bf16\"");
  m.flashAttention = r.boolean(spec, "flashAttention", "spec");
  m.maxBatchTokens = r.integer(spec, "maxBatchTokens", "spec", 1);
  const Napi::Value twin = spec.Get("tokenEmbdTwin");
  if (!twin.IsUndefined() && !twin.IsNull())
    m.tokenEmbdTwin = r.typed<uint16_t>(twin, napi_uint16_array, "spec.tokenEmbdTwin", "a Uint16Array",
                                        (size_t)c.nVocab * (size_t)c.nEmbd);

  // the rotary section of each rotated pair (Model checks the count and values)
  const Napi::Value sections = spec.Get("ropeSections");
  if (!sections.IsUndefined() && !sections.IsNull()) {
    if (!sections.IsTypedArray() || sections.As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array)
      r.typeError("ropeSections", "a Uint8Array (one section per rotated pair)");
    const Napi::Uint8Array a = sections.As<Napi::Uint8Array>();
    m.ropeSections.assign(a.Data(), a.Data() + a.ElementLength());
  }

  const Napi::Object kv = r.object(spec.Get("kv"), "kv");
  m.kv.f16 = r.boolean(kv, "f16", "kv");
  m.kv.blockSize = r.integer(kv, "blockSize", "kv", 1);
  m.kv.numBlocks = r.integer(kv, "numBlocks", "kv", 1);
  const size_t kvElements = (size_t)m.kv.numBlocks * m.kv.blockSize * (size_t)c.kvDim;
  for (const char* key : {"k", "v"}) {
    const Napi::Value planes = kv.Get(key);
    if (!planes.IsArray()) r.typeError(std::string("kv.") + key, "an array");
    const Napi::Array a = planes.As<Napi::Array>();
    for (uint32_t i = 0; i < a.Length(); ++i) {
      const std::string f = std::string("kv.") + key + "[" + str(i) + "]";
      void* p = m.kv.f16 ? (void*)r.typed<uint16_t>(a.Get(i), napi_uint16_array, f, "a Uint16Array (f16 cache)", kvElements)
                         : (void*)r.typed<float>(a.Get(i), napi_float32_array, f, "a Float32Array (f32 cache)", kvElements);
      (key[0] == 'k' ? m.kv.k : m.kv.v).push_back(p);
    }
  }
  auto stateStorage = [&](const Napi::Object& states, const std::string& name, StateStorage& out) {
    out.numSlots = r.integer(states, "numSlots", name, 0);
    const size_t convElements = (size_t)out.numSlots * (size_t)c.convStateElements;
    const size_t ssmElements = (size_t)out.numSlots * (size_t)c.ssmStateElements;
    for (const char* key : {"conv", "ssm"}) {
      const Napi::Value planes = states.Get(key);
      if (!planes.IsArray()) r.typeError(name + "." + key, "an array");
      const Napi::Array a = planes.As<Napi::Array>();
      for (uint32_t i = 0; i < a.Length(); ++i) {
        const std::string f = name + "." + key + "[" + str(i) + "]";
        const bool conv = key[0] == 'c';
        float* p = const_cast<float*>(r.typed<float>(a.Get(i), napi_float32_array, f, "a Float32Array", conv ? convElements : ssmElements));
        (conv ? out.conv : out.ssm).push_back(p);
      }
    }
  };
  stateStorage(r.object(spec.Get("states"), "states"), "states", m.states);
  const Napi::Value snapshots = spec.Get("snapshots");
  if (!snapshots.IsUndefined() && !snapshots.IsNull()) stateStorage(r.object(snapshots, "snapshots"), "snapshots", m.snapshots);
  return m;
}

// ---- NativeModel -------------------------------------------------------------------------------

class NativeModel : public Napi::ObjectWrap<NativeModel> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "NativeModel",
                       {InstanceMethod("step", &NativeModel::Step), InstanceMethod("stepSync", &NativeModel::StepSync),
                        InstanceMethod("info", &NativeModel::Info), InstanceMethod("dispose", &NativeModel::Dispose),
                        InstanceMethod("holdNextStep", &NativeModel::HoldNextStep),
                        InstanceMethod("releaseHold", &NativeModel::ReleaseHold)});
  }

  explicit NativeModel(const Napi::CallbackInfo& info) : Napi::ObjectWrap<NativeModel>(info) {
    Napi::Env env = info.Env();
    if (info.Length() < 1 || !info[0].IsObject()) throw Napi::TypeError::New(env, "NativeModel(spec): spec must be an object");
    Reader reader{env, &keep_};
    ModelSpec spec = parseSpec(reader, info[0].As<Napi::Object>());
    try {
      model_ = std::make_unique<Model>(std::move(spec));
    } catch (const std::exception& e) {
      throw Napi::RangeError::New(env, std::string("native model spec: ") + e.what());
    }
    entries_.reserve(64);
  }

  Model* model() { return model_.get(); }
  // Runs the prepared step (trunk or drafter).
  void run(float* logits) {
    if (drafterStep_) model_->draftStep(entries_, hiddenIn_, logits, hiddenOut_);
    else model_->step(entries_, logits, hiddenOut_, embeddingsIn_);
  }
  const std::vector<StepEntry>& entries() const { return entries_; }
  void finishStep() { busy_ = false; }

  // Test hook of the async contract: a held step waits on its worker thread until the JS thread calls
  // releaseHold() (or 30 s pass), so a test can observe the event loop running while a step is in
  // flight without any timing assumption.
  void waitIfHeld() {
    std::unique_lock<std::mutex> lock(holdMutex_);
    if (!holdArmed_) return;
    holdArmed_ = false;
    const bool released = holdCv_.wait_for(lock, std::chrono::seconds(30), [&] { return holdReleased_; });
    lastHold_ = released ? "released" : "timeout";
    holdReleased_ = false;
  }

 private:
  // Copies and checks the descriptor and the buffers (logits, then optional hidden output, for a
  // drafter step the hidden input, for a trunk step with embedding rows their inputs); returns the
  // logits pointer.
  float* prepare(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!model_) throw Napi::Error::New(env, "native model is disposed");
    if (busy_) throw Napi::Error::New(env, "native model: a step is already running (steps are sequential)");
    if (info.Length() < 2 || !info[0].IsTypedArray() || info[0].As<Napi::TypedArray>().TypedArrayType() != napi_int32_array)
      throw Napi::TypeError::New(env, "step(descriptor, logits): descriptor must be an Int32Array");
    if (!info[1].IsTypedArray() || info[1].As<Napi::TypedArray>().TypedArrayType() != napi_float32_array)
      throw Napi::TypeError::New(env, "step(descriptor, logits): logits must be a Float32Array");
    const Napi::Int32Array desc = info[0].As<Napi::Int32Array>();
    desc_.assign(desc.Data(), desc.Data() + desc.ElementLength());
    StepShape shape;
    try {
      shape = model_->parseStep(desc_.data(), desc_.size(), entries_);
    } catch (const std::exception& e) {
      throw Napi::RangeError::New(env, e.what());
    }
    const int nOut = shape.logits;
    const size_t D = (size_t)model_->embd();
    hiddenOut_ = nullptr;
    hiddenIn_ = nullptr;
    embeddingsIn_ = nullptr;
    drafterStep_ = shape.drafter;
    auto f32Arg = [&](size_t i, const char* name, size_t need) -> float* {
      if (info.Length() <= i || info[i].IsUndefined() || info[i].IsNull()) return nullptr;
      if (!info[i].IsTypedArray() || info[i].As<Napi::TypedArray>().TypedArrayType() != napi_float32_array)
        throw Napi::TypeError::New(env, std::string("step: ") + name + " must be a Float32Array");
      Napi::Float32Array a = info[i].As<Napi::Float32Array>();
      if (a.ElementLength() < need)
        throw Napi::RangeError::New(env, std::string("step: ") + name + " holds " + str((int64_t)a.ElementLength()) + " values, " +
                                             str((int64_t)need) + " needed");
      return a.Data();
    };
    hiddenOut_ = f32Arg(2, "hidden output", (size_t)shape.hidden * D);
    hiddenIn_ = f32Arg(3, "hidden input", (size_t)shape.tokens * D);
    if (shape.drafter && !hiddenIn_) throw Napi::TypeError::New(env, "drafter step: the hidden input (argument 4) is required");
    if (shape.embeddingRows > 0) {
      embeddingsIn_ = f32Arg(4, "embeddings", (size_t)shape.embeddingRows * D);
      if (!embeddingsIn_)
        throw Napi::TypeError::New(env, "step: " + str(shape.embeddingRows) + " embedding rows need the embeddings (argument 5)");
    }
    Napi::Float32Array logits = info[1].As<Napi::Float32Array>();
    const int width = shape.drafter ? model_->drafterVocab() : model_->vocab();
    const size_t need = (size_t)nOut * (size_t)width;
    if (logits.ElementLength() < need)
      throw Napi::RangeError::New(env, "step: logits holds " + str((int64_t)logits.ElementLength()) + " values, " +
                                           str(nOut) + " rows x vocab " + str(width) + " need " + str((int64_t)need));
    return logits.Data();
  }

  Napi::Value StepSync(const Napi::CallbackInfo& info) {
    float* logits = prepare(info);
    waitIfHeld();  // on the JS thread nothing can release it: it times out, which is what a test of the async contract detects
    try {
      run(logits);
    } catch (const std::exception& e) {
      throw Napi::Error::New(info.Env(), std::string("native step failed: ") + e.what());
    }
    return info.Env().Undefined();
  }

  Napi::Value Step(const Napi::CallbackInfo& info);

  Napi::Value HoldNextStep(const Napi::CallbackInfo& info) {
    std::lock_guard<std::mutex> lock(holdMutex_);
    holdArmed_ = true;
    holdReleased_ = false;
    lastHold_ = "armed";
    return info.Env().Undefined();
  }

  Napi::Value ReleaseHold(const Napi::CallbackInfo& info) {
    {
      std::lock_guard<std::mutex> lock(holdMutex_);
      holdReleased_ = true;
    }
    holdCv_.notify_all();
    return info.Env().Undefined();
  }

  Napi::Value Info(const Napi::CallbackInfo& info) {
    Napi::Object o = Napi::Object::New(info.Env());
    {
      std::lock_guard<std::mutex> lock(holdMutex_);
      o.Set("lastHold", lastHold_);
    }
    o.Set("scratchBytes", Napi::Number::New(info.Env(), model_ ? (double)model_->scratchBytes() : 0));
    o.Set("maxBatchTokens", Napi::Number::New(info.Env(), model_ ? model_->maxBatchTokens() : 0));
    return o;
  }

  Napi::Value Dispose(const Napi::CallbackInfo& info) {
    if (busy_) throw Napi::Error::New(info.Env(), "native model: cannot dispose while a step is running");
    model_.reset();
    keep_.clear();
    return info.Env().Undefined();
  }

  std::unique_ptr<Model> model_;
  std::vector<Napi::Reference<Napi::Value>> keep_;
  std::vector<int32_t> desc_;
  std::vector<StepEntry> entries_;
  float* hiddenOut_ = nullptr;
  const float* hiddenIn_ = nullptr;
  const float* embeddingsIn_ = nullptr;
  bool drafterStep_ = false;
  bool busy_ = false;
  std::mutex holdMutex_;
  std::condition_variable holdCv_;
  bool holdArmed_ = false, holdReleased_ = false;
  std::string lastHold_ = "none";

  friend class StepWorker;
};

// Runs one step on a libuv worker thread (which joins the pool); the event loop keeps running.
class StepWorker : public Napi::AsyncWorker {
 public:
  StepWorker(Napi::Env env, NativeModel* owner, const Napi::Object& self, const Napi::CallbackInfo& info, float* data)
      : Napi::AsyncWorker(env), deferred_(Napi::Promise::Deferred::New(env)), owner_(owner), logits_(data) {
    self_ = Napi::Persistent(self);
    // the buffers stay alive until the step settles
    for (size_t i = 1; i < info.Length() && i < 5; ++i)
      if (info[i].IsObject()) buffers_.push_back(Napi::Persistent(info[i]));
  }
  Napi::Promise Promise() { return deferred_.Promise(); }

 protected:
  void Execute() override {
    owner_->waitIfHeld();
    try {
      owner_->run(logits_);
    } catch (const std::exception& e) {
      SetError(std::string("native step failed: ") + e.what());
    }
  }
  void OnOK() override {
    owner_->finishStep();
    deferred_.Resolve(Env().Undefined());
  }
  void OnError(const Napi::Error& e) override {
    owner_->finishStep();
    deferred_.Reject(e.Value());
  }

 private:
  Napi::Promise::Deferred deferred_;
  NativeModel* owner_;
  float* logits_;
  Napi::ObjectReference self_;
  std::vector<Napi::Reference<Napi::Value>> buffers_;
};

Napi::Value NativeModel::Step(const Napi::CallbackInfo& info) {
  float* logits = prepare(info);
  busy_ = true;
  StepWorker* worker = new StepWorker(info.Env(), this, info.This().As<Napi::Object>(), info, logits);
  Napi::Promise promise = worker->Promise();
  worker->Queue();
  return promise;
}

// ---- memory-mapped files and native storage ---------------------------------------------------

struct Mapping {
  void* base;
  size_t length;
};

// mapFile(path, populate): the whole file mapped copy-on-write (writes from JS stay private and
// never reach the file; read pages are the page cache's), as one external ArrayBuffer.
Napi::Value MapFile(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsString()) throw Napi::TypeError::New(env, "mapFile(path): path must be a string");
  const std::string path = info[0].As<Napi::String>().Utf8Value();
  const bool populate = info.Length() > 1 && info[1].ToBoolean().Value();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // a FIFO must not block the open
  if (fd < 0) throw Napi::Error::New(env, "mapFile: cannot open " + path + ": " + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0) {
    ::close(fd);
    throw Napi::Error::New(env, "mapFile: " + path + " is not a non-empty regular file");
  }
  const size_t length = (size_t)st.st_size;
  void* base = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  const int mapError = errno;
  ::close(fd);
  if (base == MAP_FAILED) throw Napi::Error::New(env, "mapFile: mmap of " + path + " failed: " + std::strerror(mapError));
  if (populate) populateMapping(base, length);
  Mapping* mapping = new Mapping{base, length};
  return Napi::ArrayBuffer::New(env, base, length, [](Napi::Env, void*, Mapping* m) {
    ::munmap(m->base, m->length);
    delete m;
  }, mapping);
}

// allocBuffer(bytes): zeroed, page-aligned native memory (anonymous mapping: pages become resident
// when first touched) as an external ArrayBuffer, freed when it is collected.
Napi::Value AllocBuffer(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsNumber()) throw Napi::TypeError::New(env, "allocBuffer(bytes): bytes must be a number");
  const double bytes = info[0].As<Napi::Number>().DoubleValue();
  if (!(bytes >= 1) || bytes != std::floor(bytes) || bytes > 9007199254740991.0)
    throw Napi::RangeError::New(env, "allocBuffer(bytes): bytes must be a positive integer");
  const size_t length = (size_t)bytes;
  void* base = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED)
    throw Napi::Error::New(env, "allocBuffer: cannot allocate " + str((int64_t)length) + " bytes: " + std::strerror(errno));
  Mapping* mapping = new Mapping{base, length};
  return Napi::ArrayBuffer::New(env, base, length, [](Napi::Env, void*, Mapping* m) {
    ::munmap(m->base, m->length);
    delete m;
  }, mapping);
}

// ---- the C library's libm, for pinning the TypeScript specification ---------------------------

float argF(const Napi::CallbackInfo& info, size_t i) {
  if (i >= info.Length() || !info[i].IsNumber()) throw Napi::TypeError::New(info.Env(), "libm: arguments must be numbers");
  return (float)info[i].As<Napi::Number>().DoubleValue();
}
Napi::Value LibmExpf(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), expf(argF(info, 0))); }
Napi::Value LibmLogf(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), logf(argF(info, 0))); }
Napi::Value LibmCosf(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), cosf(argF(info, 0))); }
Napi::Value LibmSinf(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), sinf(argF(info, 0))); }
Napi::Value LibmPowf(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), powf(argF(info, 0), argF(info, 1)));
}
Napi::Value LibmFmaf(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), std::fma(argF(info, 0), argF(info, 1), argF(info, 2)));
}

}  // namespace

void registerModelExports(Napi::Env env, Napi::Object exports) {
  exports.Set("NativeModel", NativeModel::Define(env));
  exports.Set("mapFile", Napi::Function::New(env, MapFile));
  exports.Set("allocBuffer", Napi::Function::New(env, AllocBuffer));
  Napi::Object libm = Napi::Object::New(env);
  libm.Set("expf", Napi::Function::New(env, LibmExpf));
  libm.Set("logf", Napi::Function::New(env, LibmLogf));
  libm.Set("cosf", Napi::Function::New(env, LibmCosf));
  libm.Set("sinf", Napi::Function::New(env, LibmSinf));
  libm.Set("powf", Napi::Function::New(env, LibmPowf));
  libm.Set("fmaf", Napi::Function::New(env, LibmFmaf));
  exports.Set("libm", libm);
}

}  // namespace kq
