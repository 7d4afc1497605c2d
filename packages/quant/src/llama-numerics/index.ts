/**
 * A pure-TS reference of llama.cpp's CPU matmul arithmetic ("llama numerics"): each activation row
 * is quantized to the weight type's `vec_dot_type` exactly as the activation quantizers of
 * llama.cpp's haswell CPU variant do (Q8_K for Q2_K..Q6_K and IQ4_XS, as quantize_row_q8_K_ref; Q8_0
 * for Q4_0, Q5_0, Q8_0, IQ4_NL, MXFP4 and Q8_1 for Q4_1, Q5_1 as the x86 kernels, ties to even;
 * f16/bf16 rounding for F16/BF16 weights; F32 stays f32), blocks are dotted in integers, and the
 * per-block scale arithmetic follows ggml-cpu's generic `ggml_vec_dot_<w>_<act>` kernels in C's
 * evaluation order (every f32 operation rounded with Math.fround where C rounds it; the K-quant
 * kernels keep 8 float lanes as the C code does). Float weights: exact products summed in f64, as
 * ggml's scalar `ggml_vec_dot_{f32,f16,bf16}`.
 *
 * Slow and obvious on purpose: it is what the native `matmulLlama` is checked against.
 */
import { GgmlType, GGML_TYPE_TRAITS, ggmlTypeLabel } from "@keepquant/gguf";
import { QuantArgumentError, UnsupportedGgmlTypeError } from "../errors.js";
import { bf16ToFp32, f32ToBits, fp16ToFp32, fp32BitsToBf16Bits, fp32BitsToFp16Bits } from "../fp.js";
import { e8m0ToFp32Half, KVALUES_IQ4NL, KVALUES_MXFP4 } from "../dequantize.js";
import { quantizeRow } from "../quantize.js";

const fround = Math.fround;

/** Sum of |terms| added into float accumulators by the current dot (for tolerance bounds). */
let absTerms = 0;
function term(t: number): number {
  absTerms += Math.abs(t);
  return t;
}

/** The activation encoding llama.cpp's CPU backend converts x to for weights of `type`. */
export function llamaVecDotType(type: GgmlType): GgmlType {
  const act = LLAMA_VEC_DOT_TYPES[type];
  if (act === undefined) {
    throw new UnsupportedGgmlTypeError(
      ggmlTypeLabel(type),
      "llamaVecDotType",
      LLAMA_WEIGHT_TYPES.map((t) => ggmlTypeLabel(t)),
    );
  }
  return act;
}

/** Bytes of one activation row of k values in encoding `act`. */
export function activationRowBytes(act: GgmlType, k: number): number {
  const { blockSize, typeSize } = GGML_TYPE_TRAITS[act];
  return (k / blockSize) * typeSize;
}

/** quantize_row_q8_1_ref: Q8_0 codes plus s = f16(sum(q) * d). */
/**
 * One Q8_0 / Q8_1 activation code as llama.cpp's x86 kernels make it (the haswell variant's
 * quantize_row_q8_0 / q8_1): rounded to nearest with ties to even (`_mm256_round_ps`), an out of
 * range value becomes INT32_MIN (`_mm256_cvtps_epi32`), then the saturating packs to int8.
 */
function x86Q8Code(v: number): number {
  if (!(Math.abs(v) < 2147483648)) return -128;
  let r = Math.round(v);
  if (r - v === 0.5 && (r & 1) !== 0) r -= 1; // Math.round takes ties up; ggml takes them to even
  return r < -128 ? -128 : r > 127 ? 127 : r;
}

/**
 * The x86 quantize_row_q8_0 (llama.cpp's activation quantizer for Q8_0/Q4_0/Q5_0/IQ4_NL/MXFP4
 * weights): d = amax / 127 as stored, but codes are x * (127 / amax) rounded half to even. It differs
 * from quantize_row_q8_0_ref (x / d, halves away from zero, the weight quantizer) on exact ties.
 */
