import { GgmlType, GGML_TYPE_TRAITS } from "@keepquant/gguf";
import {
  KEEPQUANT_CHUNK_BYTES,
  KEEPQUANT_ENCODINGS,
  UnregisteredEncodingError,
  UnsupportedGgmlTypeError,
  decodeSlice,
  matmulDense,
  referenceProvider,
  selectProvider,
  type MatmulBTQuantGroupedArgs,
} from "@keepquant/quant";
import {
  envelopeSweepCases,
  formatSweepResults,
  materializeSweepCase,
  randomPackedWeight,
  runEnvelopeSweep,
} from "@keepquant/quant/testing";
import { afterAll, describe, expect, it } from "vitest";
import {
  CPU_NATIVE_LLAMA_PROVIDER_NAME,
  CPU_NATIVE_PROVIDER_NAME,
  NATIVE_LLAMA_TYPES,
  availableNativeIsas,
  createNativeLlamaProvider,
  createNativeProvider,
  matmulLlama,
  getNativeIsa,
  nativeDequantizeRows,
  nativeProvider,
  setNativeIsa,
  setNativeThreads,
} from "./index.js";
import { firstBitMismatch, randomFloats } from "./test-support.js";

const initialIsa = getNativeIsa();
afterAll(() => {
  setNativeIsa(initialIsa);
  setNativeThreads(0);
});

describe("cpu-native KeepQuantProvider (bf16 contract)", () => {
  it("is offered above the TS reference", () => {
    const provider = nativeProvider();
    expect(provider?.name).toBe(CPU_NATIVE_PROVIDER_NAME);
    expect(provider!.priority).toBeGreaterThan(referenceProvider.priority);
  });

  for (const isa of availableNativeIsas()) {
    it(`envelope sweep at level ${isa}: every worst ratio < 1`, () => {
      setNativeIsa(isa);
      const results = runEnvelopeSweep(createNativeProvider());
      console.log(`[${isa}]\n${formatSweepResults(results)}`);
      expect(results.length).toBe(envelopeSweepCases().length);
      for (const r of results) expect(r.worstRatio, r.name).toBeLessThan(1);
    });
  }

  it("generic level = TS reference provider bit for bit (same f32 order)", () => {
    setNativeIsa("generic");
    const native = createNativeProvider();
    for (const c of envelopeSweepCases().filter((c) => c.k <= 1024)) {
      const { args } = materializeSweepCase(c);
      expect(firstBitMismatch(native.matmulBTQuantGrouped(args), referenceProvider.matmulBTQuantGrouped(args)), c.name).toBe(-1);
    }
  });

  it("refuses unregistered encodings with the contract's message (sync and async)", async () => {
    const provider = createNativeProvider();
    const weight = { type: GgmlType.Q4_0, groups: 1, rows: 2, cols: 32, data: new Uint8Array(36) };
    const args: MatmulBTQuantGroupedArgs = { x: new Float32Array(32), xGroups: 1, m: 1, weight, p: 1 };
    const message = "no kernel for op MatmulBTQuantGrouped: Q4_0 is not a registered encoding (registered: Q4_K, Q5_K, Q6_K, Q8_0)";
    expect(() => provider.matmulBTQuantGrouped(args)).toThrow(UnregisteredEncodingError);
    expect(() => provider.matmulBTQuantGrouped(args)).toThrow(message);
    expect(() => referenceProvider.matmulBTQuantGrouped(args)).toThrow(message);
    await expect(provider.matmulBTQuantGroupedAsync(args)).rejects.toThrow(message);
  });

  it("E = 1 runs through the chunk policy; the chunking does not change a bit", () => {
    setNativeIsa("best");
    const k = 512;
    const weight = randomPackedWeight(GgmlType.Q4_K, 1, 50, k, 9);
    const x = Float32Array.from({ length: 2 * k }, (_, i) => Math.sin(i) * 3);
    const args: MatmulBTQuantGroupedArgs = { x, xGroups: 1, m: 2, weight, p: 1 };
    const chunks: [number, number, number][] = [];
    const capped = createNativeProvider({
      env: { [KEEPQUANT_CHUNK_BYTES]: String(4 * k * 7) },
      onChunk: (g, r0, r1) => chunks.push([g, r0, r1]),
    });
    const y = capped.matmulBTQuantGrouped(args);
    expect(chunks.length).toBe(8);
    expect(chunks[0]).toEqual([0, 0, 7]);
    expect(chunks[7]).toEqual([0, 49, 50]);
    const defaults: [number, number, number][] = [];
    const whole = createNativeProvider({ env: {}, onChunk: (g, r0, r1) => defaults.push([g, r0, r1]) }).matmulBTQuantGrouped(args);
    expect(defaults).toEqual([[0, 0, 50]]);
    expect(firstBitMismatch(y, whole)).toBe(-1);
    expect(() => createNativeProvider({ env: { [KEEPQUANT_CHUNK_BYTES]: "lots" } }).matmulBTQuantGrouped(args)).toThrow(
      KEEPQUANT_CHUNK_BYTES,
    );
  });

  it("E = N per ids, Pa = 1 broadcast; async gives the same bits; 1 vs N threads bit-identical", async () => {
    setNativeIsa("best");
    const sweep = envelopeSweepCases().filter((c) => c.groups > 1);
    const provider = createNativeProvider();
    for (const c of sweep) {
      const { args } = materializeSweepCase(c);
      setNativeThreads(1);
      const one = provider.matmulBTQuantGrouped(args);
      setNativeThreads(3);
      expect(firstBitMismatch(provider.matmulBTQuantGrouped(args), one), c.name).toBe(-1);
      expect(firstBitMismatch(await provider.matmulBTQuantGroupedAsync(args), one), c.name).toBe(-1);
    }
    setNativeThreads(0);
  });

  it("writes into args.out when given", () => {
    const c = envelopeSweepCases()[0]!;
    const { args } = materializeSweepCase(c);
    const out = new Float32Array(c.p * c.m * c.n);
    const y = createNativeProvider().matmulBTQuantGrouped({ ...args, out });
    expect(y).toBe(out);
  });
});

