// Element-wise and reduction kernels of the native forward step, in the arithmetic of the TypeScript
// specification (packages/engine/src/model/forward.ts and numerics/): f32 operations where it rounds
// to f32, f64 where it computes in f64, one rounding per fused multiply-add (`fmaf`). The generic
// level and the SIMD levels give identical bits; they differ in speed only.
#pragma once

#include <cstdint>

namespace kq {

struct ForwardOps {
  // ggml_vec_silu_f32 in place: ggml_v_silu on whole 8-lane vectors, x / (1 + expf(-x)) on the tail.
  void (*siluRow)(float* x, int n);
  // ggml_vec_swiglu_f32: g <- silu(g) * u (vector body / scalar tail as siluRow).
  void (*swigluRow)(float* g, const float* u, int n);
  // ggml_vec_dot_f32 in its AVX2 lane order (4 x 8 fused lanes over blocks of 32, fixed reduction).
  float (*vecDotF32)(const float* x, const float* y, int n);
  // ggml_vec_dot_f16 with one side already in f32: x (f16, converted exactly) against y, the same
  // lanes, fused multiply-adds and reduction as vecDotF32 (the f32 tail added in f32).
  float (*vecDotF16F32)(const uint16_t* x, const float* y, int n);
  // acc[i] <- f16(fma(f16->f32(v[i]), scale, acc[i])) (ggml_vec_mad_f16 on an f16 accumulator).
  void (*madF16Acc)(float* acc, const uint16_t* v, float scale, int n);
  // acc[i] <- f16(acc[i] * scale) (ggml_vec_scale_f16).
  void (*scaleF16Acc)(float* acc, float scale, int n);
  // acc[i] <- fma(v[i], scale, acc[i]) with v f32 or f16.
  void (*madF32)(float* acc, const float* v, float scale, int n);
  void (*madF16)(float* acc, const uint16_t* v, float scale, int n);
  // ggml_v_expf, one lane.
  float (*vexpf)(float x);
  // A tiled flash attention's KV tile of n keys (rows of an f16 cache, converted exactly, or f32): K transposed
  // into kT[d * ldk + j] (keys n up to a multiple of 8 zero), V into v[j * dh + d].
  void (*tileLoadF16)(const uint16_t* const* kRows, const uint16_t* const* vRows, int n, int dh, float* kT, int ldk, float* v);
  void (*tileLoadF32)(const float* const* kRows, const float* const* vRows, int n, int dh, float* kT, int ldk, float* v);
  // x[j] <- vexpf(x[j] - m).
  void (*expShifted)(float* x, int n, float m);
  // The tiled flash attention's scores (ggml's simd_gemm) of a KV tile shared by several queries, K
  // transposed: kT[d * ldk + j] is key j's element d (f32; an f16 cache's rows converted exactly), n <= ldk
  // keys: per key one f32 fused multiply-add chain over the head dimension from +0, s = fma(q[d], k[d], s),
  // then times `scale` in f32.
  void (*tileScores)(const float* kT, int ldk, int n, const float* q, int dh, float scale, float* out);
  // The same for two queries (each key's vector loaded once for both).
  void (*tileScores2)(const float* kT, int ldk, int n, const float* q0, const float* q1, int dh, float scale, float* out0,
                      float* out1);
  // acc[i] <- fma(v[j * ldv + i], p[j], acc[i]) for keys j = 0..n-1 in order (madF32 key after key).
  void (*tileValues)(float* acc, const float* v, size_t ldv, const float* p, int n, int dh);
  // The same for two accumulators and their weights (each V vector loaded once for both).
  void (*tileValues2)(float* acc0, float* acc1, const float* v, size_t ldv, const float* p0, const float* p1, int n, int dh);
  // The GDN causal depthwise conv with 4 taps over channels [0, nch) of one sequence's tokens: per
  // channel c and token t, y = ((((0 + s0 * w0) + s1 * w1) + s2 * w2) + x * w3) with each product and
  // sum rounded to f32 (s0..s2 the three previous raw inputs, oldest first), then the window shifts.
  // x/y rows are `stride` floats apart; state[c * 3 + j] and w[c * 4 + j] as the model stores them.
  void (*conv4)(const float* x, float* y, size_t stride, int nTokens, float* state, const float* w, int nch);
  // Greedy sampling's argmax (the engine's `greedy`, llama_sampler_greedy's linear scan): the lowest index
  // of the largest value (-0 and +0 equal), NaN never taken; 0 when no value is above -infinity or n is 0.
  int64_t (*argmaxF32)(const float* x, int64_t n);
  // The gated delta rule of one head for one token over its Dv state rows of Dk values (rows Dk apart): for each
  // row j, kv = decayDot(row, k, Dk, decay) (row <- row * decay, then dot(row, k)), delta = (v[j] - kv) * beta,
  // o[j] = madDot(row, q, k, Dk, delta) * scale (row <- fma(k, delta, row), then dot(row, q)), in the row kernels'
  // lanes and order (forward_ops.inc); a level may run several rows side by side.
  void (*deltaRule)(float* sHead, const float* q, const float* k, const float* v, int Dv, int Dk, float decay, float beta, float scale,
                    float* o);
};

// The kernels of the current ISA level (see dispatch.h).
const ForwardOps& forwardOps();

// Per-level tables (forward_ops_*.cc).
const ForwardOps& genericForwardOps();
const ForwardOps& avx2ForwardOps();
const ForwardOps& avx512ForwardOps();

}  // namespace kq
