import path from "node:path";
import { fileURLToPath } from "node:url";
import { GgmlType, mulberry32 } from "@keepquant/gguf";
import type { NativeKernelMenuLevel } from "./native-types.js";

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

// ascending ids, as the addon lists them
const KERNEL_MENU_TYPES = [GgmlType.Q8_0, GgmlType.Q4_K, GgmlType.Q6_K];
/**
 * The kernel menu of the x86 build at each level (src/cpu/x86: the decode row kernels of Q4_K, Q6_K and Q8_0 at
 * avx2 and avx512, the block kernels' register form at avx512): the tuner tests' fake addon reports it, and
 * kernel-menu.test.ts holds the real addon (and its emulated AVX-512 build) to it.
 */
export const X86_KERNEL_MENU: readonly NativeKernelMenuLevel[] = [
  { isa: "generic", rows: [], registers: [] },
  { isa: "avx2", rows: KERNEL_MENU_TYPES, registers: [] },
  { isa: "avx512", rows: KERNEL_MENU_TYPES, registers: KERNEL_MENU_TYPES },
];

/** Where the build puts the addon whose AVX-512 kernels are emulated over AVX2 (SIMDe; scripts/build-emulated-avx512.mjs). */
export const EMULATED = path.resolve(
  path.dirname(fileURLToPath(import.meta.url)),
  "..",
  "build",
  "emulated-avx512",
  "Release",
  "keepquant_native.node",
);
