// The Qwen3.5 vision encoder (llama.cpp's qwen3vl_merger projector) on the CPU-native arm: the same
// computation as @keepquant/engine's VisionEncoderSpec (packages/engine/src/vision/encoder/encoder.ts), bit for
// bit. Matmuls are the llama-numerics matmuls the native providers run (matmulLlama); every other op is f32 in
// the specification's order (LayerNorm as ggml_norm, GELU through ggml's f16 table, soft max with ggml_v_expf and
// the AVX2 sum, ggml_vec_dot_f32's lanes, RoPE with fmaf and the C library's cosf / sinf / powf).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kq {

// A matrix kept in its GGUF encoding: `rows` output features of `cols` values (rows of whole blocks).
struct VisionMatrix {
  int type = 0;
  int rows = 0, cols = 0;
  const uint8_t* data = nullptr;
};

struct VisionLinear {
  VisionMatrix weight;
  const float* bias = nullptr;  // [weight.rows]
};

struct VisionNorm {
  const float* weight = nullptr;  // null: the norm is absent
  const float* bias = nullptr;
};

struct VisionLayer {
  VisionNorm ln1, ln2;
  VisionLinear qkv, out, up, down;
  bool deepstack = false;
  VisionNorm deepstackNorm;                    // [4 * hidden]
  VisionLinear deepstackFc1, deepstackFc2;     // [4 * hidden] -> [projection]
};

struct VisionEncoderDims {
  int patchSize = 0, hidden = 0, heads = 0, ffn = 0, merge = 0, projection = 0, positionSide = 0;
  double eps = 0;  // a double, as the specification adds it (fround(fround(var / n) + eps))
};

// Borrowed weights (the caller keeps them alive and unchanged while the encoder exists).
struct VisionEncoderWeights {
  VisionMatrix patch[2];        // [hidden, 3 * patch * patch], F32 or F16
  const float* patchBias = nullptr;
  const float* position = nullptr;  // [positionSide^2, hidden]
  VisionNorm preNorm, postNorm;
  std::vector<VisionLayer> layers;
  VisionLinear mm0, mm2;
};

// The largest image side the encoder accepts, in pixels (the attention is quadratic in the patch count).
constexpr int kVisionMaxSide = 8192;
// The largest patch count of one image: a [n, n] score row per query and [n, 3 * hidden] activations.
constexpr int64_t kVisionMaxPatches = 65536;

class VisionEncoder {
 public:
  // Checks every shape against `dims` (throws std::invalid_argument naming the tensor).
  VisionEncoder(const VisionEncoderDims& dims, VisionEncoderWeights weights);

  int outputWidth() const;
  // Pixels per merged token side (patch * merge): image sides are multiples of it.
  int pixelUnit() const { return dims_.patchSize * dims_.merge; }
  // Why an image cannot be encoded (empty: it can): sides, plane size, patch count.
  std::string checkImage(int64_t width, int64_t height, int64_t pixelCount) const;
  // `out` receives [tokens, outputWidth()] with tokens = (width / (patch * merge)) * (height / (patch * merge)).
  // The image must pass checkImage. Multithreaded over the addon's pool.
  void encode(const float* pixels, int width, int height, float* out) const;

 private:
  void linear(const VisionLinear& l, const float* x, int m, float* y) const;
  void layer(const VisionLayer& w, float* hidden, int n, const float* cosTable, const float* sinTable) const;
  void mergerFfn(const float* hidden, int rows, const VisionNorm* norm, const VisionLinear& fc1, const VisionLinear& fc2,
                 float* out) const;

  VisionEncoderDims dims_;
  VisionEncoderWeights w_;
  std::vector<uint16_t> patchF16_[2];  // an F32 kernel rounded to f16 (ggml_conv_2d's im2col is F16)
};

// ggml_vec_gelu_f32 (GGML_GELU_FP16): x <= -10 gives 0, x >= 10 keeps x, else the f16 table entry of f16(x).
void visionGeluRow(float* x, int64_t n);
// The table (gelu of every f16 input, rounded to f16; non-finite inputs kept) as f32 values, 65536 of them.
const float* visionGeluTable();

}  // namespace kq
