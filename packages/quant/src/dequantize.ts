/**
 * Bit-exact scalar dequantization of ggml block formats, one kernel per type as ggml's
 * `dequantize_row_<type>`. Every f32 operation that C performs in float is rounded with
 * Math.fround at the same point (a product of an f32 and a small integer is exact in f64, so a
 * single store into a Float32Array is the one rounding C does). Kernels assume valid input; the
 * exported functions check the whole contract once at the boundary.
 */
import { GgmlType, GGML_TYPE_TRAITS, ggmlTypeLabel } from "@keepquant/gguf";
import { QuantArgumentError, UnsupportedGgmlTypeError } from "./errors.js";
import { FP16_TO_FP32 } from "./fp.js";
import { wasmKernel } from "./wasm-dequantize.js";

/** Decodes `blocks` blocks from `src[srcOffset..]` into `dst[dstOffset..]`. */
export type DequantizeKernel = (src: Uint8Array, srcOffset: number, dst: Float32Array, dstOffset: number, blocks: number) => void;

const F16 = FP16_TO_FP32;
const fround = Math.fround;

/** IQ4_NL / IQ4_XS non-linear 4-bit code book (ggml kvalues_iq4nl). */
export const KVALUES_IQ4NL: Int8Array = Int8Array.from([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113]);
/** MXFP4 E2M1 values doubled (ggml kvalues_mxfp4); paired with an E8M0 scale halved. */
export const KVALUES_MXFP4: Int8Array = Int8Array.from([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12]);

const e8m0Scratch = new Uint32Array(1);
const e8m0ScratchF32 = new Float32Array(e8m0Scratch.buffer);
/** 2^(e - 128) as f32, the MXFP4 block scale (ggml_e8m0_to_fp32_half). */
export function e8m0ToFp32Half(e: number): number {
  e8m0Scratch[0] = e < 2 ? 0x00200000 << e : (e - 1) << 23;
  return e8m0ScratchF32[0]!;
}
const E8M0_HALF: Float32Array = Float32Array.from({ length: 256 }, (_, e) => e8m0ToFp32Half(e));

// ---------------------------------------------------------------- plain types

function dequantizeF32(src: Uint8Array, so: number, dst: Float32Array, dOff: number, n: number): void {
  // copy bits (a trip through a JS number would quiet signaling NaNs)
  const out = new Uint8Array(dst.buffer, dst.byteOffset + dOff * 4, n * 4);
  out.set(src.subarray(so, so + n * 4));
}

const F16_BITS = new Int32Array(FP16_TO_FP32.buffer);
/** Typed-array views read GGUF's little-endian halves directly only on little-endian hosts. */
const LITTLE_ENDIAN = new Uint8Array(Uint16Array.of(1).buffer)[0] === 1;
function dequantizeF16(src: Uint8Array, so: number, dst: Float32Array, dOff: number, n: number): void {
  // integer copies of the table's bit patterns (no float conversions on the way)
  const out = new Int32Array(dst.buffer, dst.byteOffset + dOff * 4, n);
  if (LITTLE_ENDIAN && ((src.byteOffset + so) & 1) === 0) {
    const halves = new Uint16Array(src.buffer, src.byteOffset + so, n);
    for (let i = 0; i < n; i++) out[i] = F16_BITS[halves[i]!]!;
  } else {
    for (let i = 0; i < n; i++, so += 2) out[i] = F16_BITS[src[so]! | (src[so + 1]! << 8)]!;
  }
}

function dequantizeBF16(src: Uint8Array, so: number, dst: Float32Array, dOff: number, n: number): void {
  // Int32Array, not Uint32Array: the bits are the same and stores stay small integers (no doubles)
  const out = new Int32Array(dst.buffer, dst.byteOffset + dOff * 4, n);
  for (let i = 0; i < n; i++, so += 2) out[i] = (src[so]! << 16) | (src[so + 1]! << 24);
}

// ---------------------------------------------------------------- 32-element blocks

