// Kernels of the MoE FFN (qwen35moe) in the arithmetic of the TypeScript specification's moeFfn
// (packages/engine/src/model/forward.ts). The generic level and the SIMD levels give identical bits.
#pragma once

namespace kq {

struct MoeOps {
  // The router: out[e] = dot(w row e0 + e, x) for e in [0, count), each as llamafile's tinyBLAS computes
  // one output of an F32 mul_mat (AVX2): one 8-lane fused multiply-add accumulator over k (k a multiple
  // of 8), then ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)). w is [E, k] row-major.
  void (*routerRows)(const float* w, const float* x, int k, int e0, int count, float* out);
};

// The kernels of the current ISA level (see cpu/dispatch.h).
const MoeOps& moeOps();

// Per-level tables (moe_ops_*.cc).
const MoeOps& genericMoeOps();
const MoeOps& avx2MoeOps();

}  // namespace kq
