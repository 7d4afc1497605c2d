import { describe, expect, it } from "vitest";
import { GgmlType, GGML_TYPE_TRAITS } from "@keepquant/gguf";
import {
  checkMatmulBTQuantGroupedArgs,
  chunkPlan,
  chunkRows,
  createReferenceProvider,
  decodeSlice,
  dequantizeTensor,
  InvalidEnvironmentError,
  KEEPQUANT_ENCODINGS,
  QuantArgumentError,
  referenceProvider,
  UnregisteredEncodingError,
  type MatmulBTQuantGroupedArgs,
  type PackedWeight,
} from "./index.js";
import { randomActivations, randomPackedWeight } from "./testing/index.js";
import { bf16Matmul, firstBitDifference, prng } from "./test-support.js";

const MiB = 1024 * 1024;

describe("registered encodings and refusal", () => {
  it("registers exactly Q4_K, Q5_K, Q6_K, Q8_0", () => {
    expect(KEEPQUANT_ENCODINGS.map((t) => GGML_TYPE_TRAITS[t].name)).toEqual(["Q4_K", "Q5_K", "Q6_K", "Q8_0"]);
  });

  it("refuses every other encoding with the DESIGN.md message", () => {
    const args = (type: GgmlType): MatmulBTQuantGroupedArgs => {
      const { blockSize, typeSize } = GGML_TYPE_TRAITS[type];
      return {
        x: new Float32Array(blockSize),
        xGroups: 1,
        m: 1,
        p: 1,
        weight: { type, groups: 1, rows: 1, cols: blockSize, data: new Uint8Array(typeSize) },
      };
    };
    let caught: unknown;
    try {
      referenceProvider.matmulBTQuantGrouped(args(GgmlType.Q4_0));
    } catch (error) {
      caught = error;
    }
    expect(UnregisteredEncodingError.isInstance(caught)).toBe(true);
    expect((caught as UnregisteredEncodingError).code).toBe("KEEPQUANT_UNREGISTERED_ENCODING");
    expect((caught as Error).message).toBe(
      "no kernel for op MatmulBTQuantGrouped: Q4_0 is not a registered encoding (registered: Q4_K, Q5_K, Q6_K, Q8_0)",
    );
    const others = (Object.keys(GGML_TYPE_TRAITS) as string[]).map(Number).filter((t) => !KEEPQUANT_ENCODINGS.includes(t));
    expect(others.length).toBeGreaterThan(20);
    for (const type of others) {
      const name = GGML_TYPE_TRAITS[type as GgmlType].name;
      expect(() => checkMatmulBTQuantGroupedArgs(args(type as GgmlType))).toThrow(
        `no kernel for op MatmulBTQuantGrouped: ${name} is not a registered encoding (registered: Q4_K, Q5_K, Q6_K, Q8_0)`,
      );
    }
  });
});

