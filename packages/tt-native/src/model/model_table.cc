// The native model's input table (model.h ModelTable) bound to the model's fields. Shapes are not
// known here: each tensor names its dimensions, and the check is the same for every tensor (its
// columns and rows equal the named hyperparameters, its rows are whole blocks of its type). What is
// known here is only where a slot lives (the tables below) and which mixer needs it.
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "core/common.h"
#include "model/model.h"

namespace kq {
namespace {

std::string str(int64_t v) { return std::to_string(v); }
[[noreturn]] void fail(const std::string& message) { throw std::invalid_argument(message); }

// Which layers need a slot: every layer, one token mixer's, one FFN's, or none (optional).
enum class Need { Every, Attention, Gdn, Dense, Moe, Optional };

// A slot of one scope: a matrix (kept packed) or an f32 vector.
template <typename S>
struct Slot {
  const char* name;
  Need need;
  WeightMatrix S::*matrix;
  const float* S::*vector;
};

using L = LayerWeights;
const Slot<L> kLayerSlots[] = {
    {"attn_norm", Need::Every, nullptr, &L::attnNorm},
    {"post_attention_norm", Need::Every, nullptr, &L::postAttnNorm},
    {"ffn_gate", Need::Dense, &L::ffnGate, nullptr},
    {"ffn_up", Need::Dense, &L::ffnUp, nullptr},
    {"ffn_down", Need::Dense, &L::ffnDown, nullptr},
    {"ffn_gate_inp", Need::Moe, &L::router, nullptr},
    // split gate/up experts or the merged tensor: one of the two (checked after binding)
    {"ffn_gate_exps", Need::Optional, &L::gateExps, nullptr},
    {"ffn_up_exps", Need::Optional, &L::upExps, nullptr},
    {"ffn_gate_up_exps", Need::Optional, &L::gateUpExps, nullptr},
    {"ffn_down_exps", Need::Moe, &L::downExps, nullptr},
    {"ffn_gate_inp_shexp", Need::Moe, nullptr, &L::sharedGate},
    {"ffn_gate_shexp", Need::Moe, &L::sharedGateProj, nullptr},
    {"ffn_up_shexp", Need::Moe, &L::sharedUp, nullptr},
    {"ffn_down_shexp", Need::Moe, &L::sharedDown, nullptr},
    {"attn_q", Need::Attention, &L::q, nullptr},
    {"attn_k", Need::Attention, &L::k, nullptr},
    {"attn_v", Need::Attention, &L::v, nullptr},
    {"attn_output", Need::Attention, &L::o, nullptr},
    {"attn_q_norm", Need::Attention, nullptr, &L::qNorm},
    {"attn_k_norm", Need::Attention, nullptr, &L::kNorm},
    {"attn_qkv", Need::Gdn, &L::qkv, nullptr},
    {"attn_gate", Need::Gdn, &L::gate, nullptr},
    {"ssm_beta", Need::Gdn, &L::beta, nullptr},
    {"ssm_alpha", Need::Gdn, &L::alpha, nullptr},
    {"ssm_out", Need::Gdn, &L::out, nullptr},
    {"ssm_conv1d", Need::Gdn, nullptr, &L::conv},
    {"ssm_dt", Need::Gdn, nullptr, &L::dtBias},
    {"ssm_a", Need::Gdn, nullptr, &L::a},
    {"ssm_norm", Need::Gdn, nullptr, &L::norm},
};

const Slot<ModelSpec> kGlobalSlots[] = {
    {"token_embd", Need::Every, &ModelSpec::tokenEmbd, nullptr},
    {"output_norm", Need::Every, nullptr, &ModelSpec::outputNorm},
    // the caller binds the tied head to token_embd's bytes
    {"output", Need::Every, &ModelSpec::output, nullptr},
};

// The MTP block's own tensors (its attention block and FFN are layer slots of drafter.block); the
// caller resolves the shared head and its norm to the trunk's when the file has none.
const Slot<DrafterWeights> kDrafterSlots[] = {
    {"nextn.eh_proj", Need::Every, &DrafterWeights::ehProj, nullptr},
    {"nextn.enorm", Need::Every, nullptr, &DrafterWeights::enorm},
    {"nextn.hnorm", Need::Every, nullptr, &DrafterWeights::hnorm},
    {"nextn.shared_head_norm", Need::Every, nullptr, &DrafterWeights::headNorm},
    {"nextn.embed_tokens", Need::Optional, &DrafterWeights::embedTokens, nullptr},
    {"nextn.shared_head_head", Need::Every, &DrafterWeights::head, nullptr},
};

template <typename S, size_t N>
const Slot<S>* findSlot(const Slot<S> (&slots)[N], const std::string& name) {
  for (const Slot<S>& s : slots)
    if (name == s.name) return &s;
  return nullptr;
}

bool needed(Need need, const LayerWeights& L) {
  switch (need) {
    case Need::Every: return true;
    case Need::Attention: return !L.recurrent;
    case Need::Gdn: return L.recurrent;
    case Need::Dense: return !L.moe;
    case Need::Moe: return L.moe;
    case Need::Optional: return false;
  }
  return false;
}

// A slot a layer may hold: what it needs, and the optional slots of its FFN (the split/merged experts).
bool allowed(const Slot<LayerWeights>& s, const LayerWeights& L) {
  if (s.need != Need::Optional) return needed(s.need, L);
  return L.moe;
}

template <typename S>
bool bound(const Slot<S>& s, const S& target) {
  return s.matrix ? (target.*s.matrix).data != nullptr : target.*s.vector != nullptr;
}

class Binder {
 public:
  explicit Binder(const ModelTable& table) {
    if (table.hparams.size() != (size_t)hparams::kCount)
      fail("hparams: " + str((int64_t)table.hparams.size()) + " values, expected " + str(hparams::kCount));
    for (int i = 0; i < hparams::kCount; ++i) hp_[hparams::kFields[i].name] = table.hparams[i];
  }

