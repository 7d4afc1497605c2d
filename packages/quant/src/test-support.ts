/** Shared helpers for this package's tests (not exported by the package). */
import type { MatmulBTQuantGroupedArgs } from "./contract.js";
import { dequantizeTensor } from "./dequantize.js";
import { fp32BitsToBf16Bits } from "./fp.js";
import { mulberry32 } from "./testing/sweep.js";

/** Deterministic PRNG (mulberry32) for fixture bytes and values. */
export const prng = mulberry32;

export function randomBytes(length: number, seed: number): Uint8Array {
  const random = prng(seed);
  const out = new Uint8Array(length);
  for (let i = 0; i < length; i++) out[i] = (random() * 256) | 0;
  return out;
}

/** Index and both bit patterns of the first differing 32-bit word, or undefined when equal. */
export function firstBitDifference(a: Float32Array, b: Float32Array): string | undefined {
  if (a.length !== b.length) return `length ${a.length} vs ${b.length}`;
  const ua = new Uint32Array(a.buffer, a.byteOffset, a.length);
  const ub = new Uint32Array(b.buffer, b.byteOffset, b.length);
  let count = 0;
  let first = -1;
  for (let i = 0; i < ua.length; i++) {
    if (ua[i] !== ub[i]) {
      count++;
      if (first < 0) first = i;
    }
  }
  if (first < 0) return undefined;
  return `${count} differing values; first at ${first}: 0x${ua[first]!.toString(16)} vs 0x${ub[first]!.toString(16)}`;
}

export function firstByteDifference(a: Uint8Array, b: Uint8Array, blockBytes: number): string | undefined {
  if (a.length !== b.length) return `length ${a.length} vs ${b.length}`;
  for (let i = 0; i < a.length; i++) {
    if (a[i] !== b[i]) return `block ${Math.floor(i / blockBytes)} byte ${i % blockBytes}: ${a[i]} vs ${b[i]}`;
  }
  return undefined;
}

/**
 * The contract's matmul spelled out: every weight decoded and rounded to bf16, then each output
 * `dot(x, xOffset, w, wOffset, k)` of its activation row and its (selected group's) weight row.
 */
export function bf16Matmul(
  args: MatmulBTQuantGroupedArgs,
  dot: (x: Float32Array, xOffset: number, w: Float32Array, wOffset: number, k: number) => number,
): Float32Array {
  const { weight, x, m, p, xGroups } = args;
  const { groups: e, rows: n, cols: k } = weight;
  const w = dequantizeTensor(weight.type, weight.data, e * n * k);
  const bits = new Uint32Array(w.buffer);
  for (let i = 0; i < bits.length; i++) bits[i] = (fp32BitsToBf16Bits(bits[i]!) << 16) >>> 0;
  const y = new Float32Array(p * m * n);
  for (let pi = 0; pi < p; pi++) {
    const g = e === 1 ? 0 : args.ids![pi]!;
    for (let mi = 0; mi < m; mi++) {
      for (let r = 0; r < n; r++) y[(pi * m + mi) * n + r] = dot(x, ((xGroups === 1 ? 0 : pi) * m + mi) * k, w, (g * n + r) * k, k);
    }
  }
  return y;
}
