// Generated from @keepquant/gguf's MODEL_TENSOR_SCHEMA by scripts/gen-model.ts (src/model-slots.ts): do not edit.
// A layer's kinds: its token mixer and its FFN, as the model description names them.
#pragma once

namespace kq {

enum class Mixer { Attention = 0, Gdn = 1, AttentionUngated = 2 };
enum class Ffn { Dense = 0, Moe = 1, DenseFfnNorm = 2 };

namespace kinds {

constexpr int kMixerCount = 3;
inline constexpr const char* kMixerNames[kMixerCount] = {"attention", "gdn", "attention_ungated"};
inline constexpr const char* kMixerTitles[kMixerCount] = {"full-attention", "Gated DeltaNet", "ungated full-attention"};
constexpr int kFfnCount = 3;
inline constexpr const char* kFfnNames[kFfnCount] = {"dense", "moe", "dense_ffn_norm"};
inline constexpr const char* kFfnTitles[kFfnCount] = {"", " MoE", ""};

}  // namespace kinds
}  // namespace kq
