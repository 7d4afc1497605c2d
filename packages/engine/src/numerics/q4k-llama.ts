import { F16_TO_F32 } from "./half.js";

const fround = Math.fround;
const Q4_K_BLOCK_BYTES = 144;
const Q8_K_BLOCK_BYTES = 292;
const KMASK1 = 0x3f3f3f3f;
const KMASK2 = 0x0f0f0f0f;
const KMASK3 = 0x03030303;

const acc = new Float32Array(8);
const accMin = new Float32Array(4);
const sumi = new Int32Array(8);
const scales = new Uint8Array(8);
const mins = new Uint8Array(8);

/**
 * One Q4_K weight row against one Q8_K activation row, in the arithmetic order of ggml's x86 AVX2
 * `ggml_vec_dot_q4_K_q8_K` (what llama.cpp's haswell CPU backend runs): per block, eight int32
 * lanes of scaled 4-element partial sums (lane k holds elements 4k..4k+3 of every 32-element
 * sub-block), each converted to f32 and accumulated as d * lane with one rounding; the mins in four
 * lanes with -dmin; then the two horizontal sums added. Written from the published kernel's
 * semantics; bit-exact against the oracle's vec_dot in engine tests.
 */
export function vecDotQ4KQ8K(
  n: number,
  w: Uint8Array,
  wOffset: number,
  a: Uint8Array,
  aOffset: number,
  aView: DataView,
  aInt8: Int8Array = new Int8Array(a.buffer, a.byteOffset, a.byteLength),
): number {
  acc.fill(0);
  accMin.fill(0);
  for (let b = 0; b < n / 256; b++) {
    const xb = wOffset + b * Q4_K_BLOCK_BYTES;
    const yb = aOffset + b * Q8_K_BLOCK_BYTES;
    const yd = aView.getFloat32(yb, true);
    const d = fround(yd * F16_TO_F32[w[xb]! | (w[xb + 1]! << 8)]!);
    const dmin = fround(-yd * F16_TO_F32[w[xb + 2]! | (w[xb + 3]! << 8)]!);
    const u0 = (w[xb + 4]! | (w[xb + 5]! << 8) | (w[xb + 6]! << 16) | (w[xb + 7]! << 24)) >>> 0;
    const u1 = (w[xb + 8]! | (w[xb + 9]! << 8) | (w[xb + 10]! << 16) | (w[xb + 11]! << 24)) >>> 0;
    const u2 = (w[xb + 12]! | (w[xb + 13]! << 8) | (w[xb + 14]! << 16) | (w[xb + 15]! << 24)) >>> 0;
    const s0 = u0 & KMASK1;
    const s1 = ((u2 & KMASK2) | (((u0 >>> 6) & KMASK3) << 4)) >>> 0;
    const m0 = u1 & KMASK1;
    const m1 = (((u2 >>> 4) & KMASK2) | (((u1 >>> 6) & KMASK3) << 4)) >>> 0;
    for (let i = 0; i < 4; i++) {
      scales[i] = (s0 >>> (8 * i)) & 255;
      scales[4 + i] = (s1 >>> (8 * i)) & 255;
      mins[i] = (m0 >>> (8 * i)) & 255;
      mins[4 + i] = (m1 >>> (8 * i)) & 255;
    }
    for (let j = 0; j < 4; j++) {
      const o = yb + 260 + 8 * j;
      const s =
        mins[2 * j]! * (aView.getInt16(o, true) + aView.getInt16(o + 2, true)) +
        mins[2 * j + 1]! * (aView.getInt16(o + 4, true) + aView.getInt16(o + 6, true));
      accMin[j] = accMin[j]! + dmin * s;
    }
    sumi.fill(0);
    for (let j = 0; j < 4; j++) {
      const q4 = xb + 16 + 32 * j;
      const q8 = yb + 4 + 64 * j;
      const scaleLow = scales[2 * j]!;
      const scaleHigh = scales[2 * j + 1]!;
      for (let k = 0; k < 8; k++) {
        let low = 0;
        let high = 0;
        for (let e = 4 * k; e < 4 * k + 4; e++) {
          const q = w[q4 + e]!;
          low += (q & 15) * aInt8[q8 + e]!;
          high += (q >> 4) * aInt8[q8 + 32 + e]!;
        }
        sumi[k] = sumi[k]! + scaleLow * low + scaleHigh * high;
      }
    }
    for (let k = 0; k < 8; k++) acc[k] = acc[k]! + d * sumi[k]!;
  }
  const r0 = fround(acc[0]! + acc[4]!);
  const r1 = fround(acc[1]! + acc[5]!);
  const r2 = fround(acc[2]! + acc[6]!);
  const r3 = fround(acc[3]! + acc[7]!);
  const lanes = fround(fround(r0 + r2) + fround(r1 + r3));
  const minsSum = fround(fround(accMin[0]! + accMin[2]!) + fround(accMin[1]! + accMin[3]!));
  return fround(lanes + minsSum);
}

/** Q8_K activation quantizer: ggml's quantize_row_q8_K_ref (the quant package's). */
export type QuantizeQ8K = (x: Float32Array, dst: Uint8Array) => void;

let activationScratch = new Uint8Array(0);

/** y[t, r] = Q4_K row r . Q8_K(x[t]) for t < m, with vecDotQ4KQ8K (llama.cpp's AVX2 order). */
export function matmulQ4KLlama(
  data: Uint8Array,
  rows: number,
  cols: number,
  x: Float32Array,
  m: number,
  y: Float32Array,
  quantizeQ8K: QuantizeQ8K,
): void {
  const actBytes = (cols / 256) * Q8_K_BLOCK_BYTES;
  if (activationScratch.length < m * actBytes) activationScratch = new Uint8Array(m * actBytes);
  const act = activationScratch;
  for (let t = 0; t < m; t++) quantizeQ8K(x.subarray(t * cols, (t + 1) * cols), act.subarray(t * actBytes, (t + 1) * actBytes));
  const view = new DataView(act.buffer, act.byteOffset, act.byteLength);
  const int8 = new Int8Array(act.buffer, act.byteOffset, act.byteLength);
  const rowBytes = (cols / 256) * Q4_K_BLOCK_BYTES;
  for (let r = 0; r < rows; r++) {
    for (let t = 0; t < m; t++) y[t * rows + r] = vecDotQ4KQ8K(cols, data, r * rowBytes, act, t * actBytes, view, int8);
  }
}
