// The vision encoder (vision_encoder.h): VisionEncoderSpec's computation, op for op and rounding for rounding.
// The compile options of the addon (-ffp-contract=off) keep every f32 operation below one IEEE operation, as
// the specification's Math.fround steps are; std::fma is its fmaf; double arithmetic stands where it computes
// in f64 (the LayerNorm and soft max sums, the position-grid scales).
#include "model/vision_encoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "core/common.h"
#include "core/threadpool.h"
#include "cpu/dispatch.h"
#include "cpu/matmul.h"
#include "model/forward_ops.h"

namespace kq {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

// ggml_gelu_f32 in f32 steps, tanh in f64 rounded once (the specification's Math.tanh).
float geluF32(float x) {
  const float kGeluCoefA = (float)0.044715;  // fround(0.044715): decimal -> double -> float
  const float kSqrt2OverPi = (float)0.7978845608028654;
  const float inner = (kSqrt2OverPi * x) * (1.0f + (kGeluCoefA * x) * x);
  return (0.5f * x) * (1.0f + (float)std::tanh((double)inner));
}

struct GeluTable {
  float values[65536];
  GeluTable() {
    for (int i = 0; i < 65536; ++i) {
      const float x = halfToF32((uint16_t)i);
      values[i] = std::isfinite(x) ? halfToF32(f32ToHalf(geluF32(x))) : x;
    }
  }
};

// ggml_norm then `* w + b` over n values (ggml-ops.ts layerNorm): an f64 sum of the row; the variance of the
// centred row as an f64 sum of 8-lane f32 partial sums ((d0 + d4) + (d2 + d6)) + ((d1 + d5) + (d3 + d7)), the
// tail's squares added one by one; eps added in f64 to the f32 variance.
void layerNorm(const float* x, const float* w, const float* b, float* out, int n, double eps) {
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += x[i];
  const float mean = (float)sum / (float)n;
  double variance = 0;
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    float d[8];
    for (int l = 0; l < 8; ++l) {
      const float v = x[i + l] - mean;
      out[i + l] = v;
      d[l] = v * v;
    }
    const float a0 = d[0] + d[4], a1 = d[1] + d[5], a2 = d[2] + d[6], a3 = d[3] + d[7];
    variance += (double)((a0 + a2) + (a1 + a3));
  }
  for (; i < n; ++i) {
    const float v = x[i] - mean;
    out[i] = v;
    variance += (double)(v * v);
  }
  const float var = (float)(variance / n);
  const float scale = 1.0f / std::sqrt((float)((double)var + eps));
  for (int k = 0; k < n; ++k) out[k] = (out[k] * scale) * w[k] + b[k];
}

// ggml_soft_max_ext of one row without a mask (ggml-ops.ts softMaxRow): scale, subtract the max, ggml_v_expf,
// the AVX2 sum (each 8-lane vector's f32 horizontal sum added to an f64 sum), times the f32 reciprocal.
void softMaxRow(float* s, int n, float scale, float (*vexpf)(float)) {
  float max = -INFINITY;
  for (int j = 0; j < n; ++j) {
    s[j] = s[j] * scale;
    if (s[j] > max) max = s[j];
  }
  for (int j = 0; j < n; ++j) s[j] = vexpf(s[j] - max);
  double sum = 0;
  for (int g = 0; g < n; g += 8) {
    float lane[8];
    for (int l = 0; l < 8; ++l) lane[l] = g + l < n ? s[g + l] : 0.0f;
    const float t0 = lane[0] + lane[4], t1 = lane[1] + lane[5], t2 = lane[2] + lane[6], t3 = lane[3] + lane[7];
    sum += (double)((t0 + t2) + (t1 + t3));
  }
  const float inv = (float)(1.0 / sum);
  for (int j = 0; j < n; ++j) s[j] = s[j] * inv;
}

// fn(task, i0, i1) over `items` split into contiguous tasks (about 4 per thread, at least `minPerTask` each);
// every item runs once whatever the split, so results do not depend on the thread count.
template <typename F>
void parallelChunks(int64_t items, int64_t minPerTask, F&& fn) {
  const int64_t byThreads = (int64_t)threadCount() * 4;
  const int64_t bySize = std::max<int64_t>(1, items / std::max<int64_t>(1, minPerTask));
  const int tasks = (int)std::max<int64_t>(1, std::min({items, byThreads, bySize}));
  if (tasks <= 1) {
    fn(0, items);
    return;
  }
  parallelFor(tasks, [&](int t) { fn(items * t / tasks, items * (t + 1) / tasks); });
}

