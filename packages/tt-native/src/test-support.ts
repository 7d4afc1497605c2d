import { mulberry32 } from "@keepquant/gguf";

/**
 * Shared helpers of this package's tests (not exported from the package). Nothing here needs a
 * dev-only package: oracle-backed tests import `@keepquant/oracle` themselves.
 */

/** Deterministic test PRNG: mulberry32 of @keepquant/gguf, the sequence every package's test data uses. */
export const rng: (seed: number) => () => number = mulberry32;

export function randomBytes(count: number, seed: number): Uint8Array {
  const r = rng(seed);
  const out = new Uint8Array(count);
  for (let i = 0; i < count; i++) out[i] = (r() * 256) | 0;
  return out;
}

/** Values of mixed sign and magnitude, with some exact zeros. */
export function randomFloats(count: number, seed: number, scale = 1): Float32Array {
  const r = rng(seed);
  const out = new Float32Array(count);
  for (let i = 0; i < count; i++) {
    const u = r();
    out[i] = u < 0.02 ? 0 : (r() < 0.5 ? -1 : 1) * scale * 2 ** (-4 + 6 * u);
  }
  return out;
}

/** Same bits, or both NaN (NaN payloads may differ between converters). */
export function sameF32(a: number, b: number): boolean {
  if (Number.isNaN(a) && Number.isNaN(b)) return true;
  return Object.is(a, b);
}

export function firstBitMismatch(a: Float32Array, b: Float32Array): number {
  const ua = new Uint32Array(a.buffer, a.byteOffset, a.length);
  const ub = new Uint32Array(b.buffer, b.byteOffset, b.length);
  for (let i = 0; i < a.length; i++) {
    if (ua[i] !== ub[i] && !(Number.isNaN(a[i]!) && Number.isNaN(b[i]!))) return i;
  }
  return -1;
}
