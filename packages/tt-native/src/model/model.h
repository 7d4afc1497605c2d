// The native qwen35 model: one forward step over a batch of sequences, every op native, in the
// arithmetic of the TypeScript specification (packages/engine/src/model/forward.ts). Weights are
// borrowed views (a memory-mapped GGUF file or any buffer the caller keeps alive); the KV planes,
// the GDN state planes and the logits are caller-provided storage; scratch is owned here and
// allocated once, so a step allocates nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cpu/matmul.h"
#include "core/profile.h"
#include "model/model_hparams.h"
#include "model/model_kinds.h"
#include "model/model_scratch.h"

namespace kq {

// Activation buffers of one model: one per activation encoding of the type table (model.cc).
constexpr int kMaxActivationSlots = 4;

// A matmul weight exactly as stored: `rows` output features of `cols` inputs, `rowBytes` per row.
struct WeightMatrix {
  int type = -1;
  const uint8_t* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  size_t rowBytes = 0;
  // stacked matrices of [rows, cols] (an MoE expert tensor: expert e's rows start at e * rows)
  int64_t groups = 1;
  // group g as a matrix of its own
  WeightMatrix group(int64_t g) const {
    WeightMatrix w = *this;
    w.data = data + (size_t)g * (size_t)rows * rowBytes;
    w.groups = 1;
    return w;
  }
};

enum class Numerics { Llama, Bf16 };

// Hyperparameters (qwen35.md section 2) and the sizes derived from them: ModelHparams, generated
// from the model description's dimension schema (model_hparams.h; the description computed every
// value, nothing is derived here). nLayer comes from the table's layers.
struct ModelShape : ModelHparams {
  int nLayer = 0;
};

// One block: its kinds (a token mixer and an FFN, model_kinds.h) and the fields of every kind; the
// slots of its kinds are bound (model_slots.h), the others stay empty.
struct LayerWeights {
  Mixer mixer = Mixer::Attention;
  Ffn ffn = Ffn::Dense;
  const float* attnNorm = nullptr;      // [D]
  const float* postAttnNorm = nullptr;  // [D]
  WeightMatrix ffnGate, ffnUp, ffnDown;
  // the MoE FFN instead of the dense one (qwen35moe): router [E, D] (F32), stacked experts (gate and up
  // split, or merged [2 n_ff_exp] rows per expert), down experts, the shared expert and its gate [D]
  WeightMatrix router, gateExps, upExps, gateUpExps, downExps, sharedGateProj, sharedUp, sharedDown;
  const float* sharedGate = nullptr;
  // full attention
  WeightMatrix q, k, v, o;               // q: [2 H Dh, D] per head [q_h | gate_h]
  const float* qNorm = nullptr;          // [Dh]
  const float* kNorm = nullptr;          // [Dh]
  // gated delta net
  WeightMatrix qkv, gate, beta, alpha, out;
  const float* conv = nullptr;    // [conv_dim, K]
  const float* dtBias = nullptr;  // [Hv]
  const float* a = nullptr;       // [Hv], -exp(A_log)
  const float* norm = nullptr;    // [Dv]
  int cacheIndex = -1;            // KV layer (attention) or state layer (GDN)
};

// Paged K/V planes of the full-attention layers: [numBlocks, blockSize, Hkv * Dh] each.
struct KvStorage {
  bool f16 = true;
  int blockSize = 0;
  int numBlocks = 0;
  std::vector<void*> k, v;
};

// GDN state planes per GDN layer: conv [slots, conv_dim, K-1], recurrent [slots, Hv, Dv, Dk].
struct StateStorage {
  int numSlots = 0;
  std::vector<float*> conv, ssm;
};

// The MTP/NextN drafter block blk.{n_layer} (qwen35.md section 12): a full-attention block (its KV
// is the last plane of KvStorage) behind eh_proj over [rms(e) * enorm | rms(h) * hnorm], and the
// shared head.
struct DrafterWeights {
  bool present = false;
  LayerWeights block;                 // attention fields, cacheIndex = the drafter's KV plane
  WeightMatrix ehProj;                // [D, 2D]
  const float* enorm = nullptr;       // [D]
  const float* hnorm = nullptr;       // [D]
  const float* headNorm = nullptr;    // [D]: nextn.shared_head_norm or output_norm
  WeightMatrix embedTokens;           // nextn.embed_tokens (type -1 when absent: token_embd is used)
  WeightMatrix head;                  // nextn.shared_head_head or the trunk's head
};

// One sequence's share of a step (pointers into the step descriptor).
struct StepEntry {
  const int32_t* tokens = nullptr;
  int nTokens = 0;
  int startPos = 0;
  int stateSlot = 0;
  const int32_t* logitRows = nullptr;  // ascending indices into this chunk
  int nLogits = 0;
  const int32_t* blockTable = nullptr;
  int blockCount = 0;
  // trunk steps: every row goes through the last layer and its post-norm hidden state is kept
  bool hidden = false;
  // trunk steps: after this row (>= 0) the GDN state of the slot is copied to ModelSpec::snapshots
  int snapshotRow = -1;
  // trunk steps: (t, h, w) rotary positions per row [nTokens, 3], or null (row i at startPos + i in all three)
  const int32_t* ropePositions = nullptr;
  // trunk steps: ascending rows whose input is an embedding row (the step's embeddings, entry order)
  const int32_t* embeddingRows = nullptr;
  int nEmbeddingRows = 0;
};

// What a step descriptor asks for.
struct StepShape {
  bool drafter = false;  // a drafter step (hidden input required) rather than a trunk step
  int tokens = 0;
  int logits = 0;        // logit rows
  int hidden = 0;        // hidden rows kept: trunk = rows with `hidden` entries + other logit rows; drafter = logits
  int embeddingRows = 0; // rows whose input is an embedding row (the step's embeddings [embeddingRows, D])
};

struct ModelSpec {
  ModelShape shape;
  Numerics numerics = Numerics::Llama;
  bool flashAttention = true;
  int maxBatchTokens = 0;
  WeightMatrix tokenEmbd;
  const uint16_t* tokenEmbdTwin = nullptr;  // bf16 twin (bf16 numerics), else null
  const float* outputNorm = nullptr;
  WeightMatrix output;
  std::vector<LayerWeights> layers;
  DrafterWeights drafter;
  KvStorage kv;
  StateStorage states;
  // where StepEntry::snapshotRow copies a slot's GDN state (same layout and slots as `states`; optional)
  StateStorage snapshots;
  // the rotary section each rotated pair turns with, [nRot / 2]: 0 = t, 1 = h, 2 = w (interleaved
  // M-RoPE, forward.ts imropeSections); empty: every pair t
  std::vector<uint8_t> ropeSections;
};

// The model as one table (src/native-types.ts NativeModelSpec): the hyperparameters, the layers
// (token mixer + FFN, cache plane) and the tensors by slot and layer, each with its shape as named
// dimensions. bindModelTable checks every entry generically against the hyperparameters its dims
// name and against its type's block geometry, binds it to the model's fields through the generated
// slot tables of its scope and kinds (model_slots.h), and checks that each layer has what its
// kinds need.
struct TableTensor {
  std::string slot;
  int layer = -1;  // -1: a global tensor
  std::vector<std::string> dims;  // ggml ne order: cols, then rows
  WeightMatrix w;                 // an f32 vector: an F32 matrix
};
struct TableLayer {
  int index = 0;
  bool mtp = false;
  Mixer mixer = Mixer::Attention;
  Ffn ffn = Ffn::Dense;
  int cacheIndex = 0;
};
struct ModelTable {
  // hparams::kCount values in the generated order (model_hparams.h)
  std::vector<double> hparams;
  std::vector<TableLayer> layers;
  std::vector<TableTensor> tensors;
};
// Fills spec.shape, the weights and the drafter from the table; throws std::invalid_argument naming
// the hyperparameter, layer or tensor.
void bindModelTable(const ModelTable& table, ModelSpec& spec);

class Model {
 public:
  // Checks the whole spec once (shapes, types, storage) and allocates scratch; throws
  // std::invalid_argument naming what is wrong.
  explicit Model(ModelSpec spec);

