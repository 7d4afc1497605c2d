import { describe, expect, it } from "vitest";
import { GgmlType, GGML_TYPE_TRAITS } from "@keepquant/gguf";
import {
  checkGroupedMatmulShape,
  compareProviders,
  KEEPQUANT_ENCODINGS,
  matmulDense,
  matmulNumericsFor,
  QuantArgumentError,
  rankProviders,
  referenceProvider,
  runDenseGroups,
  selectProvider,
  wasmSimdProvider,
  type MatmulBTQuantGroupedArgs,
  type MatmulNumerics,
  type MatmulProvider,
} from "./index.js";
import { envelopeSweepCases, materializeSweepCase, randomPackedWeight } from "./testing/index.js";
import { firstBitDifference } from "./test-support.js";

/** A provider that records its calls and answers with its priority in every output. */
function fake(name: string, priority: number, numerics: MatmulNumerics, types: readonly GgmlType[]): MatmulProvider & { calls: number } {
  return {
    name,
    priority,
    numerics,
    calls: 0,
    supports: (type) => types.includes(type),
    matmulBTQuantGrouped(args) {
      this.calls++;
      const out = args.out ?? new Float32Array(args.p * args.m * args.weight.rows);
      return out.fill(priority);
    },
  };
}

describe("provider ranking and selection", () => {
  it("ranks by priority, then by name, whatever the order offered; refuses two providers with one name", () => {
    const a = fake("b-native", 100, "llama", [GgmlType.Q4_K]);
    const b = fake("a-native", 100, "llama", [GgmlType.Q4_K]);
    const c = fake("ts", 0, "llama", [GgmlType.Q4_K]);
    const d = fake("wasm", 10, "llama", [GgmlType.Q4_K]);
    for (const offered of [
      [a, b, c, d],
      [d, c, b, a],
      [c, a, d, b],
    ]) {
      expect(rankProviders(offered).map((p) => p.name)).toEqual(["a-native", "b-native", "wasm", "ts"]);
    }
    expect(compareProviders(a, b)).toBeGreaterThan(0);
    expect(() => rankProviders([a, c, fake("ts", 5, "bf16", [])])).toThrow(QuantArgumentError);
    expect(() => rankProviders([a, c, fake("ts", 5, "bf16", [])])).toThrow(/two providers are named "ts"/);
  });

  it("selects the highest-ranked provider of the numerics that supports the type", () => {
    const contractNative = fake("native-bf16", 100, "bf16", KEEPQUANT_ENCODINGS);
    const llamaNative = fake("native-llama", 100, "llama", [GgmlType.Q4_K, GgmlType.F32]);
    const llamaTs = fake("ts-llama", 0, "llama", [GgmlType.Q4_K, GgmlType.F32, GgmlType.IQ4_NL]);
    const all = [llamaTs, contractNative, referenceProvider, llamaNative];
    expect(selectProvider(all, "bf16", GgmlType.Q4_K)?.name).toBe("native-bf16");
    expect(selectProvider([llamaTs, referenceProvider], "bf16", GgmlType.Q6_K)?.name).toBe(referenceProvider.name);
    expect(selectProvider(all, "llama", GgmlType.Q4_K)?.name).toBe("native-llama");
    expect(selectProvider(all, "llama", GgmlType.IQ4_NL)?.name).toBe("ts-llama");
    expect(selectProvider(all, "llama", GgmlType.Q2_K)).toBeUndefined();
    expect(selectProvider(all, "exact", GgmlType.Q4_K)).toBeUndefined();
  });

  it("a bf16 model computes registered encodings by the contract and every other type in llama numerics", () => {
    for (const id of Object.keys(GGML_TYPE_TRAITS).map(Number) as GgmlType[]) {
      const registered = KEEPQUANT_ENCODINGS.includes(id);
      expect(matmulNumericsFor("bf16", id), GGML_TYPE_TRAITS[id].name).toBe(registered ? "bf16" : "llama");
      expect(matmulNumericsFor("llama", id)).toBe("llama");
      expect(matmulNumericsFor("exact", id)).toBe("exact");
    }
  });

  it("the quant providers are bf16 providers of exactly the registered encodings", () => {
    for (const provider of [referenceProvider, wasmSimdProvider]) {
      expect(provider.numerics).toBe("bf16");
      const supported = (Object.keys(GGML_TYPE_TRAITS).map(Number) as GgmlType[]).filter((t) => provider.supports(t));
      expect(supported.sort((x, y) => x - y)).toEqual([...KEEPQUANT_ENCODINGS].sort((x, y) => x - y));
    }
  });
});

describe("dense calls and dense kernels", () => {
  it("matmulDense reads only the leading M rows of x and writes only the leading M rows of out", () => {
    const k = 256;
    const weight = randomPackedWeight(GgmlType.Q8_0, 1, 5, k, 3);
    const x = Float32Array.from({ length: 4 * k }, (_, i) => Math.cos(i) * 2);
    const out = new Float32Array(4 * 5).fill(7);
    const y = matmulDense(referenceProvider, weight, x, 2, out);
    expect(y.length).toBe(10);
    expect(y.buffer).toBe(out.buffer);
    expect(Array.from(out.subarray(10))).toEqual(new Array(10).fill(7));
    const direct = referenceProvider.matmulBTQuantGrouped({ x: x.subarray(0, 2 * k), xGroups: 1, m: 2, weight, p: 1 });
    expect(firstBitDifference(y, direct)).toBeUndefined();
  });

  it("runDenseGroups gives a dense kernel the grouped operation (ids, broadcast), bit for bit", () => {
    const cases = envelopeSweepCases().filter((c) => c.groups > 1 && c.k <= 1024);
    expect(cases.length).toBeGreaterThan(0);
    for (const c of cases) {
      const { args } = materializeSweepCase(c);
      const shape = checkGroupedMatmulShape(args);
      let calls = 0;
      const y = runDenseGroups(args, shape, (weight, x, out) => {
        calls++;
        expect(weight.groups).toBe(1);
        referenceProvider.matmulBTQuantGrouped({ x, xGroups: 1, m: c.m, weight, p: 1, out });
      });
      expect(calls, c.name).toBe(c.p);
      expect(firstBitDifference(y, referenceProvider.matmulBTQuantGrouped(args)), c.name).toBeUndefined();
    }
  });

  it("checkGroupedMatmulShape takes any ggml type with block geometry and checks it like the contract", () => {
    const f32: MatmulBTQuantGroupedArgs = {
      x: new Float32Array(6),
      xGroups: 1,
      m: 2,
      p: 1,
      weight: { type: GgmlType.F32, groups: 1, rows: 4, cols: 3, data: new Uint8Array(4 * 3 * 4) },
    };
    expect(checkGroupedMatmulShape(f32)).toMatchObject({ e: 1, n: 4, k: 3, m: 2, p: 1, rowBytes: 12 });
    expect(() => checkGroupedMatmulShape({ ...f32, weight: { ...f32.weight, data: new Uint8Array(40) } }, "op")).toThrow(
      /op: invalid argument weight.data: \[1, 4, 3\] F32 is 48 bytes, data has 40/,
    );
    expect(() => checkGroupedMatmulShape({ ...f32, weight: { ...f32.weight, type: 4 as GgmlType } })).toThrow(/unknown ggml type id 4/);
    const q4 = { ...f32, x: new Float32Array(64), weight: { type: GgmlType.Q4_0, groups: 1, rows: 1, cols: 32, data: new Uint8Array(18) } };
    expect(checkGroupedMatmulShape(q4).rowBytes).toBe(18);
  });
});
