import { describe, expect, it } from "vitest";
import { loadGgmlOracle } from "./ggml.js";
import { cpuKernelsUnavailableReason, loadCpuKernelOracle } from "./cpu-kernels.js";

const reason = cpuKernelsUnavailableReason();

function random(n: number, seed: number, scale = 1): Float32Array {
  let state = seed;
  return Float32Array.from({ length: n }, () => {
    state = (Math.imul(state, 1103515245) + 12345) >>> 0;
    return (state / 2 ** 32 - 0.5) * 2 * scale;
  });
}

describe.skipIf(reason !== undefined)(`ggml CPU kernels of the pinned variant${reason ? ` (skipped: ${reason})` : ""}`, () => {
  it("vec_dot_q8_0_q8_0 is the sum over blocks of d_x * d_y * integer dot", () => {
    const cpu = loadCpuKernelOracle();
    const ggml = loadGgmlOracle();
    const n = 32 * 4;
    const x = new Uint8Array(34 * 4);
    const y = new Uint8Array(34 * 4);
    ggml.quantizeRowRef("q8_0", random(n, 1), x);
    ggml.quantizeRowRef("q8_0", random(n, 2, 3), y);
    let expected = 0;
    for (let b = 0; b < 4; b++) {
      const dx = ggml.fp16ToFp32(x[b * 34]! | (x[b * 34 + 1]! << 8));
      const dy = ggml.fp16ToFp32(y[b * 34]! | (y[b * 34 + 1]! << 8));
      let dot = 0;
      for (let i = 0; i < 32; i++) dot += ((x[b * 34 + 2 + i]! << 24) >> 24) * ((y[b * 34 + 2 + i]! << 24) >> 24);
      expected += dx * dy * dot;
    }
    expect(cpu.vecDot("q8_0_q8_0", n, x, y)).toBeCloseTo(expected, 4);
  });

  it("quantize_row_q8_K equals the reference; quantize_row_q8_0 rounds exact ties to even", () => {
    const cpu = loadCpuKernelOracle();
    const ggml = loadGgmlOracle();
    const src = random(512, 3, 4);
    const simd = new Uint8Array(2 * 292);
    const ref = new Uint8Array(2 * 292);
    cpu.quantizeRow("q8_K", src, simd);
    ggml.quantizeRowRef("q8_K", src, ref);
    expect(Buffer.from(simd).equals(Buffer.from(ref))).toBe(true);
    // amax 127 gives d = 1, so x = 2.5 is an exact tie: even (2) vs away from zero (3).
    const tie = new Float32Array(32);
    tie[0] = 127;
    tie[1] = 2.5;
    const a = new Uint8Array(34);
    const b = new Uint8Array(34);
    cpu.quantizeRow("q8_0", tie, a);
    ggml.quantizeRowRef("q8_0", tie, b);
    expect([a[3], b[3]]).toEqual([2, 3]);
  });

  it("silu, swiglu and soft_max are ggml's vectorized versions (close to, not equal to, libm)", () => {
    const cpu = loadCpuKernelOracle();
    const x = random(1024, 5, 8);
    const g = random(1024, 6, 2);
    const silu = cpu.silu(x);
    let mismatches = 0;
    for (let i = 0; i < x.length; i++) {
      const exact = x[i]! / (1 + Math.exp(-x[i]!));
      expect(Math.abs(silu[i]! - exact)).toBeLessThanOrEqual(1e-6 * Math.max(1, Math.abs(exact)));
      if (silu[i] !== Math.fround(exact)) mismatches++;
    }
    expect(mismatches).toBeGreaterThan(0);
    const swiglu = cpu.swiglu(x, g);
    for (let i = 0; i < x.length; i += 97) expect(swiglu[i]).toBeCloseTo(silu[i]! * g[i]!, 5);
    const { y, sum } = cpu.softMax(x, 8);
    expect(sum).toBeCloseTo(
      y.reduce((s, v) => s + v, 0),
      3,
    );
    expect(y[10]).toBeCloseTo(Math.exp(x[10]! - 8), 6);
  });
});
