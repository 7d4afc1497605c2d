import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { oracleLibDir, oracleUnavailableReason } from "@keepquant/oracle";
import { describe, expect, it } from "vitest";
import { seededRandom } from "../testing/synthetic-model.js";
import { ggmlDecayDot, ggmlMadDot, ggmlVecDotF32, ggmlVecSilu } from "./ggml-expf.js";

function skipReason(): string | undefined {
  const reason = oracleUnavailableReason();
  if (reason) return reason;
  const flags = /^flags\s*:\s*(.*)$/m.exec(readFileSync("/proc/cpuinfo", "utf8"))?.[1]?.split(/\s+/) ?? [];
  if (!["avx2", "fma", "f16c"].every((f) => flags.includes(f))) return "the CPU lacks AVX2/FMA/F16C (llama.cpp's haswell kernels)";
  return undefined;
}
const reason = skipReason();

type Fn = (...args: unknown[]) => unknown;

describe.skipIf(reason !== undefined)(`llama.cpp elementwise kernels (haswell CPU backend)${reason ? ` (skipped: ${reason})` : ""}`, () => {
  const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../../..");
  const koffi = createRequire(path.join(repo, "tools/oracle/package.json"))("koffi") as {
    load(file: string): { func(signature: string): Fn };
  };
  koffi.load(path.join(oracleLibDir(), "libggml-base.so"));
  const cpu = koffi.load(path.join(oracleLibDir(), "libggml-cpu-haswell.so"));
  const random = seededRandom(99);
  const values = (n: number, scale: number) => Float32Array.from({ length: n }, () => (random() * 2 - 1) * scale);

  it("ggmlVecSilu equals ggml_vec_silu_f32 bit for bit (SIMD body and scalar tail)", () => {
    const silu = cpu.func("void ggml_vec_silu_f32(int n, _Out_ float *y, const float *x)");
    for (const [n, scale] of [
      [65536, 1],
      [65536, 12],
      [65536, 100],
      [1027, 5],
    ] as const) {
      const x = values(n, scale);
      const ref = new Float32Array(n);
      silu(n, ref, x);
      const ours = new Float32Array(n);
      ggmlVecSilu(x, 0, ours, 0, n);
      let differ = 0;
      for (let i = 0; i < n; i++) if (!Object.is(ours[i], ref[i])) differ++;
      expect(differ).toBe(0);
    }
  });

  it("ggmlVecDotF32 and the fused GDN row kernels equal ggml_vec_dot_f32 (n a multiple of 32)", () => {
    const dot = cpu.func(
      "void ggml_vec_dot_f32(int n, _Out_ float *s, size_t bs, const float *x, size_t bx, const float *y, size_t by, int nrc)",
    );
    const out = new Float32Array(1);
    for (let trial = 0; trial < 400; trial++) {
      const n = [32, 64, 128, 256][trial % 4]!;
      const x = values(n, 2);
      const y = values(n, 3);
      dot(n, out, 0, x, 0, y, 0, 1);
      expect(ggmlVecDotF32(x, 0, y, 0, n)).toBe(out[0]);
      // decay then dot: same as scaling x in f32 first
      const decay = Math.fround(0.5 + random() / 2);
      const scaled = x.map((v) => v * decay);
      dot(n, out, 0, scaled, 0, y, 0, 1);
      const x2 = x.slice();
      expect(ggmlDecayDot(x2, 0, y, 0, n, decay)).toBe(out[0]);
      expect(x2).toEqual(scaled);
      // x += k * delta (one rounding) then dot
      const k = values(n, 1);
      const delta = Math.fround(random() - 0.5);
      const updated = x.map((v, i) => v + k[i]! * delta);
      dot(n, out, 0, updated, 0, y, 0, 1);
      const x3 = x.slice();
      expect(ggmlMadDot(x3, 0, y, 0, n, k, 0, delta)).toBe(out[0]);
      expect(x3).toEqual(updated);
    }
  });
});