function quantizeQ8_0Activations(x: Float32Array, dst: Uint8Array): void {
  for (let i = 0; i < x.length / 32; i++) {
    const { d, codes } = x86Q8Block(x, i * 32);
    writeFp16(dst, i * 34, d);
    for (let j = 0; j < 32; j++) dst[i * 34 + 2 + j] = codes[j]! & 0xff;
  }
}

/** One block of 32 values as the x86 activation quantizers make it: d = amax / 127 and the codes. */
function x86Q8Block(x: Float32Array, start: number): { d: number; codes: Int8Array } {
  let amax = 0;
  for (let j = 0; j < 32; j++) amax = Math.max(amax, Math.abs(x[start + j]!));
  const id = amax !== 0 ? fround(127 / amax) : 0;
  const codes = new Int8Array(32);
  for (let j = 0; j < 32; j++) codes[j] = x86Q8Code(fround(x[start + j]! * id));
  return { d: fround(amax / 127), codes };
}

function writeFp16(dst: Uint8Array, offset: number, value: number): void {
  const bits = fp32BitsToFp16Bits(f32ToBits(value));
  dst[offset] = bits & 0xff;
  dst[offset + 1] = bits >>> 8;
}

/** The x86 quantize_row_q8_1 (Q4_1/Q5_1 weights): Q8_0's codes plus s = d * sum(codes). */
function quantizeQ8_1(x: Float32Array, dst: Uint8Array): void {
  for (let i = 0; i < x.length / 32; i++) {
    const { d, codes } = x86Q8Block(x, i * 32);
    writeFp16(dst, i * 36, d);
    let sum = 0;
    for (let j = 0; j < 32; j++) {
      dst[i * 36 + 4 + j] = codes[j]! & 0xff;
      sum += codes[j]!;
    }
    writeFp16(dst, i * 36 + 2, fround(sum * d));
  }
}

/** Quantizes one activation row `x` into `dst` in encoding `act` (llama.cpp's haswell activation quantizers). */
export function quantizeActivationRow(act: GgmlType, x: Float32Array, dst: Uint8Array): Uint8Array {
  const op = "quantizeActivationRow";
  const { blockSize } = GGML_TYPE_TRAITS[act];
  if (x.length % blockSize !== 0) throw new QuantArgumentError(op, "x.length", `${x.length} is not whole ${ggmlTypeLabel(act)} blocks`);
  const bytes = activationRowBytes(act, x.length);
  if (dst.length < bytes) throw new QuantArgumentError(op, "dst", `needs ${bytes} bytes, has ${dst.length}`);
  switch (act) {
    case GgmlType.Q8_K:
      quantizeRow(act, x, dst);
      return dst;
    case GgmlType.Q8_0:
      quantizeQ8_0Activations(x, dst);
      return dst;
    case GgmlType.Q8_1:
      quantizeQ8_1(x, dst);
      return dst;
    case GgmlType.F16:
    case GgmlType.BF16: {
      for (let i = 0; i < x.length; i++) {
        const bits = f32ToBits(x[i]!);
        const h = act === GgmlType.F16 ? fp32BitsToFp16Bits(bits) : fp32BitsToBf16Bits(bits);
        dst[2 * i] = h & 0xff;
        dst[2 * i + 1] = h >>> 8;
      }
      return dst;
    }
    case GgmlType.F32:
      new Uint8Array(dst.buffer, dst.byteOffset, bytes).set(new Uint8Array(x.buffer, x.byteOffset, bytes));
      return dst;
    default:
      throw new UnsupportedGgmlTypeError(ggmlTypeLabel(act), op, ["Q8_K", "Q8_0", "Q8_1", "F16", "BF16", "F32"]);
  }
}

// ---------------------------------------------------------------- block readers

function u16(b: Uint8Array, o: number): number {
  return b[o]! | (b[o + 1]! << 8);
}
function h16(b: Uint8Array, o: number): number {
  return fp16ToFp32(u16(b, o));
}
function i8(b: Uint8Array, o: number): number {
  return (b[o]! << 24) >> 24;
}
function i16(b: Uint8Array, o: number): number {
  return (u16(b, o) << 16) >> 16;
}
function u32(b: Uint8Array, o: number): number {
  return (b[o]! | (b[o + 1]! << 8) | (b[o + 2]! << 16) | (b[o + 3]! << 24)) >>> 0;
}
const f32View = new DataView(new ArrayBuffer(4));
function f32(b: Uint8Array, o: number): number {
  for (let i = 0; i < 4; i++) f32View.setUint8(i, b[o + i]!);
  return f32View.getFloat32(0, true);
}

