// Generated from @keepquant/gguf's MODEL_TENSOR_SCHEMA by scripts/gen-model.ts (src/model-slots.ts): do not edit.
// Each scope's tensor slots (the globals, each token mixer's, each FFN's, the MTP block's own),
// bound to the native model's fields: a matrix stays packed, a vector is f32. A slot with a fallback in the
// description (a tied head, the drafter's shared head and its norm) is required: the caller binds the fallback.
#pragma once

#include "model/model.h"

namespace kq::slots {

// Required; optional; or required unless the layer binds the slot named `unless` instead.
enum class Need { Required, Optional, Unless };

template <typename S>
struct Slot {
  const char* name;
  Need need;
  const char* unless;
  WeightMatrix S::*matrix;
  const float* S::*vector;
};

// The slots of one kind.
template <typename S>
struct Slots {
  const Slot<S>* first;
  int count;
  const Slot<S>* begin() const { return first; }
  const Slot<S>* end() const { return first + count; }
};

inline const Slot<ModelSpec> kGlobal[] = {
    {"token_embd", Need::Required, nullptr, &ModelSpec::tokenEmbd, nullptr},
    {"output_norm", Need::Required, nullptr, nullptr, &ModelSpec::outputNorm},
    {"output", Need::Required, nullptr, &ModelSpec::output, nullptr},
};

inline const Slot<LayerWeights> kMixerAttention[] = {
    {"attn_norm", Need::Required, nullptr, nullptr, &LayerWeights::attnNorm},
    {"attn_q", Need::Required, nullptr, &LayerWeights::q, nullptr},
    {"attn_k", Need::Required, nullptr, &LayerWeights::k, nullptr},
    {"attn_v", Need::Required, nullptr, &LayerWeights::v, nullptr},
    {"attn_q_norm", Need::Required, nullptr, nullptr, &LayerWeights::qNorm},
    {"attn_k_norm", Need::Required, nullptr, nullptr, &LayerWeights::kNorm},
    {"attn_output", Need::Required, nullptr, &LayerWeights::o, nullptr},
};

inline const Slot<LayerWeights> kMixerGdn[] = {
    {"attn_norm", Need::Required, nullptr, nullptr, &LayerWeights::attnNorm},
    {"attn_qkv", Need::Required, nullptr, &LayerWeights::qkv, nullptr},
    {"attn_gate", Need::Required, nullptr, &LayerWeights::gate, nullptr},
    {"ssm_beta", Need::Required, nullptr, &LayerWeights::beta, nullptr},
    {"ssm_alpha", Need::Required, nullptr, &LayerWeights::alpha, nullptr},
    {"ssm_conv1d", Need::Required, nullptr, nullptr, &LayerWeights::conv},
    {"ssm_dt", Need::Required, nullptr, nullptr, &LayerWeights::dtBias},
    {"ssm_a", Need::Required, nullptr, nullptr, &LayerWeights::a},
    {"ssm_norm", Need::Required, nullptr, nullptr, &LayerWeights::norm},
    {"ssm_out", Need::Required, nullptr, &LayerWeights::out, nullptr},
};

inline const Slot<LayerWeights> kMixerAttentionUngated[] = {
    {"attn_norm", Need::Required, nullptr, nullptr, &LayerWeights::attnNorm},
    {"attn_q", Need::Required, nullptr, &LayerWeights::q, nullptr},
    {"attn_k", Need::Required, nullptr, &LayerWeights::k, nullptr},
    {"attn_v", Need::Required, nullptr, &LayerWeights::v, nullptr},
    {"attn_q_norm", Need::Required, nullptr, nullptr, &LayerWeights::qNorm},
    {"attn_k_norm", Need::Required, nullptr, nullptr, &LayerWeights::kNorm},
    {"attn_output", Need::Required, nullptr, &LayerWeights::o, nullptr},
};

inline const Slots<LayerWeights> kMixers[kinds::kMixerCount] = {{kMixerAttention, 7}, {kMixerGdn, 10}, {kMixerAttentionUngated, 7}};

inline const Slot<LayerWeights> kFfnDense[] = {
    {"post_attention_norm", Need::Required, nullptr, nullptr, &LayerWeights::postAttnNorm},
    {"ffn_gate", Need::Required, nullptr, &LayerWeights::ffnGate, nullptr},
    {"ffn_up", Need::Required, nullptr, &LayerWeights::ffnUp, nullptr},
    {"ffn_down", Need::Required, nullptr, &LayerWeights::ffnDown, nullptr},
};

inline const Slot<LayerWeights> kFfnMoe[] = {
    {"post_attention_norm", Need::Required, nullptr, nullptr, &LayerWeights::postAttnNorm},
    {"ffn_gate_inp", Need::Required, nullptr, &LayerWeights::router, nullptr},
    {"ffn_gate_exps", Need::Unless, "ffn_gate_up_exps", &LayerWeights::gateExps, nullptr},
    {"ffn_up_exps", Need::Unless, "ffn_gate_up_exps", &LayerWeights::upExps, nullptr},
    {"ffn_gate_up_exps", Need::Optional, nullptr, &LayerWeights::gateUpExps, nullptr},
    {"ffn_down_exps", Need::Required, nullptr, &LayerWeights::downExps, nullptr},
    {"ffn_gate_inp_shexp", Need::Required, nullptr, nullptr, &LayerWeights::sharedGate},
    {"ffn_gate_shexp", Need::Required, nullptr, &LayerWeights::sharedGateProj, nullptr},
    {"ffn_up_shexp", Need::Required, nullptr, &LayerWeights::sharedUp, nullptr},
    {"ffn_down_shexp", Need::Required, nullptr, &LayerWeights::sharedDown, nullptr},
};

inline const Slot<LayerWeights> kFfnDenseFfnNorm[] = {
    {"ffn_norm", Need::Required, nullptr, nullptr, &LayerWeights::postAttnNorm},
    {"ffn_gate", Need::Required, nullptr, &LayerWeights::ffnGate, nullptr},
    {"ffn_up", Need::Required, nullptr, &LayerWeights::ffnUp, nullptr},
    {"ffn_down", Need::Required, nullptr, &LayerWeights::ffnDown, nullptr},
};

inline const Slots<LayerWeights> kFfns[kinds::kFfnCount] = {{kFfnDense, 4}, {kFfnMoe, 10}, {kFfnDenseFfnNorm, 4}};

// The MTP block's own tensors (its attention block and FFN are layer slots of drafter.block).
inline const Slot<DrafterWeights> kNextn[] = {
    {"nextn.eh_proj", Need::Required, nullptr, &DrafterWeights::ehProj, nullptr},
    {"nextn.enorm", Need::Required, nullptr, nullptr, &DrafterWeights::enorm},
    {"nextn.hnorm", Need::Required, nullptr, nullptr, &DrafterWeights::hnorm},
    {"nextn.shared_head_norm", Need::Required, nullptr, nullptr, &DrafterWeights::headNorm},
    {"nextn.embed_tokens", Need::Optional, nullptr, &DrafterWeights::embedTokens, nullptr},
    {"nextn.shared_head_head", Need::Required, nullptr, &DrafterWeights::head, nullptr},
};

}  // namespace kq::slots
