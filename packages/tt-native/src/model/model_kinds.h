// Generated from @keepquant/gguf's MODEL_TENSOR_SCHEMA by scripts/gen-model.ts (src/model-slots.ts): do not edit.
// A layer's kinds: its token mixer and its FFN, as the model description names them, and the op families
// (gguf's MIXER_OPS, FFN_OPS) the native model runs them with.
#pragma once

namespace kq {

enum class Mixer { Attention = 0, Gdn = 1, AttentionUngated = 2 };
enum class Ffn { Dense = 0, Moe = 1, DenseFfnNorm = 2 };
enum class MixerOp { Attention = 0, Gdn = 1 };
enum class FfnOp { Dense = 0, Moe = 1 };

namespace kinds {

constexpr int kMixerCount = 3;
inline constexpr const char* kMixerNames[kMixerCount] = {"attention", "gdn", "attention_ungated"};
inline constexpr const char* kMixerTitles[kMixerCount] = {"full-attention", "Gated DeltaNet", "ungated full-attention"};
inline constexpr MixerOp kMixerOps[kMixerCount] = {MixerOp::Attention, MixerOp::Gdn, MixerOp::Attention};
inline constexpr bool kMixerGated[kMixerCount] = {true, false, false};
constexpr int kFfnCount = 3;
inline constexpr const char* kFfnNames[kFfnCount] = {"dense", "moe", "dense_ffn_norm"};
inline constexpr const char* kFfnTitles[kFfnCount] = {"", " MoE", ""};
inline constexpr FfnOp kFfnOps[kFfnCount] = {FfnOp::Dense, FfnOp::Moe, FfnOp::Dense};

// The op family of a layer's kinds, and whether its attention has the output gate.
constexpr MixerOp mixerOp(Mixer m) { return kMixerOps[(int)m]; }
constexpr bool mixerGated(Mixer m) { return kMixerGated[(int)m]; }
constexpr FfnOp ffnOp(Ffn f) { return kFfnOps[(int)f]; }

}  // namespace kinds
}  // namespace kq