/** One dot of k elements: weight row bytes at w[wo..] against activation row bytes at a[ao..]. */
type Dot = (k: number, w: Uint8Array, wo: number, a: Uint8Array, ao: number) => number;

const dotQ4_0: Dot = (k, w, wo, a, ao) => {
  let sumf = 0;
  for (let ib = 0; ib < k / 32; ib++) {
    const x = wo + ib * 18;
    const y = ao + ib * 34;
    let sumi = 0;
    for (let j = 0; j < 16; j++) {
      sumi += ((w[x + 2 + j]! & 0x0f) - 8) * i8(a, y + 2 + j);
      sumi += ((w[x + 2 + j]! >> 4) - 8) * i8(a, y + 2 + 16 + j);
    }
    sumf = fround(sumf + term(fround(fround(sumi * h16(w, x)) * h16(a, y))));
  }
  return sumf;
};

function dotQx_1(k: number, w: Uint8Array, wo: number, a: Uint8Array, ao: number, five: boolean): number {
  const size = five ? 24 : 20;
  let sumf = 0;
  for (let ib = 0; ib < k / 32; ib++) {
    const x = wo + ib * size;
    const y = ao + ib * 36;
    const qh = five ? u32(w, x + 4) : 0;
    const qs = x + (five ? 8 : 4);
    let sumi = 0;
    for (let j = 0; j < 16; j++) {
      const h0 = five ? ((qh >>> j) << 4) & 0x10 : 0;
      const h1 = five ? (qh >>> (j + 12)) & 0x10 : 0;
      sumi += ((w[qs + j]! & 0x0f) | h0) * i8(a, y + 4 + j);
      sumi += ((w[qs + j]! >> 4) | h1) * i8(a, y + 4 + 16 + j);
    }
    const scaled = term(fround(fround(h16(w, x) * h16(a, y)) * sumi));
    const offset = term(fround(h16(w, x + 2) * h16(a, y + 2)));
    sumf = fround(sumf + fround(scaled + offset));
  }
  return sumf;
}

const dotQ5_0: Dot = (k, w, wo, a, ao) => {
  let sumf = 0;
  for (let ib = 0; ib < k / 32; ib++) {
    const x = wo + ib * 22;
    const y = ao + ib * 34;
    const qh = u32(w, x + 2);
    let sumi = 0;
    for (let j = 0; j < 16; j++) {
      const h0 = ((qh >>> j) << 4) & 0x10;
      const h1 = (qh >>> (j + 12)) & 0x10;
      sumi += (((w[x + 6 + j]! & 0x0f) | h0) - 16) * i8(a, y + 2 + j);
      sumi += (((w[x + 6 + j]! >> 4) | h1) - 16) * i8(a, y + 2 + 16 + j);
    }
    sumf = fround(sumf + term(fround(fround(h16(w, x) * h16(a, y)) * sumi)));
  }
  return sumf;
};

const dotQ8_0: Dot = (k, w, wo, a, ao) => {
  let sumf = 0;
  for (let ib = 0; ib < k / 32; ib++) {
    const x = wo + ib * 34;
    const y = ao + ib * 34;
    let sumi = 0;
    for (let j = 0; j < 32; j++) sumi += i8(w, x + 2 + j) * i8(a, y + 2 + j);
    sumf = fround(sumf + term(fround(sumi * fround(h16(w, x) * h16(a, y)))));
  }
  return sumf;
};

