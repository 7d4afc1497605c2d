import { describe, expect, it } from "vitest";
import { GgmlType, GGML_TYPE_TRAITS } from "@keepquant/gguf";
import { loadGgmlOracle, loadGgmlRowOracle, oracleUnavailableReason } from "@keepquant/oracle";
import {
  SCALAR_DEQUANTIZE_KERNELS,
  wasmDequantizeUnavailableReason,
  dequantizeRow,
  dequantizeTensor,
  DEQUANTIZE_TYPES,
  QuantArgumentError,
  UnsupportedGgmlTypeError,
  KeepQuantError,
} from "./index.js";
import { firstBitDifference, randomBytes } from "./test-support.js";
import { FP16_TO_FP32_BITS } from "./fp.js";

const ORACLE_SKIP_REASON = oracleUnavailableReason();
import { F16_SCALE_FIELDS } from "./testing/block-layout.js";

const RANDOM_BLOCKS = 10_000;

/** f16 scales that break naive decoders: zeros, subnormals, negatives, infinities, NaNs, extremes. */
const SPECIAL_F16 = [
  0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x83ff, 0x0200, 0x0400, 0x7c00, 0xfc00, 0x7e00, 0xfe00, 0x7c01, 0xfc01, 0x7d55, 0x7bff, 0xfbff,
  0x3c00, 0xbc00, 0xb800,
];
const SPECIAL_F32_BITS = [0, 0x80000000, 1, 0x80000001, 0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001, 0xffc12345, 0xbf800000, 0x7f7fffff];
const SPECIAL_E8M0 = [0, 1, 2, 3, 127, 128, 200, 254, 255];
/** quant byte patterns: all zero, all max, "zero level" of offset formats, alternating */
const QUANT_PATTERNS = [0x00, 0xff, 0x88, 0x80, 0x55, 0xaa, 0x10, 0x01];

/** The adversarial blocks of `type`: every special scale (in every scale slot) x every quant pattern. */
function adversarialBlocks(type: GgmlType): Uint8Array {
  const { typeSize } = GGML_TYPE_TRAITS[type];
  const blocks: Uint8Array[] = [];
  const fields = F16_SCALE_FIELDS[type];
  for (const pattern of QUANT_PATTERNS) {
    if (fields) {
      for (const special of SPECIAL_F16) {
        for (let mask = 1; mask < 1 << fields.length; mask++) {
          const block = new Uint8Array(typeSize).fill(pattern);
          fields.forEach((offset, i) => {
            // special in the masked slots, an ordinary scale (0.5 / -0.25) in the others
            const h = mask & (1 << i) ? special : i === 0 ? 0x3800 : 0xb400;
            block[offset] = h & 0xff;
            block[offset + 1] = h >> 8;
          });
          blocks.push(block);
        }
      }
    } else if (type === GgmlType.Q8_K) {
      for (const bits of SPECIAL_F32_BITS) {
        const block = new Uint8Array(typeSize).fill(pattern);
        new DataView(block.buffer).setUint32(0, bits >>> 0, true);
        blocks.push(block);
      }
    } else if (type === GgmlType.MXFP4) {
      for (const e of SPECIAL_E8M0) {
        const block = new Uint8Array(typeSize).fill(pattern);
        block[0] = e;
        blocks.push(block);
      }
    } else {
      // plain types: the pattern itself plus every special f16 / f32 word
      blocks.push(new Uint8Array(typeSize).fill(pattern));
    }
  }
  if (type === GgmlType.F16 || type === GgmlType.BF16) {
    const all = new Uint8Array(65536 * 2);
    for (let h = 0; h < 65536; h++) {
      all[2 * h] = h & 0xff;
      all[2 * h + 1] = h >> 8;
    }
    blocks.push(all);
  }
  if (type === GgmlType.F32) {
    const words = new Uint8Array(SPECIAL_F32_BITS.length * 4);
    SPECIAL_F32_BITS.forEach((bits, i) => new DataView(words.buffer).setUint32(i * 4, bits >>> 0, true));
    blocks.push(words);
  }
  const total = blocks.reduce((sum, b) => sum + b.length, 0);
  const out = new Uint8Array(total);
  let offset = 0;
  for (const b of blocks) {
    out.set(b, offset);
    offset += b.length;
  }
  return out;
}