// The token order of the encoder: merge x merge groups in row-major group order, row-major inside each group;
// order[t] is the raster index of token t (encoder.ts mergeOrder).
std::vector<int32_t> mergeOrder(int px, int py, int merge) {
  std::vector<int32_t> order((size_t)px * py);
  size_t t = 0;
  for (int gy = 0; gy < py; gy += merge)
    for (int gx = 0; gx < px; gx += merge)
      for (int dy = 0; dy < merge; ++dy)
        for (int dx = 0; dx < merge; ++dx) order[t++] = (gy + dy) * px + gx + dx;
  return order;
}

void checkMatrix(const VisionMatrix& m, const std::string& name, int rows, int cols) {
  if (m.rows != rows || m.cols != cols)
    throw std::invalid_argument(name + " is [" + str(m.rows) + ", " + str(m.cols) + "], expected [" + str(rows) + ", " + str(cols) + "]");
  const TypeTraits& t = typeTraits(m.type);
  if (t.blockSize == 0 || kernels().type[m.type].vec_dot == nullptr || t.vecDotType < 0)
    throw std::invalid_argument(name + ": ggml type " + str(m.type) + " has no matmul kernel here");
  const int act = t.vecDotType;
  if (cols % t.blockSize != 0 || cols % typeTraits(act).blockSize != 0)
    throw std::invalid_argument(name + ": " + str(cols) + " columns are not whole " + t.name + " / " + typeTraits(act).name + " blocks");
  if (!m.data) throw std::invalid_argument(name + ": no data");
}

void checkNorm(const VisionNorm& n, const std::string& name) {
  if ((n.weight == nullptr) != (n.bias == nullptr)) throw std::invalid_argument(name + ": weight and bias go together");
}

}  // namespace

const float* visionGeluTable() {
  static const GeluTable* table = new GeluTable();  // built once (thread-safe static), never freed
  return table->values;
}

void visionGeluRow(float* x, int64_t n) {
  const float* t = visionGeluTable();
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    if (v <= -10.0f) x[i] = 0.0f;
    else if (v < 10.0f) x[i] = t[f32ToHalf(v)];
  }
}

VisionEncoder::VisionEncoder(const VisionEncoderDims& dims, VisionEncoderWeights weights) : dims_(dims), w_(std::move(weights)) {
  const VisionEncoderDims& d = dims_;
  if (d.patchSize < 1 || d.hidden < 1 || d.heads < 1 || d.ffn < 1 || d.merge < 1 || d.projection < 1 || d.positionSide < 1)
    throw std::invalid_argument("dims: every size must be a positive integer");
  if (!(d.eps >= 0) || !std::isfinite(d.eps)) throw std::invalid_argument("dims.eps must be finite and not negative");
  if (d.hidden % d.heads != 0 || (d.hidden / d.heads) % 4 != 0)
    throw std::invalid_argument("dims: hidden " + str(d.hidden) + " / heads " + str(d.heads) + " is not a head size divisible by 4");
  const int D = d.hidden, K = 3 * d.patchSize * d.patchSize, G = d.merge * d.merge * D;
  for (int i = 0; i < 2; ++i) {
    const std::string name = i == 0 ? "patch[0]" : "patch[1]";
    const VisionMatrix& p = w_.patch[i];
    if (p.type != T_F32 && p.type != T_F16) throw std::invalid_argument(name + ": the convolution kernel must be F32 or F16");
    checkMatrix(p, name, D, K);
    if (p.type == T_F32) {
      // ggml_conv_2d's im2col is F16: an F32 kernel becomes an F16 copy (encoder.ts convKernelF16)
      patchF16_[i].resize((size_t)D * K);
      const float* src = reinterpret_cast<const float*>(p.data);
      for (size_t j = 0; j < patchF16_[i].size(); ++j) patchF16_[i][j] = f32ToHalf(src[j]);
      w_.patch[i].type = T_F16;
      w_.patch[i].data = reinterpret_cast<const uint8_t*>(patchF16_[i].data());
    }
  }
  if (!w_.patchBias || !w_.position) throw std::invalid_argument("patchBias and position are required");
  checkNorm(w_.preNorm, "preNorm");
  checkNorm(w_.postNorm, "postNorm");
  for (size_t il = 0; il < w_.layers.size(); ++il) {
    const VisionLayer& l = w_.layers[il];
    const std::string b = "layers[" + str((int64_t)il) + "].";
    if (!l.ln1.weight || !l.ln2.weight) throw std::invalid_argument(b + "ln1 and ln2 are required");
    checkNorm(l.ln1, b + "ln1");
    checkNorm(l.ln2, b + "ln2");
    checkMatrix(l.qkv.weight, b + "qkv", 3 * D, D);
    checkMatrix(l.out.weight, b + "out", D, D);
    checkMatrix(l.up.weight, b + "up", d.ffn, D);
    checkMatrix(l.down.weight, b + "down", D, d.ffn);
    if (l.deepstack) {
      if (!l.deepstackNorm.weight) throw std::invalid_argument(b + "deepstack.norm is required");
      checkNorm(l.deepstackNorm, b + "deepstack.norm");
      checkMatrix(l.deepstackFc1.weight, b + "deepstack.fc1", l.deepstackFc1.weight.rows, G);
      checkMatrix(l.deepstackFc2.weight, b + "deepstack.fc2", d.projection, l.deepstackFc1.weight.rows);
    }
    for (const VisionLinear* lin : {&l.qkv, &l.out, &l.up, &l.down})
      if (!lin->bias) throw std::invalid_argument(b + "every linear needs its bias");
    if (l.deepstack && (!l.deepstackFc1.bias || !l.deepstackFc2.bias)) throw std::invalid_argument(b + "deepstack biases are required");
  }
  checkMatrix(w_.mm0.weight, "mm0", w_.mm0.weight.rows, G);
  checkMatrix(w_.mm2.weight, "mm2", d.projection, w_.mm0.weight.rows);
  if (!w_.mm0.bias || !w_.mm2.bias) throw std::invalid_argument("mm0 and mm2 need their biases");
  visionGeluTable();
}