/** Q4_0: 18 B = f16 d + 16 B nibbles; 4.5 bits per weight; y = (q - 8) * d */
function dequantizeQ4_0(src: Uint8Array, so: number, dst: Float32Array, y: number, nb: number): void {
  for (let i = 0; i < nb; i++, so += 18, y += 32) {
    const d = F16[src[so]! | (src[so + 1]! << 8)]!;
    for (let j = 0; j < 16; j++) {
      const q = src[so + 2 + j]!;
      dst[y + j] = ((q & 0x0f) - 8) * d;
      dst[y + j + 16] = ((q >> 4) - 8) * d;
    }
  }
}

/**
 * `x * d + m` as ggml's compiled code computes it when the product or m is a NaN: the product's NaN
 * when it is one (x86 returns the first NaN operand and ggml's add has the product first; measured
 * against the oracle: with both d and m NaN, d's payload comes out), else m's. A JS `+` has no
 * operand order to rely on: V8 may swap the operands of a commutative add, and whether it does
 * changed between Node 20 and Node 24, so the choice is made here explicitly. Only blocks whose d
 * or m is not finite (f16 exponent all ones) take this path: otherwise no NaN can arise.
 */
function productFirst(product: number, m: number): number {
  return Number.isNaN(product) ? product : m + product;
}

/** Whether the f16 at `src[offset]` is an infinity or a NaN. */
function f16NotFinite(src: Uint8Array, offset: number): boolean {
  return (src[offset + 1]! & 0x7c) === 0x7c;
}

/** Q4_1: 20 B = f16 d, f16 m + 16 B nibbles; 5 bits per weight; y = q * d + m */
function dequantizeQ4_1(src: Uint8Array, so: number, dst: Float32Array, y: number, nb: number): void {
  for (let i = 0; i < nb; i++, so += 20, y += 32) {
    const d = F16[src[so]! | (src[so + 1]! << 8)]!;
    const m = F16[src[so + 2]! | (src[so + 3]! << 8)]!;
    if (f16NotFinite(src, so) || f16NotFinite(src, so + 2)) {
      for (let j = 0; j < 16; j++) {
        const q = src[so + 4 + j]!;
        dst[y + j] = productFirst(fround((q & 0x0f) * d), m);
        dst[y + j + 16] = productFirst(fround((q >> 4) * d), m);
      }
      continue;
    }
    for (let j = 0; j < 16; j++) {
      const q = src[so + 4 + j]!;
      dst[y + j] = m + fround((q & 0x0f) * d);
      dst[y + j + 16] = m + fround((q >> 4) * d);
    }
  }
}

/** Q5_0: 22 B = f16 d, u32 qh, 16 B nibbles; 5.5 bits per weight; y = (q - 16) * d */
function dequantizeQ5_0(src: Uint8Array, so: number, dst: Float32Array, y: number, nb: number): void {
  for (let i = 0; i < nb; i++, so += 22, y += 32) {
    const d = F16[src[so]! | (src[so + 1]! << 8)]!;
    const qh = src[so + 2]! | (src[so + 3]! << 8) | (src[so + 4]! << 16) | (src[so + 5]! << 24);
    for (let j = 0; j < 16; j++) {
      const q = src[so + 6 + j]!;
      const h0 = ((qh >>> j) << 4) & 0x10;
      const h1 = (qh >>> (j + 12)) & 0x10;
      dst[y + j] = (((q & 0x0f) | h0) - 16) * d;
      dst[y + j + 16] = (((q >> 4) | h1) - 16) * d;
    }
  }
}