describe("one provider interface (@keepquant/quant's MatmulProvider)", () => {
  const allTypes = (Object.keys(GGML_TYPE_TRAITS).map(Number) as GgmlType[]).sort((a, b) => a - b);

  it("cpu-native is a bf16 provider of the registered encodings; cpu-native-llama a llama provider of NATIVE_LLAMA_TYPES", () => {
    const contract = createNativeProvider();
    const llama = createNativeLlamaProvider();
    expect([contract.numerics, contract.name]).toEqual(["bf16", CPU_NATIVE_PROVIDER_NAME]);
    expect([llama.numerics, llama.name]).toEqual(["llama", CPU_NATIVE_LLAMA_PROVIDER_NAME]);
    expect(llama.priority).toBe(contract.priority);
    expect(allTypes.filter((t) => contract.supports(t))).toEqual([...KEEPQUANT_ENCODINGS].sort((a, b) => a - b));
    expect(allTypes.filter((t) => llama.supports(t))).toEqual([...NATIVE_LLAMA_TYPES].sort((a, b) => a - b));
    expect(createNativeProvider({ name: "cpu-native-x" }).name).toBe("cpu-native-x");
    expect(createNativeLlamaProvider({ name: "cpu-native-llama-x" }).name).toBe("cpu-native-llama-x");
    // selection: the native contract provider outranks the TS reference; llama types go to the llama provider
    const offered = [referenceProvider, llama, contract];
    expect(selectProvider(offered, "bf16", GgmlType.Q4_K)).toBe(contract);
    expect(selectProvider(offered, "llama", GgmlType.Q4_K)).toBe(llama);
    expect(selectProvider(offered, "bf16", GgmlType.Q4_0)).toBeUndefined();
  });

  it("cpu-native-llama computes the grouped operation as matmulLlama per selected group (ids, broadcast, async), bit for bit", async () => {
    setNativeIsa("best");
    const llama = createNativeLlamaProvider();
    for (const type of [GgmlType.Q4_K, GgmlType.Q8_0, GgmlType.F32]) {
      const k = 256;
      const n = 9;
      const weight =
        type === GgmlType.F32
          ? { type, groups: 3, rows: n, cols: k, data: new Uint8Array(randomFloats(3 * n * k, 71).buffer) }
          : randomPackedWeight(type, 3, n, k, 70 + type);
      const rowBytes = weight.data.length / (3 * n);
      const ids = Int32Array.from([2, 0, 2]);
      const x = randomFloats(3 * 2 * k, 5 + type);
      for (const xGroups of [1, 3]) {
        const args: MatmulBTQuantGroupedArgs = { x: x.subarray(0, xGroups * 2 * k), xGroups, m: 2, weight, ids, p: 3 };
        const expected = new Float32Array(3 * 2 * n);
        for (let p = 0; p < 3; p++) {
          const group = { type, rows: n, cols: k, data: weight.data.subarray(ids[p]! * n * rowBytes, (ids[p]! + 1) * n * rowBytes) };
          const xp = xGroups === 1 ? x.subarray(0, 2 * k) : x.subarray(p * 2 * k, (p + 1) * 2 * k);
          expected.set(matmulLlama(group, xp, 2), p * 2 * n);
        }
        const name = `${GGML_TYPE_TRAITS[type].name} Pa=${xGroups}`;
        expect(firstBitMismatch(llama.matmulBTQuantGrouped(args), expected), name).toBe(-1);
        expect(firstBitMismatch(await llama.matmulBTQuantGroupedAsync(args), expected), name).toBe(-1);
      }
      // the dense call writes the leading rows of a longer output
      const dense = { ...weight, groups: 1, rows: n, data: weight.data.subarray(0, n * rowBytes) };
      const out = new Float32Array(4 * n).fill(3);
      matmulDense(llama, dense, x, 2, out);
      expect(firstBitMismatch(out.subarray(0, 2 * n), matmulLlama(dense, x.subarray(0, 2 * k), 2))).toBe(-1);
      expect(Array.from(out.subarray(2 * n))).toEqual(new Array(2 * n).fill(3));
    }
  });

  it("cpu-native-llama refuses a type without a kernel by name (sync and async)", async () => {
    const llama = createNativeLlamaProvider();
    const weight = { type: GgmlType.IQ2_XXS, groups: 1, rows: 1, cols: 256, data: new Uint8Array(66) };
    const args: MatmulBTQuantGroupedArgs = { x: new Float32Array(256), xGroups: 1, m: 1, weight, p: 1 };
    expect(() => llama.matmulBTQuantGrouped(args)).toThrow(UnsupportedGgmlTypeError);
    expect(() => llama.matmulBTQuantGrouped(args)).toThrow(/IQ2_XXS is not supported/);
    await expect(llama.matmulBTQuantGroupedAsync(args)).rejects.toThrow(/IQ2_XXS/);
  });
});

