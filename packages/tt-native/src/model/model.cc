// The native qwen35 forward step (see model.h). Every op follows the TypeScript specification
// (packages/engine/src/model/forward.ts) operation for operation: f32 where it rounds to f32, f64
// where it sums in f64, one rounding per fused multiply-add, the C library's expf/logf/cosf/sinf.
// Work is split over the thread pool by rows, heads and channels only, never inside a reduction,
// so results do not depend on the thread count.
#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "cpu/dispatch.h"
#include "model/forward_ops.h"
#include "model/step_descriptor.h"
#include "cpu/kernels.h"
#include "cpu/matmul.h"
#include "cpu/tuning.h"
#include "core/profile.h"
#include "core/threadpool.h"

namespace kq {
namespace {

// The activation encodings a matmul input is quantized to, read off the type table: every vec_dot_type
// but F32 (f32 weights read the input directly), one buffer each, with BF16 sharing F16's (same row
// size; the buffer remembers which encoding it holds).
struct ActivationSlots {
  int count = 0;
  int encoding[kTypeCount] = {};  // slot -> the encoding its buffer is sized for
  int slotOf[kTypeCount] = {};    // activation encoding -> slot, -1 for none
};
constexpr ActivationSlots makeActivationSlots() {
  ActivationSlots s;
  for (int t = 0; t < kTypeCount; ++t) s.slotOf[t] = -1;
  for (int t = 0; t < kTypeCount; ++t) {
    const int act = kTypeTraits[t].vecDotType;
    if (act < 0 || act == T_F32) continue;
    const int key = act == T_BF16 ? T_F16 : act;
    if (s.slotOf[key] < 0) {
      s.slotOf[key] = s.count;
      s.encoding[s.count++] = key;
    }
    s.slotOf[act] = s.slotOf[key];
  }
  return s;
}
constexpr ActivationSlots kActivationSlots = makeActivationSlots();
static_assert(kActivationSlots.count <= kMaxActivationSlots, "more activation encodings than Model has buffers");

// Query rows at or above which llama.cpp's CPU flash attention takes its tiled f32 path.
constexpr int kFlashAttnTiledMinRows = 64;
constexpr int kFlashAttnKvTile = 64;

std::string str(int64_t v) { return std::to_string(v); }

[[noreturn]] void fail(const std::string& message) { throw std::invalid_argument(message); }

float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
float softplus(float x) { return x > 20 ? x : logf(1.0f + expf(x)); }
float roundF16(float v) { return halfToF32(f32ToHalf(v)); }

// ggml_rms_norm then ggml_mul: f64 sum of f32 squares, f32 scale.
void rmsNorm(const float* x, const float* w, float* out, int n, float eps) {
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    const float v = x[i];
    sum += (double)(v * v);
  }
  const float mean = (float)(sum / (double)n);
  const float scale = 1.0f / std::sqrt(mean + eps);
  for (int i = 0; i < n; ++i) out[i] = (x[i] * scale) * w[i];
}

// Per-thread scratch that grows once and is then reused.
template <typename T>
T* threadScratch(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

}  // namespace

Model::Model(ModelSpec spec) : spec_(std::move(spec)) {
  // Shapes were checked when the table was bound (bindModelTable): every tensor against the named
  // dimensions of the description. What is left here is what the table cannot say by itself: the
  // numerics' needs, the cache planes' order and the storage.
  const ModelShape& c = spec_.shape;
  if ((int)spec_.layers.size() != c.nLayer) fail("layers: expected " + str(c.nLayer) + " layers");
  if (spec_.maxBatchTokens < 1) fail("maxBatchTokens must be positive");
  const int D = c.nEmbd;
  keyDim_ = c.keyDim;
  valueDim_ = c.ssmInnerSize;
  convDim_ = c.convDim;
  headVDim_ = c.headVDim;
  kvRowStride_ = (size_t)c.kvDim;
  convStride_ = c.convStateElements;
  ssmStride_ = c.ssmStateElements;

  // the rotary section of every rotated pair (no table: every pair turns with t)
  const size_t pairs = (size_t)(c.nRot / 2);
  if (spec_.ropeSections.empty()) spec_.ropeSections.assign(pairs, 0);
  if (spec_.ropeSections.size() != pairs)
    fail("ropeSections: " + str((int64_t)spec_.ropeSections.size()) + " values, expected one per rotated pair (" + str((int64_t)pairs) + ")");
  for (size_t i = 0; i < pairs; ++i)
    if (spec_.ropeSections[i] > 2) fail("ropeSections[" + str((int64_t)i) + "] is " + str(spec_.ropeSections[i]) + ", expected 0 (t), 1 (h) or 2 (w)");

  if (!dequantSupported(spec_.tokenEmbd.type)) fail("token_embd: type " + str(spec_.tokenEmbd.type) + " cannot be decoded");
  if (spec_.numerics == Numerics::Bf16 && !spec_.tokenEmbdTwin) fail("bf16 numerics need the token embedding's bf16 twin");
  int attentionLayers = 0, gdnLayers = 0;
  for (int il = 0; il < c.nLayer; ++il) {
    const LayerWeights& L = spec_.layers[il];
    const std::string p = "blk." + str(il);
    switch (kinds::mixerOp(L.mixer)) {  // a GDN state plane, or a KV plane
      case MixerOp::Gdn:
        if (L.cacheIndex != gdnLayers++) fail(p + ": state layer index out of order");
        break;
      case MixerOp::Attention:
        if (L.cacheIndex != attentionLayers++) fail(p + ": KV layer index out of order");
        break;
    }
  }
  const DrafterWeights& d = spec_.drafter;
  if (d.present) {
    const std::string p = "blk." + str(c.nLayer) + ".";
    // the drafter's head may be a prefix of the shared head's rows (a reduced drafter vocabulary)
    if (d.head.rows < 1 || d.head.rows > c.nVocab)
      fail(p + "head: " + str(d.head.rows) + " rows, expected 1 .. " + str(c.nVocab) + " (a prefix of the vocabulary)");
    if (d.embedTokens.type >= 0 && !dequantSupported(d.embedTokens.type))
      fail(p + "nextn.embed_tokens: type " + str(d.embedTokens.type) + " cannot be decoded");
    if (d.block.cacheIndex != attentionLayers)
      fail(p + ": the drafter's KV plane must follow the trunk's (" + str(attentionLayers) + ")");
  }
  const int kvPlanes = attentionLayers + (d.present ? 1 : 0);
  const KvStorage& kv = spec_.kv;
  if ((int)kv.k.size() != kvPlanes || (int)kv.v.size() != kvPlanes)
    fail("kv: expected " + str(kvPlanes) + " K and V planes");
  if (kvPlanes > 0 && (kv.blockSize < 1 || kv.numBlocks < 1)) fail("kv: blockSize and numBlocks must be positive");
  for (void* p : kv.k)
    if (!p) fail("kv: a K plane is missing");
  for (void* p : kv.v)
    if (!p) fail("kv: a V plane is missing");
  const StateStorage& st = spec_.states;
  if ((int)st.conv.size() != gdnLayers || (int)st.ssm.size() != gdnLayers)
    fail("states: expected " + str(gdnLayers) + " conv and recurrent planes");
  if (gdnLayers > 0 && st.numSlots < 1) fail("states: numSlots must be positive");
  const StateStorage& snap = spec_.snapshots;
  if (!snap.conv.empty() || !snap.ssm.empty()) {
    if ((int)snap.conv.size() != gdnLayers || (int)snap.ssm.size() != gdnLayers)
      fail("snapshots: expected " + str(gdnLayers) + " conv and recurrent planes");
    if (snap.numSlots != st.numSlots) fail("snapshots: numSlots must equal states.numSlots");
  }

  const size_t T = (size_t)spec_.maxBatchTokens;
  auto alloc = [&](std::vector<float>& v, size_t n) {
    v.assign(n, 0.0f);
    scratchBytes_ += n * sizeof(float);
  };
  // the scratch of model_scratch.h: [T, width] each
#define KQ_SCRATCH_ALLOC(buffer, width) alloc(buffer##_, T * (size_t)c.width);
  KQ_SCRATCH_TRUNK(KQ_SCRATCH_ALLOC)
  alloc(outHidden_, T * D);
  KQ_SCRATCH_FFN_DENSE(KQ_SCRATCH_ALLOC)  // on every model (on an MoE model: feed_forward_length wide, or 0)
  const bool anyMoe = std::any_of(spec_.layers.begin(), spec_.layers.end(), [](const LayerWeights& L) { return kinds::ffnOp(L.ffn) == FfnOp::Moe; }) ||
                      (d.present && kinds::ffnOp(d.block.ffn) == FfnOp::Moe);
  if (anyMoe) {
    const size_t E = (size_t)c.nExpert, K = (size_t)c.nExpertUsed, F = (size_t)c.nFfExp, S = (size_t)c.nFfShexp;
    alloc(moeLogits_, T * E);
    alloc(moeProbs_, T * E);
    alloc(moeWeights_, T * K);
    alloc(moeX_, T * D);
    // every (row, expert) pair of a step at once: gate|up [2 F] and down [D] per pair
    alloc(moeGate_, T * K * 2 * F);
    alloc(moeUp_, T * K * F);
    alloc(moeDown_, T * D);
    alloc(moeExperts_, T * K * D);
    alloc(moeShared_, T * S);
    alloc(moeSharedUp_, T * S);
    alloc(moeSharedOut_, T * D);
    moeIds_.assign(T * K, 0);
    moeCount_.assign(E, 0);
    moeFirst_.assign(E + 1, 0);
    moePairRow_.assign(T * K, 0);
    moeSlotPair_.assign(T * K, 0);
    moeJobs_.reserve(2 * E + 4);
    size_t xBytes = 0, hBytes = 0, sBytes = 0;
    auto widest = [&](const LayerWeights& L) {
      if (kinds::ffnOp(L.ffn) != FfnOp::Moe) return;
      xBytes = std::max(xBytes, moeActRowBytes(L, 0));
      hBytes = std::max(hBytes, moeActRowBytes(L, 1));
      sBytes = std::max(sBytes, moeActRowBytes(L, 2));
    };
    for (const LayerWeights& L : spec_.layers) widest(L);
    if (d.present) widest(d.block);
    moeActX_.assign(T * K * xBytes, 0);
    moeActH_.assign(T * K * hBytes, 0);
    moeActShared_.assign(T * sBytes, 0);
    scratchBytes_ += moeActX_.size() + moeActH_.size() + moeActShared_.size();
  }
  if (d.present) alloc(concat_, T * c.ehProjIn);
  alloc(headInput_, T * D);
  logitAmongKept_.assign(T, 0);
  if (kvPlanes > 0) {
    KQ_SCRATCH_MIXER_ATTENTION(KQ_SCRATCH_ALLOC)
  }
  if (gdnLayers > 0) {
    KQ_SCRATCH_MIXER_GDN(KQ_SCRATCH_ALLOC)
  }
#undef KQ_SCRATCH_ALLOC
  rowEntry_.assign(T, 0);
  entryRow0_.assign(T, 0);
  rowPos_.assign(T, 0);
  rowRope_.assign(3 * T, 0);
  outRows_.assign(T, 0);
  // Activation buffers for the widest input in each encoding (f32 weights read x directly).
  const int widths[] = {D, c.attnOutDim, valueDim_, c.nFf, d.present ? c.ehProjIn : 0, c.nFfExp, c.nFfShexp};
  for (int i = 0; i < kActivationSlots.count; ++i) {
    const int encoding = kActivationSlots.encoding[i];
    size_t bytes = 0;
    for (int width : widths) {
      const TypeTraits& ti = typeTraits(encoding);
      if (width > 0 && width % ti.blockSize == 0) bytes = std::max(bytes, actRowBytes(encoding, width) * T);
    }
    actBuffer_[i].assign(bytes, 0);
    scratchBytes_ += bytes;
  }
}

// ---------------------------------------------------------------------------------------------
// Step descriptor (Int32Array): its layout is defined once, in src/step-descriptor.ts; the offsets
// below come from the header generated from it (model/step_descriptor.h).

StepShape Model::parseStep(const int32_t* desc, size_t length, std::vector<StepEntry>& entries) const {
  entries.clear();
  if (length < (size_t)step::kHeaderLength) fail("step descriptor is empty");
  StepShape shape;
  const int kind = desc[step::kHeaderKind];
  if (kind != step::kKindTrunk && kind != step::kKindDrafter)
    fail("step descriptor: kind must be " + str(step::kKindTrunk) + " (trunk) or " + str(step::kKindDrafter) + " (drafter), got " + str(kind));
  shape.drafter = kind == step::kKindDrafter;
  if (shape.drafter && !spec_.drafter.present) fail("drafter step: this model has no MTP drafter block");
  const int count = desc[step::kHeaderEntryCount];
  if (count < 0) fail("step descriptor: negative entry count");
  size_t at = step::kHeaderLength;
  int totalTokens = 0, totalLogits = 0, totalHidden = 0;
  const ModelShape& c = spec_.shape;
  const bool anyGdn = !shape.drafter && !spec_.states.conv.empty();
  const bool anyAttention = !spec_.kv.k.empty();
  std::vector<int> slotsSeen;
  for (int e = 0; e < count; ++e) {
    const std::string where = "step entry " + str(e) + ": ";
    if (at + step::kEntryLength > length) fail(where + "descriptor is truncated");
    StepEntry s;
    s.nTokens = desc[at + step::kEntryNTokens];
    s.startPos = desc[at + step::kEntryStartPos];
    s.stateSlot = desc[at + step::kEntryStateSlot];
    s.nLogits = desc[at + step::kEntryNLogitRows];
    s.blockCount = desc[at + step::kEntryBlockCount];
    const int flags = desc[at + step::kEntryFlags];
    s.snapshotRow = desc[at + step::kEntrySnapshotRow];
    const int nRope = desc[at + step::kEntryNRopePositions];
    s.nEmbeddingRows = desc[at + step::kEntryNEmbeddingRows];
    at += step::kEntryLength;
    if (s.snapshotRow < -1 || s.snapshotRow >= s.nTokens) fail(where + "snapshot row must be -1 or a row of the chunk");
    if (s.snapshotRow >= 0 && (shape.drafter || spec_.snapshots.conv.empty()))
      fail(where + "a GDN state snapshot needs a trunk step and a model with snapshot planes");
    if (flags != 0 && flags != step::kFlagKeepHidden) fail(where + "flags must be 0 or " + str(step::kFlagKeepHidden));
    if (flags != 0 && shape.drafter) fail(where + "a drafter step keeps the logit rows' hidden states only (flags must be 0)");
    s.hidden = flags == step::kFlagKeepHidden;
    if (s.nTokens < 1) fail(where + "nTokens must be positive");
    if (s.startPos < 0) fail(where + "startPos must be >= 0");
    if (s.nLogits < 0 || s.nLogits > s.nTokens) fail(where + "logit row count out of range");
    if (s.blockCount < 0) fail(where + "negative block count");
    if (nRope != 0 && nRope != 3 * s.nTokens)
      fail(where + "rotary positions: " + str(nRope) + " values, expected 0 or 3 per row (" + str(3 * (int64_t)s.nTokens) + ")");
    if (s.nEmbeddingRows < 0 || s.nEmbeddingRows > s.nTokens) fail(where + "embedding row count out of range");
    if ((nRope != 0 || s.nEmbeddingRows != 0) && shape.drafter)
      fail(where + "a drafter step takes token rows at their own positions (no rotary positions or embedding rows)");
    if (at + (size_t)s.nTokens + (size_t)s.nLogits + (size_t)s.blockCount + (size_t)nRope + (size_t)s.nEmbeddingRows > length)
      fail(where + "descriptor is truncated");
    s.tokens = desc + at;
    at += s.nTokens;
    s.logitRows = desc + at;
    at += s.nLogits;
    s.blockTable = desc + at;
    at += s.blockCount;
    s.ropePositions = nRope != 0 ? desc + at : nullptr;
    at += nRope;
    s.embeddingRows = desc + at;
    at += s.nEmbeddingRows;
    for (int i = 0; i < s.nEmbeddingRows; ++i) {
      const int r = s.embeddingRows[i];
      if (r < 0 || r >= s.nTokens || (i > 0 && r <= s.embeddingRows[i - 1]))
        fail(where + "embedding rows must be ascending indices in [0, " + str(s.nTokens) + ")");
    }
    // an embedding row's token is a placeholder, never looked up
    for (int i = 0, next = 0; i < s.nTokens; ++i) {
      if (next < s.nEmbeddingRows && s.embeddingRows[next] == i) {
        ++next;
        continue;
      }
      if (s.tokens[i] < 0 || s.tokens[i] >= c.nVocab)
        fail(where + "token " + str(s.tokens[i]) + " at row " + str(i) + " is outside [0, " + str(c.nVocab) + ")");
    }
    for (int i = 0; i < s.nLogits; ++i) {
      const int r = s.logitRows[i];
      if (r < 0 || r >= s.nTokens || (i > 0 && r <= s.logitRows[i - 1]))
        fail(where + "logit rows must be ascending indices in [0, " + str(s.nTokens) + ")");
    }
    const int64_t end = (int64_t)s.startPos + s.nTokens;
    if (anyAttention) {
      const int bs = spec_.kv.blockSize;
      const int64_t needed = (end + bs - 1) / bs;
      if (s.blockCount < needed)
        fail(where + "block table has " + str(s.blockCount) + " blocks, positions [0, " + str(end) + ") need " + str(needed));
      for (int64_t i = 0; i < needed; ++i)
        if (s.blockTable[i] < 0 || s.blockTable[i] >= spec_.kv.numBlocks)
          fail(where + "block id " + str(s.blockTable[i]) + " is outside [0, " + str(spec_.kv.numBlocks) + ")");
    }
    if (anyGdn) {
      if (s.stateSlot < 0 || s.stateSlot >= spec_.states.numSlots)
        fail(where + "state slot " + str(s.stateSlot) + " is outside [0, " + str(spec_.states.numSlots) + ")");
      if (std::find(slotsSeen.begin(), slotsSeen.end(), s.stateSlot) != slotsSeen.end())
        fail(where + "state slot " + str(s.stateSlot) + " appears twice in one step");
      slotsSeen.push_back(s.stateSlot);
    }
    totalTokens += s.nTokens;
    totalLogits += s.nLogits;
    totalHidden += s.hidden ? s.nTokens : s.nLogits;
    shape.embeddingRows += s.nEmbeddingRows;
    if (totalTokens > spec_.maxBatchTokens)
      fail("step has more than maxBatchTokens (" + str(spec_.maxBatchTokens) + ") tokens");
    entries.push_back(s);
  }
  if (at != length) fail("step descriptor has " + str((int64_t)(length - at)) + " trailing values");
  shape.tokens = totalTokens;
  shape.logits = totalLogits;
  shape.hidden = totalHidden;
  return shape;
}

// ---------------------------------------------------------------------------------------------
// matmuls: y[m, N] = W x, with the input set by prepareInput (its quantized forms are reused by
// every matmul of the same input, e.g. Q, K and V).

void Model::prepareInput(const float* x, int rows, int cols) {
  actSource_ = x;
  actRows_ = rows;
  actCols_ = cols;
  for (int& t : actType_) t = -1;
}

const uint8_t* Model::activations(int actType, size_t* actBytes) {
  const int64_t k = actCols_;
  *actBytes = actRowBytes(actType, k);
  if (actType == T_F32) return reinterpret_cast<const uint8_t*>(actSource_);
  const int slot = actType >= 0 && actType < kTypeCount ? kActivationSlots.slotOf[actType] : -1;
  if (slot < 0) throw std::invalid_argument("activations: ggml type " + str(actType) + " is not an activation encoding");
  uint8_t* buffer = actBuffer_[slot].data();
  if (actType_[slot] != actType) {
    const ProfileScope scope(kPhaseActQuant);
    const float* x = actSource_;
    const size_t bytes = *actBytes;
    parallelRange(actRows_, 4, [&](int row) { quantizeActRow(actType, x + (size_t)row * k, buffer + (size_t)row * bytes, k); });
    actType_[slot] = actType;
  }
  return buffer;
}

void Model::matmul(const WeightMatrix& w, float* y) {
  const MatmulOut one{&w, y};
  matmulMany(&one, 1);
}

void Model::matmulMany(const MatmulOut* outs, int count) {
  const ProfileScope scope(matmulPhase_);
  LlamaRowsJob jobs[8];
  int jobCount = 0;
  for (int i = 0; i < count; ++i) {
    const WeightMatrix& w = *outs[i].weight;
    if (spec_.numerics == Numerics::Bf16 && typeTraits(w.type).registered) {
      matmulBf16Rows(w.type, w.data, actCols_, 0, w.rows, actSource_, actRows_, outs[i].y, w.rows, 0);
      continue;
    }
    size_t actBytes = 0;
    const uint8_t* act = activations(typeTraits(w.type).vecDotType, &actBytes);
    jobs[jobCount] = LlamaRowsJob{w.type, w.data, w.rows, actCols_, act, actBytes, actRows_, outs[i].y};
    jobs[jobCount++].role = matmulRole_;
  }
  if (jobCount > 0) matmulLlamaRowsBatch(jobs, jobCount);
}

void Model::rmsNormRows(const float* x, const float* w, float* out, int rows) {
  const ProfileScope scope(kPhaseNorm);
  const int D = spec_.shape.nEmbd;
  const float eps = spec_.shape.eps;
  parallelRange(rows, 8, [&](int r) { rmsNorm(x + (size_t)r * D, w, out + (size_t)r * D, D, eps); });
}

// ---------------------------------------------------------------------------------------------

void Model::embed(const std::vector<StepEntry>& entries, int rows, const WeightMatrix& e, const uint16_t* twin,
                  const float* embeddings) {
  const ProfileScope scope(kPhaseEmbed);
  const int D = spec_.shape.nEmbd;
  const ToFloatFn decode = kernels().type[e.type].to_float;
  // row -> token, or -(k + 1) for the k-th embedding row of the step
  std::vector<int32_t>& tokens = outRows_;  // borrowed until the output rows are computed
  int row = 0, embedded = 0;
  for (const StepEntry& s : entries)
    for (int i = 0, next = 0; i < s.nTokens; ++i) {
      const bool input = next < s.nEmbeddingRows && s.embeddingRows[next] == i;
      if (input) ++next;
      tokens[row++] = input ? -(++embedded) : s.tokens[i];
    }
  parallelRange(rows, 4, [&](int r) {
    const int token = tokens[r];
    float* dst = hidden_.data() + (size_t)r * D;
    if (token < 0) {
      std::memcpy(dst, embeddings + (size_t)(-token - 1) * D, (size_t)D * sizeof(float));
    } else if (twin) {
      const uint16_t* src = twin + (size_t)token * D;
      for (int d = 0; d < D; ++d) dst[d] = bf16ToF32(src[d]);
    } else {
      decode(e.data + (size_t)token * e.rowBytes, dst, D);
    }
  });
}

void Model::indexRows(const std::vector<StepEntry>& entries, int* total) {
  int T = 0;
  for (const StepEntry& s : entries) {
    entryRow0_[&s - entries.data()] = T;
    for (int i = 0; i < s.nTokens; ++i) {
      rowEntry_[T] = (int32_t)(&s - entries.data());
      rowPos_[T] = s.startPos + i;
      for (int k = 0; k < 3; ++k) rowRope_[3 * (size_t)T + k] = s.ropePositions ? s.ropePositions[3 * i + k] : s.startPos + i;
      ++T;
    }
  }
  *total = T;
}

void Model::head(const WeightMatrix& w, const int32_t* rows, int nKept, int nOut, float* logits) {
  const int D = spec_.shape.nEmbd;
  if (nOut == 0) return;
  const float* input = outHidden_.data();
  if (nOut != nKept) {
    // llama.cpp's get_rows of the logit rows before the head
    for (int k = 0; k < nOut; ++k)
      std::memcpy(headInput_.data() + (size_t)k * D, outHidden_.data() + (size_t)rows[k] * D, D * sizeof(float));
    input = headInput_.data();
  }
  prepareInput(input, nOut, D);
  matmulRole_ = kRoleHead;
  matmulPhase_ = kPhaseMatmulHead;
  matmul(w, logits);
  matmulRole_ = kRoleLayer;
  matmulPhase_ = kPhaseMatmulLayer;
}

void Model::step(const std::vector<StepEntry>& entries, float* logits, float* hiddenOut, const float* embeddings) {
  const ProfileScope scope(kPhaseOther);
  const ModelShape& c = spec_.shape;
  const int D = c.nEmbd;
  int T = 0;
  indexRows(entries, &T);
  if (T == 0) return;
  embed(entries, T, spec_.tokenEmbd, spec_.tokenEmbdTwin, embeddings);
  // rows that go on after the last mixer (kept) and, among them, the rows that need logits
  int nOut = 0, nLogits = 0;
  {
    int row = 0;
    for (const StepEntry& s : entries) {
      int next = 0;  // next logit row of this entry
      for (int i = 0; i < s.nTokens; ++i) {
        const bool logit = next < s.nLogits && s.logitRows[next] == i;
        if (logit) ++next;
        if (!logit && !s.hidden) continue;
        if (logit) logitAmongKept_[nLogits++] = nOut;
        outRows_[nOut++] = row + i;
      }
      row += s.nTokens;
    }
  }
  for (int il = 0; il < c.nLayer; ++il) {
    const LayerWeights& L = spec_.layers[il];
    rmsNormRows(hidden_.data(), L.attnNorm, normed_.data(), T);
    switch (kinds::mixerOp(L.mixer)) {  // the op family of the layer's token mixer
      case MixerOp::Attention: attention(L, entries, T); break;
      case MixerOp::Gdn: gatedDeltaNet(L, entries, T); break;
    }
    int rows = T;
    if (il == c.nLayer - 1) {
      // as llama.cpp: after the last mixer only the output rows go on
      if (nOut == 0) return;
      for (int k = 0; k < nOut; ++k) {
        const int from = outRows_[k];
        if (from != k) {
          std::memmove(hidden_.data() + (size_t)k * D, hidden_.data() + (size_t)from * D, D * sizeof(float));
          std::memmove(branch_.data() + (size_t)k * D, branch_.data() + (size_t)from * D, D * sizeof(float));
        }
      }
      rows = nOut;
    }
    float* h = hidden_.data();
    const float* b = branch_.data();
    for (size_t i = 0; i < (size_t)rows * D; ++i) h[i] = h[i] + b[i];
    rmsNormRows(hidden_.data(), L.postAttnNorm, normed_.data(), rows);
    ffn(L, rows);
    for (size_t i = 0; i < (size_t)rows * D; ++i) h[i] = h[i] + b[i];
  }
  rmsNormRows(hidden_.data(), spec_.outputNorm, outHidden_.data(), nOut);
  if (hiddenOut) std::memcpy(hiddenOut, outHidden_.data(), (size_t)nOut * D * sizeof(float));
  head(spec_.output, logitAmongKept_.data(), nOut, nLogits, logits);
}

// The MTP drafter block (qwen35.md section 12; forward.ts `draft`).
void Model::draftStep(const std::vector<StepEntry>& entries, const float* hiddenIn, float* logits, float* hiddenOut) {
  const ModelShape& c = spec_.shape;
  const DrafterWeights& d = spec_.drafter;
  const int D = c.nEmbd;
  const float eps = c.eps;
  int T = 0;
  indexRows(entries, &T);
  if (T == 0) return;
  if (d.embedTokens.type >= 0) embed(entries, T, d.embedTokens, nullptr, nullptr);
  else embed(entries, T, spec_.tokenEmbd, spec_.tokenEmbdTwin, nullptr);
  // concat(rms(e) * enorm, rms(h) * hnorm): embedding first, hidden second
  float* concat = concat_.data();
  parallelRange(T, 8, [&](int r) {
    rmsNorm(hidden_.data() + (size_t)r * D, d.enorm, concat + (size_t)r * 2 * D, D, eps);
    rmsNorm(hiddenIn + (size_t)r * D, d.hnorm, concat + (size_t)r * 2 * D + D, D, eps);
  });
  prepareInput(concat, T, 2 * D);
  matmul(d.ehProj, hidden_.data());
  const LayerWeights& L = d.block;
  float* h = hidden_.data();
  const float* b = branch_.data();
  rmsNormRows(h, L.attnNorm, normed_.data(), T);
  attention(L, entries, T);
  for (size_t i = 0; i < (size_t)T * D; ++i) h[i] = b[i] + h[i];
  rmsNormRows(h, L.postAttnNorm, normed_.data(), T);
  ffn(L, T);
  for (size_t i = 0; i < (size_t)T * D; ++i) h[i] = b[i] + h[i];
  // head norm over the logit rows (compacted to 0 .. nOut-1), then the shared head
  int nOut = 0;
  {
    int row = 0;
    for (const StepEntry& s : entries) {
      for (int i = 0; i < s.nLogits; ++i) outRows_[nOut++] = row + s.logitRows[i];
      row += s.nTokens;
    }
  }
  parallelRange(nOut, 8, [&](int k) { rmsNorm(h + (size_t)outRows_[k] * D, d.headNorm, outHidden_.data() + (size_t)k * D, D, eps); });
  if (hiddenOut) std::memcpy(hiddenOut, outHidden_.data(), (size_t)nOut * D * sizeof(float));
  head(d.head, nullptr, nOut, nOut, logits);
}

void Model::ffn(const LayerWeights& L, int rows) {
  const ProfileScope scope(kPhaseFfn);
  if (kinds::ffnOp(L.ffn) == FfnOp::Moe) {
    matmulPhase_ = kPhaseMatmulMoe;
    moeFfn(L, rows);
    matmulPhase_ = kPhaseMatmulLayer;
    return;
  }
  const int nFf = spec_.shape.nFf;
  const ForwardOps& ops = forwardOps();
  prepareInput(normed_.data(), rows, spec_.shape.nEmbd);
  const MatmulOut gateUp[] = {{&L.ffnGate, ffnGate_.data()}, {&L.ffnUp, ffnUp_.data()}};
  matmulMany(gateUp, 2);
  float* g = ffnGate_.data();
  const float* u = ffnUp_.data();
  parallelRange(rows, 4, [&](int r) { ops.swigluRow(g + (size_t)r * nFf, u + (size_t)r * nFf, nFf); });
  prepareInput(ffnGate_.data(), rows, nFf);
  matmul(L.ffnDown, branch_.data());
}

// The MoE FFN (qwen35moe): model/moe.cc.

// ---------------------------------------------------------------------------------------------
// Full attention (qwen35.md section 6)

namespace {

struct AttentionContext {
  const ForwardOps* ops;
  const void* kPlane;
  const void* vPlane;
  bool f16;
  int blockSize;
  size_t rowStride;
  int Dh;
  float scale;
  size_t offset(const int32_t* blockTable, int j, int kvHead) const {
    return ((size_t)blockTable[j / blockSize] * blockSize + (size_t)(j % blockSize)) * rowStride + (size_t)kvHead * Dh;
  }
  // f64 dots of the K rows at positions [j0, j1) against q (each in element order), f32 scores
  // ggml_vec_dot_f16 (an f16 cache) or _f32 of K row j with q: four 8-lane f32 FMA accumulators.
  float kqDot(const int32_t* blockTable, int j, int kvHead, const float* q) const {
    const size_t base = offset(blockTable, j, kvHead);
    if (f16) return ops->vecDotF16F32(static_cast<const uint16_t*>(kPlane) + base, q, Dh);
    return ops->vecDotF32(static_cast<const float*>(kPlane) + base, q, Dh);
  }
  void madV(float* acc, size_t base, float p) const {
    if (f16) ops->madF16(acc, static_cast<const uint16_t*>(vPlane) + base, p, Dh);
    else ops->madF32(acc, static_cast<const float*>(vPlane) + base, p, Dh);
  }
};

thread_local std::vector<float> tQuery, tAcc, tScores, tLanes, tRow;

// llama.cpp's CPU flash attention for < 64 query rows (forward.ts attendOneChunk).
// The sum ggml_vec_soft_max_f32's AVX2 body returns for p[0..n) (values past n count as 0, as masked
// cells do): each 8-lane vector's f32 horizontal sum ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)),
// added to an f64 sum.
double softMaxSum(const float* p, int n) {
  double sum = 0;
  for (int g = 0; g < n; g += 8) {
    float v[8];
    for (int i = 0; i < 8; ++i) v[i] = g + i < n ? p[g + i] : 0.0f;
    const float t0 = v[0] + v[4], t1 = v[1] + v[5], t2 = v[2] + v[6], t3 = v[3] + v[7];
    sum += (double)((t0 + t2) + (t1 + t3));
  }
  return sum;
}

void attendOneChunk(const AttentionContext& a, const int32_t* blockTable, int pos, int kvHead, const float* qHead,
                    float* out) {
  const int Dh = a.Dh;
  float* q = threadScratch(tQuery, Dh);
  float* acc = threadScratch(tAcc, Dh);
  float* scores = threadScratch(tScores, (size_t)pos + 1);
  for (int i = 0; i < Dh; ++i) q[i] = a.f16 ? roundF16(qHead[i]) : qHead[i];
  std::fill(acc, acc + Dh, 0.0f);
  // kq_vec_dot: ggml_vec_dot_f16 (an f16 cache) or _f32, four 8-lane f32 FMA accumulators
  for (int j = 0; j <= pos; ++j) scores[j] = a.kqDot(blockTable, j, kvHead, q) * a.scale;
  float M = -std::numeric_limits<float>::infinity();
  float S = 0;
  for (int j = 0; j <= pos; ++j) {
    const size_t base = a.offset(blockTable, j, kvHead);
    const float s = scores[j];
    float ms = 1, vs = 1;
    if (s > M) {
      const float old = M;
      M = s;
      ms = expf(old - M);
      if (a.f16) a.ops->scaleF16Acc(acc, ms, Dh);
      else
        for (int i = 0; i < Dh; ++i) acc[i] = acc[i] * ms;
    } else {
      vs = expf(s - M);
    }
    if (a.f16) a.ops->madF16Acc(acc, static_cast<const uint16_t*>(a.vPlane) + base, vs, Dh);
    else a.ops->madF32(acc, static_cast<const float*>(a.vPlane) + base, vs, Dh);
    S = S * ms + vs;
  }
  const float inv = S == 0 ? 0.0f : 1.0f / S;
  for (int i = 0; i < Dh; ++i) out[i] = acc[i] * inv;
}

// attendOneChunk for the `heads` query heads of one row that read KV head kvHead (the decode step): each K
// and V row is read from memory once for all of them; each head's operations and their order are
// attendOneChunk's, so are its bits. qHeads(h) and outs(h) give head h's query and output.
thread_local std::vector<float> tGroupQuery, tGroupAcc, tGroupScores;
template <typename Q, typename O>
void attendOneChunkGroup(const AttentionContext& a, const int32_t* blockTable, int pos, int kvHead, int heads, Q&& qHeads, O&& outs) {
  const int Dh = a.Dh;
  const size_t n = (size_t)pos + 1;
  float* q = threadScratch(tGroupQuery, (size_t)heads * Dh);
  float* acc = threadScratch(tGroupAcc, (size_t)heads * Dh);
  float* scores = threadScratch(tGroupScores, (size_t)heads * n);
  for (int h = 0; h < heads; ++h) {
    const float* qh = qHeads(h);
    for (int i = 0; i < Dh; ++i) q[(size_t)h * Dh + i] = a.f16 ? roundF16(qh[i]) : qh[i];
  }
  std::fill(acc, acc + (size_t)heads * Dh, 0.0f);
  for (int j = 0; j <= pos; ++j)
    for (int h = 0; h < heads; ++h) scores[(size_t)h * n + j] = a.kqDot(blockTable, j, kvHead, q + (size_t)h * Dh) * a.scale;
  float M[8], S[8];
  for (int h = 0; h < heads; ++h) {
    M[h] = -std::numeric_limits<float>::infinity();
    S[h] = 0;
  }
  for (int j = 0; j <= pos; ++j) {
    const size_t base = a.offset(blockTable, j, kvHead);
    for (int h = 0; h < heads; ++h) {
      float* hAcc = acc + (size_t)h * Dh;
      const float s = scores[(size_t)h * n + j];
      float ms = 1, vs = 1;
      if (s > M[h]) {
        const float old = M[h];
        M[h] = s;
        ms = expf(old - M[h]);
        if (a.f16) a.ops->scaleF16Acc(hAcc, ms, Dh);
        else
          for (int i = 0; i < Dh; ++i) hAcc[i] = hAcc[i] * ms;
      } else {
        vs = expf(s - M[h]);
      }
      if (a.f16) a.ops->madF16Acc(hAcc, static_cast<const uint16_t*>(a.vPlane) + base, vs, Dh);
      else a.ops->madF32(hAcc, static_cast<const float*>(a.vPlane) + base, vs, Dh);
      S[h] = S[h] * ms + vs;
    }
  }
  for (int h = 0; h < heads; ++h) {
    const float inv = S[h] == 0 ? 0.0f : 1.0f / S[h];
    float* out = outs(h);
    for (int i = 0; i < Dh; ++i) out[i] = acc[(size_t)h * Dh + i] * inv;
  }
}

// llama.cpp without flash attention (forward.ts attendStandard).
void attendStandard(const AttentionContext& a, const int32_t* blockTable, int pos, int kvHead, const float* qHead,
                    float* out) {
  const int Dh = a.Dh;
  const int n = pos + 1;
  float* q = threadScratch(tQuery, Dh);
  float* scores = threadScratch(tScores, (size_t)n);
  float* lanes = threadScratch(tLanes, (size_t)8 * Dh);  // [lane][Dh]
  for (int i = 0; i < Dh; ++i) q[i] = a.f16 ? roundF16(qHead[i]) : qHead[i];
  float max = -std::numeric_limits<float>::infinity();
  for (int j = 0; j < n; ++j) {
    const float s = a.kqDot(blockTable, j, kvHead, q) * a.scale;
    scores[j] = s;
    if (s > max) max = s;
  }
  // ggml_vec_soft_max_f32 (AVX2 build): 8 lanes at a time (masked positions past n give 0), each
  // vector's f32 horizontal sum ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)) added in f64
  for (int j = 0; j < n; ++j) scores[j] = a.ops->vexpf(scores[j] - max);
  const double sum = softMaxSum(scores, n);
  const float inv = (float)(1.0 / sum);
  for (int j = 0; j < n; ++j) {
    const float p = scores[j] * inv;
    scores[j] = a.f16 ? roundF16(p) : p;
  }
  std::fill(lanes, lanes + (size_t)8 * Dh, 0.0f);
  for (int j = 0; j < n; ++j) a.madV(lanes + (size_t)(j & 7) * Dh, a.offset(blockTable, j, kvHead), scores[j]);
  for (int i = 0; i < Dh; ++i) {
    const float t0 = lanes[i] + lanes[4 * Dh + i];
    const float t1 = lanes[Dh + i] + lanes[5 * Dh + i];
    const float t2 = lanes[2 * Dh + i] + lanes[6 * Dh + i];
    const float t3 = lanes[3 * Dh + i] + lanes[7 * Dh + i];
    out[i] = (t0 + t2) + (t1 + t3);
  }
}

// Query rows of one sequence that share each KV tile in attendTiledBlock.
constexpr int kFlashAttnQueryBlock = 16;

thread_local std::vector<float> tTileK, tTileV, tBlockAcc, tBlockMs;

// llama.cpp's tiled CPU flash attention for >= 64 query rows (forward.ts attendTiled), for `rows` consecutive
// query rows of one sequence (positions pos0, pos0 + 1, ...) and the `heads` query heads that read KV head
// kvHead: KV tiles outermost, so that each tile is read (and converted to f32) once for all of them instead
// of once per row and head. Each (row, head) keeps its own running max, sum and accumulator and sees its
// tiles in the same order with the same operations as the specification's per-row loop, so its output is
// the same bits. qHeads(r, h) and outs(r, h) give the query and the output of row r and head h.
template <typename Q, typename O>
void attendTiledBlock(const AttentionContext& a, const int32_t* blockTable, int pos0, int rows, int kvHead, int heads, Q&& qHeads,
                      O&& outs) {
  constexpr int kTile = kFlashAttnKvTile;
  const int Dh = a.Dh;
  const int pairs = rows * heads;
  float* kT = threadScratch(tTileK, (size_t)Dh * kTile);
  float* vT = threadScratch(tTileV, (size_t)kTile * Dh);
  float* acc = threadScratch(tBlockAcc, (size_t)pairs * Dh);
  float* ms = threadScratch(tBlockMs, (size_t)pairs * 2);  // [pair]: M, S
  float* scores = threadScratch(tScores, 2 * kTile);
  std::fill(acc, acc + (size_t)pairs * Dh, 0.0f);
  for (int i = 0; i < pairs; ++i) {
    ms[2 * i] = -std::numeric_limits<float>::infinity();
    ms[2 * i + 1] = 0;
  }
  const int nAll = pos0 + rows;
  for (int t0 = 0; t0 < nAll; t0 += kTile) {
    const int tEnd = std::min(nAll, t0 + kTile);
    // the tile's K (transposed, zero past its last key up to a multiple of 8) and V rows in f32
    const void* kRows[kTile];
    const void* vRows[kTile];
    for (int j = t0; j < tEnd; ++j) {
      const size_t base = a.offset(blockTable, j, kvHead);
      kRows[j - t0] = a.f16 ? (const void*)(static_cast<const uint16_t*>(a.kPlane) + base) : (const void*)(static_cast<const float*>(a.kPlane) + base);
      vRows[j - t0] = a.f16 ? (const void*)(static_cast<const uint16_t*>(a.vPlane) + base) : (const void*)(static_cast<const float*>(a.vPlane) + base);
    }
    if (a.f16)
      a.ops->tileLoadF16(reinterpret_cast<const uint16_t* const*>(kRows), reinterpret_cast<const uint16_t* const*>(vRows), tEnd - t0, Dh, kT, kTile, vT);
    else
      a.ops->tileLoadF32(reinterpret_cast<const float* const*>(kRows), reinterpret_cast<const float* const*>(vRows), tEnd - t0, Dh, kT, kTile, vT);
    for (int r = 0; r < rows; ++r) {
      const int n = pos0 + r + 1;
      if (n <= t0) continue;
      const int t1 = std::min(n, t0 + kTile);
      // the heads two at a time where they pair up (each tile vector loaded once for both)
      for (int h = 0; h < heads; h += 2) {
        const int two = std::min(2, heads - h);
        float* sc[2] = {scores, scores + kTile};
        if (two == 2)
          a.ops->tileScores2(kT, kTile, t1 - t0, qHeads(r, h), qHeads(r, h + 1), Dh, a.scale, sc[0], sc[1]);
        else
          a.ops->tileScores(kT, kTile, t1 - t0, qHeads(r, h), Dh, a.scale, sc[0]);
        for (int u = 0; u < two; ++u) {
          const int pair = r * heads + h + u;
          float* pAcc = acc + (size_t)pair * Dh;
          float& M = ms[2 * pair];
          float& S = ms[2 * pair + 1];
          float* p = sc[u];
          float tileMax = -std::numeric_limits<float>::infinity();
          for (int j = 0; j < t1 - t0; ++j) tileMax = std::max(tileMax, p[j]);
          const float newMax = std::max(M, tileMax);
          const float m = M == -std::numeric_limits<float>::infinity() ? 0.0f : expf(M - newMax);
          if (m != 1) {
            for (int i = 0; i < Dh; ++i) pAcc[i] = pAcc[i] * m;
            S = S * m;
          }
          M = newMax;
          a.ops->expShifted(p, t1 - t0, M);
          S = (float)((double)S + softMaxSum(p, t1 - t0));
        }
        float* acc0 = acc + (size_t)(r * heads + h) * Dh;
        if (two == 2) a.ops->tileValues2(acc0, acc0 + Dh, vT, (size_t)Dh, sc[0], sc[1], t1 - t0, Dh);
        else a.ops->tileValues(acc0, vT, (size_t)Dh, sc[0], t1 - t0, Dh);
      }
    }
  }
  for (int r = 0; r < rows; ++r)
    for (int h = 0; h < heads; ++h) {
      const int pair = r * heads + h;
      const float S = ms[2 * pair + 1];
      const float inv = S == 0 ? 0.0f : 1.0f / S;
      const float* pAcc = acc + (size_t)pair * Dh;
      float* out = outs(r, h);
      for (int i = 0; i < Dh; ++i) out[i] = pAcc[i] * inv;
    }
}

thread_local std::vector<float> tRopeCos, tRopeSin;

// NEOX rotation of the first nRot dims as ggml's haswell build compiles rotate_pairs (GCC contracts
// x0 * cos - x1 * sin into a fused multiply-subtract after rounding x1 * sin to f32; the same for the
// second output), as the specification computes it.
void rope(float* x, const float* cosTable, const float* sinTable, int half) {
  for (int i = 0; i < half; ++i) {
    const float x0 = x[i], x1 = x[i + half];
    const float c = cosTable[i], s = sinTable[i];
    const float x1s = x1 * s, x1c = x1 * c;
    x[i] = std::fma(x0, c, -x1s);
    x[i + half] = std::fma(x0, s, x1c);
  }
}

}  // namespace

void Model::attention(const LayerWeights& L, const std::vector<StepEntry>& entries, int T) {
  const ProfileScope scope(kPhaseAttention);
  const ModelShape& c = spec_.shape;
  const int H = c.nHead, Hkv = c.nHeadKv, Dh = c.headDim, D = c.nEmbd;
  const float eps = c.eps;
  // gated (qwen35): attn_q rows are per head [q_h | gate_h], qDim = 2 H Dh; an ungated kind: q_h only, qDim = H Dh
  const bool gated = kinds::mixerGated(L.mixer);
  const size_t qDim = (size_t)c.qDim, qHeadStride = qDim / H;
  prepareInput(normed_.data(), T, D);
  const MatmulOut qkv[] = {{&L.q, qg_.data()}, {&L.k, kRows_.data()}, {&L.v, vRows_.data()}};
  matmulMany(qkv, 3);
  const KvStorage& kv = spec_.kv;
  void* kPlane = kv.k[L.cacheIndex];
  void* vPlane = kv.v[L.cacheIndex];
  const size_t stride = kvRowStride_;
  const int half = c.nRot / 2;
  const uint8_t* section = spec_.ropeSections.data();
  // Q/K norms and RoPE per row, then K and V into the row's cache slot
  parallelRange(T, 1, [&](int r) {
    const int pos = rowPos_[r];
    float* cosTable = threadScratch(tRopeCos, (size_t)half + 1);
    float* sinTable = threadScratch(tRopeSin, (size_t)half + 1);
    // ggml's M-RoPE cache: one theta per section (t, h, w), each scaled at every pair, the pair
    // taking its section's (a text row has all three at its position: plain NEOX RoPE)
    const int32_t* rotary = rowRope_.data() + 3 * (size_t)r;
    float theta[3] = {(float)rotary[0], (float)rotary[1], (float)rotary[2]};
    for (int i = 0; i < half; ++i) {
      const float t = theta[section[i]];
      cosTable[i] = cosf(t);
      sinTable[i] = sinf(t);
      for (float& v : theta) v = v * c.ropeThetaScale;
    }
    for (int h = 0; h < H; ++h) {
      float* qh = q_.data() + ((size_t)r * H + h) * Dh;
      rmsNorm(qg_.data() + (size_t)r * qDim + (size_t)h * qHeadStride, L.qNorm, qh, Dh, eps);
      rope(qh, cosTable, sinTable, half);
    }
    float* kr = kRows_.data() + (size_t)r * stride;
    for (int j = 0; j < Hkv; ++j) {
      rmsNorm(kr + (size_t)j * Dh, L.kNorm, kr + (size_t)j * Dh, Dh, eps);
      rope(kr + (size_t)j * Dh, cosTable, sinTable, half);
    }
    const StepEntry& e = entries[rowEntry_[r]];
    const size_t dst = ((size_t)e.blockTable[pos / kv.blockSize] * kv.blockSize + (size_t)(pos % kv.blockSize)) * stride;
    const float* vr = vRows_.data() + (size_t)r * stride;
    if (kv.f16) {
      uint16_t* kp = static_cast<uint16_t*>(kPlane) + dst;
      uint16_t* vp = static_cast<uint16_t*>(vPlane) + dst;
      for (size_t i = 0; i < stride; ++i) {
        kp[i] = f32ToHalf(kr[i]);
        vp[i] = f32ToHalf(vr[i]);
      }
    } else {
      std::memcpy(static_cast<float*>(kPlane) + dst, kr, stride * sizeof(float));
      std::memcpy(static_cast<float*>(vPlane) + dst, vr, stride * sizeof(float));
    }
  });
  AttentionContext a{&forwardOps(), kPlane, vPlane, kv.f16, kv.blockSize, stride, Dh, 1.0f / std::sqrt((float)Dh)};
  const bool tiled = T >= kFlashAttnTiledMinRows;
  const int group = H / Hkv;
  const auto gateRow = [&](int r, int h) {
    // o <- o * sigmoid(gate)
    if (!gated) return;
    float* out = attnOut_.data() + ((size_t)r * H + h) * Dh;
    const float* gate = qg_.data() + (size_t)r * qDim + (size_t)h * qHeadStride + Dh;
    for (int i = 0; i < Dh; ++i) out[i] = out[i] * sigmoid(gate[i]);
  };
  if (spec_.flashAttention && tiled) {
    // blocks of up to kFlashAttnQueryBlock rows of one sequence, times the KV heads: one task each
    std::vector<int32_t>& blocks = attnBlocks_;
    blocks.clear();
    for (size_t ei = 0; ei < entries.size(); ++ei)
      for (int t = 0; t < entries[ei].nTokens; t += kFlashAttnQueryBlock) blocks.push_back(entryRow0_[ei] + t);
    const int nBlocks = (int)blocks.size();
    parallelRange(nBlocks * Hkv, 1, [&](int task) {
      const int b = task / Hkv, kvHead = task % Hkv;
      const int r0 = blocks[b];
      const StepEntry& e = entries[rowEntry_[r0]];
      const int rows = std::min(kFlashAttnQueryBlock, entryRow0_[rowEntry_[r0]] + e.nTokens - r0);
      const int h0 = kvHead * group;
      attendTiledBlock(
          a, e.blockTable, rowPos_[r0], rows, kvHead, group,
          [&](int r, int h) { return q_.data() + ((size_t)(r0 + r) * H + h0 + h) * Dh; },
          [&](int r, int h) { return attnOut_.data() + ((size_t)(r0 + r) * H + h0 + h) * Dh; });
      for (int r = 0; r < rows; ++r)
        for (int h = 0; h < group; ++h) gateRow(r0 + r, h0 + h);
    });
    prepareInput(attnOut_.data(), T, H * Dh);
    matmul(L.o, branch_.data());
    return;
  }
  if (spec_.flashAttention && group <= 8 && T * Hkv >= threadCount()) {
    // one task per row and KV head: its query heads read each K and V row once between them
    parallelRange(T * Hkv, 1, [&](int task) {
      const int r = task / Hkv, kvHead = task % Hkv;
      const int h0 = kvHead * group;
      attendOneChunkGroup(
          a, entries[rowEntry_[r]].blockTable, rowPos_[r], kvHead, group,
          [&](int h) { return q_.data() + ((size_t)r * H + h0 + h) * Dh; },
          [&](int h) { return attnOut_.data() + ((size_t)r * H + h0 + h) * Dh; });
      for (int h = 0; h < group; ++h) gateRow(r, h0 + h);
    });
    prepareInput(attnOut_.data(), T, H * Dh);
    matmul(L.o, branch_.data());
    return;
  }
  parallelRange(T * H, 1, [&](int task) {
    const int r = task / H, h = task % H;
    const StepEntry& e = entries[rowEntry_[r]];
    const int pos = rowPos_[r];
    const int kvHead = h / group;
    const float* qh = q_.data() + ((size_t)r * H + h) * Dh;
    float* out = attnOut_.data() + ((size_t)r * H + h) * Dh;
    if (!spec_.flashAttention) attendStandard(a, e.blockTable, pos, kvHead, qh, out);
    else attendOneChunk(a, e.blockTable, pos, kvHead, qh, out);
    gateRow(r, h);
  });
  prepareInput(attnOut_.data(), T, H * Dh);
  matmul(L.o, branch_.data());
}

// ---------------------------------------------------------------------------------------------
// Gated DeltaNet (qwen35.md section 7)

void Model::gatedDeltaNet(const LayerWeights& L, const std::vector<StepEntry>& entries, int T) {
  const ProfileScope scope(kPhaseGdn);
  const ModelShape& c = spec_.shape;
  const int Hk = c.ssmGroupCount, Hv = c.ssmTimeStepRank, Dk = c.ssmStateSize, K = c.convKernel, D = c.nEmbd;
  const int Dv = headVDim_, convDim = convDim_, keyDim = keyDim_, valueDim = valueDim_;
  const float eps = c.eps;
  const ForwardOps& ops = forwardOps();
  prepareInput(normed_.data(), T, D);
  const MatmulOut inputs[] = {{&L.qkv, mixed_.data()}, {&L.gate, zRows_.data()}, {&L.beta, betaRows_.data()}, {&L.alpha, alphaRows_.data()}};
  matmulMany(inputs, 4);
  float* convPlane = spec_.states.conv[L.cacheIndex];
  float* ssmPlane = spec_.states.ssm[L.cacheIndex];
  const float* mixed = mixed_.data();
  float* y = convOut_.data();
  // causal depthwise conv over [state (K-1 raw inputs), current] per channel, token by token; the
  // state keeps raw inputs (f32 products added in f32, oldest tap first)
  int row0 = 0;
  for (const StepEntry& e : entries) {
    float* convBase = convPlane + (size_t)e.stateSlot * convStride_;
    float* snapConv = e.snapshotRow >= 0 ? spec_.snapshots.conv[L.cacheIndex] + (size_t)e.stateSlot * convStride_ : nullptr;
    if (K == 4) {
      // qwen35's kernel: channels in chunks, vectorized across channels (ops.conv4); with a snapshot
      // row, the tokens up to it, the state copied, then the rest (the same operations in order)
      const int chunk = 256;
      const int first = e.snapshotRow >= 0 ? std::min(e.snapshotRow + 1, e.nTokens) : e.nTokens;
      parallelRange((convDim + chunk - 1) / chunk, 1, [&](int part) {
        const int c0 = part * chunk, n = std::min(chunk, convDim - c0);
        float* state = convBase + (size_t)c0 * (K - 1);
        const float* w = L.conv + (size_t)c0 * K;
        ops.conv4(mixed + (size_t)row0 * convDim + c0, y + (size_t)row0 * convDim + c0, (size_t)convDim, first, state, w, n);
        if (snapConv) {
          std::memcpy(snapConv + (size_t)c0 * (K - 1), state, (size_t)n * (K - 1) * sizeof(float));
          const size_t at = (size_t)(row0 + first) * convDim + c0;
          ops.conv4(mixed + at, y + at, (size_t)convDim, e.nTokens - first, state, w, n);
        }
      });
    } else {
      parallelRange(convDim, 256, [&](int ch) {
        float* state = convBase + (size_t)ch * (K - 1);
        const float* w = L.conv + (size_t)ch * K;
        for (int t = 0; t < e.nTokens; ++t) {
          const size_t at = (size_t)(row0 + t) * convDim + ch;
          const float current = mixed[at];
          float acc = 0;
          for (int j = 0; j < K - 1; ++j) acc = acc + state[j] * w[j];
          acc = acc + current * w[K - 1];
          for (int j = 0; j + 1 < K - 1; ++j) state[j] = state[j + 1];
          if (K > 1) state[K - 2] = current;
          y[at] = acc;
          if (t == e.snapshotRow) std::memcpy(snapConv + (size_t)ch * (K - 1), state, (size_t)(K - 1) * sizeof(float));
        }
      });
    }
    row0 += e.nTokens;
  }
  // SiLU, then the L2 norms of q and k per K-head as llama.cpp computes them (forward.ts): an RMS norm with eps / Dk
  // (f64 sum of f32 squares, the mean rounded to f32), then a scale by 1 / sqrt(Dk)
  const float normEps = eps / (float)Dk;
  const float invSqrtDk = (float)(1.0 / std::sqrt((double)Dk));
  parallelRange(T, 1, [&](int r) {
    float* yr = y + (size_t)r * convDim;
    ops.siluRow(yr, convDim);
    for (int kh = 0; kh < 2 * Hk; ++kh) {
      float* v = yr + (size_t)kh * Dk;
      double sum = 0;
      for (int i = 0; i < Dk; ++i) sum += (double)(v[i] * v[i]);
      const float mean = (float)(sum / Dk);
      const float scale = 1.0f / std::sqrt(mean + normEps);
      for (int i = 0; i < Dk; ++i) v[i] = (v[i] * scale) * invSqrtDk;
    }
  });
  // gated delta rule per (sequence, V-head), token by token; V-head h uses Q/K head h mod Hk
  const float readoutScale = 1.0f / std::sqrt((float)Dv);
  const int nEntries = (int)entries.size();
  parallelRange(nEntries * Hv, 1, [&](int task) {
    const int ei = task / Hv, h = task % Hv;
    const StepEntry& e = entries[ei];
    const int r0 = entryRow0_[ei];
    const int kh = h % Hk;
    float* sHead = ssmPlane + (size_t)e.stateSlot * ssmStride_ + (size_t)h * Dv * Dk;
    for (int t = 0; t < e.nTokens; ++t) {
      const int row = r0 + t;
      const float* yr = y + (size_t)row * convDim;
      const float* q = yr + (size_t)kh * Dk;
      const float* k = yr + keyDim + (size_t)kh * Dk;
      const float* v = yr + 2 * keyDim + (size_t)h * Dv;
      const float beta = sigmoid(betaRows_[(size_t)row * Hv + h]);
      const float g = softplus(alphaRows_[(size_t)row * Hv + h] + L.dtBias[h]) * L.a[h];
      const float decay = expf(g);
      float* o = gdnOut_.data() + (size_t)row * valueDim + (size_t)h * Dv;
      ops.deltaRule(sHead, q, k, v, Dv, Dk, decay, beta, readoutScale, o);
      if (t == e.snapshotRow) {
        float* snap = spec_.snapshots.ssm[L.cacheIndex] + (size_t)e.stateSlot * ssmStride_ + (size_t)h * Dv * Dk;
        std::memcpy(snap, sHead, (size_t)Dv * Dk * sizeof(float));
      }
      // gated RMSNorm: rms(o_h) * ssm_norm (raw), times silu(z_h)
      rmsNorm(o, L.norm, o, Dv, eps);
      float* zh = zRows_.data() + (size_t)row * valueDim + (size_t)h * Dv;
      ops.siluRow(zh, Dv);
      for (int j = 0; j < Dv; ++j) o[j] = o[j] * zh[j];
    }
  });
  prepareInput(gdnOut_.data(), T, valueDim);
  matmul(L.out, branch_.data());
}

// ---------------------------------------------------------------------------------------------

const ForwardOps& forwardOps() {
  switch (currentIsaLevel()) {
#if defined(KEEPQUANT_X86)
    case IsaLevel::Avx2:
      return avx2ForwardOps();
    case IsaLevel::Avx512:
      return avx512ForwardOps();
#endif
    default:
      return genericForwardOps();
  }
}

}  // namespace kq
