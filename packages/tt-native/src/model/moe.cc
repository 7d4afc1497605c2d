// The MoE FFN (qwen35moe) of the native step: the TypeScript specification's moeFfn
// (packages/engine/src/model/forward.ts) op for op, llama.cpp's build_moe_ffn: the F32 router as
// tinyBLAS computes it, soft_max, top-k by ggml_argsort's order, the weights normalized to sum 1, the
// routed experts grouped by expert as ggml's mul_mat_id groups them (each expert's rows in ascending
// row order, each row a dense row's arithmetic), and the shared expert behind its sigmoid gate.
//
// Speed (bits unchanged): the input is quantized once per step for every expert and the shared expert;
// all selected experts' gate and up matmuls (and the shared expert's) run as one task list in one
// dispatch, the SwiGLU and the down inputs' quantization in one, and every down matmul in one.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "core/threadpool.h"
#include "cpu/dispatch.h"
#include "cpu/kernels.h"
#include "cpu/matmul.h"
#include "cpu/moe_matmul.h"
#include "model/forward_ops.h"
#include "model/model.h"
#include "model/moe_ops.h"

namespace kq {
namespace {

float moeSigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// ggml_soft_max over one row (no mask, scale 1): max; 8-lane vectors through ggml_v_expf with an f32
// horizontal sum each and the tail through expf, all summed in f64; then every value times (float)(1/sum).
void softMaxRow(const ForwardOps& ops, const float* x, float* y, int n) {
  float max = -INFINITY;
  for (int i = 0; i < n; ++i) max = std::max(max, x[i]);
  double sum = 0;
  const int simd = n - n % 8;
  for (int g = 0; g < simd; g += 8) {
    for (int i = 0; i < 8; ++i) y[g + i] = ops.vexpf(x[g + i] - max);
    const float t0 = y[g] + y[g + 4], t1 = y[g + 1] + y[g + 5], t2 = y[g + 2] + y[g + 6], t3 = y[g + 3] + y[g + 7];
    sum += (double)((t0 + t2) + (t1 + t3));
  }
  for (int i = simd; i < n; ++i) {
    y[i] = expf(x[i] - max);
    sum += (double)y[i];
  }
  const float scale = (float)(1.0 / sum);
  for (int i = 0; i < n; ++i) y[i] = y[i] * scale;
}

// ggml_argsort_top_k's first k: ggml_argsort (descending) is std::sort of the indices 0..n-1 by
// v[a] > v[b], so equal values come out in std::sort's (introsort's) order, not by index. Without ties
// that touch the selection the order is the unique descending one, found by selection; otherwise the
// row is sorted as ggml sorts it (`order` is scratch of n indices).
void topK(const float* v, int n, int k, int32_t* out, int32_t* order) {
  for (int s = 0; s < k; ++s) {
    int best = -1;
    for (int i = 0; i < n; ++i) {
      bool taken = false;
      for (int j = 0; j < s; ++j) taken = taken || out[j] == i;
      if (!taken && (best < 0 || v[i] > v[best])) best = i;
    }
    out[s] = best;
  }
  // a selected value equal to any other value (selected or not), or a NaN, makes the order std::sort's
  bool tie = false;
  for (int s = 0; s < k && !tie; ++s) {
    const float value = v[out[s]];
    if (value != value) tie = true;
    for (int i = 0; i < n && !tie; ++i) tie = i != out[s] && (v[i] == value || v[i] != v[i]);
  }
  if (!tie) return;
  std::iota(order, order + n, 0);
  std::sort(order, order + n, [v](int32_t a, int32_t b) { return v[a] > v[b]; });
  std::copy(order, order + k, out);
}

}  // namespace

const MoeOps& moeOps() {
  switch (currentIsaLevel()) {
    case IsaLevel::Avx2:
    case IsaLevel::Avx512:
#if defined(KEEPQUANT_X86)
      return avx2MoeOps();
#endif
    default:
      return genericMoeOps();
  }
}

// Scratch of the grouped path (sizes from the layers' expert types; see moeScratch in model.cc).
size_t Model::moeActRowBytes(const LayerWeights& L, int which) const {
  const ModelShape& c = spec_.shape;
  const WeightMatrix& w = which == 0 ? (L.gateUpExps.data ? L.gateUpExps : L.gateExps) : which == 1 ? L.downExps : L.sharedDown;
  const int act = w.type >= 0 && w.type < kTypeCount ? typeTraits(w.type).vecDotType : -1;
  if (act < 0) return 0;  // no vec_dot: the matmul itself names the type
  const int width = which == 0 ? c.nEmbd : which == 1 ? c.nFfExp : c.nFfShexp;
  return act == T_F32 ? sizeof(float) * (size_t)width : actRowBytes(act, width);
}

void Model::moeFfn(const LayerWeights& L, int rows) {
  const ModelShape& c = spec_.shape;
  const ForwardOps& ops = forwardOps();
  const int D = c.nEmbd, E = c.nExpert, K = c.nExpertUsed;
  const float* x = normed_.data();
  // 1. router logits (an F32 weight: tinyBLAS from 2 rows on, over rows x blocks of experts; one row
  // (llamafile_sgemm declines n < 2): ggml_vec_dot_f32 per expert; any other type through the matmul
  // providers)
  float* logits = moeLogits_.data();
  if (L.router.type == T_F32 && rows == 1) {
    const float* w = reinterpret_cast<const float*>(L.router.data);
    parallelRange(E, 32, [&](int e) { logits[e] = ops.vecDotF32(w + (size_t)e * D, x, D); });
  } else if (L.router.type == T_F32 && D % 8 == 0) {
    const float* w = reinterpret_cast<const float*>(L.router.data);
    const MoeOps& moe = moeOps();
    constexpr int kBlock = 32;
    const int blocks = (E + kBlock - 1) / kBlock;
    parallelRange(rows * blocks, 1, [&](int item) {
      const int t = item / blocks, e0 = (item % blocks) * kBlock;
      moe.routerRows(w, x + (size_t)t * D, D, e0, std::min(kBlock, E - e0), logits + (size_t)t * E + e0);
    });
  } else {
    prepareInput(x, rows, D);
    matmul(L.router, logits);
  }
  // 2. softmax, top-k, weights normalized (f64 sum, one f32 division each)
  float* probs = moeProbs_.data();
  int32_t* ids = moeIds_.data();
  float* weights = moeWeights_.data();
  parallelRange(rows, 4, [&](int t) {
    thread_local std::vector<int32_t> order;
    if (order.size() < (size_t)E) order.resize((size_t)E);
    softMaxRow(ops, logits + (size_t)t * E, probs + (size_t)t * E, E);
    topK(probs + (size_t)t * E, E, K, ids + (size_t)t * K, order.data());
    double sum = 0;
    for (int s = 0; s < K; ++s) sum += (double)probs[(size_t)t * E + ids[(size_t)t * K + s]];
    const float total = (float)sum;
    for (int s = 0; s < K; ++s) weights[(size_t)t * K + s] = probs[(size_t)t * E + ids[(size_t)t * K + s]] / total;
  });
  if (spec_.numerics == Numerics::Bf16) moeExpertsPerExpert(L, rows);
  else moeExpertsGrouped(L, rows);
  // 5. branch = (expert 0 + expert 1 + ... in top-k order) + shared * sigmoid(ggml_vec_dot_f32(shared gate, x)),
  // expert s's term = its down row times its weight, rounded to f32
  float* branch = branch_.data();
  const float* down = moeExperts_.data();
  const int32_t* pairOf = moeSlotPair_.data();
  parallelRange(rows, 1, [&](int t) {
    const float gate = moeSigmoid(ops.vecDotF32(L.sharedGate, x + (size_t)t * D, D));
    const float* sh = moeSharedOut_.data() + (size_t)t * D;
    const float* w = weights + (size_t)t * K;
    const float* y0 = down + (size_t)pairOf[(size_t)t * K] * D;
    for (int i = 0; i < D; ++i) {
      float sum = y0[i] * w[0];
      for (int s = 1; s < K; ++s) {
        const float term = down[(size_t)pairOf[(size_t)t * K + s] * D + i] * w[s];
        sum = sum + term;
      }
      const float shared = sh[i] * gate;
      branch[(size_t)t * D + i] = sum + shared;
    }
  });
}

// 3 + 4 (llama numerics): the selected experts grouped by expert, and the shared expert, in three dispatches.
void Model::moeExpertsGrouped(const LayerWeights& L, int rows) {
  const ModelShape& c = spec_.shape;
  const ForwardOps& ops = forwardOps();
  const int D = c.nEmbd, E = c.nExpert, K = c.nExpertUsed, F = c.nFfExp, S = c.nFfShexp;
  const int32_t* ids = moeIds_.data();
  const bool merged = L.gateUpExps.data != nullptr;
  const WeightMatrix& gu = merged ? L.gateUpExps : L.gateExps;
  // pairs (row, expert) in expert order, rows ascending within an expert: mul_mat_id's grouping
  int32_t* count = moeCount_.data();
  int32_t* first = moeFirst_.data();
  std::fill(count, count + E, 0);
  for (int i = 0; i < rows * K; ++i) ++count[ids[i]];
  first[0] = 0;
  for (int e = 0; e < E; ++e) first[e + 1] = first[e] + count[e];
  std::fill(count, count + E, 0);
  int32_t* pairRow = moePairRow_.data();
  for (int t = 0; t < rows; ++t)
    for (int s = 0; s < K; ++s) {
      const int e = ids[(size_t)t * K + s];
      const int pair = first[e] + count[e]++;
      pairRow[pair] = t;
      moeSlotPair_[(size_t)t * K + s] = pair;
    }
  const int pairs = rows * K;
  // the input, quantized once for every expert and the shared expert; each expert's rows gathered
  prepareInput(normed_.data(), rows, D);
  const int xAct = typeTraits(gu.type).vecDotType;
  size_t xBytes = 0;
  const uint8_t* xq = activations(xAct, &xBytes);
  const uint8_t* expertInput = xq;
  if (rows > 1) {
    uint8_t* gathered = moeActX_.data();
    parallelRange(pairs, 16, [&](int p) { std::memcpy(gathered + (size_t)p * xBytes, xq + (size_t)pairRow[p] * xBytes, xBytes); });
    expertInput = gathered;
  }
  std::vector<LlamaRowsJob>& jobs = moeJobs_;
  jobs.clear();
  float* gate = moeGate_.data();
  float* up = moeUp_.data();
  for (int e = 0; e < E; ++e) {
    const int n = first[e + 1] - first[e];
    if (n == 0) continue;
    const uint8_t* act = rows > 1 ? expertInput + (size_t)first[e] * xBytes : expertInput;
    if (merged) {
      // per expert [2 n_ff_exp] output rows: gate rows first, then up (llama.cpp's views of ffn_gate_up_exps)
      const WeightMatrix w = L.gateUpExps.group(e);
      jobs.push_back(LlamaRowsJob{w.type, w.data, w.rows, D, act, xBytes, n, gate + (size_t)first[e] * 2 * F});
    } else {
      const WeightMatrix g = L.gateExps.group(e), u = L.upExps.group(e);
      jobs.push_back(LlamaRowsJob{g.type, g.data, g.rows, D, act, xBytes, n, gate + (size_t)first[e] * F});
      jobs.push_back(LlamaRowsJob{u.type, u.data, u.rows, D, act, xBytes, n, up + (size_t)first[e] * F});
    }
  }
  const MatmulOut shared[] = {{&L.sharedGateProj, moeShared_.data()}, {&L.sharedUp, moeSharedUp_.data()}};
  for (const MatmulOut& o : shared) {
    size_t bytes = 0;
    const uint8_t* act = activations(typeTraits(o.weight->type).vecDotType, &bytes);
    jobs.push_back(LlamaRowsJob{o.weight->type, o.weight->data, o.weight->rows, D, act, bytes, rows, o.y});
  }
  matmulGrouped(jobs.data(), (int)jobs.size());
  // SwiGLU of every pair and shared row, each quantized for its down matmul
  const int hAct = typeTraits(L.downExps.type).vecDotType, sAct = typeTraits(L.sharedDown.type).vecDotType;
  const size_t hBytes = moeActRowBytes(L, 1), sBytes = moeActRowBytes(L, 2);
  uint8_t* hq = moeActH_.data();
  uint8_t* sq = moeActShared_.data();
  auto encode = [](int act, const float* v, uint8_t* dst, int n) {
    if (act == T_F32) std::memcpy(dst, v, sizeof(float) * (size_t)n);
    else quantizeActRow(act, v, dst, n);
  };
  parallelRange(pairs + rows, 1, [&](int p) {
    if (p < pairs) {
      float* g = merged ? gate + (size_t)p * 2 * F : gate + (size_t)p * F;
      const float* u = merged ? g + F : up + (size_t)p * F;
      ops.swigluRow(g, u, F);
      encode(hAct, g, hq + (size_t)p * hBytes, F);
    } else {
      const int r = p - pairs;
      float* g = moeShared_.data() + (size_t)r * S;
      ops.swigluRow(g, moeSharedUp_.data() + (size_t)r * S, S);
      encode(sAct, g, sq + (size_t)r * sBytes, S);
    }
  });
  jobs.clear();
  float* down = moeExperts_.data();
  for (int e = 0; e < E; ++e) {
    const int n = first[e + 1] - first[e];
    if (n == 0) continue;
    const WeightMatrix w = L.downExps.group(e);
    jobs.push_back(LlamaRowsJob{w.type, w.data, w.rows, F, hq + (size_t)first[e] * hBytes, hBytes, n, down + (size_t)first[e] * D});
  }
  jobs.push_back(LlamaRowsJob{L.sharedDown.type, L.sharedDown.data, L.sharedDown.rows, S, sq, sBytes, rows, moeSharedOut_.data()});
  matmulGrouped(jobs.data(), (int)jobs.size());
}

// 3 + 4 (bf16 numerics): expert by expert over the rows that chose it (ascending row order), then the
// shared expert, through the matmul providers (which decode the weights to bf16).
void Model::moeExpertsPerExpert(const LayerWeights& L, int rows) {
  const ModelShape& c = spec_.shape;
  const ForwardOps& ops = forwardOps();
  const int D = c.nEmbd, E = c.nExpert, K = c.nExpertUsed, F = c.nFfExp, S = c.nFfShexp;
  const float* x = normed_.data();
  const int32_t* ids = moeIds_.data();
  float* down = moeExperts_.data();
  for (int e = 0; e < E; ++e) {
    int n = 0;
    for (int t = 0; t < rows; ++t)
      for (int s = 0; s < K; ++s) {
        if (ids[(size_t)t * K + s] != e) continue;
        moeSlotPair_[(size_t)t * K + s] = t * K + s;
        moePairRow_[n] = t * K + s;
        std::memcpy(moeX_.data() + (size_t)n * D, x + (size_t)t * D, sizeof(float) * D);
        ++n;
      }
    if (n == 0) continue;
    float* gate = moeGate_.data();
    float* up = moeUp_.data();
    prepareInput(moeX_.data(), n, D);
    if (L.gateUpExps.data) {
      // merged: per row [2 n_ff_exp], gate rows first, then up
      const WeightMatrix gu = L.gateUpExps.group(e);
      matmul(gu, gate);
      // in ascending rows: row r's halves move down to [r F) and [r F) of `up`, below what later rows read
      for (int r = 0; r < n; ++r) {
        std::memcpy(up + (size_t)r * F, gate + (size_t)r * 2 * F + F, sizeof(float) * F);
        std::memmove(gate + (size_t)r * F, gate + (size_t)r * 2 * F, sizeof(float) * F);
      }
    } else {
      const WeightMatrix g = L.gateExps.group(e), u = L.upExps.group(e);
      const MatmulOut outs[] = {{&g, gate}, {&u, up}};
      matmulMany(outs, 2);
    }
    parallelRange(n, 4, [&](int r) { ops.swigluRow(gate + (size_t)r * F, up + (size_t)r * F, F); });
    prepareInput(gate, n, F);
    const WeightMatrix w = L.downExps.group(e);
    matmul(w, moeDown_.data());
    // each row's down output goes to its slot's place (slot t K + s), as the combine step reads it
    for (int r = 0; r < n; ++r)
      std::memcpy(down + (size_t)moePairRow_[r] * D, moeDown_.data() + (size_t)r * D, sizeof(float) * D);
  }
  prepareInput(x, rows, D);
  const MatmulOut shared[] = {{&L.sharedGateProj, moeShared_.data()}, {&L.sharedUp, moeSharedUp_.data()}};
  matmulMany(shared, 2);
  parallelRange(rows, 4, [&](int r) { ops.swigluRow(moeShared_.data() + (size_t)r * S, moeSharedUp_.data() + (size_t)r * S, S); });
  prepareInput(moeShared_.data(), rows, S);
  matmul(L.sharedDown, moeSharedOut_.data());
}

}  // namespace kq