  // A tensor's named dimension: a hyperparameter by its name.
  double hparam(const std::string& name, const std::string& where) const {
    const auto it = hp_.find(name);
    if (it == hp_.end()) fail(where + "hparams." + name + " is not a hyperparameter");
    return it->second;
  }

  // The generic check of one entry: its named dims, its type's geometry, its element kind.
  template <typename S>
  void bind(const Slot<S>& slot, const TableTensor& t, const std::string& where, S& target) const {
    const WeightMatrix& w = t.w;
    if (t.dims.empty() || t.dims.size() > 3) fail(where + ": dims must name 1 to 3 dimensions");
    const int64_t cols = (int64_t)hparam(t.dims[0], where + ": ");
    const int64_t rows = t.dims.size() >= 2 ? (int64_t)hparam(t.dims[1], where + ": ") : 1;
    const int64_t groups = t.dims.size() == 3 ? (int64_t)hparam(t.dims[2], where + ": ") : 1;
    if (w.cols != cols || w.rows != rows || w.groups != groups) {
      const std::string named = t.dims.size() == 3   ? t.dims[2] + " x " + t.dims[1] + " x " + t.dims[0]
                                : t.dims.size() == 2 ? t.dims[1] + " x " + t.dims[0]
                                                     : "1 x " + t.dims[0];
      fail(where + ": [" + (w.groups > 1 ? str(w.groups) + ", " : "") + str(w.rows) + ", " + str(w.cols) + "], expected [" +
           (groups > 1 ? str(groups) + ", " : "") + str(rows) + ", " + str(cols) + "] (" + named + ")");
    }
    if (slot.vector && groups != 1) fail(where + ": an f32 vector cannot be stacked");
    const TypeTraits& ti = typeTraits(w.type);
    if (ti.blockSize == 0) fail(where + ": ggml type " + str(w.type) + " is not supported by the native step");
    if (cols % ti.blockSize != 0) fail(where + ": " + str(cols) + " columns is not a whole number of blocks");
    const size_t rowBytes = (size_t)(cols / ti.blockSize) * (size_t)ti.typeSize;
    if (w.rowBytes != rowBytes) fail(where + ": rowBytes " + str((int64_t)w.rowBytes) + ", expected " + str((int64_t)rowBytes));
    if (slot.matrix) {
      if ((target.*slot.matrix).data) fail(where + ": appears twice in the table");
      target.*slot.matrix = w;
      return;
    }
    if (w.type != T_F32) fail(where + ": an f32 vector, found ggml type " + str(w.type));
    if (reinterpret_cast<uintptr_t>(w.data) % alignof(float) != 0) fail(where + ": f32 data is not 4-byte aligned");
    if (target.*slot.vector) fail(where + ": appears twice in the table");
    target.*slot.vector = reinterpret_cast<const float*>(w.data);
  }