function dotTable4(values: Int8Array, mx: boolean): Dot {
  const size = mx ? 17 : 18;
  return (k, w, wo, a, ao) => {
    let sumf = 0;
    for (let ib = 0; ib < k / 32; ib++) {
      const x = wo + ib * size;
      const y = ao + ib * 34;
      const d = fround(h16(a, y) * (mx ? e8m0ToFp32Half(w[x]!) : h16(w, x)));
      const qs = x + (mx ? 1 : 2);
      let s = 0;
      for (let j = 0; j < 16; j++) {
        s += i8(a, y + 2 + j) * values[w[qs + j]! & 0xf]!;
        s += i8(a, y + 2 + 16 + j) * values[w[qs + j]! >> 4]!;
      }
      sumf = fround(sumf + term(fround(d * s)));
    }
    return sumf;
  };
}

// Q8_K block: d f32 at 0, qs at 4..259, bsums int16 at 260..291.
const Q8K = 292;

const dotQ2_K: Dot = (k, w, wo, a, ao) => {
  let sumf = 0;
  for (let i = 0; i < k / 256; i++) {
    const x = wo + i * 84;
    const y = ao + i * Q8K;
    const yd = f32(a, y);
    let summs = 0;
    for (let j = 0; j < 16; j++) summs += i16(a, y + 260 + 2 * j) * (w[x + j]! >> 4);
    const dall = fround(yd * h16(w, x + 80));
    const dmin = fround(yd * h16(w, x + 82));
    let isum = 0;
    let is = 0;
    let q8 = y + 4;
    let q2 = x + 16;
    for (let kk = 0; kk < 2; kk++) {
      let shift = 0;
      for (let j = 0; j < 4; j++) {
        let d = w[x + is++]! & 0xf;
        let isuml = 0;
        for (let l = 0; l < 16; l++) isuml += i8(a, q8 + l) * ((w[q2 + l]! >> shift) & 3);
        isum += d * isuml;
        d = w[x + is++]! & 0xf;
        isuml = 0;
        for (let l = 16; l < 32; l++) isuml += i8(a, q8 + l) * ((w[q2 + l]! >> shift) & 3);
        isum += d * isuml;
        shift += 2;
        q8 += 32;
      }
      q2 += 32;
    }
    const scaled = term(fround(dall * fround(isum)));
    const mins = term(fround(dmin * fround(summs)));
    sumf = fround(sumf + fround(scaled - mins));
  }
  return sumf;
};

/** The 8-lane accumulation shared by Q3_K..Q6_K: aux32[l] += scale(j) * q8 * q over 16-groups. */
function laneSums(quants: Int8Array, a: Uint8Array, q8: number, scale16: ArrayLike<number>, aux32: Int32Array): void {
  aux32.fill(0);
  for (let j = 0; j < 16; j++) {
    const sc = scale16[j]!;
    for (let h = 0; h < 2; h++) {
      const base = j * 16 + h * 8;
      for (let l = 0; l < 8; l++) aux32[l]! += sc * (i8(a, q8 + base + l) * quants[base + l]!);
    }
  }
}

function kQuantScales(w: Uint8Array, s: number, sc: Uint8Array, mn: Uint8Array): void {
  for (let j = 0; j < 8; j++) {
    if (j < 4) {
      sc[j] = w[s + j]! & 63;
      mn[j] = w[s + j + 4]! & 63;
    } else {
      sc[j] = (w[s + j + 4]! & 0xf) | ((w[s + j - 4]! >> 6) << 4);
      mn[j] = (w[s + j + 4]! >> 4) | ((w[s + j]! >> 6) << 4);
    }
  }
}