int VisionEncoder::outputWidth() const {
  int deepstack = 0;
  for (const VisionLayer& l : w_.layers) deepstack += l.deepstack ? 1 : 0;
  return dims_.projection * (1 + deepstack);
}

std::string VisionEncoder::checkImage(int64_t width, int64_t height, int64_t pixelCount) const {
  const int64_t unit = (int64_t)dims_.patchSize * dims_.merge;
  if (width < 1 || height < 1 || width > kVisionMaxSide || height > kVisionMaxSide)
    return "image " + str(width) + "x" + str(height) + ": each side must be 1 .. " + str(kVisionMaxSide) + " pixels";
  if (width % unit != 0 || height % unit != 0)
    return "image " + str(width) + "x" + str(height) + " is not a multiple of " + str(unit) + " pixels on each side";
  const int64_t patches = (width / dims_.patchSize) * (height / dims_.patchSize);
  if (patches > kVisionMaxPatches)
    return "image " + str(width) + "x" + str(height) + " has " + str(patches) + " patches, more than " + str(kVisionMaxPatches);
  if (pixelCount != 3 * width * height)
    return "image pixels: expected " + str(3 * width * height) + " values for 3x" + str(height) + "x" + str(width) + ", got " +
           str(pixelCount);
  return "";
}

void VisionEncoder::linear(const VisionLinear& l, const float* x, int m, float* y) const {
  const VisionMatrix& w = l.weight;
  matmulLlama(w.type, w.data, w.rows, w.cols, x, m, y);
  const int N = w.rows;
  parallelChunks(m, 8, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      for (int i = 0; i < N; ++i) y[t * N + i] = y[t * N + i] + l.bias[i];
  });
}