describe("slice decode legs (native decode = quant decodeSlice, bit for bit)", () => {
  for (const type of [GgmlType.Q4_K, GgmlType.Q5_K, GgmlType.Q6_K, GgmlType.Q8_0]) {
    const name = GGML_TYPE_TRAITS[type].name;
    it(`${name}: slices across chunk boundaries of every group`, () => {
      const k = 512;
      const weight = randomPackedWeight(type, 3, 21, k, 40 + type);
      const rowBytes = (k / GGML_TYPE_TRAITS[type].blockSize) * GGML_TYPE_TRAITS[type].typeSize;
      for (const [g, r0, r1] of [
        [0, 0, 21],
        [1, 0, 7],
        [1, 7, 14],
        [2, 14, 21],
        [2, 20, 21],
      ] as const) {
        const ts = decodeSlice(weight, g, r0, r1, new Float32Array((r1 - r0) * k));
        const bytes = weight.data.subarray((g * 21 + r0) * rowBytes, (g * 21 + r1) * rowBytes);
        const native = nativeDequantizeRows(type, bytes, new Float32Array((r1 - r0) * k), r1 - r0);
        expect(firstBitMismatch(native, ts), `${name} g=${g} [${r0}, ${r1})`).toBe(-1);
      }
    });
  }

  it("negative zero survives the decode (negative scale x zero quant)", () => {
    // one Q8_0 block: d = -1.0 (f16 0xbc00), quants 0..31 with q[0] = 0
    const block = new Uint8Array(34);
    block[0] = 0x00;
    block[1] = 0xbc;
    for (let i = 1; i < 32; i++) block[2 + i] = i;
    const out = nativeDequantizeRows(GgmlType.Q8_0, block, new Float32Array(32), 1);
    expect(Object.is(out[0], -0)).toBe(true);
    expect(out[5]).toBe(-5);
    const bf = nativeDequantizeRows(GgmlType.Q8_0, block, new Float32Array(32), 1, { roundBf16: true });
    expect(Object.is(bf[0], -0)).toBe(true);
  });
});
