// Node-API surface of the native vision encoder (mirrored by src/native-types.ts): VisionEncoder, built once
// over borrowed weights (the engine's VisionEncoderDims and VisionEncoderWeights as they are), then
// encode(pixels, width, height, out) off the JS thread or encodeSync on it.
#include <napi.h>

#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/common.h"
#include "model/vision_encoder.h"

namespace kq {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

// Reads the spec; every failure names the field. Typed arrays are kept alive for the encoder's lifetime.
struct VisionReader {
  Napi::Env env;
  std::vector<Napi::Reference<Napi::Value>>* keep;

  [[noreturn]] void typeError(const std::string& field, const std::string& what) const {
    throw Napi::TypeError::New(env, "vision encoder spec: " + field + " must be " + what);
  }
  [[noreturn]] void rangeError(const std::string& field, const std::string& what) const {
    throw Napi::RangeError::New(env, "vision encoder spec: " + field + " " + what);
  }
  Napi::Object object(const Napi::Value& v, const std::string& field) const {
    if (!v.IsObject()) typeError(field, "an object");
    return v.As<Napi::Object>();
  }
  int integer(const Napi::Object& o, const char* key, const std::string& field, int min) const {
    const Napi::Value v = o.Get(key);
    if (!v.IsNumber()) typeError(field + "." + key, "a number");
    const double d = v.As<Napi::Number>().DoubleValue();
    if (d != std::floor(d) || d < min || d > 2147483647.0) rangeError(field + "." + key, "must be an integer >= " + str(min));
    return (int)d;
  }
  const float* floats(const Napi::Value& v, const std::string& field, size_t length) const {
    if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_float32_array) typeError(field, "a Float32Array");
    const Napi::Float32Array a = v.As<Napi::Float32Array>();
    if (a.ElementLength() != length) rangeError(field, "has " + str((int64_t)a.ElementLength()) + " values, expected " + str((int64_t)length));
    keep->push_back(Napi::Persistent(v));
    return a.Data();
  }
  // {type, rows, cols, data, groups?} (a PackedWeight)
  VisionMatrix matrix(const Napi::Value& v, const std::string& field) const {
    const Napi::Object o = object(v, field);
    VisionMatrix m;
    m.type = integer(o, "type", field, 0);
    m.rows = integer(o, "rows", field, 1);
    m.cols = integer(o, "cols", field, 1);
    if (!o.Get("groups").IsUndefined() && integer(o, "groups", field, 1) != 1) rangeError(field + ".groups", "must be 1");
    const TypeTraits& t = typeTraits(m.type);
    if (t.blockSize == 0) rangeError(field + ".type", "is ggml type " + str(m.type) + ", unknown to the native arm");
    if (m.cols % t.blockSize != 0) rangeError(field + ".cols", str(m.cols) + " is not whole " + t.name + " blocks");
    const Napi::Value data = o.Get("data");
    if (!data.IsTypedArray()) typeError(field + ".data", "a Uint8Array");
    const Napi::TypedArray a = data.As<Napi::TypedArray>();
    const size_t need = rowBytes(m.type, m.cols) * (size_t)m.rows;
    if (a.ByteLength() < need)
      rangeError(field + ".data", "holds " + str((int64_t)a.ByteLength()) + " bytes, [" + str(m.rows) + ", " + str(m.cols) + "] " + t.name +
                                      " needs " + str((int64_t)need));
    keep->push_back(Napi::Persistent(data));
    m.data = static_cast<const uint8_t*>(a.ArrayBuffer().Data()) + a.ByteOffset();
    return m;
  }
  VisionLinear linear(const Napi::Value& v, const std::string& field) const {
    const Napi::Object o = object(v, field);
    VisionLinear l;
    l.weight = matrix(o.Get("weight"), field + ".weight");
    l.bias = floats(o.Get("bias"), field + ".bias", (size_t)l.weight.rows);
    return l;
  }
  VisionNorm norm(const Napi::Value& v, const std::string& field, size_t n, bool optional) const {
    VisionNorm out;
    if (optional && (v.IsUndefined() || v.IsNull())) return out;
    const Napi::Object o = object(v, field);
    out.weight = floats(o.Get("weight"), field + ".weight", n);
    out.bias = floats(o.Get("bias"), field + ".bias", n);
    return out;
  }
};