/** Q5_1: 24 B = f16 d, f16 m, u32 qh, 16 B nibbles; 6 bits per weight; y = q * d + m */
function dequantizeQ5_1(src: Uint8Array, so: number, dst: Float32Array, y: number, nb: number): void {
  for (let i = 0; i < nb; i++, so += 24, y += 32) {
    const d = F16[src[so]! | (src[so + 1]! << 8)]!;
    const m = F16[src[so + 2]! | (src[so + 3]! << 8)]!;
    const qh = src[so + 4]! | (src[so + 5]! << 8) | (src[so + 6]! << 16) | (src[so + 7]! << 24);
    if (f16NotFinite(src, so) || f16NotFinite(src, so + 2)) {
      // a NaN can arise: the product's NaN first, as Q4_1
      for (let j = 0; j < 16; j++) {
        const q = src[so + 8 + j]!;
        const h0 = ((qh >>> j) << 4) & 0x10;
        const h1 = (qh >>> (j + 12)) & 0x10;
        dst[y + j] = productFirst(fround(((q & 0x0f) | h0) * d), m);
        dst[y + j + 16] = productFirst(fround(((q >> 4) | h1) * d), m);
      }
      continue;
    }
    for (let j = 0; j < 16; j++) {
      const q = src[so + 8 + j]!;
      const h0 = ((qh >>> j) << 4) & 0x10;
      const h1 = (qh >>> (j + 12)) & 0x10;
      dst[y + j] = m + fround(((q & 0x0f) | h0) * d);
      dst[y + j + 16] = m + fround(((q >> 4) | h1) * d);
    }
  }
}

/** Q8_0: 34 B = f16 d + 32 int8; 8.5 bits per weight; y = q * d */
function dequantizeQ8_0(src: Uint8Array, so: number, dst: Float32Array, y: number, nb: number): void {
  for (let i = 0; i < nb; i++, so += 34, y += 32) {
    const d = F16[src[so]! | (src[so + 1]! << 8)]!;
    const qs = so + 2;
    for (let j = 0; j < 32; j++) dst[y + j] = ((src[qs + j]! << 24) >> 24) * d;
  }
}

/** IQ4_NL: 18 B = f16 d + 16 B nibbles into the non-linear code book; y = d * kvalues[q] */
function dequantizeIQ4_NL(src: Uint8Array, so: number, dst: Float32Array, y: number, nb: number): void {
  const kv = KVALUES_IQ4NL;
  for (let i = 0; i < nb; i++, so += 18, y += 32) {
    const d = F16[src[so]! | (src[so + 1]! << 8)]!;
    for (let j = 0; j < 16; j++) {
      const q = src[so + 2 + j]!;
      dst[y + j] = d * kv[q & 0x0f]!;
      dst[y + j + 16] = d * kv[q >> 4]!;
    }
  }
}

/** MXFP4: 17 B = E8M0 exponent + 16 B nibbles of E2M1 (doubled); y = kvalues[q] * 2^(e-128) */
function dequantizeMXFP4(src: Uint8Array, so: number, dst: Float32Array, y: number, nb: number): void {
  const kv = KVALUES_MXFP4;
  for (let i = 0; i < nb; i++, so += 17, y += 32) {
    const d = E8M0_HALF[src[so]!]!;
    for (let j = 0; j < 16; j++) {
      const q = src[so + 1 + j]!;
      dst[y + j] = kv[q & 0x0f]! * d;
      dst[y + j + 16] = kv[q >> 4]! * d;
    }
  }
}

// ---------------------------------------------------------------- 256-element super-blocks

/** Q2_K: 84 B = 16 B 4+4-bit scales/mins, 64 B 2-bit quants, f16 d, f16 dmin; 2.625 bits per weight */
function dequantizeQ2_K(src: Uint8Array, so: number, dst: Float32Array, y: number, nb: number): void {
  for (let i = 0; i < nb; i++, so += 84) {
    const d = F16[src[so + 80]! | (src[so + 81]! << 8)]!;
    const min = F16[src[so + 82]! | (src[so + 83]! << 8)]!;
    let is = 0;
    for (let half = 0; half < 2; half++) {
      const q = so + 16 + half * 32;
      for (let shift = 0; shift < 8; shift += 2) {
        let sc = src[so + is++]!;
        let dl = fround(d * (sc & 0x0f));
        let ml = fround(min * (sc >> 4));
        for (let l = 0; l < 16; l++) dst[y++] = fround(dl * ((src[q + l]! >> shift) & 3)) - ml;
        sc = src[so + is++]!;
        dl = fround(d * (sc & 0x0f));
        ml = fround(min * (sc >> 4));
        for (let l = 0; l < 16; l++) dst[y++] = fround(dl * ((src[q + l + 16]! >> shift) & 3)) - ml;
      }
    }
  }
}

