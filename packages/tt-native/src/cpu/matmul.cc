#include "cpu/matmul.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "cpu/dispatch.h"
#include "cpu/kernels.h"
#include "cpu/tuning.h"
#include "core/threadpool.h"

namespace kq {
namespace {

// Rows per task: enough tasks to balance threads, few enough to amortize scheduling; a batched decode step
// through a block kernel takes long runs (batchStepRowsPerTask).
int64_t rowsPerTask(int64_t n, int64_t m, bool blockKernel) {
  const int64_t threads = threadCount();
  if (blockKernel && m > 1 && m <= kBatchKernelMaxRows) return batchStepRowsPerTask(n, threads);
  const int64_t target = threads * 8;
  int64_t r = (n + target - 1) / target;
  // a block kernel prepares the activation tile once per task: bigger tasks amortize it
  const int64_t cap = m > 1 && !blockKernel ? 16 : 64;
  r = std::max<int64_t>(1, std::min(r, cap));
  return r;
}

}  // namespace

namespace {

// Rows [r0, r1) of one job. Each task owns a block of weight rows; activation rows are walked in
// tiles that stay in cache. Every y[mi, r] is one kernel call's result whatever the split, so
// threads never change bits.
// `regs`: a batched decode step (2 .. kBatchKernelMaxRows activation rows) or a prefill whose variant asks for the
// block kernels' register form (a prefill's activation rows then go through it in tiles of kBatchKernelMaxRows).
void rowBlock(const LlamaRowsJob& job, const DecodeVariant* v, bool regs, int64_t r0, int64_t r1) {
  const CpuTypeTraits& kt = (v && v->isa >= 0 ? kernelsAt((IsaLevel)v->isa) : kernels()).type[job.type];
  const VecDotFn dot = kt.vec_dot;
  const VecDotMultiFn multi = kt.vec_dot_multi;
  const int multiRows = kt.multi_rows;
  const size_t wBytes = rowBytes(job.type, job.k);
  const int64_t m = job.m, n = job.n;
  const VecDotRowsFn rowsFn = kt.vec_dot_rows;
  if (m == 1 && rowsFn) {
    // decode: the task's weight rows in one call, several side by side (independent chains), the activation
    // row's per-block values prepared once
    rowsFn((int)job.k, job.w + (size_t)r0 * wBytes, wBytes, (int)(r1 - r0), job.act, job.y + r0, v ? v->prefetch : 0,
           v && v->weightRows > 0 ? v->weightRows : kt.weight_rows);
    return;
  }
  const bool registers = regs && kt.vec_dot_block_regs;  // the level has the register form for this type
  const int64_t mTile = blockTileRows(registers);
  const VecDotBlockFn blockFn = registers ? kt.vec_dot_block_regs : kt.vec_dot_block;
  if (blockFn) {
    // prefill: the kernel takes the task's whole block of weight rows per activation tile
    for (int64_t m0 = 0; m0 < m; m0 += mTile) {
      const int64_t m1 = std::min(m, m0 + mTile);
      blockFn((int)job.k, job.w + (size_t)r0 * wBytes, wBytes, (int)(r1 - r0), job.act + (size_t)m0 * job.actBytes, job.actBytes,
              (int)(m1 - m0), job.y + (size_t)m0 * n + r0, (size_t)n);
    }
    return;
  }
  for (int64_t m0 = 0; m0 < m; m0 += mTile) {
    const int64_t m1 = std::min(m, m0 + mTile);
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* wr = job.w + (size_t)r * wBytes;
      if (multi) {
        for (int64_t mi = m0; mi < m1; mi += multiRows) {
          const int rows = (int)std::min<int64_t>(multiRows, m1 - mi);
          multi((int)job.k, wr, job.act + (size_t)mi * job.actBytes, job.actBytes, rows, job.y + (size_t)mi * n + r, (size_t)n);
        }
      } else {
        for (int64_t mi = m0; mi < m1; ++mi) job.y[(size_t)mi * n + r] = dot((int)job.k, wr, job.act + (size_t)mi * job.actBytes);
      }
    }
  }
}

}  // namespace