  // Parses a step descriptor (see model.cc) into entries, checking every index against the model;
  // throws std::invalid_argument naming the entry and field.
  StepShape parseStep(const int32_t* desc, size_t length, std::vector<StepEntry>& entries) const;

  // Runs one trunk step; `logits` receives [nOut, vocab] (entry order, then row order), `hidden`
  // (when not null) the kept post-norm hidden rows [StepShape.hidden, D]. `embeddings`
  // [StepShape.embeddingRows, D] are the inputs of the entries' embedding rows (entry order).
  void step(const std::vector<StepEntry>& entries, float* logits, float* hidden = nullptr, const float* embeddings = nullptr);

  // Runs one drafter step: `hiddenIn` [tokens, D] pairs with the rows; `logits` receives
  // [nOut, vocab], `hidden` (when not null) the logit rows' post-norm hidden states [nOut, D].
  void draftStep(const std::vector<StepEntry>& entries, const float* hiddenIn, float* logits, float* hidden = nullptr);
  bool hasDrafter() const { return spec_.drafter.present; }
  int embd() const { return spec_.shape.nEmbd; }

  size_t scratchBytes() const { return scratchBytes_; }
  int vocab() const { return (int)spec_.output.rows; }
  /** Logits per row of a drafter step: the drafter head's rows (the vocabulary or a prefix of it). */
  int drafterVocab() const { return spec_.drafter.present ? (int)spec_.drafter.head.rows : vocab(); }
  int maxBatchTokens() const { return spec_.maxBatchTokens; }

