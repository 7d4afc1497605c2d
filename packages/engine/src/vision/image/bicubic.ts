/**
 * Separable bicubic resampling of interleaved RGB u8, bit for bit as llama.cpp's `resize_pillow` (Pillow's
 * `Resample.c` scheme) computes it for RESIZE_ALGO_BICUBIC. Written from the algorithm:
 *
 * - kernel: Keys cubic with a = -0.5 (Pillow's, not PyTorch's -0.75), support 2 input pixels, widened by the
 *   scale when downsampling (`support = 2 * max(1, in/out)`), evaluated in f64 at
 *   `(i - center + 0.5) / max(1, in/out)` with `center = (o + 0.5) * in/out`;
 * - the taps of one output pixel cover input `[trunc(center - support + 0.5), trunc(center + support + 0.5))`
 *   clamped to the image, and are normalized to sum 1 in f64;
 * - each weight becomes an i32 with 22 fractional bits: `trunc(w * 2^22 ± 0.5)` (sign of w);
 * - a pass accumulates in i32 from `2^21` (one half), then `acc >> 22` clamped to [0, 255];
 * - the horizontal pass runs first (to u8), then the vertical pass; a dimension that keeps its size is
 *   not resampled at all.
 */

/** Fixed-point fraction bits of the weights: 32 - 8 (u8 pixels) - 2 (headroom). */
const PRECISION_BITS = 22;
const HALF = 1 << (PRECISION_BITS - 1);
/** Bicubic support radius in input pixels at scale 1. */
const BICUBIC_SUPPORT = 2;
/** Keys' cubic parameter used by Pillow (and so llama.cpp). */
const BICUBIC_A = -0.5;

/** Largest side llama.cpp's resize accepts. */
export const MAX_RESIZE_SIDE = 65536;

function bicubicFilter(distance: number): number {
  const x = distance < 0 ? -distance : distance;
  const a = BICUBIC_A;
  if (x < 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2) return (((x - 5) * x + 8) * x - 4) * a;
  return 0;
}

/** The taps of one dimension: output `o` reads `count[o]` inputs from `first[o]` with `weights[o * kernelSize + k]`. */
interface Taps {
  kernelSize: number;
  first: Int32Array;
  count: Int32Array;
  weights: Int32Array;
}

function computeTaps(inSize: number, outSize: number): Taps {
  const scale = inSize / outSize;
  const filterScale = scale < 1 ? 1 : scale;
  const support = BICUBIC_SUPPORT * filterScale;
  const kernelSize = Math.ceil(support) * 2 + 1;
  const first = new Int32Array(outSize);
  const count = new Int32Array(outSize);
  const weights = new Int32Array(outSize * kernelSize);
  const fixedScale = 2 ** PRECISION_BITS;
  const inverseFilterScale = 1 / filterScale;
  const row = new Float64Array(kernelSize);
  for (let o = 0; o < outSize; o++) {
    const center = (o + 0.5) * scale;
    let lo = Math.trunc(center - support + 0.5);
    if (lo < 0) lo = 0;
    let hi = Math.trunc(center + support + 0.5);
    if (hi > inSize) hi = inSize;
    const n = hi - lo;
    let sum = 0;
    for (let k = 0; k < n; k++) {
      const w = bicubicFilter((k + lo - center + 0.5) * inverseFilterScale);
      row[k] = w;
      sum += w;
    }
    for (let k = 0; k < kernelSize; k++) {
      let w = k < n ? (row[k] as number) : 0;
      if (k < n && sum !== 0) w /= sum;
      weights[o * kernelSize + k] = Math.trunc(w * fixedScale + (w < 0 ? -0.5 : 0.5));
    }
    first[o] = lo;
    count[o] = n;
  }
  return { kernelSize, first, count, weights };
}

function clampU8(value: number): number {
  return value < 0 ? 0 : value > 255 ? 255 : value;
}

/** rgb: (height, width, 3) -> (height, outWidth, 3) */
function resampleHorizontal(rgb: Uint8Array, width: number, height: number, outWidth: number, taps: Taps): Uint8Array {
  const out = new Uint8Array(outWidth * height * 3);
  const { kernelSize, first, count, weights } = taps;
  for (let y = 0; y < height; y++) {
    const rowStart = y * width * 3;
    const outRow = y * outWidth * 3;
    for (let o = 0; o < outWidth; o++) {
      const kBase = o * kernelSize;
      let p = rowStart + (first[o] as number) * 3;
      let r = HALF;
      let g = HALF;
      let b = HALF;
      const n = count[o] as number;
      for (let k = 0; k < n; k++) {
        const w = weights[kBase + k] as number;
        r = (r + (rgb[p] as number) * w) | 0;
        g = (g + (rgb[p + 1] as number) * w) | 0;
        b = (b + (rgb[p + 2] as number) * w) | 0;
        p += 3;
      }
      out[outRow + o * 3] = clampU8(r >> PRECISION_BITS);
      out[outRow + o * 3 + 1] = clampU8(g >> PRECISION_BITS);
      out[outRow + o * 3 + 2] = clampU8(b >> PRECISION_BITS);
    }
  }
  return out;
}

/** rgb: (height, width, 3) -> (outHeight, width, 3) */
function resampleVertical(rgb: Uint8Array, width: number, outHeight: number, taps: Taps): Uint8Array {
  const rowLength = width * 3;
  const out = new Uint8Array(rowLength * outHeight);
  const acc = new Int32Array(rowLength);
  const { kernelSize, first, count, weights } = taps;
  for (let o = 0; o < outHeight; o++) {
    acc.fill(HALF);
    const n = count[o] as number;
    for (let k = 0; k < n; k++) {
      const w = weights[o * kernelSize + k] as number;
      const src = ((first[o] as number) + k) * rowLength;
      for (let i = 0; i < rowLength; i++) acc[i] = ((acc[i] as number) + (rgb[src + i] as number) * w) | 0;
    }
    const dst = o * rowLength;
    for (let i = 0; i < rowLength; i++) out[dst + i] = clampU8((acc[i] as number) >> PRECISION_BITS);
  }
  return out;
}

/**
 * Resizes interleaved RGB u8 `(height, width, 3)` to `(outHeight, outWidth, 3)` with llama.cpp's bicubic.
 * Same size in: a copy out.
 */
export function resizeBicubicRgb(rgb: Uint8Array, width: number, height: number, outWidth: number, outHeight: number): Uint8Array {
  if (rgb.length !== width * height * 3) {
    throw new RangeError(`rgb has ${rgb.length} bytes, expected ${width}x${height}x3 = ${width * height * 3}`);
  }
  for (const [name, side] of [
    ["width", width],
    ["height", height],
    ["outWidth", outWidth],
    ["outHeight", outHeight],
  ] as const) {
    if (!Number.isInteger(side) || side <= 0 || side > MAX_RESIZE_SIDE) {
      throw new RangeError(`${name} ${side} is out of range (1..${MAX_RESIZE_SIDE})`);
    }
  }
  const horizontal = outWidth !== width;
  const vertical = outHeight !== height;
  let out = horizontal ? resampleHorizontal(rgb, width, height, outWidth, computeTaps(width, outWidth)) : rgb;
  if (vertical) out = resampleVertical(out, outWidth, outHeight, computeTaps(height, outHeight));
  return out === rgb ? rgb.slice() : out;
}