 private:
  std::unordered_map<std::string, double> hp_;
};

}  // namespace

void bindModelTable(const ModelTable& table, ModelSpec& spec) {
  const Binder binder(table);
  ModelShape& c = spec.shape;
  // the values in the generated order (model_hparams.h): integers checked against their least value
  for (int i = 0; i < hparams::kCount; ++i) {
    const hparams::Field& h = hparams::kFields[i];
    const double v = table.hparams[i];
    if (h.kind == hparams::Kind::Float) {
      c.*h.real = (float)v;
      continue;
    }
    if (v != (double)(int64_t)v || v < h.min || v > 9.0e15) fail(std::string("hparams.") + h.name + " must be an integer >= " + str(h.min));
    if (h.kind == hparams::Kind::Int) {
      if (v > 2147483647.0) fail(std::string("hparams.") + h.name + " is too large");
      c.*h.integer = (int)v;
    } else {
      c.*h.wide = (int64_t)v;
    }
  }

  // layers: the trunk in order, then at most one MTP block
  std::unordered_map<int, int> trunkAt;  // blk index -> position in spec.layers
  int mtpIndex = -1;
  for (const TableLayer& l : table.layers) {
    const std::string where = "layers[blk." + str(l.index) + "]";
    if (l.mtp) {
      if (mtpIndex >= 0) fail(where + ": only one MTP block is supported");
      if (l.recurrent) fail(where + ": the MTP block is a full-attention block");
      mtpIndex = l.index;
      spec.drafter.present = true;
      spec.drafter.block.recurrent = false;
      spec.drafter.block.moe = l.moe;
      spec.drafter.block.cacheIndex = l.cacheIndex;
      continue;
    }
    if (mtpIndex >= 0) fail(where + ": trunk layers come before the MTP block");
    if (l.index != (int)spec.layers.size()) fail(where + ": trunk layers must be blk.0, blk.1, ... in order");
    trunkAt[l.index] = (int)spec.layers.size();
    LayerWeights L;
    L.recurrent = l.recurrent;
    L.moe = l.moe;
    L.cacheIndex = l.cacheIndex;
    spec.layers.push_back(L);
    c.recurrent.push_back(l.recurrent ? 1 : 0);
  }
  c.nLayer = (int)spec.layers.size();
  if (c.nLayer < 1) fail("layers: the model needs at least one trunk layer");

  for (const TableTensor& t : table.tensors) {
    if (t.layer < 0) {
      const Slot<ModelSpec>* slot = findSlot(kGlobalSlots, t.slot);
      if (!slot) fail(t.slot + ": not a global slot of the native qwen35 model");
      binder.bind(*slot, t, t.slot, spec);
      continue;
    }
    const std::string where = "blk." + str(t.layer) + "." + t.slot;
    LayerWeights* layer = nullptr;
    if (t.layer == mtpIndex) {
      if (const Slot<DrafterWeights>* slot = findSlot(kDrafterSlots, t.slot)) {
        binder.bind(*slot, t, where, spec.drafter);
        continue;
      }
      layer = &spec.drafter.block;
    } else {
      const auto it = trunkAt.find(t.layer);
      if (it == trunkAt.end()) fail(where + ": blk." + str(t.layer) + " is not a layer of the table");
      layer = &spec.layers[it->second];
    }
    const Slot<LayerWeights>* slot = findSlot(kLayerSlots, t.slot);
    if (!slot) fail(where + ": not a layer slot of the native qwen35 model");
    if (!allowed(*slot, *layer))
      fail(where + ": a " + (layer->recurrent ? "Gated DeltaNet" : "full-attention") + (layer->moe ? " MoE" : "") + " layer has no " +
           t.slot);
    binder.bind(*slot, t, where, *layer);
  }

  // what each scope needs
  for (const Slot<ModelSpec>& s : kGlobalSlots)
    if (s.need != Need::Optional && !bound(s, spec)) fail(std::string(s.name) + ": missing from the table");
  auto checkLayer = [&](const LayerWeights& L, int index) {
    for (const Slot<LayerWeights>& s : kLayerSlots)
      if (needed(s.need, L) && !bound(s, L)) fail("blk." + str(index) + "." + s.name + ": missing from the table");
    if (L.moe && !(L.gateUpExps.data || (L.gateExps.data && L.upExps.data)))
      fail("blk." + str(index) + ": an MoE layer needs ffn_gate_exps and ffn_up_exps, or ffn_gate_up_exps");
  };
  for (int il = 0; il < c.nLayer; ++il) checkLayer(spec.layers[il], il);
  if (spec.drafter.present) {
    checkLayer(spec.drafter.block, mtpIndex);
    for (const Slot<DrafterWeights>& s : kDrafterSlots)
      if (s.need != Need::Optional && !bound(s, spec.drafter))
        fail("blk." + str(mtpIndex) + "." + s.name + ": missing from the table");
    if (spec.drafter.embedTokens.data == nullptr) spec.drafter.embedTokens.type = -1;
  }
}

}  // namespace kq
