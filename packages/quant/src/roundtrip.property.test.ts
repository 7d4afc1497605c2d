/**
 * Property tests of the quantizers (fast-check): for random blocks of every type our reference
 * quantizers write, dequantize(quantize(x)) stays within the type's error bound relative to the
 * block's largest magnitude, and for the symmetric types (Q4_0, Q5_0, Q8_0) quantizing the
 * dequantized values again gives the same bytes. f16 and bf16 conversions round
 * to nearest within half a unit in the last place.
 */
import { GGML_TYPE_TRAITS, GgmlType } from "@keepquant/gguf";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { bf16ToFp32, dequantizeRow, fp16ToFp32, fp32ToBf16, fp32ToFp16, QUANTIZE_TYPES, quantizeTensor } from "./index.js";

const RUNS = { numRuns: 300, seed: 20_261_201 };

/**
 * max |x - dequantize(quantize(x))| / max |x| over a block. Single-scale types: half a step, one
 * step at the clamped end of Q4_0/Q5_0 (analytic, plus the f16 scale's rounding); K-quants (their
 * scales are searched, not closed-form, and quantized again): two steps of the type's bits over the
 * block's range, 2^-(bits-2).
 */
const RELATIVE_BOUND: Partial<Record<GgmlType, number>> = {
  [GgmlType.Q4_0]: 1 / 8 + 1e-3,
  [GgmlType.Q4_1]: 1 / 15 + 1e-3,
  [GgmlType.Q5_0]: 1 / 16 + 1e-3,
  [GgmlType.Q5_1]: 1 / 31 + 1e-3,
  [GgmlType.Q8_0]: 1 / 254 + 1e-3,
  [GgmlType.Q8_K]: 1 / 254 + 1e-4,
  [GgmlType.Q2_K]: 1,
  [GgmlType.Q3_K]: 1 / 2,
  [GgmlType.Q4_K]: 1 / 4,
  [GgmlType.Q5_K]: 1 / 8,
  [GgmlType.Q6_K]: 1 / 16,
};
/**
 * Absolute slack: the super-block scale is an f16, often subnormal for small weights (resolution
 * 2^-24), multiplied by a quant of at most 128 (single-scale types) or by a sub-block scale times a
 * quant, at most 4096 (K-quants).
 */
const scaleResolution = (type: GgmlType): number => 2 ** -24 * (SINGLE_SCALE.has(type) || type === GgmlType.Q8_K ? 128 : 4096);
const SINGLE_SCALE = new Set([GgmlType.Q4_0, GgmlType.Q4_1, GgmlType.Q5_0, GgmlType.Q5_1, GgmlType.Q8_0]);
/** Symmetric types (no min): their dequantized values quantize to the same bytes. */
const REQUANTIZES_EXACTLY = new Set([GgmlType.Q4_0, GgmlType.Q5_0, GgmlType.Q8_0]);

/** Values of one block: mixed magnitudes (a per-block exponent), exact zeros and negative zeros. */
const value = fc.oneof(
  { weight: 20, arbitrary: fc.float({ min: -1, max: 1, noNaN: true }) },
  { weight: 1, arbitrary: fc.constantFrom(0, -0) },
);
const blocks = (blockSize: number) =>
  fc
    .tuple(fc.integer({ min: 1, max: 2 }), fc.integer({ min: -12, max: 12 }))
    .chain(([count, exponent]) =>
      fc
        .array(value, { minLength: count * blockSize, maxLength: count * blockSize })
        .map((xs) => Float32Array.from(xs, (x) => x * 2 ** exponent)),
    );

function blockMax(x: Float32Array, start: number, length: number): number {
  let amax = 0;
  for (let i = start; i < start + length; i++) amax = Math.max(amax, Math.abs(x[i]!));
  return amax;
}

/** Half a unit in the last place of a float format with `mantissa` bits and smallest normal exponent `minExponent`. */
function halfUlp(x: number, mantissa: number, minExponent: number): number {
  if (x === 0) return 0;
  return 2 ** (Math.max(Math.floor(Math.log2(Math.abs(x))), minExponent) - mantissa - 1);
}

describe("quantizer round trips (fast-check)", () => {
  it("covers every type the reference quantizers write", () => {
    expect(QUANTIZE_TYPES.filter((t) => RELATIVE_BOUND[t] === undefined).map((t) => GGML_TYPE_TRAITS[t].name)).toEqual([]);
  });

  for (const type of QUANTIZE_TYPES) {
    const { name, blockSize } = GGML_TYPE_TRAITS[type];
    const bound = RELATIVE_BOUND[type] ?? 0;
    const slack = scaleResolution(type);
    it(`${name}: dequantize(quantize(x)) within ${bound.toPrecision(3)} of each block's max |x|${REQUANTIZES_EXACTLY.has(type) ? "; requantizing is exact" : ""}`, () => {
      fc.assert(
        fc.property(blocks(blockSize), (x) => {
          const packed = quantizeTensor(type, x);
          const y = dequantizeRow(type, packed, new Float32Array(x.length));
          for (let b = 0; b < x.length / blockSize; b++) {
            const amax = blockMax(x, b * blockSize, blockSize);
            for (let i = 0; i < blockSize; i++) {
              const at = b * blockSize + i;
              expect(Math.abs(x[at]! - y[at]!), `block ${b} element ${i}: ${x[at]} -> ${y[at]}`).toBeLessThanOrEqual(bound * amax + slack);
            }
          }
          // requantizing is exact while the f16 scale is a normal number (above 2^-14)
          const normalScale = x.every((_, i) => i % blockSize !== 0 || blockMax(x, i, blockSize) >= 2 ** -14 * 128);
          if (REQUANTIZES_EXACTLY.has(type) && normalScale)
            expect(Buffer.from(quantizeTensor(type, y)).equals(Buffer.from(packed))).toBe(true);
        }),
        RUNS,
      );
    });
  }

  it("f16 and bf16: round to nearest, within half a unit in the last place; exact values survive", () => {
    fc.assert(
      fc.property(fc.float({ min: -60_000, max: 60_000, noNaN: true }), (x) => {
        const h = fp16ToFp32(fp32ToFp16(x));
        expect(Math.abs(h - x)).toBeLessThanOrEqual(halfUlp(x, 10, -14));
        expect(fp32ToFp16(h)).toBe(fp32ToFp16(x));
        const b = bf16ToFp32(fp32ToBf16(x));
        expect(Math.abs(b - x)).toBeLessThanOrEqual(halfUlp(x, 7, -126));
        expect(fp32ToBf16(b)).toBe(fp32ToBf16(x));
        expect(Object.is(Math.sign(b), Math.sign(x)) || b === 0).toBe(true);
      }),
      { ...RUNS, numRuns: 2000 },
    );
  });
});