 private:
  struct MatmulOut {
    const WeightMatrix* weight;
    float* y;
  };
  void prepareInput(const float* x, int rows, int cols);
  // The prepared input in `actType` (quantized once per input and encoding).
  const uint8_t* activations(int actType, size_t* actBytes);
  void matmul(const WeightMatrix& w, float* y);
  // Matmuls sharing the prepared input, in one parallel dispatch.
  void matmulMany(const MatmulOut* outs, int count);
  void rmsNormRows(const float* x, const float* w, float* out, int rows);
  void embed(const std::vector<StepEntry>& entries, int rows, const WeightMatrix& table, const uint16_t* twin,
             const float* embeddings);
  void indexRows(const std::vector<StepEntry>& entries, int* total);
  // The head over `nOut` rows of outHidden_ listed in `rows` (compacted first when not 0..nOut-1).
  void head(const WeightMatrix& w, const int32_t* rows, int nKept, int nOut, float* logits);
  void attention(const LayerWeights& L, const std::vector<StepEntry>& entries, int rows);
  void gatedDeltaNet(const LayerWeights& L, const std::vector<StepEntry>& entries, int rows);
  void ffn(const LayerWeights& L, int rows);
  // the MoE FFN (model/moe.cc): router, top-k and combine; the routed and shared experts grouped by
  // expert in three dispatches (llama numerics) or expert by expert (bf16 numerics)
  void moeFfn(const LayerWeights& L, int rows);
  void moeExpertsGrouped(const LayerWeights& L, int rows);
  void moeExpertsPerExpert(const LayerWeights& L, int rows);
  // bytes of one quantized input row of a layer's experts: 0 gate/up (width D), 1 down (n_ff_exp), 2 shared down
  size_t moeActRowBytes(const LayerWeights& L, int which) const;

  ModelSpec spec_;
  int keyDim_ = 0, valueDim_ = 0, convDim_ = 0, headVDim_ = 0;
  size_t kvRowStride_ = 0;
  int64_t convStride_ = 0, ssmStride_ = 0;
  size_t scratchBytes_ = 0;
  // scratch, [rows, width]
  // the layer loop's (model_scratch.h: the trunk's and each kind's buffers, as the description names them)
#define KQ_SCRATCH_MEMBER(buffer, width) std::vector<float> buffer##_;
  KQ_SCRATCH_TRUNK(KQ_SCRATCH_MEMBER)
  KQ_SCRATCH_MIXER_ATTENTION(KQ_SCRATCH_MEMBER)
  KQ_SCRATCH_MIXER_GDN(KQ_SCRATCH_MEMBER)
  KQ_SCRATCH_FFN_DENSE(KQ_SCRATCH_MEMBER)
  KQ_SCRATCH_FFN_MOE(KQ_SCRATCH_MEMBER)
#undef KQ_SCRATCH_MEMBER
  // the step's own: the kept rows' hidden states, the drafter's [e | h] input, the head's input
  std::vector<float> outHidden_, concat_, headInput_;
  std::vector<int32_t> logitAmongKept_;
  // the MoE FFN's work buffers (qwen35moe)
  std::vector<float> moeLogits_, moeProbs_, moeWeights_, moeX_, moeGate_, moeUp_, moeDown_, moeExperts_, moeShared_,
      moeSharedUp_, moeSharedOut_;
  std::vector<int32_t> moeIds_;
  // per expert: pairs chosen, first pair; per pair (row, expert) in expert order: its row; per slot t K + s: its pair
  std::vector<int32_t> moeCount_, moeFirst_, moePairRow_, moeSlotPair_;
  // quantized inputs of the grouped matmuls: gathered expert rows, down rows, shared-expert down rows
  std::vector<uint8_t> moeActX_, moeActH_, moeActShared_;
  std::vector<LlamaRowsJob> moeJobs_;
  std::vector<int32_t> rowEntry_, rowPos_, outRows_, entryRow0_;
  std::vector<int32_t> rowRope_;  // row -> rotary (t, h, w)
  std::vector<int32_t> attnBlocks_;  // first rows of the tiled attention's query blocks (one step)
  // quantized activations of the current matmul input, one buffer per activation encoding
  const float* actSource_ = nullptr;
  int actRows_ = 0, actCols_ = 0;
  std::vector<uint8_t> actBuffer_[kMaxActivationSlots];
  int actType_[kMaxActivationSlots] = {-1, -1, -1, -1};
  // what the next matmuls are: their tuned decode variant's role (cpu/tuning.h) and profile phase
  int matmulRole_ = 0;
  int matmulPhase_ = kPhaseMatmulLayer;
};

}  // namespace kq
