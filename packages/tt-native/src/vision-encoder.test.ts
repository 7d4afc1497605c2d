/**
 * The native vision encoder's own contract: the same bits at every ISA level and thread count (the AVX-512
 * level also through the emulated build on a CPU without AVX-512: scripts/build-emulated-avx512.mjs), and
 * typed refusals of a bad spec or image before any work. That the bits are VisionEncoderSpec's is held by
 * @keepquant/engine's src/vision/encoder/native.test.ts.
 */
import fs from "node:fs";
import { createRequire } from "node:module";
import { GgmlType } from "@keepquant/gguf";
import { quantizeTensor } from "@keepquant/quant";
import { afterAll, describe, expect, it } from "vitest";
import { NativeArgumentError } from "./errors.js";
import { createNativeVisionEncoder, nativeAddon } from "./index.js";
import type { NativeAddon, NativeVisionEncoderSpec, NativeVisionLinear, NativeVisionMatrix, NativeVisionNorm } from "./native-types.js";
import { EMULATED, firstBitMismatch, randomFloats } from "./test-support.js";

const addon = nativeAddon();
const emulated =
  addon && !addon.buildInfo().isaAvailable.includes("avx512") && fs.existsSync(EMULATED)
    ? (createRequire(import.meta.url)(EMULATED) as NativeAddon)
    : undefined;

afterAll(() => {
  addon?.setIsa(addon.buildInfo().isaBest);
  addon?.setThreads(0);
  emulated?.setThreads(0);
});

const DIMS = { patchSize: 2, hidden: 64, heads: 2, ffn: 256, eps: 1e-6, merge: 2, projection: 40, positionSide: 6 };

function matrix(type: GgmlType, rows: number, cols: number, seed: number): NativeVisionMatrix {
  const values = randomFloats(rows * cols, seed, 1 / Math.sqrt(cols));
  const data = type === GgmlType.F32 ? new Uint8Array(values.buffer) : quantizeTensor(type, values);
  return { type, rows, cols, data };
}

function spec(types: { layer: GgmlType; wide: GgmlType }): NativeVisionEncoderSpec {
  let seed = 100;
  const { hidden: D, ffn, projection: P, positionSide: S, patchSize: p } = DIMS;
  const G = 4 * D;
  const norm = (n: number): NativeVisionNorm => ({ weight: randomFloats(n, seed++, 1), bias: randomFloats(n, seed++, 0.1) });
  const linear = (type: GgmlType, rows: number, cols: number): NativeVisionLinear => ({
    weight: matrix(type, rows, cols, seed++),
    bias: randomFloats(rows, seed++, 0.1),
  });
  return {
    dims: DIMS,
    patch: [matrix(GgmlType.F32, D, 3 * p * p, seed++), matrix(GgmlType.F32, D, 3 * p * p, seed++)],
    patchBias: randomFloats(D, seed++, 0.1),
    position: randomFloats(S * S * D, seed++, 0.5),
    layers: [0, 1].map((il) => ({
      ln1: norm(D),
      qkv: linear(types.layer, 3 * D, D),
      out: linear(types.layer, D, D),
      ln2: norm(D),
      up: linear(types.layer, ffn, D),
      down: linear(types.wide, D, ffn),
      deepstack: il === 1 ? { norm: norm(G), fc1: linear(types.wide, G, G), fc2: linear(types.wide, P, G) } : undefined,
    })),
    postNorm: norm(D),
    mm0: linear(types.wide, G, G),
    mm2: linear(types.wide, P, G),
  };
}

const IMAGES: [number, number][] = [
  [12, 12],
  [16, 28],
];

function encodeAll(target: NativeAddon, s: NativeVisionEncoderSpec, isa: string, threads: number): Float32Array[] {
  target.setIsa(isa);
  target.setThreads(threads);
  const encoder = new target.VisionEncoder(s);
  const outs = IMAGES.map(([w, h]) => {
    const out = new Float32Array((w / 4) * (h / 4) * encoder.outputWidth());
    encoder.encodeSync(randomFloats(3 * w * h, w * 1000 + h), w, h, out);
    return out;
  });
  encoder.dispose();
  return outs;
}

