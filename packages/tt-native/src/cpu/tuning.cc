#include "cpu/tuning.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "cpu/dispatch.h"
#include "cpu/kernels.h"
#include "cpu/matmul.h"

namespace kq {
namespace {

DecodeVariant gVariants[kRoleCount][kTypeCount];

// A fixed pseudo-random activation row (xorshift), the same for every variant of a timing.
void fillActivation(float* x, int64_t k) {
  uint32_t s = 0x9E3779B9u;
  for (int64_t i = 0; i < k; ++i) {
    s ^= s << 13;
    s ^= s >> 17;
    s ^= s << 5;
    x[i] = (float)((int32_t)(s % 2001) - 1000) / 1000.0f;
  }
}

}  // namespace

std::string checkDecodeVariant(const DecodeVariant& v) {
  if (v.isa != -1 && !isaAvailable((IsaLevel)v.isa))
    return std::string("isa ") + (v.isa >= 0 && v.isa <= 3 ? isaName((IsaLevel)v.isa) : "?") + " is not a level this CPU and build run";
  if (v.isa == (int)IsaLevel::Generic && bestIsaLevel() != IsaLevel::Generic)
    return "isa generic sums in another order than the SIMD levels: not a bit-identical decode variant";
  if (v.weightRows < 0 || v.weightRows > 4 || v.weightRows == 3)
    return "weightRows must be 0 (default), 1, 2 or 4, got " + std::to_string(v.weightRows);
  if (v.prefetch < 0 || v.prefetch > kMaxPrefetchBlocks)
    return "prefetch must be 0 (default) .. " + std::to_string(kMaxPrefetchBlocks) + " blocks, got " + std::to_string(v.prefetch);
  if (v.rowsPerTask < 0 || v.rowsPerTask > kMaxRowsPerTask)
    return "rowsPerTask must be 0 (automatic) .. " + std::to_string(kMaxRowsPerTask) + ", got " + std::to_string(v.rowsPerTask);
  if (v.threads != 0 && v.threads != 1) return "threads must be 0 (the pool) or 1 (the calling thread), got " + std::to_string(v.threads);
  if (v.batchKernel != 0 && v.batchKernel != 1)
    return "batchKernel must be 0 (the block kernels) or 1 (the register kernels), got " + std::to_string(v.batchKernel);
  if (v.prefillKernel != 0 && v.prefillKernel != 1)
    return "prefillKernel must be 0 (the block kernels) or 1 (the register kernels), got " + std::to_string(v.prefillKernel);
  return "";
}

void setDecodeVariant(int role, int type, const DecodeVariant& v) {
  if (role < 0 || role >= kRoleCount || type < 0 || type >= kTypeCount) return;
  gVariants[role][type] = v;
}

const DecodeVariant& decodeVariant(int role, int type) {
  static const DecodeVariant kDefault{};
  if (role < 0 || role >= kRoleCount || type < 0 || type >= kTypeCount) return kDefault;
  return gVariants[role][type];
}

void resetDecodeVariants() {
  for (auto& role : gVariants)
    for (DecodeVariant& v : role) v = DecodeVariant{};
}

std::vector<double> timeDecodeMatmul(int type, int64_t k, const std::vector<TimedMatrix>& matrices, const DecodeVariant& v,
                                     int passes, int actRows) {
  const int actType = typeTraits(type).vecDotType;
  const int64_t m = std::max(1, std::min(actRows, kTimedMaxRows));
  std::vector<float> x((size_t)(k * m));
  fillActivation(x.data(), k * m);
  const size_t actBytes = actRowBytes(actType, k);
  std::vector<uint8_t> act(actBytes * (size_t)m);
  const uint8_t* actData = reinterpret_cast<const uint8_t*>(x.data());
  if (actType != T_F32) {
    for (int64_t r = 0; r < m; ++r) quantizeActRow(actType, x.data() + r * k, act.data() + (size_t)r * actBytes, k);
    actData = act.data();
  }
  int64_t maxRows = 0;
  for (const TimedMatrix& mat : matrices) maxRows = std::max(maxRows, mat.rows);
  std::vector<float> y((size_t)(maxRows * m));
  std::vector<double> out;
  out.reserve((size_t)passes);
  for (int p = 0; p < passes; ++p) {
    const auto start = std::chrono::steady_clock::now();
    for (const TimedMatrix& mat : matrices) {
      LlamaRowsJob job{type, mat.w, mat.rows, k, actData, actBytes, m, y.data()};
      job.variant = &v;
      matmulLlamaRowsBatch(&job, 1);
    }
    out.push_back((double)std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
  }
  return out;
}

void matmulDecodeVariant(int type, const uint8_t* w, int64_t n, int64_t k, const float* x, float* y, const DecodeVariant& v,
                         int64_t m) {
  const int actType = typeTraits(type).vecDotType;
  const size_t actBytes = actRowBytes(actType, k);
  std::vector<uint8_t> act(actBytes * (size_t)m);
  const uint8_t* actData = reinterpret_cast<const uint8_t*>(x);
  if (actType != T_F32) {
    for (int64_t r = 0; r < m; ++r) quantizeActRow(actType, x + r * k, act.data() + (size_t)r * actBytes, k);
    actData = act.data();
  }
  LlamaRowsJob job{type, w, n, k, actData, actBytes, m, y};
  job.variant = &v;
  matmulLlamaRowsBatch(&job, 1);
}

}  // namespace kq