describe("argument contract, checked once at the boundary", () => {
  const base = (): MatmulBTQuantGroupedArgs => ({
    x: new Float32Array(2 * 3 * 256),
    xGroups: 2,
    m: 3,
    p: 2,
    ids: Int32Array.from([1, 0]),
    weight: { type: GgmlType.Q4_K, groups: 2, rows: 5, cols: 256, data: new Uint8Array(2 * 5 * 144) },
  });
  const expectArgumentError = (mutate: (a: MatmulBTQuantGroupedArgs) => void, argument: string, pattern: RegExp) => {
    const args = base();
    mutate(args);
    let caught: unknown;
    try {
      checkMatmulBTQuantGroupedArgs(args);
    } catch (error) {
      caught = error;
    }
    expect(QuantArgumentError.isInstance(caught), argument).toBe(true);
    expect((caught as QuantArgumentError).argument).toBe(argument);
    expect((caught as Error).message).toMatch(pattern);
  };

  it("accepts a valid call and derives the shape", () => {
    const shape = checkMatmulBTQuantGroupedArgs(base());
    expect(shape).toMatchObject({ e: 2, n: 5, k: 256, m: 3, p: 2, pa: 2, rowBytes: 144, groupBytes: 720 });
    expect(Array.from(shape.groupOf)).toEqual([1, 0]);
  });

  it("names the offending argument", () => {
    expectArgumentError((a) => (a.weight.cols = 255), "weight.cols", /255 is not a whole number of Q4_K blocks/);
    expectArgumentError((a) => (a.weight.data = new Uint8Array(10)), "weight.data", /\[2, 5, 256\] Q4_K is 1440 bytes, data has 10/);
    expectArgumentError((a) => (a.weight.rows = 0), "weight.rows", /positive integer/);
    expectArgumentError((a) => (a.xGroups = 3), "xGroups", /must be 1 \(broadcast\) or p = 2/);
    expectArgumentError((a) => (a.x = new Float32Array(5)), "x", /expected \[2, 3, 256\]/);
    expectArgumentError((a) => delete a.ids, "ids", /required/);
    expectArgumentError((a) => (a.ids = Int32Array.from([0])), "ids", /expected 2 ids, got 1/);
    expectArgumentError((a) => (a.ids = Int32Array.from([0, 2])), "ids[1]", /2 is outside \[0, 2\)/);
    expectArgumentError((a) => (a.ids = Int32Array.from([-1, 0])), "ids[0]", /-1 is outside/);
    expectArgumentError((a) => (a.out = new Float32Array(3)), "out", /expected \[2, 3, 5\] = 30 values/);
    expectArgumentError((a) => (a.m = 1.5), "m", /positive integer/);
  });

  it("never reads ids when E = 1", () => {
    const weight = randomPackedWeight(GgmlType.Q8_0, 1, 7, 64, 3);
    const x = randomActivations(2 * 64, 4);
    const untouchable = new Proxy(new Int32Array(2), {
      get() {
        throw new Error("ids were read");
      },
      has() {
        throw new Error("ids were read");
      },
    });
    const withIds = referenceProvider.matmulBTQuantGrouped({ x, xGroups: 2, m: 1, p: 2, weight, ids: untouchable });
    const without = referenceProvider.matmulBTQuantGrouped({ x, xGroups: 2, m: 1, p: 2, weight });
    expect(firstBitDifference(withIds, without)).toBeUndefined();
  });
});

describe("chunk policy", () => {
  it("worked checks of DESIGN.md", () => {
    expect(chunkPlan(248320, 1024, {})).toEqual({ rows: 65536, chunks: 4, planeBytes: 65536 * 1024 * 4 });
    const head27b = chunkPlan(248320, 5120, {});
    expect(head27b.rows).toBe(31040); // the ceil(N / 8) term
    expect(head27b.planeBytes).toBe(635_699_200);
    expect(head27b.chunks).toBe(8);
    expect(chunkRows(248320, 5120, { KEEPQUANT_CHUNK_BYTES: String(64 * MiB) })).toBe(3276);
  });

  it("clamps to [1, N] and treats empty as unset", () => {
    expect(chunkRows(100, 256, {})).toBe(100);
    expect(chunkRows(100, 256, { KEEPQUANT_CHUNK_BYTES: "" })).toBe(100);
    expect(chunkRows(100, 256, { KEEPQUANT_CHUNK_BYTES: "1" })).toBe(1);
    expect(chunkRows(100, 256, { KEEPQUANT_CHUNK_BYTES: String(5 * 1024 + 1023) })).toBe(5);
    expect(chunkRows(100, 256, { KEEPQUANT_CHUNK_BYTES: String(2 ** 40) })).toBe(100);
  });

  it("rejects invalid KEEPQUANT_CHUNK_BYTES values, naming the variable", () => {
    for (const value of ["abc", "0", "-5", "1.5", " 64", "64 ", "1e6", "0x10", "64MiB", "99999999999999999999"]) {
      let caught: unknown;
      try {
        chunkRows(1000, 1024, { KEEPQUANT_CHUNK_BYTES: value });
      } catch (error) {
        caught = error;
      }
      expect(InvalidEnvironmentError.isInstance(caught), value).toBe(true);
      expect((caught as InvalidEnvironmentError).variable).toBe("KEEPQUANT_CHUNK_BYTES");
      expect((caught as Error).message).toContain(`KEEPQUANT_CHUNK_BYTES=${JSON.stringify(value)} is invalid`);
    }
  });
});

/** Random partition of [0, n) into slices of 1..maxLength rows. */
function randomSlices(n: number, maxLength: number, seed: number): Array<[number, number]> {
  const random = prng(seed);
  const slices: Array<[number, number]> = [];
  for (let r = 0; r < n; ) {
    const length = 1 + Math.floor(random() * maxLength);
    slices.push([r, Math.min(n, r + length)]);
    r += length;
  }
  return slices;
}

