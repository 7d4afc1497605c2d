#include "cpu/moe_matmul.h"

#include <algorithm>
#include <vector>

#include "core/threadpool.h"
#include "cpu/dispatch.h"
#include "cpu/kernels.h"
#include "cpu/tuning.h"

namespace kq {
namespace {

// Rows per task. Decode (one routed row per expert): one contiguous run of each expert matrix per thread.
// The jobs of a dispatch are equal in size (the selected experts' gate and up, or their down matrices,
// and the shared expert's), so their tasks still balance, and each thread streams long runs of rows the
// hardware prefetcher follows: on an AMD EPYC Zen 1 the FFN phase of a 35B-A3B decode step took
// 0.88-0.91x the time of 32-64-row tasks (in-process A/B, min and median over 8 rounds).
// Batched steps (matmul.cc's split): a few rows per expert through a block kernel take long runs
// (batchStepRowsPerTask); otherwise enough tasks to balance the threads, few enough to amortize scheduling.
int64_t groupedRowsPerTask(int64_t n, int64_t m, bool blockKernel) {
  if (m == 1) return std::max<int64_t>(1, (n + threadCount() - 1) / threadCount());
  if (blockKernel && m <= kBatchKernelMaxRows) return batchStepRowsPerTask(n, threadCount());
  const int64_t target = (int64_t)threadCount() * 8;
  const int64_t cap = blockKernel ? 64 : 16;
  return std::max<int64_t>(1, std::min((n + target - 1) / target, cap));
}

// Weight rows [r0, r1) of one job with the kernel matmul.cc's row loop picks for the job's shape
// (decode: several weight rows per call, with the tuned decode variant of the layers' matmuls of this
// type: ISA path, rows per call, prefetch distance; prefill: the block kernel per activation tile of
// 32 or its register form per tile of 8 as the layers' variant says, else the multi-row or single dot).
// Each y[mi, r] is one kernel call's result whatever the task split or the variant (every variant gives
// the same bits).
void groupedRowBlock(const LlamaRowsJob& job, int64_t r0, int64_t r1) {
  const size_t wBytes = rowBytes(job.type, job.k);
  const int64_t m = job.m, n = job.n;
  const DecodeVariant* v = m == 1 ? (job.variant ? job.variant : &decodeVariant(kRoleLayer, job.type)) : nullptr;
  const CpuTypeTraits& kt = (v && v->isa >= 0 ? kernelsAt((IsaLevel)v->isa) : kernels()).type[job.type];
  if (v && kt.vec_dot_rows) {
    kt.vec_dot_rows((int)job.k, job.w + (size_t)r0 * wBytes, wBytes, (int)(r1 - r0), job.act, job.y + r0, v->prefetch,
                    v->weightRows > 0 ? v->weightRows : kt.weight_rows);
    return;
  }
  // a few rows (the tokens of a batched step routed to this expert): the tuned batch kernel; more (a prefill's): the
  // tuned prefill kernel, the register form over tiles of kBatchKernelMaxRows rows
  const DecodeVariant& tuned = job.variant ? *job.variant : decodeVariant(kRoleLayer, job.type);
  const bool regs = kt.vec_dot_block_regs && usesRegisterForm(tuned, m);
  const int64_t mTile = blockTileRows(regs);
  const VecDotBlockFn blockFn = regs ? kt.vec_dot_block_regs : kt.vec_dot_block;
  if (blockFn) {
    for (int64_t m0 = 0; m0 < m; m0 += mTile) {
      const int64_t m1 = std::min(m, m0 + mTile);
      blockFn((int)job.k, job.w + (size_t)r0 * wBytes, wBytes, (int)(r1 - r0), job.act + (size_t)m0 * job.actBytes,
                       job.actBytes, (int)(m1 - m0), job.y + (size_t)m0 * n + r0, (size_t)n);
    }
    return;
  }
  for (int64_t m0 = 0; m0 < m; m0 += mTile) {
    const int64_t m1 = std::min(m, m0 + mTile);
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* wr = job.w + (size_t)r * wBytes;
      if (kt.vec_dot_multi) {
        for (int64_t mi = m0; mi < m1; mi += kt.multi_rows) {
          const int rows = (int)std::min<int64_t>(kt.multi_rows, m1 - mi);
          kt.vec_dot_multi((int)job.k, wr, job.act + (size_t)mi * job.actBytes, job.actBytes, rows, job.y + (size_t)mi * n + r,
                           (size_t)n);
        }
      } else {
        for (int64_t mi = m0; mi < m1; ++mi) job.y[(size_t)mi * n + r] = kt.vec_dot((int)job.k, wr, job.act + (size_t)mi * job.actBytes);
      }
    }
  }
}

}  // namespace

void matmulGrouped(const LlamaRowsJob* jobs, int count) {
  if (count <= 0) return;
  // task t of job j: first[j] <= t < first[j + 1]; grows once per thread, then reused
  thread_local std::vector<int64_t> rpt;
  thread_local std::vector<int> first;
  rpt.resize((size_t)count);
  first.resize((size_t)count + 1);
  first[0] = 0;
  for (int j = 0; j < count; ++j) {
    const bool block = jobs[j].m > 1 && kernels().type[jobs[j].type].vec_dot_block != nullptr;
    rpt[j] = groupedRowsPerTask(jobs[j].n, jobs[j].m, block);
    first[j + 1] = first[j] + (int)((jobs[j].n + rpt[j] - 1) / rpt[j]);
  }
  const int64_t* perTask = rpt.data();
  const int* starts = first.data();
  parallelFor(starts[count], [&](int t) {
    // the job owning task t (binary search over the prefix of task counts)
    const int j = (int)(std::upper_bound(starts, starts + count + 1, t) - starts) - 1;
    const int64_t r0 = (int64_t)(t - starts[j]) * perTask[j];
    groupedRowBlock(jobs[j], r0, std::min(jobs[j].n, r0 + perTask[j]));
  });
}

}  // namespace kq
