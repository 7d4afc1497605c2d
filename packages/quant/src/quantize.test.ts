import { describe, expect, it } from "vitest";
import { GgmlType, GGML_TYPE_TRAITS } from "@keepquant/gguf";
import { loadGgmlOracle, oracleUnavailableReason } from "@keepquant/oracle";
import {
  dequantizeTensor,
  nearestInt,
  quantizeRow,
  quantizeTensor,
  QUANTIZE_TYPES,
  QuantArgumentError,
  UnsupportedGgmlTypeError,
} from "./index.js";
import { firstByteDifference, prng } from "./test-support.js";

const ORACLE_SKIP_REASON = oracleUnavailableReason();

/** Random blocks: per-block magnitude from 2^-20 to 2^20, a few outliers, both signs. */
function randomValues(blocks: number, blockSize: number, seed: number): Float32Array {
  const random = prng(seed);
  const x = new Float32Array(blocks * blockSize);
  for (let b = 0; b < blocks; b++) {
    const magnitude = 2 ** (-20 + 40 * random());
    const shift = random() < 0.3 ? (random() - 0.5) * magnitude * 2 : 0; // offset blocks (min > 0 paths)
    for (let i = 0; i < blockSize; i++) {
      let v = (random() * 2 - 1) * magnitude + shift;
      if (random() < 0.02) v *= 8;
      x[b * blockSize + i] = v;
    }
  }
  return x;
}

/** Inputs that hit the quantizers' branches and rounding ties. */
function adversarialValues(blockSize: number): Float32Array {
  const blocks: number[][] = [];
  const fill = (f: (i: number) => number) => blocks.push(Array.from({ length: blockSize }, (_, i) => f(i)));
  fill(() => 0); // all zero
  fill((i) => (i % 2 ? -0 : 0)); // signed zeros
  fill(() => 1); // constant positive (max == min after min clamp)
  fill(() => -1); // constant negative
  fill(() => 3.5e-3);
  fill((i) => (i === 7 ? 100 : 0)); // single spike
  fill((i) => (i === 7 ? -100 : 0.01)); // negative spike
  fill((i) => i); // ramp
  fill((i) => -i); // negative ramp
  fill((i) => (i % 16) - 8 + 0.5); // .5 ties for nearest_int / roundf
  fill((i) => ((i % 31) - 15) * 0.25); // exact quarter steps
  fill((i) => (i % 3 === 0 ? 1e-30 : -2e-30)); // tiny (below GROUP_MAX_EPS)
  fill((i) => (i % 5) * 1e-40); // subnormals
  fill((i) => (i % 2 ? 3e37 : -1e37)); // huge
  fill((i) => 65504 * (i % 2 ? 1 : -1)); // f16 max
  fill((i) => 1e5 * Math.sin(i)); // scale beyond f16 range
  fill((i) => 2 ** ((i % 20) - 10)); // powers of two, positive only
  fill((i) => 127 * (i % 2 ? 1 : -1) + (i % 7));
  return Float32Array.from(blocks.flat());
}

function oracleQuantize(type: GgmlType, x: Float32Array, prefill: number): Uint8Array {
  const oracle = loadGgmlOracle();
  const { blockSize, typeSize } = GGML_TYPE_TRAITS[type];
  const out = new Uint8Array((x.length / blockSize) * typeSize).fill(prefill);
  oracle.quantizeRowRef(oracle.typeName(type), x, out);
  return out;
}

describe("quantizeRow: bit-exact against ggml's quantize_row_<type>_ref", () => {
  it("covers Q4_0, Q8_0, Q4_K, Q5_K, Q6_K, Q8_K (the issue's list) and Q4_1, Q5_0, Q5_1, Q2_K, Q3_K", () => {
    expect(QUANTIZE_TYPES.map((t) => GGML_TYPE_TRAITS[t].name).sort()).toEqual(
      ["Q2_K", "Q3_K", "Q4_0", "Q4_1", "Q4_K", "Q5_0", "Q5_1", "Q5_K", "Q6_K", "Q8_0", "Q8_K"].sort(),
    );
  });

  for (const type of QUANTIZE_TYPES) {
    const { name, blockSize, typeSize } = GGML_TYPE_TRAITS[type];
    const blocks = blockSize === 32 ? 10_000 : 1_500;
    it.skipIf(ORACLE_SKIP_REASON)(`${name}: ${blocks} random blocks + adversarial blocks`, () => {
      for (const x of [randomValues(blocks, blockSize, 0x51ed + type), adversarialValues(blockSize)]) {
        // both outputs start from the same garbage: C leaves some bytes (Q8_K sums of a zero block) as they were
        const expected = oracleQuantize(type, x, 0xa5);
        const ours = quantizeRow(type, x, new Uint8Array(expected.length).fill(0xa5));
        expect(firstByteDifference(ours, expected, typeSize), name).toBeUndefined();
      }
    });
  }

  it("nearestInt rounds half to even inside +-2^22 and wraps like C outside", () => {
    expect([0.5, 1.5, 2.5, -0.5, -1.5, 3.49999976, -7.5].map(nearestInt)).toEqual([0, 2, 2, 0, -2, 3, -8]);
    expect(nearestInt(Number.NaN)).toBe(0);
    expect(nearestInt(Number.POSITIVE_INFINITY)).toBe(-4194304);
  });

  it("quantized Q8_K of an all-zero block is d = 0 and zero levels", () => {
    const out = quantizeTensor(GgmlType.Q8_K, new Float32Array(256));
    expect(out.subarray(0, 260).every((b) => b === 0)).toBe(true);
  });

  it("round trip error of Q8_0 stays within half a step (values where the f16 scale is normal)", () => {
    const random = prng(5);
    const x = Float32Array.from({ length: 64 * 32 }, () => random() * 2 - 1);
    const back = dequantizeTensor(GgmlType.Q8_0, quantizeTensor(GgmlType.Q8_0, x), x.length);
    for (let b = 0; b < 64; b++) {
      let amax = 0;
      for (let i = 0; i < 32; i++) amax = Math.max(amax, Math.abs(x[b * 32 + i]!));
      const step = amax / 127;
      for (let i = 0; i < 32; i++) expect(Math.abs(back[b * 32 + i]! - x[b * 32 + i]!)).toBeLessThanOrEqual(step * 0.5 + amax * 2 ** -10);
    }
  });

  it("refuses types without a reference quantizer and partial blocks", () => {
    expect(() => quantizeRow(GgmlType.IQ4_XS, new Float32Array(256), new Uint8Array(136))).toThrow(UnsupportedGgmlTypeError);
    expect(() => quantizeRow(GgmlType.IQ4_XS, new Float32Array(256), new Uint8Array(136))).toThrow(
      /quantizeRow: ggml type IQ4_XS is not supported/,
    );
    expect(() => quantizeRow(GgmlType.Q4_K, new Float32Array(255), new Uint8Array(144))).toThrow(QuantArgumentError);
    expect(() => quantizeRow(GgmlType.Q4_K, new Float32Array(256), new Uint8Array(143))).toThrow(
      /argument dst: 1 Q4_K blocks need 144 bytes/,
    );
  });
});