void matmulLlamaRowsBatch(const LlamaRowsJob* jobs, int count) {
  // one task space over every job's row blocks: one dispatch (one wait) for matmuls sharing an input
  constexpr int kMaxJobs = 8;
  int64_t rpt[kMaxJobs];
  int first[kMaxJobs + 1];
  const DecodeVariant* variant[kMaxJobs];
  bool regs[kMaxJobs];
  bool inline_ = true;  // every job asks for the calling thread alone
  first[0] = 0;
  for (int j = 0; j < count; ++j) {
    const LlamaRowsJob& job = jobs[j];
    const DecodeVariant* tuned = job.variant ? job.variant : &decodeVariant(job.role, job.type);
    variant[j] = job.m == 1 ? tuned : nullptr;
    regs[j] = usesRegisterForm(*tuned, job.m);
    // a tuned size applies to every matrix of its (role, type) group: capped at one task per thread, so that
    // the group's smaller matrices still split over the threads
    rpt[j] = variant[j] && variant[j]->rowsPerTask > 0
                 ? std::min<int64_t>(variant[j]->rowsPerTask, (job.n + threadCount() - 1) / threadCount())
                 : rowsPerTask(job.n, job.m, job.m > 1 && kernels().type[job.type].vec_dot_block != nullptr);
    first[j + 1] = first[j] + (int)((job.n + rpt[j] - 1) / rpt[j]);
    if (!variant[j] || variant[j]->threads != 1) inline_ = false;
  }
  auto task = [&](int t) {
    int j = 0;
    while (t >= first[j + 1]) ++j;
    const int64_t r0 = (int64_t)(t - first[j]) * rpt[j];
    rowBlock(jobs[j], variant[j], regs[j], r0, std::min(jobs[j].n, r0 + rpt[j]));
  };
  if (inline_) {
    for (int t = 0; t < first[count]; ++t) task(t);
    return;
  }
  parallelFor(first[count], task);
}

void matmulLlamaRows(int type, const uint8_t* w, int64_t n, int64_t k, const uint8_t* actData, size_t actBytes,
                     int64_t m, float* y) {
  const LlamaRowsJob job{type, w, n, k, actData, actBytes, m, y};
  matmulLlamaRowsBatch(&job, 1);
}

void matmulLlama(int type, const uint8_t* w, int64_t n, int64_t k, const float* x, int64_t m, float* y) {
  const int actType = typeTraits(type).vecDotType;
  const size_t actBytes = actRowBytes(actType, k);
  std::vector<uint8_t> act;
  const uint8_t* actData;
  if (actType == T_F32) {
    actData = reinterpret_cast<const uint8_t*>(x);
  } else {
    act.resize(actBytes * (size_t)m);
    uint8_t* a = act.data();
    parallelFor((int)m, [&](int row) { quantizeActRow(actType, x + (size_t)row * k, a + (size_t)row * actBytes, k); });
    actData = a;
  }
  matmulLlamaRows(type, w, n, k, actData, actBytes, m, y);
}

void matmulBf16Rows(int type, const uint8_t* w, int64_t k, int64_t rowStart, int64_t rowCount, const float* x,
                    int64_t m, float* y, int64_t ldy, int64_t yOffset) {
  const DotF32Fn dot = kernels().dotF32;
  const ToFloatFn decode = kernels().type[type].to_float;
  const size_t wBytes = rowBytes(type, k);
  const int64_t rpt = rowsPerTask(rowCount, m, false);
  const int tasks = (int)((rowCount + rpt - 1) / rpt);
  parallelFor(tasks, [&](int t) {
    thread_local std::vector<float> row;  // grows once per thread, then reused
    if (row.size() < (size_t)k) row.resize((size_t)k);
    const int64_t r0 = (int64_t)t * rpt;
    const int64_t r1 = std::min(rowCount, r0 + rpt);
    for (int64_t r = r0; r < r1; ++r) {
      decode(w + (size_t)(rowStart + r) * wBytes, row.data(), k);
      for (int64_t i = 0; i < k; ++i) row[i] = roundToBf16(row[i]);
      for (int64_t mi = 0; mi < m; ++mi) y[mi * ldy + yOffset + r] = dot((int)k, x + (size_t)mi * k, row.data());
    }
  });
}

bool dequantizeRows(int type, const uint8_t* src, int64_t rows, int64_t k, float* dst, bool roundBf16) {
  if (!dequantSupported(type)) return false;
  const ToFloatFn decode = kernels().type[type].to_float;
  const size_t wBytes = rowBytes(type, k);
  const int64_t rpt = std::max<int64_t>(1, rows / (threadCount() * 4));
  const int tasks = (int)((rows + rpt - 1) / rpt);
  parallelFor(tasks, [&](int t) {
    const int64_t r0 = (int64_t)t * rpt;
    const int64_t r1 = std::min(rows, r0 + rpt);
    for (int64_t r = r0; r < r1; ++r) {
      float* out = dst + (size_t)r * k;
      decode(src + (size_t)r * wBytes, out, k);
      if (roundBf16)
        for (int64_t i = 0; i < k; ++i) out[i] = roundToBf16(out[i]);
    }
  });
  return true;
}

uint64_t sumWords(const uint8_t* buf, size_t bytes) {
  const SumWordsFn sum = kernels().sumWords;
  const size_t words = bytes / 8;
  const size_t chunk = 1 << 16;  // words per task (512 KiB)
  const int tasks = (int)((words + chunk - 1) / chunk);
  std::vector<uint64_t> partial((size_t)tasks, 0);
  parallelFor(tasks, [&](int t) {
    const size_t w0 = (size_t)t * chunk, w1 = std::min(words, w0 + chunk);
    partial[(size_t)t] = sum(buf + w0 * 8, w1 - w0);
  });
  uint64_t s = 0;
  for (uint64_t p : partial) s += p;
  return s;
}

}  // namespace kq