/** Q3_K: 110 B = 32 B high-bit mask, 64 B 2-bit quants, 12 B 6-bit scales, f16 d; 3.4375 bits per weight */
function dequantizeQ3_K(src: Uint8Array, so: number, dst: Float32Array, y: number, nb: number): void {
  const scales = new Int32Array(16);
  for (let i = 0; i < nb; i++, so += 110) {
    const dAll = F16[src[so + 108]! | (src[so + 109]! << 8)]!;
    const sc = so + 96;
    for (let j = 0; j < 16; j++) {
      const low = j < 8 ? src[sc + j]! & 0x0f : src[sc + j - 8]! >> 4;
      const high = (src[sc + 8 + (j & 3)]! >> (2 * (j >> 2))) & 3;
      scales[j] = (low | (high << 4)) - 32;
    }
    const hm = so;
    let bit = 0; // high-bit plane: set means level q, clear means q - 4 (branch-free below)
    let is = 0;
    for (let half = 0; half < 2; half++) {
      const q = so + 32 + half * 32;
      for (let shift = 0; shift < 8; shift += 2) {
        let dl = fround(dAll * scales[is++]!);
        for (let l = 0; l < 16; l++) {
          dst[y++] = dl * (((src[q + l]! >> shift) & 3) - 4 + (((src[hm + l]! >> bit) & 1) << 2));
        }
        dl = fround(dAll * scales[is++]!);
        for (let l = 0; l < 16; l++) {
          dst[y++] = dl * (((src[q + l + 16]! >> shift) & 3) - 4 + (((src[hm + l + 16]! >> bit) & 1) << 2));
        }
        bit++;
      }
    }
  }
}

/** Scale and min j (0..7) of a Q4_K/Q5_K 12-byte packed 6-bit scale array at `sc` (get_scale_min_k4). */
function scaleK4(src: Uint8Array, sc: number, j: number): number {
  return j < 4 ? src[sc + j]! & 63 : (src[sc + j + 4]! & 0x0f) | ((src[sc + j - 4]! >> 6) << 4);
}
function minK4(src: Uint8Array, sc: number, j: number): number {
  return j < 4 ? src[sc + j + 4]! & 63 : (src[sc + j + 4]! >> 4) | ((src[sc + j]! >> 6) << 4);
}

/**
 * Q4_K: 144 B = f16 d, f16 dmin, 12 B 6-bit scales/mins, 128 B nibbles; 4.5 bits per weight. Q5_K
 * (`fifthBit`): 176 B = the same with 32 B of high bits before the nibbles; 5.5 bits per weight.
 */
