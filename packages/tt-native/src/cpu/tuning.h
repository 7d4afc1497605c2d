// The decode (one activation row) tunables of the CPU-native arm and their timing. Every variant gives
// the same bits as every other (each output is one kernel chain whatever the ISA path, the rows per
// call, the prefetch distance, the split into tasks or the threads), so choosing among them is purely a
// speed question: the tuner (src/tuner.ts) times them on the loaded model's own weights and sets the
// fastest per (role, weight type).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/common.h"

namespace kq {

// Which matmuls a variant applies to: the layers' dense matmuls, or the output head (one very tall
// matrix per token: 248,320 rows on Qwen3.5).
enum MatmulRole : int { kRoleLayer = 0, kRoleHead = 1, kRoleCount = 2 };

struct DecodeVariant {
  int isa = -1;         // IsaLevel of the decode kernels; -1: the current level
  int weightRows = 0;   // weight rows per kernel call (1: single, 2: the pair kernels); 0: the level's default
  int prefetch = 0;     // software prefetch distance in weight blocks; 0: the level's default
  int rowsPerTask = 0;  // weight rows per pool task; 0: automatic (about 8 tasks per thread, at most 64 rows)
  int threads = 0;      // 1: on the calling thread alone (no dispatch); 0: every pool thread
  // A batched decode step (2 .. kBatchKernelMaxRows activation rows, one per sequence): 0 the block kernels
  // of the current level, 1 their register form (vec_dot_block_regs) where the type has one. The other
  // fields are one-row fields: a batched step runs at the current level with automatic tasks.
  int batchKernel = 0;
  // A prefill matmul (more than kBatchKernelMaxRows activation rows): 0 the block kernels of the current level over
  // tiles of 32 activation rows, 1 their register form (vec_dot_block_regs, where the type has one) over tiles of
  // kBatchKernelMaxRows rows. On an AMD Zen 4 (one thread, tasks of 64 weight rows against 128 activation rows, the
  // weights streamed): Q4_K 11.7-12.8 cycles per (block, row) in the register form against 14.1-15.0 in the block
  // kernel at K = 1024 and 2048, 11.2 against 12.0 at K = 3584; Q6_K and Q8_0 the same either way. Which one wins
  // depends on the CPU (the block kernel shares each activation load between two weight rows, the register form
  // keeps its weights in registers), so the tuner times it.
  int prefillKernel = 0;
};

// Activation rows up to which a matmul is a batched decode step (the variant's batchKernel applies).
constexpr int kBatchKernelMaxRows = 8;

// Whether a matmul of `m` activation rows with variant `v` takes the register form of the block kernels: a batched
// decode step (2 .. kBatchKernelMaxRows rows) whose batchKernel asks for it, or a prefill (more rows) whose
// prefillKernel does.
inline bool usesRegisterForm(const DecodeVariant& v, int64_t m) {
  return m > kBatchKernelMaxRows ? v.prefillKernel == 1 : m > 1 && v.batchKernel == 1;
}
// Activation rows per tile of a matmul through the block kernels (32) or their register form (kBatchKernelMaxRows).
inline int64_t blockTileRows(bool registerForm) { return registerForm ? kBatchKernelMaxRows : 32; }
// Activation rows up to which timeDecodeMatmul and matmulDecodeVariant take a matmul (a prefill's tile for the tuner).
constexpr int kTimedMaxRows = 64;

// Weight rows per task of a batched decode step (2 .. kBatchKernelMaxRows activation rows through a block
// kernel): about two tasks per thread, at most kBatchTaskMaxRows rows (the 0.8B head: 243 tasks). Long runs
// of contiguous rows keep each thread's prefetch stream going and prepare the activation tile once per task;
// the split moves no bit (each output is one kernel call's result). Measured on an AMD EPYC Zen 4 (2 threads,
// in-process A/B alternating with the old split of about 8 tasks per thread and at most 64 rows, medians of 6):
// 8 concurrent sequences decoded 1.055x (0.8B Q4_K_M), 1.024x (Q8_0) and 1.069x (35B-A3B 4-layer MoE) the
// old aggregate; one batched step of the 0.8B Q4_K_M took 54-56 ms instead of 60-67 (head 13.5-14.1 ms
// instead of 16.3-17.7). Prefill (more rows per step) kept the old split: 0.99-1.03x, noise.
constexpr int64_t kBatchTaskMaxRows = 1024;
inline int64_t batchStepRowsPerTask(int64_t n, int64_t threads) {
  const int64_t tasks = 2 * threads;
  return n <= 0 ? 1 : std::max<int64_t>(1, std::min<int64_t>((n + tasks - 1) / tasks, kBatchTaskMaxRows));
}

// Limits of the fields (checkDecodeVariant).
constexpr int kMaxPrefetchBlocks = 1024;
constexpr int kMaxRowsPerTask = 1 << 20;

// Empty when `v` can run on this CPU and build, else why not (names the field and its value).
std::string checkDecodeVariant(const DecodeVariant& v);
// The variant decode matmuls of (role, type) run with. Set only between steps (not while one runs).
void setDecodeVariant(int role, int type, const DecodeVariant& v);
const DecodeVariant& decodeVariant(int role, int type);
void resetDecodeVariants();

// One weight matrix of a timing pass: `rows` rows of type `type` and K columns.
struct TimedMatrix {
  const uint8_t* w;
  int64_t rows;
};

// Times decode matmuls of `actRows` activation rows (1: one; up to kBatchKernelMaxRows: a batched step; up to kTimedMaxRows:
// a prefill's) (K columns, random values quantized to the type's
// vec_dot_type) against every matrix of `matrices` in turn, `passes` times, with variant `v`. Returns
// the nanoseconds of each pass (steady clock). A pass should read more bytes than the last-level cache
// holds, so each one streams its weights from memory as a decode step does.
std::vector<double> timeDecodeMatmul(int type, int64_t k, const std::vector<TimedMatrix>& matrices,
                                     const DecodeVariant& v, int passes, int actRows = 1);

// y[m, N] = x[m, K] W^T (m = 1: decode; 2 .. 8: a batched step; more: a prefill) with variant `v` (tests hold every variant
// bit-identical).
void matmulDecodeVariant(int type, const uint8_t* w, int64_t n, int64_t k, const float* x, float* y,
                         const DecodeVariant& v, int64_t m = 1);

}  // namespace kq