void VisionEncoder::encode(const float* pixels, int width, int height, float* out) const {
  const int p = dims_.patchSize, D = dims_.hidden, merge = dims_.merge, S = dims_.positionSide;
  const int px = width / p, py = height / p, n = px * py, K = 3 * p * p;
  const std::vector<int32_t> order = mergeOrder(px, py, merge);

  // im2col: one row per patch (raster order), elements (channel, ky, kx)
  std::vector<float> cols((size_t)n * K);
  const size_t plane = (size_t)width * height;
  parallelChunks(n, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int y = (int)(r / px), x = (int)(r % px);
      for (int c = 0; c < 3; ++c)
        for (int ky = 0; ky < p; ++ky)
          std::memcpy(&cols[(size_t)r * K + (size_t)(c * p + ky) * p], pixels + c * plane + (size_t)(y * p + ky) * width + (size_t)x * p,
                      sizeof(float) * p);
    }
  });
  std::vector<float> a((size_t)n * D), b((size_t)n * D);
  matmulLlama(w_.patch[0].type, w_.patch[0].data, D, K, cols.data(), n, a.data());
  matmulLlama(w_.patch[1].type, w_.patch[1].data, D, K, cols.data(), n, b.data());

  // position embeddings, raster order: the trained grid, or its bilinear resize with corners aligned
  std::vector<float> resized;
  const float* pos = w_.position;
  if (px != S || py != S) {
    resized.resize((size_t)n * D);
    const float* table = w_.position;
    const float sfx = px > 1 && S > 1 ? (float)((double)(px - 1) / (S - 1)) : (float)((double)px / S);
    const float sfy = py > 1 && S > 1 ? (float)((double)(py - 1) / (S - 1)) : (float)((double)py / S);
    for (int i1 = 0; i1 < py; ++i1) {
      const float y = (float)((double)i1 / sfy);
      const int y0 = std::min(std::max((int)std::floor(y), 0), S - 1);
      const int y1 = std::min(std::max((int)std::floor(y) + 1, 0), S - 1);
      const float dy = std::max(0.0f, std::min((float)((double)y - y0), 1.0f));
      for (int i0 = 0; i0 < px; ++i0) {
        const float x = (float)((double)i0 / sfx);
        const int x0 = std::min(std::max((int)std::floor(x), 0), S - 1);
        const int x1 = std::min(std::max((int)std::floor(x) + 1, 0), S - 1);
        const float dx = std::max(0.0f, std::min((float)((double)x - x0), 1.0f));
        const float wa = (1.0f - dx) * (1.0f - dy), wb = dx * (1.0f - dy), wc = (1.0f - dx) * dy, wd = dx * dy;
        float* o = &resized[((size_t)i1 * px + i0) * D];
        const float* ra = table + ((size_t)y0 * S + x0) * D;
        const float* rb = table + ((size_t)y0 * S + x1) * D;
        const float* rc = table + ((size_t)y1 * S + x0) * D;
        const float* rd = table + ((size_t)y1 * S + x1) * D;
        for (int e = 0; e < D; ++e) {
          const float v = ra[e] * wa + rb[e] * wb;
          o[e] = (v + rc[e] * wc) + rd[e] * wd;
        }
      }
    }
    pos = resized.data();
  }

  // patches in merge order: (conv0 + conv1) + bias, then + position
  std::vector<float> hidden((size_t)n * D);
  parallelChunks(n, 16, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const size_t src = (size_t)order[t] * D;
      float* h = &hidden[(size_t)t * D];
      for (int e = 0; e < D; ++e) h[e] = ((a[src + e] + b[src + e]) + w_.patchBias[e]) + pos[src + e];
    }
  });
  if (w_.preNorm.weight) {
    parallelChunks(n, 8, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t)
        layerNorm(&hidden[(size_t)t * D], w_.preNorm.weight, w_.preNorm.bias, &hidden[(size_t)t * D], D, dims_.eps);
    });
  }

  // the rotary tables: the first quarter of each head's pairs turns with the patch row, the second with its column
  const int Dh = D / dims_.heads, half = Dh / 2, quarter = Dh / 4;
  const float thetaScale = powf(10000.0f, (float)(-2.0 / half));
  std::vector<float> cosTable((size_t)n * half), sinTable((size_t)n * half);
  parallelChunks(n, 16, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float thetaRow = (float)(order[t] / px), thetaCol = (float)(order[t] % px);
      for (int j = 0; j < half; ++j) {
        const float theta = j < quarter ? thetaRow : thetaCol;
        cosTable[(size_t)t * half + j] = cosf(theta);
        sinTable[(size_t)t * half + j] = sinf(theta);
        if (j < quarter) thetaRow = thetaRow * thetaScale;
        else thetaCol = thetaCol * thetaScale;
      }
    }
  });

  const int group = merge * merge, tokens = n / group, P = dims_.projection, outWidth = outputWidth();
  std::vector<float> merged;
  int deepstackIndex = 0;
  for (const VisionLayer& l : w_.layers) {
    layer(l, hidden.data(), n, cosTable.data(), sinTable.data());
    if (!l.deepstack) continue;
    ++deepstackIndex;
    merged.resize((size_t)tokens * P);
    mergerFfn(hidden.data(), tokens, &l.deepstackNorm, l.deepstackFc1, l.deepstackFc2, merged.data());
    for (int t = 0; t < tokens; ++t)
      std::memcpy(out + (size_t)t * outWidth + (size_t)deepstackIndex * P, &merged[(size_t)t * P], sizeof(float) * P);
  }
  if (w_.postNorm.weight) {
    parallelChunks(n, 8, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t)
        layerNorm(&hidden[(size_t)t * D], w_.postNorm.weight, w_.postNorm.bias, &hidden[(size_t)t * D], D, dims_.eps);
    });
  }
  merged.resize((size_t)tokens * P);
  mergerFfn(hidden.data(), tokens, nullptr, w_.mm0, w_.mm2, merged.data());
  for (int t = 0; t < tokens; ++t) std::memcpy(out + (size_t)t * outWidth, &merged[(size_t)t * P], sizeof(float) * P);
}

