import { describe, expect, it } from "vitest";
import { GgmlType, GGML_TYPE_TRAITS } from "@keepquant/gguf";
import {
  createWasmSimdProvider,
  fp32BitsToBf16Bits,
  KEEPQUANT_ENCODINGS,
  roundToBf16Wasm,
  UnregisteredEncodingError,
  wasmSimdDotModel,
  wasmSimdProvider,
  wasmSimdProviderUnavailableReason,
  type MatmulBTQuantGroupedArgs,
} from "./index.js";
import { formatSweepResults, randomActivations, randomPackedWeight, runEnvelopeSweep } from "./testing/index.js";
import { bf16Matmul, firstBitDifference, prng } from "./test-support.js";

/** The provider's arithmetic spelled out: bf16(w) then wasmSimdDotModel per output. */
function modelOutput(args: MatmulBTQuantGroupedArgs): Float32Array {
  return bf16Matmul(args, wasmSimdDotModel);
}

describe("wasm-simd provider", () => {
  it("is available on this runtime", () => {
    expect(wasmSimdProviderUnavailableReason()).toBeUndefined();
    expect(wasmSimdProvider.priority).toBeGreaterThan(0);
  });

  it("rounds to bf16 exactly as fp32BitsToBf16Bits (ties, subnormals, infinities, NaN payloads)", () => {
    const random = prng(9);
    const bits = new Uint32Array(200_003);
    const specials = [
      0, 0x80000000, 1, 0x7f800000, 0xff800000, 0x7f800001, 0x7fbfffff, 0xffc00001, 0x3f808000, 0x3f818000, 0x7f7fffff, 0x7f7f8000,
    ];
    bits.set(specials);
    for (let i = specials.length; i < bits.length; i++) bits[i] = (random() * 4294967296) >>> 0;
    const values = new Float32Array(bits.buffer.slice(0));
    roundToBf16Wasm(values);
    const rounded = new Uint32Array(values.buffer);
    let mismatches = 0;
    for (let i = 0; i < bits.length; i++) if (rounded[i] !== (fp32BitsToBf16Bits(bits[i]!) << 16) >>> 0) mismatches++;
    expect(mismatches).toBe(0);
  });

  for (const type of KEEPQUANT_ENCODINGS) {
    const name = GGML_TYPE_TRAITS[type].name;
    it(`${name}: bit-exact against its documented lane order (dense, grouped, broadcast, forced tiles)`, () => {
      const k = 512;
      const dense: MatmulBTQuantGroupedArgs = {
        x: randomActivations(2 * 3 * k, 60 + type),
        xGroups: 2,
        m: 3,
        p: 2,
        weight: randomPackedWeight(type, 1, 45, k, 61 + type),
      };
      const grouped: MatmulBTQuantGroupedArgs = {
        x: randomActivations(2 * k, 62 + type),
        xGroups: 1,
        m: 2,
        p: 5,
        ids: Int32Array.from([3, 0, 3, 2, 1]),
        weight: randomPackedWeight(type, 4, 29, k, 63 + type),
      };
      for (const args of [dense, grouped]) {
        const expected = modelOutput(args);
        expect(firstBitDifference(wasmSimdProvider.matmulBTQuantGrouped(args), expected)).toBeUndefined();
        const tiny = createWasmSimdProvider({ env: { KEEPQUANT_CHUNK_BYTES: String(3 * k * 4) } });
        expect(firstBitDifference(tiny.matmulBTQuantGrouped(args), expected)).toBeUndefined();
      }
    });
  }

  it("passes the envelope sweep (every worst ratio below 1.0)", () => {
    const results = runEnvelopeSweep(wasmSimdProvider);
    console.log(`envelope sweep, provider ${wasmSimdProvider.name}:\n${formatSweepResults(results)}`);
    for (const r of results) expect(r.worstRatio, r.name).toBeLessThan(1);
  });

  it("refuses unregistered encodings like every provider", () => {
    const args: MatmulBTQuantGroupedArgs = {
      x: new Float32Array(32),
      xGroups: 1,
      m: 1,
      p: 1,
      weight: { type: GgmlType.Q4_0, groups: 1, rows: 1, cols: 32, data: new Uint8Array(18) },
    };
    expect(() => wasmSimdProvider.matmulBTQuantGrouped(args)).toThrow(UnregisteredEncodingError);
  });
});
