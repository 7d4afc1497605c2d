import { GgmlType, GGML_TYPE_TRAITS } from "@keepquant/gguf";
import { loadGgmlOracle, loadGgmlRowOracle, oracleUnavailableReason } from "@keepquant/oracle";
import { DEQUANTIZE_TYPES, UnsupportedGgmlTypeError, dequantizeRow, roundToBf16InPlace } from "@keepquant/quant";
import { describe, expect, it } from "vitest";
import {
  NATIVE_DEQUANTIZE_TYPES,
  availableNativeIsas,
  getNativeIsa,
  nativeDequantizeRow,
  nativeDequantizeRows,
  setNativeIsa,
} from "./index.js";
import { firstBitMismatch, randomBytes } from "./test-support.js";

const ORACLE_REASON = oracleUnavailableReason();

const ROWS = 3;
function sample(type: GgmlType, blocksPerRow: number, seed: number) {
  const { blockSize, typeSize } = GGML_TYPE_TRAITS[type];
  const k = blocksPerRow * blockSize;
  return { k, bytes: randomBytes(ROWS * blocksPerRow * typeSize, seed) };
}

describe("native dequantization", () => {
  it("covers every type the quant package dequantizes", () => {
    for (const t of DEQUANTIZE_TYPES) expect(NATIVE_DEQUANTIZE_TYPES).toContain(t);
  });

  for (const type of NATIVE_DEQUANTIZE_TYPES) {
    const name = GGML_TYPE_TRAITS[type].name;
    const noReference = !DEQUANTIZE_TYPES.includes(type);
    const title = noReference
      ? `${name}: bit-exact against @keepquant/quant (skipped: the quant package has no dequantizer for it; checked against the oracle only)`
      : `${name}: bit-exact against @keepquant/quant at every ISA level (random bytes, NaN/Inf scales included)`;
    it.skipIf(noReference)(title, () => {
      const { k, bytes } = sample(type, 9, 17 + type);
      const ts = dequantizeRow(type, bytes, new Float32Array(ROWS * k));
      const before = getNativeIsa();
      for (const isa of availableNativeIsas()) {
        setNativeIsa(isa);
        const native = nativeDequantizeRows(type, bytes, new Float32Array(ROWS * k), ROWS);
        expect(firstBitMismatch(native, ts), isa).toBe(-1);
      }
      setNativeIsa(before);
    });

    it.skipIf(ORACLE_REASON)(`${name}: bit-exact against ggml's dequantize_row / row converters`, () => {
      const oracle = loadGgmlOracle();
      const rows = loadGgmlRowOracle();
      const { k, bytes } = sample(type, 9, 99 + type);
      const native = nativeDequantizeRows(type, bytes, new Float32Array(ROWS * k), ROWS);
      const ggml = new Float32Array(ROWS * k);
      const halves = new Uint16Array(bytes.buffer, bytes.byteOffset, bytes.length >> 1);
      if (type === GgmlType.F32) ggml.set(new Float32Array(bytes.buffer, bytes.byteOffset, ROWS * k));
      else if (type === GgmlType.F16) rows.fp16ToFp32Row(halves, ggml);
      else if (type === GgmlType.BF16) rows.bf16ToFp32Row(halves, ggml);
      else if (type === GgmlType.Q8_1) {
        // ggml has no dequantize_row_q8_1: Q8_1 decodes as the Q8_0 block with the same d and qs
        const q8_0 = new Uint8Array((bytes.length / 36) * 34);
        for (let b = 0; b < bytes.length / 36; b++) {
          q8_0.set(bytes.subarray(b * 36, b * 36 + 2), b * 34);
          q8_0.set(bytes.subarray(b * 36 + 4, b * 36 + 36), b * 34 + 2);
        }
        oracle.dequantizeRow("q8_0", q8_0, ggml);
      } else oracle.dequantizeRow(oracle.typeName(type), bytes, ggml);
      expect(firstBitMismatch(native, ggml)).toBe(-1);
    });
  }

  it("one long row is split across the pool and stays bit-exact", () => {
    const type = GgmlType.Q4_K;
    const k = 256 * 64 * 3;
    const bytes = randomBytes((k / 256) * 144, 5);
    const native = nativeDequantizeRow(type, bytes, new Float32Array(k));
    const ts = dequantizeRow(type, bytes, new Float32Array(k));
    expect(firstBitMismatch(native, ts)).toBe(-1);
  });

  it("roundBf16 rounds each decoded value once (RNE), as the contract decode", () => {
    const type = GgmlType.Q6_K;
    const { k, bytes } = sample(type, 4, 7);
    const native = nativeDequantizeRows(type, bytes, new Float32Array(ROWS * k), ROWS, { roundBf16: true });
    const ts = dequantizeRow(type, bytes, new Float32Array(ROWS * k));
    roundToBf16InPlace(ts);
    expect(firstBitMismatch(native, ts)).toBe(-1);
  });

  it("refuses types it cannot decode and shapes that are not whole blocks", () => {
    expect(() => nativeDequantizeRow(GgmlType.IQ2_XXS, new Uint8Array(66), new Float32Array(256))).toThrow(UnsupportedGgmlTypeError);
    expect(() => nativeDequantizeRow(GgmlType.Q4_K, new Uint8Array(144), new Float32Array(200))).toThrow(
      /200 is not a whole number of Q4_K blocks/,
    );
    expect(() => nativeDequantizeRow(GgmlType.Q4_K, new Uint8Array(100), new Float32Array(256))).toThrow(/needs 144 bytes/);
  });
});
