/**
 * The native vision encoder against its specification (VisionEncoderSpec over the native llama-numerics
 * matmuls, the TypeScript libm pinned to the C library's), bit for bit: random small models with F32, F16
 * and quantized matrices, deepstack on and off, square and non-square images on the trained position grid
 * and off it, at every ISA level this CPU runs and with 1 and 2 threads. Then the typed refusals.
 */
import { GGML_TYPE_TRAITS, GgmlType, mulberry32 } from "@keepquant/gguf";
import { quantizeTensor, type PackedWeight } from "@keepquant/quant";
import * as native from "@keepquant/tt-native";
import { afterAll, describe, expect, it } from "vitest";
import { EngineError } from "../../errors.js";
import { pinNativeLibm } from "../../model/test-support.js";
import { f32BitsToF16Bits } from "../../numerics/half.js";
import {
  providerMatmul,
  VisionEncoderSpec,
  type VisionEncoderDims,
  type VisionEncoderWeights,
  type VisionLinear,
  type VisionNorm,
} from "./encoder.js";
import { NativeVisionEncoder, selectVisionEncoder, VISION_SPEC_PROVIDER } from "./native.js";

const loaded = native.nativeAddon() !== undefined;

const random = mulberry32;

function floats(rand: () => number, n: number, scale: number, offset = 0): Float32Array {
  return Float32Array.from({ length: n }, () => offset + (rand() * 2 - 1) * scale);
}

function packed(type: GgmlType, values: Float32Array, rows: number, cols: number): PackedWeight {
  if (type === GgmlType.F32) return { type, groups: 1, rows, cols, data: new Uint8Array(values.buffer) };
  if (type === GgmlType.F16) {
    const bits = new Uint32Array(values.buffer);
    return { type, groups: 1, rows, cols, data: new Uint8Array(Uint16Array.from(bits, (b) => f32BitsToF16Bits(b)).buffer) };
  }
  return { type, groups: 1, rows, cols, data: quantizeTensor(type, values) };
}

/** The matrix types of one model: per role (K of each is the role's input width). */
interface Types {
  patch: GgmlType;
  qkv: GgmlType;
  out: GgmlType;
  up: GgmlType;
  down: GgmlType;
  mm0: GgmlType;
  mm2: GgmlType;
  fc1: GgmlType;
  fc2: GgmlType;
}

const F32_TYPES: Types = {
  patch: GgmlType.F32,
  qkv: GgmlType.F32,
  out: GgmlType.F32,
  up: GgmlType.F32,
  down: GgmlType.F32,
  mm0: GgmlType.F32,
  mm2: GgmlType.F32,
  fc1: GgmlType.F32,
  fc2: GgmlType.F32,
};

function model(dims: VisionEncoderDims, types: Types, seed: number, deepstackAt: number[], layers = 2): VisionEncoderWeights {
  const rand = random(seed);
  const { patchSize: p, hidden: D, ffn, projection: P, positionSide: S, merge } = dims;
  const G = merge * merge * D;
  const K = 3 * p * p;
  const norm = (n: number): VisionNorm => ({ weight: floats(rand, n, 0.2, 1), bias: floats(rand, n, 0.1) });
  const linear = (type: GgmlType, rows: number, cols: number): VisionLinear => ({
    weight: packed(type, floats(rand, rows * cols, 1 / Math.sqrt(cols)), rows, cols),
    bias: floats(rand, rows, 0.1),
  });
  return {
    patch: [packed(types.patch, floats(rand, D * K, 0.2), D, K), packed(types.patch, floats(rand, D * K, 0.2), D, K)],
    patchBias: floats(rand, D, 0.1),
    position: floats(rand, S * S * D, 0.5),
    preNorm: seed % 2 === 0 ? norm(D) : undefined,
    layers: Array.from({ length: layers }, (_, il) => ({
      ln1: norm(D),
      qkv: linear(types.qkv, 3 * D, D),
      out: linear(types.out, D, D),
      ln2: norm(D),
      up: linear(types.up, ffn, D),
      down: linear(types.down, D, ffn),
      deepstack: deepstackAt.includes(il) ? { norm: norm(G), fc1: linear(types.fc1, G, G), fc2: linear(types.fc2, P, G) } : undefined,
    })),
    postNorm: norm(D),
    mm0: linear(types.mm0, G, G),
    mm2: linear(types.mm2, P, G),
  };
}

// small: head size 16 (the dot products' tails only); wide: head size 32 (whole 32-lane blocks), K = 64 / 256
const SMALL: VisionEncoderDims = { patchSize: 4, hidden: 32, heads: 2, ffn: 48, eps: 1e-6, merge: 2, projection: 24, positionSide: 4 };
const WIDE: VisionEncoderDims = { patchSize: 2, hidden: 64, heads: 2, ffn: 256, eps: 1e-6, merge: 2, projection: 40, positionSide: 6 };
const QUANT_TYPES: Types = {
  patch: GgmlType.F16,
  qkv: GgmlType.Q8_0,
  out: GgmlType.F16,
  up: GgmlType.Q8_0,
  down: GgmlType.Q4_K,
  mm0: GgmlType.Q5_K,
  mm2: GgmlType.Q6_K,
  fc1: GgmlType.Q4_K,
  fc2: GgmlType.Q8_0,
};