function dequantizeKScaleMin(src: Uint8Array, so: number, dst: Float32Array, y: number, nb: number, fifthBit: boolean): void {
  const blockBytes = fifthBit ? 176 : 144;
  for (let i = 0; i < nb; i++, so += blockBytes) {
    const d = F16[src[so]! | (src[so + 1]! << 8)]!;
    const min = F16[src[so + 2]! | (src[so + 3]! << 8)]!;
    const sc = so + 4;
    const qh = so + 16;
    let ql = fifthBit ? so + 48 : so + 16;
    for (let is = 0; is < 8; is += 2, ql += 32) {
      const d1 = fround(d * scaleK4(src, sc, is));
      const m1 = fround(min * minK4(src, sc, is));
      const d2 = fround(d * scaleK4(src, sc, is + 1));
      const m2 = fround(min * minK4(src, sc, is + 1));
      if (fifthBit) {
        // fifth bit of sub-block `is` is bit `is` of qh (branch-free: (qh >> is & 1) << 4)
        for (let l = 0; l < 32; l++) {
          dst[y + l] = fround(d1 * ((src[ql + l]! & 0x0f) | (((src[qh + l]! >> is) & 1) << 4))) - m1;
        }
        for (let l = 0; l < 32; l++) {
          dst[y + 32 + l] = fround(d2 * ((src[ql + l]! >> 4) | (((src[qh + l]! >> (is + 1)) & 1) << 4))) - m2;
        }
      } else {
        for (let l = 0; l < 32; l++) dst[y + l] = fround(d1 * (src[ql + l]! & 0x0f)) - m1;
        for (let l = 0; l < 32; l++) dst[y + 32 + l] = fround(d2 * (src[ql + l]! >> 4)) - m2;
      }
      y += 64;
    }
  }
}
function dequantizeQ4_K(src: Uint8Array, so: number, dst: Float32Array, y: number, nb: number): void {
  dequantizeKScaleMin(src, so, dst, y, nb, false);
}
function dequantizeQ5_K(src: Uint8Array, so: number, dst: Float32Array, y: number, nb: number): void {
  dequantizeKScaleMin(src, so, dst, y, nb, true);
}

/** Q6_K: 210 B = 128 B low nibbles, 64 B high 2-bit pairs, 16 int8 scales, f16 d; 6.5625 bits per weight */
function dequantizeQ6_K(src: Uint8Array, so: number, dst: Float32Array, y: number, nb: number): void {
  for (let i = 0; i < nb; i++, so += 210) {
    const d = F16[src[so + 208]! | (src[so + 209]! << 8)]!;
    let ql = so;
    let qh = so + 128;
    let sc = so + 192;
    for (let n = 0; n < 2; n++) {
      for (let half = 0; half < 2; half++) {
        const is = half;
        const s0 = fround(d * ((src[sc + is]! << 24) >> 24));
        const s2 = fround(d * ((src[sc + is + 2]! << 24) >> 24));
        const s4 = fround(d * ((src[sc + is + 4]! << 24) >> 24));
        const s6 = fround(d * ((src[sc + is + 6]! << 24) >> 24));
        for (let l = half * 16; l < half * 16 + 16; l++) {
          const h = src[qh + l]!;
          const a = src[ql + l]!;
          const b = src[ql + l + 32]!;
          dst[y + l] = s0 * (((a & 0x0f) | ((h & 3) << 4)) - 32);
          dst[y + l + 32] = s2 * (((b & 0x0f) | (((h >> 2) & 3) << 4)) - 32);
          dst[y + l + 64] = s4 * (((a >> 4) | (((h >> 4) & 3) << 4)) - 32);
          dst[y + l + 96] = s6 * (((b >> 4) | (((h >> 6) & 3) << 4)) - 32);
        }
      }
      y += 128;
      ql += 64;
      qh += 32;
      sc += 8;
    }
  }
}

const q8kScratch = new Uint32Array(1);
const q8kScratchF32 = new Float32Array(q8kScratch.buffer);
/** Q8_K: 292 B = f32 d, 256 int8, 16 int16 block sums; y = d * q (activation format for K-quant dots) */
function dequantizeQ8_K(src: Uint8Array, so: number, dst: Float32Array, y: number, nb: number): void {
  for (let i = 0; i < nb; i++, so += 292, y += 256) {
    q8kScratch[0] = src[so]! | (src[so + 1]! << 8) | (src[so + 2]! << 16) | (src[so + 3]! << 24);
    const d = q8kScratchF32[0]!;
    const qs = so + 4;
    for (let j = 0; j < 256; j++) dst[y + j] = d * ((src[qs + j]! << 24) >> 24);
  }
}