describe("slice decode", () => {
  for (const type of [...KEEPQUANT_ENCODINGS, GgmlType.Q4_0, GgmlType.IQ4_XS, GgmlType.BF16]) {
    const { name, blockSize, typeSize } = GGML_TYPE_TRAITS[type];
    it(`${name}: every slice is bit-exact against whole-tensor dequantization`, () => {
      const e = 3;
      const n = 41;
      const k = blockSize === 256 ? 768 : 96;
      const rowBytes = (k / blockSize) * typeSize;
      const random = prng(17 + type);
      const data = new Uint8Array(e * n * rowBytes);
      for (let i = 0; i < data.length; i++) data[i] = (random() * 256) | 0;
      const weight: PackedWeight = { type, groups: e, rows: n, cols: k, data };
      const whole = dequantizeTensor(type, data, e * n * k);
      for (let g = 0; g < e; g++) {
        for (const [r0, r1] of randomSlices(n, 9, g + 100 * type)) {
          const slice = decodeSlice(weight, g, r0, r1, new Float32Array((r1 - r0) * k));
          const expected = whole.subarray((g * n + r0) * k, (g * n + r1) * k);
          expect(firstBitDifference(slice, expected), `${name} group ${g} rows [${r0}, ${r1})`).toBeUndefined();
        }
      }
      expect(() => decodeSlice(weight, 3, 0, 1, new Float32Array(k))).toThrow(/argument group: 3 is outside \[0, 3\)/);
      expect(() => decodeSlice(weight, 0, 5, 42, new Float32Array(37 * k))).toThrow(/rowStart\/rowEnd/);
      expect(() => decodeSlice(weight, 0, 0, 2, new Float32Array(k))).toThrow(/argument dst: needs/);
    });
  }
});

/** The contract's numerics written out plainly: bf16(w) * x in f32, f32 accumulation in k order. */
function naiveReference(args: MatmulBTQuantGroupedArgs): Float32Array {
  return bf16Matmul(args, (x, xOffset, w, wOffset, k) => {
    let acc = 0;
    for (let kk = 0; kk < k; kk++) acc = Math.fround(acc + Math.fround(x[xOffset + kk]! * w[wOffset + kk]!));
    return acc;
  });
}

describe("reference provider", () => {
  for (const type of KEEPQUANT_ENCODINGS) {
    const name = GGML_TYPE_TRAITS[type].name;
    it(`${name}: forced chunk boundaries give the same bits as one chunk and as the plain formula`, () => {
      const n = 53;
      const k = 512;
      const weight = randomPackedWeight(type, 1, n, k, 40 + type);
      const x = randomActivations(2 * 3 * k, 41 + type);
      const args = { x, xGroups: 2, m: 3, p: 2, weight };
      const chunks: Array<[number, number]> = [];
      const capBytes = 7 * 4 * k + 100; // 7 rows per chunk
      const chunked = createReferenceProvider({
        env: { KEEPQUANT_CHUNK_BYTES: String(capBytes) },
        onChunk: (_g, r0, r1) => chunks.push([r0, r1]),
      }).matmulBTQuantGrouped(args);
      expect(chunks.length).toBe(Math.ceil(n / 7));
      expect(chunks[0]).toEqual([0, 7]);
      expect(chunks.at(-1)).toEqual([49, 53]);
      for (const [r0, r1] of chunks) expect((r1 - r0) * k * 4).toBeLessThanOrEqual(capBytes);
      const single = createReferenceProvider({ env: {} }).matmulBTQuantGrouped(args);
      expect(firstBitDifference(chunked, single)).toBeUndefined();
      expect(firstBitDifference(single, naiveReference(args))).toBeUndefined();
    });
  }

  it("grouped: repeated, out-of-order ids and Pa = 1 broadcast match the plain formula", () => {
    const weight = randomPackedWeight(GgmlType.Q6_K, 5, 11, 256, 77);
    const ids = Int32Array.from([4, 1, 4, 0, 3, 1]);
    const broadcast = { x: randomActivations(2 * 256, 78), xGroups: 1, m: 2, p: 6, ids, weight };
    const out = new Float32Array(6 * 2 * 11);
    const y = createReferenceProvider({ env: { KEEPQUANT_CHUNK_BYTES: String(3 * 256 * 4) } }).matmulBTQuantGrouped({ ...broadcast, out });
    expect(y).toBe(out);
    expect(firstBitDifference(y, naiveReference(broadcast))).toBeUndefined();
    // outputs with the same group and broadcast x are identical; different groups differ
    expect(firstBitDifference(y.subarray(0, 22), y.subarray(44, 66))).toBeUndefined();
    expect(firstBitDifference(y.subarray(0, 22), y.subarray(22, 44))).toBeDefined();
  });
});
