import { describe, expect, it } from "vitest";
import { loadGgmlOracle, loadGgmlRowOracle, oracleUnavailableReason } from "@keepquant/oracle";
import {
  bf16ToFp32,
  f32ToBits,
  FP16_TO_FP32_BITS,
  fp16ToFp32,
  fp32BitsToBf16Bits,
  fp32BitsToFp16Bits,
  fp32ToBf16,
  fp32ToFp16,
  roundToBf16InPlace,
} from "./index.js";
import { prng } from "./test-support.js";

const ORACLE_SKIP_REASON = oracleUnavailableReason();

/** Random f32 bit patterns plus every class of special value (zeros, subnormals, ties, NaNs, overflow). */
function f32Patterns(count: number, seed: number): Uint32Array {
  const specials = [
    0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x007fffff, 0x00400000, 0x00008000, 0x00018000, 0x0000ffff, 0x7f800000, 0xff800000,
    0x7f800001, 0x7fbfffff, 0x7fc00000, 0xffc00000, 0x7fffffff, 0xffffffff, 0x7f7fffff, 0xff7fffff, 0x7f7f8000, 0x7f7f7fff, 0x3f808000,
    0x3f818000, 0x3f817fff, 0x3f808001, 0x477fe000, 0x477ff000, 0x477fefff, 0x47800000, 0x33000000, 0x33000001, 0x32ffffff, 0x33800000,
    0x38800000, 0x387fffff, 0x387fe000, 0x387ff000, 0x38000000, 0x3f800000, 0xbf800000, 0x3f801000, 0x3f803000, 0x3f800fff,
  ];
  const random = prng(seed);
  const out = new Uint32Array(count);
  out.set(specials);
  for (let i = specials.length; i < count; i++) out[i] = (random() * 4294967296) >>> 0;
  return out;
}

describe("f16 / bf16 conversions", () => {
  it.skipIf(ORACLE_SKIP_REASON)("f16 -> f32 matches ggml_fp16_to_fp32_row on all 65536 patterns", () => {
    const rows = loadGgmlRowOracle();
    const all = new Uint16Array(65536).map((_, i) => i);
    const expected = new Float32Array(65536);
    rows.fp16ToFp32Row(all, expected);
    expect(Array.from(FP16_TO_FP32_BITS)).toEqual(Array.from(new Uint32Array(expected.buffer)));
  });

  it.skipIf(ORACLE_SKIP_REASON)("bf16 -> f32 matches ggml_bf16_to_fp32_row on all 65536 patterns", () => {
    const rows = loadGgmlRowOracle();
    const all = new Uint16Array(65536).map((_, i) => i);
    const expected = new Float32Array(65536);
    rows.bf16ToFp32Row(all, expected);
    const ours = new Float32Array(65536);
    const ourBits = new Uint32Array(ours.buffer);
    for (let h = 0; h < 65536; h++) ourBits[h] = (h << 16) >>> 0;
    expect(Array.from(ourBits)).toEqual(Array.from(new Uint32Array(expected.buffer)));
    // the number-returning form agrees wherever a number can carry the value (all non-NaN)
    for (let h = 0; h < 65536; h += 97) if (!Number.isNaN(expected[h]!)) expect(Object.is(bf16ToFp32(h), expected[h])).toBe(true);
  });

  it.skipIf(ORACLE_SKIP_REASON)("f32 -> f16 (RNE, overflow, subnormals, NaN) matches ggml on 2^20 patterns", () => {
    const rows = loadGgmlRowOracle();
    const bits = f32Patterns(1 << 20, 7);
    const expected = new Uint16Array(bits.length);
    rows.fp32ToFp16Row(new Float32Array(bits.buffer), expected);
    let mismatches = 0;
    for (let i = 0; i < bits.length; i++) if (fp32BitsToFp16Bits(bits[i]!) !== expected[i]) mismatches++;
    expect(mismatches).toBe(0);
    // the scalar ggml_fp32_to_fp16 agrees with the number-taking form on non-NaN values
    const oracle = loadGgmlOracle();
    const values = new Float32Array(bits.buffer, 0, 4000);
    for (const v of values) if (!Number.isNaN(v)) expect(fp32ToFp16(v)).toBe(oracle.fp32ToFp16(v));
  });

  it.skipIf(ORACLE_SKIP_REASON)("f32 -> bf16 (RNE, NaN kept quiet) matches ggml_fp32_to_bf16 (row, row_ref, scalar)", () => {
    const oracle = loadGgmlOracle();
    const rows = loadGgmlRowOracle();
    const bits = f32Patterns(1 << 20, 11);
    const values = new Float32Array(bits.buffer);
    const viaRow = new Uint16Array(bits.length);
    const viaRef = new Uint16Array(bits.length);
    oracle.fp32ToBf16Row(values, viaRow);
    rows.fp32ToBf16RowRef(values, viaRef);
    let mismatches = 0;
    let nans = 0;
    for (let i = 0; i < bits.length; i++) {
      const ours = fp32BitsToBf16Bits(bits[i]!);
      if (ours !== viaRow[i] || ours !== viaRef[i]) mismatches++;
      if ((bits[i]! & 0x7fffffff) > 0x7f800000) nans++;
    }
    expect(nans).toBeGreaterThan(1000); // the random set really exercises NaN payloads
    expect(mismatches).toBe(0);
    for (let i = 0; i < 4000; i++) if (!Number.isNaN(values[i]!)) expect(fp32ToBf16(values[i]!)).toBe(oracle.fp32ToBf16(values[i]!));
  });

  it("roundToBf16InPlace applies exactly fp32BitsToBf16Bits to every element", () => {
    const bits = f32Patterns(50_000, 3);
    const values = new Float32Array(bits.buffer.slice(0));
    roundToBf16InPlace(values);
    const rounded = new Uint32Array(values.buffer);
    for (let i = 0; i < bits.length; i++) expect(rounded[i]).toBe((fp32BitsToBf16Bits(bits[i]!) << 16) >>> 0);
  });

  it("known values: RNE ties, max f16, negative zero", () => {
    expect(fp32ToFp16(65504)).toBe(0x7bff);
    expect(fp32ToFp16(65520)).toBe(0x7c00); // tie at the top rounds to even = infinity
    expect(fp32ToFp16(-0)).toBe(0x8000);
    expect(fp16ToFp32(0x0001)).toBe(2 ** -24);
    expect(fp32ToBf16(1 + 2 ** -8)).toBe(0x3f80); // tie -> even
    expect(fp32ToBf16(1 + 3 * 2 ** -8)).toBe(0x3f82); // tie -> even (up)
    expect(f32ToBits(bf16ToFp32(0x8000))).toBe(0x80000000);
  });
});