function dotQ45_K(five: boolean): Dot {
  const size = five ? 176 : 144;
  return (k, w, wo, a, ao) => {
    const sums = new Float32Array(8);
    const quants = new Int8Array(256);
    const aux32 = new Int32Array(8);
    const sc = new Uint8Array(8);
    const mn = new Uint8Array(8);
    const scale16 = new Int32Array(16);
    let sumf = 0;
    for (let i = 0; i < k / 256; i++) {
      const x = wo + i * size;
      const y = ao + i * Q8K;
      const qs = x + (five ? 48 : 16);
      const qh = x + 16;
      let m = 1;
      for (let j = 0; j < 4; j++) {
        for (let l = 0; l < 32; l++) quants[j * 64 + l] = (w[qs + 32 * j + l]! & 0xf) + (five && w[qh + l]! & m ? 16 : 0);
        m <<= 1;
        for (let l = 0; l < 32; l++) quants[j * 64 + 32 + l] = (w[qs + 32 * j + l]! >> 4) + (five && w[qh + l]! & m ? 16 : 0);
        m <<= 1;
      }
      kQuantScales(w, x + 4, sc, mn);
      let sumi = 0;
      for (let j = 0; j < 16; j++) sumi += i16(a, y + 260 + 2 * j) * mn[j >> 1]!;
      for (let j = 0; j < 16; j++) scale16[j] = sc[j >> 1]!;
      laneSums(quants, a, y + 4, scale16, aux32);
      const yd = f32(a, y);
      const d = fround(h16(w, x) * yd);
      for (let l = 0; l < 8; l++) sums[l] = fround(sums[l]! + term(fround(d * fround(aux32[l]!))));
      const dmin = fround(h16(w, x + 2) * yd);
      sumf = fround(sumf - term(fround(dmin * fround(sumi))));
    }
    for (let l = 0; l < 8; l++) sumf = fround(sumf + term(sums[l]!));
    return sumf;
  };
}

const dotQ3_K: Dot = (k, w, wo, a, ao) => {
  const sums = new Float32Array(8);
  const quants = new Int8Array(256);
  const aux32 = new Int32Array(8);
  const scale16 = new Int32Array(16);
  const aux = new Uint32Array(4);
  const auxBytes = new Int8Array(aux.buffer);
  for (let i = 0; i < k / 256; i++) {
    const x = wo + i * 110;
    const y = ao + i * Q8K;
    // layout: hmask[32] qs[64] scales[12] d
    let m = 1;
    let p = 0;
    for (let half = 0; half < 2; half++) {
      const q3 = x + 32 + 32 * half;
      for (let s = 0; s < 8; s += 2) {
        for (let l = 0; l < 32; l++) quants[p + l] = ((w[q3 + l]! >> s) & 3) - (w[x + l]! & m ? 0 : 4);
        p += 32;
        m <<= 1;
      }
    }
    for (let j = 0; j < 3; j++) aux[j] = u32(w, x + 96 + 4 * j);
    const tmp = aux[2]!;
    const kmask1 = 0x03030303;
    const kmask2 = 0x0f0f0f0f;
    const a0 = aux[0]!;
    const a1 = aux[1]!;
    aux[2] = ((a0 >>> 4) & kmask2) | (((tmp >>> 4) & kmask1) << 4);
    aux[3] = ((a1 >>> 4) & kmask2) | (((tmp >>> 6) & kmask1) << 4);
    aux[0] = (a0 & kmask2) | (((tmp >>> 0) & kmask1) << 4);
    aux[1] = (a1 & kmask2) | (((tmp >>> 2) & kmask1) << 4);
    for (let j = 0; j < 16; j++) scale16[j] = auxBytes[j]! - 32;
    laneSums(quants, a, y + 4, scale16, aux32);
    const d = fround(h16(w, x + 108) * f32(a, y));
    for (let l = 0; l < 8; l++) sums[l] = fround(sums[l]! + term(fround(d * fround(aux32[l]!))));
  }
  let sumf = 0;
  for (let l = 0; l < 8; l++) sumf = fround(sumf + term(sums[l]!));
  return sumf;
};

const dotQ6_K: Dot = (k, w, wo, a, ao) => {
  const sums = new Float32Array(8);
  const quants = new Int8Array(256);
  const aux32 = new Int32Array(8);
  const scale16 = new Int32Array(16);
  for (let i = 0; i < k / 256; i++) {
    const x = wo + i * 210;
    const y = ao + i * Q8K;
    // layout: ql[128] qh[64] scales[16] d
    for (let half = 0; half < 2; half++) {
      const ql = x + 64 * half;
      const qh = x + 128 + 32 * half;
      const base = 128 * half;
      for (let l = 0; l < 32; l++) {
        const h = w[qh + l]!;
        quants[base + l] = ((w[ql + l]! & 0xf) | ((h & 3) << 4)) - 32;
        quants[base + l + 32] = ((w[ql + l + 32]! & 0xf) | (((h >> 2) & 3) << 4)) - 32;
        quants[base + l + 64] = ((w[ql + l]! >> 4) | (((h >> 4) & 3) << 4)) - 32;
        quants[base + l + 96] = ((w[ql + l + 32]! >> 4) | (((h >> 6) & 3) << 4)) - 32;
      }
    }
    for (let j = 0; j < 16; j++) scale16[j] = i8(w, x + 192 + j);
    laneSums(quants, a, y + 4, scale16, aux32);
    const d = fround(h16(w, x + 208) * f32(a, y));
    for (let l = 0; l < 8; l++) sums[l] = fround(sums[l]! + term(fround(d * fround(aux32[l]!))));
  }
  let sumf = 0;
  for (let l = 0; l < 8; l++) sumf = fround(sumf + term(sums[l]!));
  return sumf;
};