class VisionEncoderWrap : public Napi::ObjectWrap<VisionEncoderWrap> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(env, "VisionEncoder",
                       {InstanceMethod("encode", &VisionEncoderWrap::Encode), InstanceMethod("encodeSync", &VisionEncoderWrap::EncodeSync),
                        InstanceMethod("outputWidth", &VisionEncoderWrap::OutputWidth),
                        InstanceMethod("dispose", &VisionEncoderWrap::Dispose)});
  }

  explicit VisionEncoderWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<VisionEncoderWrap>(info) {
    Napi::Env env = info.Env();
    if (info.Length() < 1 || !info[0].IsObject()) throw Napi::TypeError::New(env, "VisionEncoder(spec): spec must be an object");
    const VisionReader r{env, &keep_};
    const Napi::Object spec = info[0].As<Napi::Object>();
    const Napi::Object d = r.object(spec.Get("dims"), "dims");
    VisionEncoderDims dims;
    dims.patchSize = r.integer(d, "patchSize", "dims", 1);
    dims.hidden = r.integer(d, "hidden", "dims", 1);
    dims.heads = r.integer(d, "heads", "dims", 1);
    dims.ffn = r.integer(d, "ffn", "dims", 1);
    dims.merge = r.integer(d, "merge", "dims", 1);
    dims.projection = r.integer(d, "projection", "dims", 1);
    dims.positionSide = r.integer(d, "positionSide", "dims", 1);
    const Napi::Value eps = d.Get("eps");
    if (!eps.IsNumber()) r.typeError("dims.eps", "a number");
    dims.eps = eps.As<Napi::Number>().DoubleValue();
    const size_t D = (size_t)dims.hidden, G = (size_t)dims.merge * dims.merge * D;
    const int64_t S = dims.positionSide;
    if (S > 4096) r.rangeError("dims.positionSide", "is " + str(S) + ", more than 4096");

    VisionEncoderWeights w;
    const Napi::Value patch = spec.Get("patch");
    if (!patch.IsArray() || patch.As<Napi::Array>().Length() != 2) r.typeError("patch", "an array of two matrices");
    w.patch[0] = r.matrix(patch.As<Napi::Array>().Get(0u), "patch[0]");
    w.patch[1] = r.matrix(patch.As<Napi::Array>().Get(1u), "patch[1]");
    w.patchBias = r.floats(spec.Get("patchBias"), "patchBias", D);
    w.position = r.floats(spec.Get("position"), "position", (size_t)(S * S) * D);
    w.preNorm = r.norm(spec.Get("preNorm"), "preNorm", D, true);
    w.postNorm = r.norm(spec.Get("postNorm"), "postNorm", D, true);
    const Napi::Value layers = spec.Get("layers");
    if (!layers.IsArray()) r.typeError("layers", "an array");
    const Napi::Array list = layers.As<Napi::Array>();
    for (uint32_t i = 0; i < list.Length(); ++i) {
      const std::string f = "layers[" + str(i) + "]";
      const Napi::Object o = r.object(list.Get(i), f);
      VisionLayer l;
      l.ln1 = r.norm(o.Get("ln1"), f + ".ln1", D, false);
      l.qkv = r.linear(o.Get("qkv"), f + ".qkv");
      l.out = r.linear(o.Get("out"), f + ".out");
      l.ln2 = r.norm(o.Get("ln2"), f + ".ln2", D, false);
      l.up = r.linear(o.Get("up"), f + ".up");
      l.down = r.linear(o.Get("down"), f + ".down");
      const Napi::Value ds = o.Get("deepstack");
      if (!ds.IsUndefined() && !ds.IsNull()) {
        const Napi::Object dso = r.object(ds, f + ".deepstack");
        l.deepstack = true;
        l.deepstackNorm = r.norm(dso.Get("norm"), f + ".deepstack.norm", G, false);
        l.deepstackFc1 = r.linear(dso.Get("fc1"), f + ".deepstack.fc1");
        l.deepstackFc2 = r.linear(dso.Get("fc2"), f + ".deepstack.fc2");
      }
      w.layers.push_back(l);
    }
    w.mm0 = r.linear(spec.Get("mm0"), "mm0");
    w.mm2 = r.linear(spec.Get("mm2"), "mm2");
    try {
      encoder_ = std::make_unique<VisionEncoder>(dims, std::move(w));
    } catch (const std::exception& e) {
      throw Napi::RangeError::New(env, std::string("vision encoder spec: ") + e.what());
    }
  }

  const VisionEncoder* encoder() const { return encoder_.get(); }
  void finish() { --running_; }

 private:
  struct Image {
    const float* pixels;
    int width, height;
    float* out;
  };

  // (pixels: Float32Array, width, height, out: Float32Array), checked whole before any work.
  Image prepare(const Napi::CallbackInfo& info, const char* op) {
    Napi::Env env = info.Env();
    if (!encoder_) throw Napi::Error::New(env, "vision encoder is disposed");
    auto f32 = [&](size_t i, const char* name) {
      if (info.Length() <= i || !info[i].IsTypedArray() || info[i].As<Napi::TypedArray>().TypedArrayType() != napi_float32_array)
        throw Napi::TypeError::New(env, std::string(op) + ": " + name + " must be a Float32Array");
      return info[i].As<Napi::Float32Array>();
    };
    auto side = [&](size_t i, const char* name) -> int64_t {
      if (info.Length() <= i || !info[i].IsNumber()) throw Napi::TypeError::New(env, std::string(op) + ": " + name + " must be a number");
      const double v = info[i].As<Napi::Number>().DoubleValue();
      if (!(v >= 1 && v <= kVisionMaxSide) || v != std::floor(v))
        throw Napi::RangeError::New(env, std::string(op) + ": " + name + " must be an integer in [1, " + str(kVisionMaxSide) + "]");
      return (int64_t)v;
    };
    const Napi::Float32Array pixels = f32(0, "pixels");
    const int64_t width = side(1, "width"), height = side(2, "height");
    Napi::Float32Array out = f32(3, "out");
    const std::string problem = encoder_->checkImage(width, height, (int64_t)pixels.ElementLength());
    if (!problem.empty()) throw Napi::RangeError::New(env, std::string(op) + ": " + problem);
    const int64_t unit = (int64_t)encoder_->outputWidth();
    const int64_t pixelUnit = encoder_->pixelUnit();
    const int64_t tokens = (width / pixelUnit) * (height / pixelUnit);
    if ((int64_t)out.ElementLength() != tokens * unit)
      throw Napi::RangeError::New(env, std::string(op) + ": out holds " + str((int64_t)out.ElementLength()) + " values, " + str(tokens) +
                                           " tokens x " + str(unit) + " need " + str(tokens * unit));
    return Image{pixels.Data(), (int)width, (int)height, out.Data()};
  }

  Napi::Value EncodeSync(const Napi::CallbackInfo& info) {
    const Image image = prepare(info, "encodeSync");
    try {
      encoder_->encode(image.pixels, image.width, image.height, image.out);
    } catch (const std::exception& e) {
      throw Napi::Error::New(info.Env(), std::string("vision encode failed: ") + e.what());
    }
    return info.Env().Undefined();
  }

  Napi::Value Encode(const Napi::CallbackInfo& info);

  Napi::Value OutputWidth(const Napi::CallbackInfo& info) {
    if (!encoder_) throw Napi::Error::New(info.Env(), "vision encoder is disposed");
    return Napi::Number::New(info.Env(), encoder_->outputWidth());
  }

  Napi::Value Dispose(const Napi::CallbackInfo& info) {
    if (running_ > 0) throw Napi::Error::New(info.Env(), "vision encoder: cannot dispose while an encode is running");
    encoder_.reset();
    keep_.clear();
    return info.Env().Undefined();
  }

  std::unique_ptr<VisionEncoder> encoder_;
  std::vector<Napi::Reference<Napi::Value>> keep_;
  int running_ = 0;
  friend class VisionEncodeWorker;
};

