#include "core/profile.h"

namespace kq {
namespace {

thread_local int tPhase = -1;
thread_local std::chrono::steady_clock::time_point tSince;

uint64_t sinceNs(std::chrono::steady_clock::time_point from, std::chrono::steady_clock::time_point to) {
  return (uint64_t)std::chrono::duration_cast<std::chrono::nanoseconds>(to - from).count();
}

}  // namespace

const char* profilePhaseName(int phase) {
  static const char* const kNames[kPhaseCount] = {"other",        "embed",       "norm",       "activationQuant",
                                                   "matmulLayers", "matmulHead",  "matmulMoe",  "gdn",
                                                   "attention",    "ffn"};
  return phase >= 0 && phase < kPhaseCount ? kNames[phase] : "unknown";
}

ProfileCounters& profileCounters() {
  static ProfileCounters* c = new ProfileCounters();  // never destroyed (read by late workers)
  return *c;
}

void resetProfile() {
  ProfileCounters& c = profileCounters();
  for (int i = 0; i < kPhaseCount; ++i) {
    c.ns[i].store(0);
    c.calls[i].store(0);
  }
  c.steps.store(0);
}

ProfileScope::ProfileScope(int phase) : active_(profileCounters().on.load(std::memory_order_relaxed)), parent_(tPhase) {
  if (!active_) return;
  const auto now = std::chrono::steady_clock::now();
  ProfileCounters& c = profileCounters();
  if (parent_ >= 0) c.ns[parent_].fetch_add(sinceNs(tSince, now), std::memory_order_relaxed);
  c.calls[phase].fetch_add(1, std::memory_order_relaxed);
  tPhase = phase;
  tSince = now;
}

ProfileScope::~ProfileScope() {
  if (!active_) return;
  const auto now = std::chrono::steady_clock::now();
  if (tPhase >= 0) profileCounters().ns[tPhase].fetch_add(sinceNs(tSince, now), std::memory_order_relaxed);
  tPhase = parent_;
  tSince = now;
}

}  // namespace kq