interface Case {
  name: string;
  dims: VisionEncoderDims;
  types: Types;
  seed: number;
  deepstack: number[];
  images: [number, number][];
}

const CASES: Case[] = [
  // 16x16 is the trained 4x4 position grid; the others resize it (non-square, larger, 60 patches)
  {
    name: "F32, no deepstack",
    dims: SMALL,
    types: F32_TYPES,
    seed: 7,
    deepstack: [],
    images: [
      [16, 16],
      [24, 16],
      [16, 32],
      [40, 24],
    ],
  },
  {
    name: "F32, deepstack at 0 and 1",
    dims: SMALL,
    types: F32_TYPES,
    seed: 4,
    deepstack: [0, 1],
    images: [
      [16, 16],
      [8, 24],
    ],
  },
  // 12x12 is the trained 6x6 grid; 16x24 and 24x8 resize it (up to 96 patches)
  {
    name: "F16 + Q8_0 / Q4_K / Q5_K / Q6_K, deepstack at 1",
    dims: WIDE,
    types: QUANT_TYPES,
    seed: 3,
    deepstack: [1],
    images: [
      [12, 12],
      [16, 24],
      [24, 8],
    ],
  },
  {
    name: "F32 patch kernel, F16 matrices",
    dims: WIDE,
    types: {
      ...QUANT_TYPES,
      patch: GgmlType.F32,
      qkv: GgmlType.F16,
      up: GgmlType.F16,
      down: GgmlType.F16,
      mm0: GgmlType.F16,
      mm2: GgmlType.F16,
      fc1: GgmlType.F16,
      fc2: GgmlType.F16,
    },
    seed: 10,
    deepstack: [0],
    images: [[20, 12]],
  },
];

function firstMismatch(a: Float32Array, b: Float32Array): string | undefined {
  if (a.length !== b.length) return `lengths ${a.length} and ${b.length}`;
  const ua = new Uint32Array(a.buffer, a.byteOffset, a.length);
  const ub = new Uint32Array(b.buffer, b.byteOffset, b.length);
  for (let i = 0; i < a.length; i++) if (ua[i] !== ub[i]) return `element ${i}: ${a[i]} vs ${b[i]}`;
  return undefined;
}

describe.skipIf(!loaded)("native vision encoder == VisionEncoderSpec, bit for bit", () => {
  pinNativeLibm();
  const threadsBefore = loaded ? native.getNativeThreads() : 0;
  afterAll(() => {
    native.setNativeIsa("best");
    native.setNativeThreads(threadsBefore);
  });

  for (const c of CASES) {
    it(`${c.name}: ${c.images.map(([w, h]) => `${w}x${h}`).join(", ")} at every ISA level, 1 and 2 threads`, () => {
      const weights = model(c.dims, c.types, c.seed, c.deepstack);
      const encoder = new NativeVisionEncoder(c.dims, weights, native);
      const spec = new VisionEncoderSpec(c.dims, weights, providerMatmul(native.createNativeLlamaProvider()));
      expect(encoder.outputWidth).toBe(spec.outputWidth);
      let compared = 0;
      for (const isa of native.availableNativeIsas()) {
        native.setNativeIsa(isa);
        for (const [width, height] of c.images) {
          const pixels = floats(random(c.seed * 31 + width + height), 3 * width * height, 1.5);
          native.setNativeThreads(2);
          const expected = spec.encode({ pixels, width, height });
          for (const threads of [1, 2]) {
            native.setNativeThreads(threads);
            const out = encoder.encode({ pixels, width, height });
            expect({ ...out, embeddings: undefined }).toEqual({ ...expected, embeddings: undefined });
            expect(firstMismatch(out.embeddings, expected.embeddings), `${isa}, ${threads} threads, ${width}x${height}`).toBeUndefined();
            compared++;
          }
        }
      }
      expect(compared).toBe(native.availableNativeIsas().length * c.images.length * 2);
      encoder.dispose();
    });
  }

  it("encodeAsync gives the same bits off the JS thread", async () => {
    const c = CASES[2]!;
    const weights = model(c.dims, c.types, c.seed, c.deepstack);
    const encoder = new NativeVisionEncoder(c.dims, weights, native);
    const pixels = floats(random(5), 3 * 16 * 24, 1.5);
    const sync = encoder.encode({ pixels, width: 16, height: 24 });
    const async = await encoder.encodeAsync({ pixels, width: 16, height: 24 });
    expect(firstMismatch(async.embeddings, sync.embeddings)).toBeUndefined();
    encoder.dispose();
    expect(() => encoder.encode({ pixels, width: 16, height: 24 })).toThrow(/disposed/);
  });
});