void VisionEncoder::layer(const VisionLayer& w, float* hidden, int n, const float* cosTable, const float* sinTable) const {
  const int D = dims_.hidden, H = dims_.heads, Dh = D / H, half = Dh / 2, F = dims_.ffn;
  const double eps = dims_.eps;
  std::vector<float> normed((size_t)n * D);
  parallelChunks(n, 8, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) layerNorm(hidden + (size_t)t * D, w.ln1.weight, w.ln1.bias, &normed[(size_t)t * D], D, eps);
  });
  std::vector<float> qkv((size_t)n * 3 * D);
  linear(w.qkv, normed.data(), n, qkv.data());
  // RoPE on q and k of every head: one product rounded, one fused (as GCC contracts ggml's rotate_pairs)
  parallelChunks(n, 8, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      for (int part = 0; part < 2; ++part)
        for (int h = 0; h < H; ++h) {
          float* base = &qkv[(size_t)t * 3 * D + (size_t)part * D + (size_t)h * Dh];
          for (int i = 0; i < half; ++i) {
            const float c = cosTable[(size_t)t * half + i], s = sinTable[(size_t)t * half + i];
            const float x0 = base[i], x1 = base[i + half];
            base[i] = std::fma(x0, c, -(x1 * s));
            base[i + half] = std::fma(x0, s, x1 * c);
          }
        }
  });
  // attention over all patches (no mask): KQ with ggml_vec_dot_f32, soft max, KQV
  const ForwardOps& ops = forwardOps();
  std::vector<float> vT((size_t)D * n);  // per head h: [Dh][n] at h * Dh * n
  parallelChunks(n, 16, [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s)
      for (int e = 0; e < D; ++e) vT[(size_t)e * n + s] = qkv[(size_t)s * 3 * D + 2 * D + e];
  });
  std::vector<float> attn((size_t)n * D);
  const float scale = 1.0f / std::sqrt((float)Dh);
  parallelChunks((int64_t)H * n, 4, [&](int64_t i0, int64_t i1) {
    std::vector<float> scores(n);
    for (int64_t item = i0; item < i1; ++item) {
      const int h = (int)(item / n), t = (int)(item % n);
      const float* q = &qkv[(size_t)t * 3 * D + (size_t)h * Dh];
      for (int s = 0; s < n; ++s) scores[s] = ops.vecDotF32(&qkv[(size_t)s * 3 * D + D + (size_t)h * Dh], q, Dh);
      softMaxRow(scores.data(), n, scale, ops.vexpf);
      const float* v = &vT[(size_t)h * Dh * n];
      for (int i = 0; i < Dh; ++i) attn[(size_t)t * D + (size_t)h * Dh + i] = ops.vecDotF32(v + (size_t)i * n, scores.data(), n);
    }
  });
  std::vector<float> projected((size_t)n * D);
  linear(w.out, attn.data(), n, projected.data());
  for (size_t i = 0; i < (size_t)n * D; ++i) hidden[i] = projected[i] + hidden[i];
  parallelChunks(n, 8, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) layerNorm(hidden + (size_t)t * D, w.ln2.weight, w.ln2.bias, &normed[(size_t)t * D], D, eps);
  });
  std::vector<float> up((size_t)n * F);
  linear(w.up, normed.data(), n, up.data());
  parallelChunks(n, 8, [&](int64_t t0, int64_t t1) { visionGeluRow(&up[(size_t)t0 * F], (t1 - t0) * F); });
  linear(w.down, up.data(), n, projected.data());
  for (size_t i = 0; i < (size_t)n * D; ++i) hidden[i] = hidden[i] + projected[i];
}

void VisionEncoder::mergerFfn(const float* hidden, int rows, const VisionNorm* norm, const VisionLinear& fc1, const VisionLinear& fc2,
                              float* out) const {
  const int width = dims_.merge * dims_.merge * dims_.hidden;
  std::vector<float> normed;
  const float* x = hidden;
  if (norm) {
    normed.resize((size_t)rows * width);
    parallelChunks(rows, 4, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        layerNorm(hidden + (size_t)r * width, norm->weight, norm->bias, &normed[(size_t)r * width], width, dims_.eps);
    });
    x = normed.data();
  }
  const int mid = fc1.weight.rows;
  std::vector<float> midRows((size_t)rows * mid);
  linear(fc1, x, rows, midRows.data());
  parallelChunks(rows, 4, [&](int64_t r0, int64_t r1) { visionGeluRow(&midRows[(size_t)r0 * mid], (r1 - r0) * mid); });
  linear(fc2, midRows.data(), rows, out);
}

}  // namespace kq
