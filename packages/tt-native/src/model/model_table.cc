// The native model's input table (model.h ModelTable) bound to the model's fields. Shapes are not
// known here: each tensor names its dimensions, and the check is the same for every tensor (its
// columns and rows equal the named hyperparameters, its rows are whole blocks of its type). Which
// slots a scope or a layer's kinds have, and where each lives, is the generated model_slots.h.
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "core/common.h"
#include "model/model.h"
#include "model/model_slots.h"

namespace kq {
namespace {

std::string str(int64_t v) { return std::to_string(v); }
[[noreturn]] void fail(const std::string& message) { throw std::invalid_argument(message); }

using slots::Need;
using slots::Slot;
using slots::Slots;

template <typename S, typename List>
const Slot<S>* findSlot(const List& list, const std::string& name) {
  for (const Slot<S>& s : list)
    if (name == s.name) return &s;
  return nullptr;
}

// The slots of a layer's kinds: its token mixer's, then its FFN's.
const Slots<LayerWeights>& mixerSlots(const LayerWeights& L) { return slots::kMixers[(int)L.mixer]; }
const Slots<LayerWeights>& ffnSlots(const LayerWeights& L) { return slots::kFfns[(int)L.ffn]; }

const Slot<LayerWeights>* layerSlot(const LayerWeights& L, const std::string& name) {
  if (const Slot<LayerWeights>* s = findSlot<LayerWeights>(mixerSlots(L), name)) return s;
  return findSlot<LayerWeights>(ffnSlots(L), name);
}

// A slot of some kind (not necessarily this layer's).
bool anyLayerSlot(const std::string& name) {
  for (const Slots<LayerWeights>& list : slots::kMixers)
    if (findSlot<LayerWeights>(list, name)) return true;
  for (const Slots<LayerWeights>& list : slots::kFfns)
    if (findSlot<LayerWeights>(list, name)) return true;
  return false;
}

template <typename S>
bool bound(const Slot<S>& s, const S& target) {
  return s.matrix ? (target.*s.matrix).data != nullptr : target.*s.vector != nullptr;
}

// What a scope's slots need: every required slot bound, and each `unless` slot bound or its alternative.
template <typename S, typename List>
void checkNeeds(const List& list, const S& target, const std::string& prefix) {
  for (const Slot<S>& s : list) {
    if (s.need == Need::Optional || bound(s, target)) continue;
    if (s.need == Need::Unless) {
      const Slot<S>* other = findSlot<S>(list, s.unless);
      if (other && bound(*other, target)) continue;
      fail(prefix + s.name + ": missing from the table (or " + s.unless + " instead)");
    }
    fail(prefix + s.name + ": missing from the table");
  }
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
      if (kinds::mixerOp(l.mixer) != MixerOp::Attention) fail(where + ": the MTP block is a full-attention block");
      mtpIndex = l.index;
      spec.drafter.present = true;
      spec.drafter.block.mixer = l.mixer;
      spec.drafter.block.ffn = l.ffn;
      spec.drafter.block.cacheIndex = l.cacheIndex;
      continue;
    }
    if (mtpIndex >= 0) fail(where + ": trunk layers come before the MTP block");
    if (l.index != (int)spec.layers.size()) fail(where + ": trunk layers must be blk.0, blk.1, ... in order");
    trunkAt[l.index] = (int)spec.layers.size();
    LayerWeights L;
    L.mixer = l.mixer;
    L.ffn = l.ffn;
    L.cacheIndex = l.cacheIndex;
    spec.layers.push_back(L);
  }
  c.nLayer = (int)spec.layers.size();
  if (c.nLayer < 1) fail("layers: the model needs at least one trunk layer");

  for (const TableTensor& t : table.tensors) {
    if (t.layer < 0) {
      const Slot<ModelSpec>* slot = findSlot<ModelSpec>(slots::kGlobal, t.slot);
      if (!slot) fail(t.slot + ": not a global slot of the native qwen35 model");
      binder.bind(*slot, t, t.slot, spec);
      continue;
    }
    const std::string where = "blk." + str(t.layer) + "." + t.slot;
    LayerWeights* layer = nullptr;
    if (t.layer == mtpIndex) {
      if (const Slot<DrafterWeights>* slot = findSlot<DrafterWeights>(slots::kNextn, t.slot)) {
        binder.bind(*slot, t, where, spec.drafter);
        continue;
      }
      layer = &spec.drafter.block;
    } else {
      const auto it = trunkAt.find(t.layer);
      if (it == trunkAt.end()) fail(where + ": blk." + str(t.layer) + " is not a layer of the table");
      layer = &spec.layers[it->second];
    }
    const Slot<LayerWeights>* slot = layerSlot(*layer, t.slot);
    if (!slot) {
      if (!anyLayerSlot(t.slot)) fail(where + ": not a layer slot of the native qwen35 model");
      fail(where + ": a " + kinds::kMixerTitles[(int)layer->mixer] + kinds::kFfnTitles[(int)layer->ffn] + " layer has no " + t.slot);
    }
    binder.bind(*slot, t, where, *layer);
  }

  // what each scope needs
  checkNeeds<ModelSpec>(slots::kGlobal, spec, "");
  auto checkLayer = [&](const LayerWeights& L, int index) {
    const std::string prefix = "blk." + str(index) + ".";
    checkNeeds<LayerWeights>(mixerSlots(L), L, prefix);
    checkNeeds<LayerWeights>(ffnSlots(L), L, prefix);
  };
  for (int il = 0; il < c.nLayer; ++il) checkLayer(spec.layers[il], il);
  if (spec.drafter.present) {
    checkLayer(spec.drafter.block, mtpIndex);
    checkNeeds<DrafterWeights>(slots::kNextn, spec.drafter, "blk." + str(mtpIndex) + ".");
    if (spec.drafter.embedTokens.data == nullptr) spec.drafter.embedTokens.type = -1;
  }
}

}  // namespace kq