// One encode on a libuv worker thread (which joins the pool); the event loop keeps running.
class VisionEncodeWorker : public Napi::AsyncWorker {
 public:
  VisionEncodeWorker(Napi::Env env, VisionEncoderWrap* owner, const Napi::CallbackInfo& info, const float* pixels, int width, int height,
                     float* out)
      : Napi::AsyncWorker(env), deferred_(Napi::Promise::Deferred::New(env)), owner_(owner), pixels_(pixels), width_(width),
        height_(height), out_(out) {
    self_ = Napi::Persistent(info.This().As<Napi::Object>());
    buffers_.push_back(Napi::Persistent(info[0]));  // the buffers stay alive until the encode settles
    buffers_.push_back(Napi::Persistent(info[3]));
  }
  Napi::Promise Promise() { return deferred_.Promise(); }

 protected:
  void Execute() override {
    try {
      owner_->encoder()->encode(pixels_, width_, height_, out_);
    } catch (const std::exception& e) {
      SetError(std::string("vision encode failed: ") + e.what());
    }
  }
  void OnOK() override {
    owner_->finish();
    deferred_.Resolve(Env().Undefined());
  }
  void OnError(const Napi::Error& e) override {
    owner_->finish();
    deferred_.Reject(e.Value());
  }

 private:
  Napi::Promise::Deferred deferred_;
  VisionEncoderWrap* owner_;
  const float* pixels_;
  int width_, height_;
  float* out_;
  Napi::ObjectReference self_;
  std::vector<Napi::Reference<Napi::Value>> buffers_;
};

Napi::Value VisionEncoderWrap::Encode(const Napi::CallbackInfo& info) {
  const Image image = prepare(info, "encode");
  ++running_;
  VisionEncodeWorker* worker = new VisionEncodeWorker(info.Env(), this, info, image.pixels, image.width, image.height, image.out);
  Napi::Promise promise = worker->Promise();
  worker->Queue();
  return promise;
}

}  // namespace

void registerVisionExports(Napi::Env env, Napi::Object exports) { exports.Set("VisionEncoder", VisionEncoderWrap::Define(env)); }

}  // namespace kq