/** ggml's own decode of `src` (one koffi call for the whole buffer). */
function oracleDequantize(type: GgmlType, src: Uint8Array, elements: number): Float32Array {
  const out = new Float32Array(elements);
  if (type === GgmlType.F32) {
    new Uint8Array(out.buffer).set(src); // ggml's F32 rows are the bytes themselves
  } else if (type === GgmlType.F16) {
    loadGgmlRowOracle().fp16ToFp32Row(new Uint16Array(src.slice().buffer), out);
  } else if (type === GgmlType.BF16) {
    loadGgmlRowOracle().bf16ToFp32Row(new Uint16Array(src.slice().buffer), out);
  } else {
    const oracle = loadGgmlOracle();
    oracle.dequantizeRow(oracle.typeName(type), src, out);
  }
  return out;
}

describe("dequantizeRow: bit-exact against ggml's dequantize_row_<type>", () => {
  it("covers exactly the issue's type list", () => {
    expect(DEQUANTIZE_TYPES.map((t) => GGML_TYPE_TRAITS[t].name).sort()).toEqual(
      [
        "F32",
        "F16",
        "BF16",
        "Q4_0",
        "Q4_1",
        "Q5_0",
        "Q5_1",
        "Q8_0",
        "Q2_K",
        "Q3_K",
        "Q4_K",
        "Q5_K",
        "Q6_K",
        "Q8_K",
        "IQ4_NL",
        "IQ4_XS",
        "MXFP4",
      ].sort(),
    );
  });

  for (const type of DEQUANTIZE_TYPES) {
    const { name, blockSize, typeSize } = GGML_TYPE_TRAITS[type];
    it.skipIf(ORACLE_SKIP_REASON)(`${name}: ${RANDOM_BLOCKS} random blocks + adversarial blocks`, () => {
      const random = randomBytes(RANDOM_BLOCKS * typeSize, 0x9e3779b9 ^ type);
      const adversarial = adversarialBlocks(type);
      for (const src of [random, adversarial]) {
        const elements = (src.length / typeSize) * blockSize;
        const expected = oracleDequantize(type, src, elements);
        const ours = dequantizeTensor(type, src, elements);
        expect(firstBitDifference(ours, expected), name).toBeUndefined();
        // the scalar kernel too (the SIMD arm's fallback and reference)
        const scalar = new Float32Array(elements);
        SCALAR_DEQUANTIZE_KERNELS[type]!(src, 0, scalar, 0, src.length / typeSize);
        expect(firstBitDifference(scalar, expected), `${name} scalar`).toBeUndefined();
      }
      // a row starting at an odd byte address decodes the same (kernels read bytes, not words)
      // (77 blocks: the SIMD arm with a remainder for BF16's 8-value steps; 4 blocks: the scalar arm)
      for (const rowBlocks of [77, 4]) {
        const rowBytes = rowBlocks * typeSize;
        const shifted = new Uint8Array(rowBytes + 1);
        shifted.set(random.subarray(0, rowBytes), 1);
        const row = dequantizeRow(type, shifted.subarray(1), new Float32Array(rowBlocks * blockSize));
        expect(firstBitDifference(row, oracleDequantize(type, random.subarray(0, rowBytes), rowBlocks * blockSize))).toBeUndefined();
      }
    });
  }

  it("the contract's encodings run WebAssembly SIMD kernels on this runtime", () => {
    expect(wasmDequantizeUnavailableReason()).toBeUndefined();
  });

  it("negative scale times a zero quant stays -0", () => {
    // Q8_0: d = -1.0, all quants 0
    const q8 = new Uint8Array(34);
    q8[0] = 0x00;
    q8[1] = 0xbc;
    const y8 = dequantizeRow(GgmlType.Q8_0, q8, new Float32Array(32));
    expect(y8.every((v) => Object.is(v, -0))).toBe(true);
    // Q4_0: d = -0.5, nibbles 8 (level 0)
    const q4 = new Uint8Array(18).fill(0x88);
    q4[0] = 0x00;
    q4[1] = 0xb8;
    const y4 = dequantizeRow(GgmlType.Q4_0, q4, new Float32Array(32));
    expect(y4.every((v) => Object.is(v, -0))).toBe(true);
    // Q6_K: d = -1, scales 1, every level 32 (ql nibble 0, qh pair 2) -> -0
    const q6 = new Uint8Array(210);
    q6.fill(0xaa, 128, 192);
    q6.fill(1, 192, 208);
    q6[208] = 0x00;
    q6[209] = 0xbc;
    const y6 = dequantizeRow(GgmlType.Q6_K, q6, new Float32Array(256));
    expect(y6.every((v) => Object.is(v, -0))).toBe(true);
  });
});