const dotIQ4_XS: Dot = (k, w, wo, a, ao) => {
  let sumf = 0;
  for (let ibl = 0; ibl < k / 256; ibl++) {
    const x = wo + ibl * 136;
    const y = ao + ibl * Q8K;
    const d4d8 = fround(h16(w, x) * f32(a, y));
    let h = u16(w, x + 2);
    let qs = x + 8;
    let q8 = y + 4;
    for (let ib = 0; ib < 8; ib += 2) {
      const sl = w[x + 4 + (ib >> 1)]!;
      const ls1 = (sl & 0xf) | ((h << 4) & 0x30);
      const ls2 = (sl >> 4) | ((h << 2) & 0x30);
      h >>= 4;
      const d1 = fround(d4d8 * (ls1 - 32));
      const d2 = fround(d4d8 * (ls2 - 32));
      for (const dd of [d1, d2]) {
        let s = 0;
        for (let j = 0; j < 16; j++) {
          s += i8(a, q8 + j) * KVALUES_IQ4NL[w[qs + j]! & 0xf]!;
          s += i8(a, q8 + 16 + j) * KVALUES_IQ4NL[w[qs + j]! >> 4]!;
        }
        sumf = fround(sumf + term(fround(dd * s)));
        qs += 16;
        q8 += 32;
      }
    }
  }
  return sumf;
};

function dotFloat(read: (b: Uint8Array, o: number) => number, size: number): Dot {
  return (k, w, wo, a, ao) => {
    let sum = 0;
    for (let i = 0; i < k; i++) sum += term(fround(read(w, wo + i * size) * read(a, ao + i * size)));
    return fround(sum);
  };
}

const DOTS: Readonly<Partial<Record<GgmlType, Dot>>> = {
  [GgmlType.F32]: dotFloat(f32, 4),
  [GgmlType.F16]: dotFloat(h16, 2),
  [GgmlType.BF16]: dotFloat((b, o) => bf16ToFp32(u16(b, o)), 2),
  [GgmlType.Q4_0]: dotQ4_0,
  [GgmlType.Q4_1]: (k, w, wo, a, ao) => dotQx_1(k, w, wo, a, ao, false),
  [GgmlType.Q5_0]: dotQ5_0,
  [GgmlType.Q5_1]: (k, w, wo, a, ao) => dotQx_1(k, w, wo, a, ao, true),
  [GgmlType.Q8_0]: dotQ8_0,
  [GgmlType.Q2_K]: dotQ2_K,
  [GgmlType.Q3_K]: dotQ3_K,
  [GgmlType.Q4_K]: dotQ45_K(false),
  [GgmlType.Q5_K]: dotQ45_K(true),
  [GgmlType.Q6_K]: dotQ6_K,
  [GgmlType.IQ4_NL]: dotTable4(KVALUES_IQ4NL, false),
  [GgmlType.IQ4_XS]: dotIQ4_XS,
  [GgmlType.MXFP4]: dotTable4(KVALUES_MXFP4, true),
};

/** Weight types with a llama.cpp CPU dot kernel here (the keys of DOTS), ascending. */
export const LLAMA_WEIGHT_TYPES: readonly GgmlType[] = Object.freeze(
  (Object.keys(DOTS) as string[]).map((id) => Number(id) as GgmlType).sort((a, b) => a - b),
);