describe.skipIf(!loaded)("native vision encoder: typed refusals before any native work", () => {
  const weights = model(SMALL, F32_TYPES, 1, []);
  const encoder = loaded ? new NativeVisionEncoder(SMALL, weights, native) : undefined;
  const refusal = (width: number, height: number, pixels: Float32Array | undefined): EngineError => {
    try {
      encoder!.encode({ pixels: pixels ?? new Float32Array(3 * width * height), width, height });
    } catch (error) {
      expect(EngineError.isInstance(error)).toBe(true);
      return error as EngineError;
    }
    throw new Error("no refusal");
  };

  it("names the wrong pixel count, sides off the 8-pixel grid, absurd sizes", () => {
    expect(refusal(16, 16, new Float32Array(10)).message).toMatch(/expected 768 values for 3x16x16, got 10/);
    expect(refusal(12, 16, undefined).message).toMatch(/12x16 is not a multiple of 8 pixels on each side/);
    expect(refusal(0, 16, new Float32Array(0)).field).toBe("image.width");
    expect(refusal(16, 2.5, new Float32Array(0)).field).toBe("image.height");
    expect(refusal(16, 1e9, new Float32Array(0)).message).toMatch(/not an integer in \[1, 8192\]/);
    expect(refusal(8192, 8192, new Float32Array(0)).message).toMatch(/4194304 patches, more than 65536/);
    expect(refusal(Number.NaN, 16, new Float32Array(0)).code).toBe("ENGINE_BAD_REQUEST");
  });

  it("the addon itself refuses the same inputs with a RangeError instead of crashing", () => {
    const handle = native.createNativeVisionEncoder({ dims: SMALL, ...weights });
    expect(() => handle.encodeSync(new Float32Array(10), 16, 16, new Float32Array(4 * 24))).toThrow(/expected 768 values/);
    expect(() => handle.encodeSync(new Float32Array(768), 16, 16, new Float32Array(3))).toThrow(/out holds 3 values/);
    expect(() => handle.encodeSync(new Float32Array(3 * 12 * 16), 12, 16, new Float32Array(0))).toThrow(/not a multiple of 8/);
    expect(() => handle.encodeSync(new Float32Array(0), -1, 16, new Float32Array(0))).toThrow(RangeError);
    expect(() => handle.encode(new Float32Array(0), 16, 16, new Float32Array(0))).toThrow(/expected 768 values/);
    handle.dispose();
    expect(() => handle.outputWidth()).toThrow(/disposed/);
  });

  it("refuses weights that do not fit the dims, naming the tensor", () => {
    const bad = { ...weights, mm2: { ...weights.mm2, weight: { ...weights.mm2.weight, rows: 5 } } };
    expect(() => new NativeVisionEncoder(SMALL, bad, native)).toThrow(/mm2/);
    try {
      new NativeVisionEncoder(SMALL, bad, native);
    } catch (error) {
      expect(EngineError.isInstance(error) && error.code === "ENGINE_BAD_MODEL").toBe(true);
    }
    const shortBias = { ...weights, patchBias: new Float32Array(3) };
    expect(() => new NativeVisionEncoder(SMALL, shortBias, native)).toThrow(/patchBias has 3 values, expected 32/);
    const q4 = { ...weights, patch: [{ ...weights.patch[0], type: GgmlType.Q4_K }, weights.patch[1]] as const };
    expect(() => new NativeVisionEncoder(SMALL, q4, native)).toThrow(new RegExp(`${GGML_TYPE_TRAITS[GgmlType.Q4_K].name}|blocks`));
  });
});

describe("selectVisionEncoder", () => {
  it("picks the native encoder when the addon is loaded, else the specification, and says which", async () => {
    const weights = model(SMALL, F32_TYPES, 2, []);
    const auto = await selectVisionEncoder(SMALL, weights);
    if (loaded) {
      expect(auto.provider).toBe(`cpu-native-vision-${native.getNativeIsa()}`);
      expect(auto.encoder).toBeInstanceOf(NativeVisionEncoder);
      expect(auto.reason).toBeUndefined();
    } else {
      expect(auto.provider).toBe(VISION_SPEC_PROVIDER);
      expect(auto.reason).toMatch(/native vision encoder unavailable/);
    }
    const ts = await selectVisionEncoder(SMALL, weights, { provider: "ts" });
    expect(ts.provider).toBe(VISION_SPEC_PROVIDER);
    expect(ts.encoder).toBeInstanceOf(VisionEncoderSpec);
    expect(ts.encoder.encode({ pixels: floats(random(1), 768, 1), width: 16, height: 16 }).tokens).toBe(4);
  });
});