/** IQ4_XS: 136 B = f16 d, u16 high scale bits, 4 B low scale nibbles, 128 B nibbles; 4.25 bits per weight */
function dequantizeIQ4_XS(src: Uint8Array, so: number, dst: Float32Array, y: number, nb: number): void {
  const kv = KVALUES_IQ4NL;
  for (let i = 0; i < nb; i++, so += 136) {
    const d = F16[src[so]! | (src[so + 1]! << 8)]!;
    const scalesH = src[so + 2]! | (src[so + 3]! << 8);
    let qs = so + 8;
    for (let ib = 0; ib < 8; ib++, qs += 16, y += 32) {
      const ls = ((src[so + 4 + (ib >> 1)]! >> (4 * (ib & 1))) & 0x0f) | (((scalesH >> (2 * ib)) & 3) << 4);
      const dl = fround(d * (ls - 32));
      for (let j = 0; j < 16; j++) {
        const q = src[qs + j]!;
        dst[y + j] = dl * kv[q & 0x0f]!;
        dst[y + j + 16] = dl * kv[q >> 4]!;
      }
    }
  }
}

/** The scalar (plain TypeScript) dequantizers: the readable reference, and the fallback everywhere. */
export const SCALAR_DEQUANTIZE_KERNELS: Readonly<Partial<Record<GgmlType, DequantizeKernel>>> = {
  [GgmlType.F32]: dequantizeF32,
  [GgmlType.F16]: dequantizeF16,
  [GgmlType.BF16]: dequantizeBF16,
  [GgmlType.Q4_0]: dequantizeQ4_0,
  [GgmlType.Q4_1]: dequantizeQ4_1,
  [GgmlType.Q5_0]: dequantizeQ5_0,
  [GgmlType.Q5_1]: dequantizeQ5_1,
  [GgmlType.Q8_0]: dequantizeQ8_0,
  [GgmlType.Q2_K]: dequantizeQ2_K,
  [GgmlType.Q3_K]: dequantizeQ3_K,
  [GgmlType.Q4_K]: dequantizeQ4_K,
  [GgmlType.Q5_K]: dequantizeQ5_K,
  [GgmlType.Q6_K]: dequantizeQ6_K,
  [GgmlType.Q8_K]: dequantizeQ8_K,
  [GgmlType.IQ4_NL]: dequantizeIQ4_NL,
  [GgmlType.IQ4_XS]: dequantizeIQ4_XS,
  [GgmlType.MXFP4]: dequantizeMXFP4,
};

/**
 * The dequantizers in use, by type: the scalar ones, except the contract's encodings (Q8_0, Q4_K,
 * Q5_K, Q6_K) and every other block type but F16, which run WebAssembly SIMD kernels of the same arithmetic when the runtime has SIMD.
 * Anything else is refused with UnsupportedGgmlTypeError.
 */
export const DEQUANTIZE_KERNELS: Readonly<Partial<Record<GgmlType, DequantizeKernel>>> = {
  ...SCALAR_DEQUANTIZE_KERNELS,
  [GgmlType.Q8_0]: wasmKernel(GgmlType.Q8_0, dequantizeQ8_0),
  [GgmlType.Q4_K]: wasmKernel(GgmlType.Q4_K, dequantizeQ4_K),
  [GgmlType.Q5_K]: wasmKernel(GgmlType.Q5_K, dequantizeQ5_K),
  [GgmlType.Q6_K]: wasmKernel(GgmlType.Q6_K, dequantizeQ6_K),
  [GgmlType.Q4_0]: wasmKernel(GgmlType.Q4_0, dequantizeQ4_0),
  [GgmlType.Q8_K]: wasmKernel(GgmlType.Q8_K, dequantizeQ8_K),
  [GgmlType.BF16]: wasmKernel(GgmlType.BF16, dequantizeBF16),
  [GgmlType.Q2_K]: wasmKernel(GgmlType.Q2_K, dequantizeQ2_K),
  [GgmlType.Q3_K]: wasmKernel(GgmlType.Q3_K, dequantizeQ3_K),
  [GgmlType.IQ4_NL]: wasmKernel(GgmlType.IQ4_NL, dequantizeIQ4_NL),
  [GgmlType.IQ4_XS]: wasmKernel(GgmlType.IQ4_XS, dequantizeIQ4_XS),
  [GgmlType.MXFP4]: wasmKernel(GgmlType.MXFP4, dequantizeMXFP4),
  [GgmlType.Q4_1]: wasmKernel(GgmlType.Q4_1, dequantizeQ4_1),
  [GgmlType.Q5_0]: wasmKernel(GgmlType.Q5_0, dequantizeQ5_0),
  [GgmlType.Q5_1]: wasmKernel(GgmlType.Q5_1, dequantizeQ5_1),
};

