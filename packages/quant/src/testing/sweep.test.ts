import { describe, expect, it } from "vitest";
import { GgmlType } from "@keepquant/gguf";
import { referenceProvider, type KeepQuantProvider, type MatmulBTQuantGroupedArgs } from "../index.js";
import { envelopeFactor, envelopeReport, envelopeSweepCases, formatSweepResults, runEnvelopeSweep } from "./index.js";

describe("analytic bf16 envelope sweep", () => {
  it("covers every registered encoding, E=1, E=N with repeated/out-of-order ids, Pa=1, ragged N, K from one block to 5120", () => {
    const cases = envelopeSweepCases();
    for (const type of [GgmlType.Q4_K, GgmlType.Q5_K, GgmlType.Q6_K, GgmlType.Q8_0]) {
      const mine = cases.filter((c) => c.type === type);
      expect(mine.some((c) => c.groups === 1)).toBe(true);
      expect(mine.some((c) => c.ids && new Set(c.ids).size < c.ids.length && c.ids.some((id, i) => i > 0 && id < c.ids![i - 1]!))).toBe(
        true,
      );
      expect(mine.some((c) => c.groups > 1 && c.xGroups === 1)).toBe(true);
      expect(mine.some((c) => c.groups > 1 && c.groups === c.n)).toBe(true);
      expect(Math.min(...mine.map((c) => c.k))).toBe(type === GgmlType.Q8_0 ? 32 : 256);
      expect(Math.max(...mine.map((c) => c.k))).toBe(5120);
      expect(mine.some((c) => c.n % 2 === 1 && c.n > 32)).toBe(true);
    }
  });

  it("reference provider: every worst ratio is below 1.0", () => {
    const results = runEnvelopeSweep(referenceProvider);
    console.log(`envelope sweep, provider ${referenceProvider.name}:\n${formatSweepResults(results)}`);
    for (const r of results) {
      expect(r.worstRatio, r.name).toBeLessThan(1);
      expect(r.worstRatio, `${r.name} (bf16 rounding must be visible)`).toBeGreaterThan(0);
    }
  });

  it("flags providers that break the contract", () => {
    const cases = envelopeSweepCases().filter((c) => c.name.includes("repeated out-of-order ids") || c.name.includes("K=5120"));
    const ignoresIds: KeepQuantProvider = {
      ...referenceProvider,
      name: "ignores-ids",
      matmulBTQuantGrouped: (args: MatmulBTQuantGroupedArgs) =>
        referenceProvider.matmulBTQuantGrouped({ ...args, ids: new Int32Array(args.p) }),
    };
    const dropsLastBlock: KeepQuantProvider = {
      ...referenceProvider,
      name: "drops-last-block",
      matmulBTQuantGrouped: (args: MatmulBTQuantGroupedArgs) => {
        const x = args.x.slice();
        const k = args.weight.cols;
        for (let row = 0; row < x.length / k; row++) x.fill(0, row * k + k - 32, row * k + k);
        return referenceProvider.matmulBTQuantGrouped({ ...args, x });
      },
    };
    const grouped = runEnvelopeSweep(ignoresIds, cases).filter((r) => r.name.includes("ids"));
    expect(grouped.length).toBe(4);
    for (const r of grouped) expect(r.worstRatio, r.name).toBeGreaterThan(1);
    for (const r of runEnvelopeSweep(dropsLastBlock, cases)) expect(r.worstRatio, r.name).toBeGreaterThan(1);
  });

  it("bound arithmetic: factor = 2^-8 + gamma_K (1 + 2^-8) + K 2^-53", () => {
    const k = 4096;
    const gamma = (k * 2 ** -24) / (1 - k * 2 ** -24);
    expect(envelopeFactor(k)).toBeCloseTo(2 ** -8 + gamma * (1 + 2 ** -8) + k * 2 ** -53, 15);
    // a single product: |x w| = 1, error exactly the bf16 half-ulp worst case stays inside
    const report = envelopeReport({
      x: Float32Array.from([1]),
      xGroups: 1,
      m: 1,
      decoded: Float32Array.from([1 + 2 ** -8]),
      groups: 1,
      n: 1,
      k: 1,
      p: 1,
      y: Float32Array.from([1]),
    });
    expect(report.worstRatio).toBeLessThan(1);
    expect(report.worstRatio).toBeGreaterThan(0.99);
  });
});
