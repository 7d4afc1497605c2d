// Generated from @keepquant/gguf's MODEL_TENSOR_SCHEMA by scripts/gen-model.ts (src/model-slots.ts): do not edit.
// A layer's kinds: its token mixer and its FFN, as the model description names them.
#pragma once

namespace kq {

enum class Mixer { Attention = 0, Gdn = 1 };
enum class Ffn { Dense = 0, Moe = 1 };

namespace kinds {

constexpr int kMixerCount = 2;
inline constexpr const char* kMixerNames[kMixerCount] = {"attention", "gdn"};
inline constexpr const char* kMixerTitles[kMixerCount] = {"full-attention", "Gated DeltaNet"};
constexpr int kFfnCount = 2;
inline constexpr const char* kFfnNames[kFfnCount] = {"dense", "moe"};
inline constexpr const char* kFfnTitles[kFfnCount] = {"", " MoE"};

}  // namespace kinds
}  // namespace kq