export const DEQUANTIZE_TYPES: readonly GgmlType[] = (Object.keys(DEQUANTIZE_KERNELS) as string[]).map((id) => Number(id) as GgmlType);

/** The kernel for `type`, or a typed refusal naming the type. */
export function dequantizeKernel(type: GgmlType, operation = "dequantizeRow"): DequantizeKernel {
  const kernel = DEQUANTIZE_KERNELS[type];
  if (!kernel) {
    throw new UnsupportedGgmlTypeError(
      ggmlTypeLabel(type),
      operation,
      DEQUANTIZE_TYPES.map((t) => ggmlTypeLabel(t)),
    );
  }
  return kernel;
}

/** Checks that `elements` values of `type` fill whole blocks and returns [blocks, bytes]. */
export function blockGeometry(type: GgmlType, elements: number, operation: string, argument: string): [number, number] {
  const traits = GGML_TYPE_TRAITS[type];
  if (!Number.isSafeInteger(elements) || elements < 0) {
    throw new QuantArgumentError(operation, argument, `element count ${elements} is not a non-negative integer`);
  }
  if (elements % traits.blockSize !== 0) {
    throw new QuantArgumentError(
      operation,
      argument,
      `${elements} elements is not a whole number of ${traits.name} blocks (${traits.blockSize} per block)`,
    );
  }
  const blocks = elements / traits.blockSize;
  return [blocks, blocks * traits.typeSize];
}

/**
 * Decodes one row: `dst.length` values of `type` from the front of `src` (which must hold exactly
 * the row's bytes, or more). Bit-exact against ggml's dequantize_row_<type>.
 */
export function dequantizeRow(type: GgmlType, src: Uint8Array, dst: Float32Array): Float32Array {
  const kernel = dequantizeKernel(type, "dequantizeRow");
  const [blocks, bytes] = blockGeometry(type, dst.length, "dequantizeRow", "dst.length");
  if (src.length < bytes) {
    throw new QuantArgumentError(
      "dequantizeRow",
      "src",
      `${dst.length} ${ggmlTypeLabel(type)} values need ${bytes} bytes, src has ${src.length}`,
    );
  }
  kernel(src, 0, dst, 0, blocks);
  return dst;
}

/**
 * Decodes a whole tensor of `elements` values (any number of rows; rows of whole blocks are
 * contiguous, so this is one long row). `src.length` must be exactly the packed size.
 */
export function dequantizeTensor(type: GgmlType, src: Uint8Array, elements: number, dst?: Float32Array): Float32Array {
  const kernel = dequantizeKernel(type, "dequantizeTensor");
  const [blocks, bytes] = blockGeometry(type, elements, "dequantizeTensor", "elements");
  if (src.length !== bytes) {
    throw new QuantArgumentError(
      "dequantizeTensor",
      "src",
      `${elements} ${ggmlTypeLabel(type)} values are ${bytes} bytes, src has ${src.length}`,
    );
  }
  const out = dst ?? new Float32Array(elements);
  if (out.length < elements) {
    throw new QuantArgumentError("dequantizeTensor", "dst", `needs ${elements} values, has ${out.length}`);
  }
  kernel(src, 0, out, 0, blocks);
  return out;
}