describe("Q4_1 / Q5_1: which NaN x * d + m returns (as ggml on x86, on every Node)", () => {
  // d at bytes 0-1, m at bytes 2-3 in both formats; the quants are 0x5a (Q5_1's qh too). 20,000
  // copies of the block: enough iterations for V8 to optimize the kernel, whose add is where the
  // operand order can change
  const COPIES = 20_000;
  const block = (type: GgmlType, d: number, m: number): Uint8Array => {
    const { typeSize } = GGML_TYPE_TRAITS[type];
    const bytes = new Uint8Array(typeSize * COPIES).fill(0x5a);
    for (let i = 0; i < COPIES; i++) bytes.set([d & 0xff, d >> 8, m & 0xff, m >> 8], i * typeSize);
    return bytes;
  };
  const decoders = (type: GgmlType): [string, (src: Uint8Array) => Uint32Array][] => [
    ["dequantizeRow", (src) => new Uint32Array(dequantizeRow(type, src, new Float32Array(32 * COPIES)).buffer)],
    [
      "scalar",
      (src) => {
        const out = new Float32Array(32 * COPIES);
        SCALAR_DEQUANTIZE_KERNELS[type]!(src, 0, out, 0, COPIES);
        return new Uint32Array(out.buffer);
      },
    ],
  ];
  for (const type of [GgmlType.Q4_1, GgmlType.Q5_1]) {
    const name = GGML_TYPE_TRAITS[type].name;
    for (const [decoder, decode] of decoders(type)) {
      it(`${name} (${decoder}): d NaN and m NaN give d's payload; a finite d and m NaN give m's`, () => {
        const dNan = 0x7d55;
        const mNan = 0xfe01;
        expect([...new Set(decode(block(type, dNan, mNan)))]).toEqual([FP16_TO_FP32_BITS[dNan]]);
        expect([...new Set(decode(block(type, 0x3800, mNan)))]).toEqual([FP16_TO_FP32_BITS[mNan]]);
        expect([...new Set(decode(block(type, dNan, 0x3c00)))]).toEqual([FP16_TO_FP32_BITS[dNan]]);
        // d = +inf, m = NaN: a non-zero quant gives inf + NaN = m's NaN
        expect([...new Set(decode(block(type, 0x7c00, mNan)))]).toEqual([FP16_TO_FP32_BITS[mNan]]);
        // d = +inf, m = -inf: inf - inf is the hardware's default NaN, not an infinity
        const infMinusInf = decode(block(type, 0x7c00, 0xfc00));
        expect(new Float32Array(infMinusInf.buffer).every(Number.isNaN)).toBe(true);
      });
    }
  }
});

describe("dequantize argument contract", () => {
  it("refuses types without a kernel, naming the type", () => {
    for (const type of [GgmlType.Q8_1, GgmlType.IQ2_XXS, GgmlType.IQ1_S, GgmlType.TQ1_0, GgmlType.NVFP4, GgmlType.I8, GgmlType.F64]) {
      const name = GGML_TYPE_TRAITS[type].name;
      const { blockSize, typeSize } = GGML_TYPE_TRAITS[type];
      let caught: unknown;
      try {
        dequantizeRow(type, new Uint8Array(typeSize), new Float32Array(blockSize));
      } catch (error) {
        caught = error;
      }
      expect(UnsupportedGgmlTypeError.isInstance(caught)).toBe(true);
      expect((caught as UnsupportedGgmlTypeError).code).toBe("KEEPQUANT_UNSUPPORTED_GGML_TYPE");
      expect((caught as Error).message).toContain(`ggml type ${name} is not supported`);
      expect((caught as UnsupportedGgmlTypeError).typeName).toBe(name);
    }
    expect(() => dequantizeRow(4 as GgmlType, new Uint8Array(18), new Float32Array(32))).toThrow(/unknown ggml type id 4/);
  });

  it("checks whole blocks and source length once, naming the argument", () => {
    expect(() => dequantizeRow(GgmlType.Q4_K, new Uint8Array(144), new Float32Array(255))).toThrow(QuantArgumentError);
    expect(() => dequantizeRow(GgmlType.Q4_K, new Uint8Array(144), new Float32Array(255))).toThrow(
      /dst\.length.*whole number of Q4_K blocks/,
    );
    expect(() => dequantizeRow(GgmlType.Q4_K, new Uint8Array(143), new Float32Array(256))).toThrow(
      /argument src: 256 Q4_K values need 144 bytes, src has 143/,
    );
    expect(() => dequantizeTensor(GgmlType.Q8_0, new Uint8Array(35), 32)).toThrow(/src: 32 Q8_0 values are 34 bytes, src has 35/);
    try {
      dequantizeTensor(GgmlType.Q8_0, new Uint8Array(35), 32);
    } catch (error) {
      expect(KeepQuantError.isInstance(error)).toBe(true);
      expect((error as QuantArgumentError).argument).toBe("src");
    }
  });
});
