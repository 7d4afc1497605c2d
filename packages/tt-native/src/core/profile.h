// Step phase timers of the native model (a bench mode: off unless setProfiling(true)). Each phase's
// time is exclusive: a nested scope (a matmul inside a GDN layer) pauses its parent. Only the thread
// that runs the step opens scopes; parallel tasks inside a scope are charged to it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace kq {

enum ProfilePhase : int {
  kPhaseOther = 0,    // residual adds, row bookkeeping, everything outside a named phase
  kPhaseEmbed,        // token embedding rows
  kPhaseNorm,         // RMS norms
  kPhaseActQuant,     // activation rows quantized to the weights' vec_dot_type
  kPhaseMatmulLayer,  // the layers' dense matmuls
  kPhaseMatmulHead,   // the output head
  kPhaseMatmulMoe,    // the MoE expert matmuls
  kPhaseGdn,          // Gated DeltaNet: conv, delta rule, gated norm (its matmuls excluded)
  kPhaseAttention,    // full attention: rope, scores, softmax, values (its matmuls excluded)
  kPhaseFfn,          // SwiGLU and the FFN's other element-wise work (its matmuls excluded)
  kPhaseCount
};
const char* profilePhaseName(int phase);

struct ProfileCounters {
  std::atomic<bool> on{false};
  std::atomic<uint64_t> ns[kPhaseCount];
  std::atomic<uint64_t> calls[kPhaseCount];
  std::atomic<uint64_t> steps{0};
};
ProfileCounters& profileCounters();
void resetProfile();

// Opens phase `phase` on this thread until destroyed (no cost beyond one relaxed load when off).
class ProfileScope {
 public:
  explicit ProfileScope(int phase);
  ~ProfileScope();
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

 private:
  bool active_;
  int parent_;
};

}  // namespace kq