/** Those weight types and their activation encoding: gguf's GGML_TYPE_TRAITS[type].vecDotType. */
export const LLAMA_VEC_DOT_TYPES: Readonly<Partial<Record<GgmlType, GgmlType>>> = Object.freeze(
  Object.fromEntries(
    LLAMA_WEIGHT_TYPES.map((t) => {
      const act = GGML_TYPE_TRAITS[t].vecDotType;
      if (act === undefined) throw new Error(`GGML_TYPE_TRAITS gives ${ggmlTypeLabel(t)} no vecDotType, but it has a dot kernel`);
      return [t, act];
    }),
  ),
);

/**
 * ggml's vec_dot for one weight row and one activation row already in `llamaVecDotType(type)`
 * encoding (both as bytes, from the given offsets).
 */
export function vecDotLlamaReference(
  type: GgmlType,
  k: number,
  weight: Uint8Array,
  weightOffset: number,
  activation: Uint8Array,
  activationOffset: number,
): number {
  const dot = DOTS[type];
  if (!dot)
    throw new UnsupportedGgmlTypeError(
      ggmlTypeLabel(type),
      "vecDotLlamaReference",
      LLAMA_WEIGHT_TYPES.map((t) => ggmlTypeLabel(t)),
    );
  return dot(k, weight, weightOffset, activation, activationOffset);
}

/** A dense [rows, cols] weight exactly as stored in GGUF (row = output feature). */
export interface LlamaWeight {
  type: GgmlType;
  /** N */
  rows: number;
  /** K */
  cols: number;
  data: Uint8Array;
}

/** y [M, N] = W [N, K] x x [M, K] with llama.cpp's CPU numerics (see the module comment). */
export interface MatmulLlamaReferenceOptions {
  /**
   * [M, N] output: for each y, the sum of |terms| that the f32 accumulation adds (block terms,
   * lane terms, products). A different order of f32 additions changes y by at most about
   * (terms) * 2^-24 * this magnitude: tests use it to bound SIMD-vs-scalar differences.
   */
  magnitudes?: Float64Array;
}

export function matmulLlamaReference(
  weight: LlamaWeight,
  x: Float32Array,
  m: number,
  options: MatmulLlamaReferenceOptions = {},
): Float32Array {
  const op = "matmulLlamaReference";
  const act = llamaVecDotType(weight.type);
  const { rows: n, cols: k, type } = weight;
  for (const t of [type, act]) {
    const bs = GGML_TYPE_TRAITS[t].blockSize;
    if (k % bs !== 0) throw new QuantArgumentError(op, "weight.cols", `${k} is not whole ${ggmlTypeLabel(t)} blocks`);
  }
  const rowBytes = (k / GGML_TYPE_TRAITS[type].blockSize) * GGML_TYPE_TRAITS[type].typeSize;
  if (weight.data.length < n * rowBytes) {
    throw new QuantArgumentError(
      op,
      "weight.data",
      `[${n}, ${k}] ${ggmlTypeLabel(type)} needs ${n * rowBytes} bytes, has ${weight.data.length}`,
    );
  }
  if (x.length < m * k) throw new QuantArgumentError(op, "x", `needs ${m * k} values, has ${x.length}`);
  const actBytes = activationRowBytes(act, k);
  const activations = new Uint8Array(actBytes * m);
  for (let mi = 0; mi < m; mi++) {
    quantizeActivationRow(act, x.subarray(mi * k, (mi + 1) * k), activations.subarray(mi * actBytes, (mi + 1) * actBytes));
  }
  const dot = DOTS[type]!;
  const y = new Float32Array(m * n);
  const magnitudes = options.magnitudes;
  if (magnitudes && magnitudes.length < m * n) throw new QuantArgumentError(op, "options.magnitudes", `needs ${m * n} values`);
  for (let mi = 0; mi < m; mi++) {
    for (let r = 0; r < n; r++) {
      absTerms = 0;
      y[mi * n + r] = dot(k, weight.data, r * rowBytes, activations, mi * actBytes);
      if (magnitudes) magnitudes[mi * n + r] = absTerms;
    }
  }
  return y;
}