describe.skipIf(!addon)("native vision encoder", () => {
  for (const [name, types] of [
    ["F32", { layer: GgmlType.F32, wide: GgmlType.F32 }],
    ["Q8_0 and Q4_K / Q6_K", { layer: GgmlType.Q8_0, wide: GgmlType.Q4_K }],
    ["Q8_0 and Q6_K", { layer: GgmlType.Q8_0, wide: GgmlType.Q6_K }],
  ] as const) {
    it(`${name}: each ISA level's bits at 1 and 2 threads; the AVX-512 level (real or emulated) gives the AVX2 level's`, () => {
      const s = spec(types);
      const levels = addon!.buildInfo().isaAvailable;
      const runs: [string, NativeAddon, string][] = levels.map((isa) => [isa, addon!, isa]);
      if (emulated) runs.push(["emulated avx512", emulated, "avx512"]);
      const byLevel = new Map<string, Float32Array[]>();
      for (const [label, target, isa] of runs) {
        const one = encodeAll(target, s, isa, 1);
        expect(one[0]!.some((v) => v !== 0)).toBe(true);
        const two = encodeAll(target, s, isa, 2);
        two.forEach((out, i) => expect(firstBitMismatch(out, one[i]!), `${label}, 2 threads, image ${i}`).toBe(-1));
        byLevel.set(label, one);
      }
      // generic and the SIMD levels may differ (ggml's F32 / F16 dots sum in other orders); the engine's test holds each to the spec
      const avx2 = byLevel.get("avx2");
      for (const label of ["avx512", "emulated avx512"]) {
        const outs = byLevel.get(label);
        if (!avx2 || !outs) continue;
        outs.forEach((out, i) => expect(firstBitMismatch(out, avx2[i]!), `${label} against avx2, image ${i}`).toBe(-1));
      }
      expect(byLevel.size).toBe(runs.length);
    });
  }

  it("encode runs off the JS thread and gives encodeSync's bits", async () => {
    const encoder = createNativeVisionEncoder(spec({ layer: GgmlType.Q8_0, wide: GgmlType.Q4_K }));
    const pixels = randomFloats(3 * 16 * 28, 9);
    const sync = new Float32Array(4 * 7 * encoder.outputWidth());
    const async = new Float32Array(sync.length);
    encoder.encodeSync(pixels, 16, 28, sync);
    const running = encoder.encode(pixels, 16, 28, async);
    expect(() => encoder.dispose()).toThrow(/while an encode is running/);
    await running;
    expect(firstBitMismatch(async, sync)).toBe(-1);
    encoder.dispose();
    expect(() => encoder.encodeSync(pixels, 16, 28, sync)).toThrow(/disposed/);
  });

  it("refuses a bad spec naming the field (NativeArgumentError), before building anything", () => {
    const good = spec({ layer: GgmlType.F32, wide: GgmlType.F32 });
    const field = (s: unknown): string => {
      try {
        createNativeVisionEncoder(s as NativeVisionEncoderSpec);
      } catch (error) {
        expect(error).toBeInstanceOf(NativeArgumentError);
        return (error as NativeArgumentError).argument;
      }
      return "accepted";
    };
    expect(field({ ...good, patchBias: new Float32Array(3) })).toBe("patchBias");
    expect(field({ ...good, dims: { ...DIMS, heads: 3 } })).toBe("dims");
    expect(field({ ...good, mm0: { ...good.mm0, weight: { ...good.mm0.weight, data: new Uint8Array(8) } } })).toBe("mm0.weight.data");
    expect(
      field({
        ...good,
        layers: [{ ...good.layers[0]!, qkv: { ...good.layers[0]!.qkv, weight: { ...good.layers[0]!.qkv.weight, type: 99 } } }],
      }),
    ).toBe("layers[0].qkv.weight.type");
    const q4Patch = { ...good, patch: [matrix(GgmlType.Q4_K, 64, 256, 1), good.patch[1]] };
    expect(field(q4Patch)).toMatch(/^patch\[0\]/);
    expect(field(good)).toBe("accepted");
  });

  it("refuses bad images with a RangeError or TypeError, never a crash", () => {
    const encoder = createNativeVisionEncoder(spec({ layer: GgmlType.F32, wide: GgmlType.F32 }));
    const out = new Float32Array(9 * encoder.outputWidth());
    expect(() => encoder.encodeSync(new Float32Array(3 * 144 - 1), 12, 12, out)).toThrow(/expected 432 values for 3x12x12/);
    expect(() => encoder.encodeSync(new Float32Array(3 * 140), 10, 14, out)).toThrow(/10x14 is not a multiple of 4 pixels/);
    expect(() => encoder.encodeSync(new Float32Array(3 * 144), 12, 12, new Float32Array(5))).toThrow(/out holds 5 values/);
    expect(() => encoder.encodeSync(new Float32Array(0), 1e6, 12, out)).toThrow(RangeError);
    expect(() => encoder.encodeSync(new Float32Array(0), 8192, 8192, out)).toThrow(/patches, more than 65536/);
    expect(() => encoder.encodeSync(new Float64Array(3 * 144) as unknown as Float32Array, 12, 12, out)).toThrow(TypeError);
    expect(() => encoder.encode(new Float32Array(1), 12, 12, out)).toThrow(RangeError);
    // non-finite pixels propagate (NaN / infinity in the output), nothing breaks
    const pixels = randomFloats(3 * 144, 4);
    pixels[0] = Number.NaN;
    pixels[1] = Number.POSITIVE_INFINITY;
    pixels[2] = -3e38;
    encoder.encodeSync(pixels, 12, 12, out);
    expect(out.some((v) => !Number.isFinite(v))).toBe(true);
    encoder.dispose();
  });
});
