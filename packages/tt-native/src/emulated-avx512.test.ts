/**
 * The AVX-512 kernels, checked on a CPU without AVX-512. The build step makes a second addon there
 * (scripts/build-emulated-avx512.mjs: CMake option KEEPQUANT_EMULATE_AVX512, the 512-bit intrinsics from SIMDe's
 * AVX2 implementation, src/cpu/x86/simde_avx512.h) whose avx512 level runs on any AVX2 CPU. Every matmul its
 * avx512 level gives must be, bit for bit, this addon's AVX2 level's, which llama.test.ts holds to ggml's
 * haswell vec_dot: every type with a kernel, one-row decode with every weight-rows / prefetch variant, batched
 * steps (2-8 rows, both batch kernels) and prefill tiles with tails, 1 and 2 threads. CI may run on either
 * kind of CPU; this way both run the AVX-512 code. On a CPU with AVX-512 the real kernels run in every test
 * and this file skips.
 */
import fs from "node:fs";
import { createRequire } from "node:module";
import { GgmlType } from "@keepquant/gguf";
import { quantizeTensor } from "@keepquant/quant";
import { afterAll, describe, expect, it } from "vitest";
import { nativeAddon } from "./index.js";
import type { NativeAddon } from "./native-types.js";
import { EMULATED, firstBitMismatch, randomFloats } from "./test-support.js";

const addon = nativeAddon();

function skipReason(): string | undefined {
  if (!addon) return "the native addon is not built";
  if (process.arch !== "x64") return `x86-64 only (this is ${process.arch})`;
  if (addon.buildInfo().isaAvailable.includes("avx512")) return "this CPU runs the real AVX-512 kernels in every test";
  if (!addon.buildInfo().isaAvailable.includes("avx2")) return "the CPU has no AVX2, which the emulation runs on";
  if (!fs.existsSync(EMULATED))
    return `no emulated AVX-512 build at ${EMULATED} (it needs SIMDe's headers, Debian's libsimde-dev; then pnpm --filter @keepquant/tt-native build)`;
  return undefined;
}
const reason = skipReason();
const emulated = reason ? undefined : (createRequire(import.meta.url)(EMULATED) as NativeAddon);

afterAll(() => {
  addon?.setThreads(0);
  emulated?.setThreads(0);
});

// K: an odd block count for the 32-value types (9 blocks), two and three super-blocks for the K-quants
const TYPES: [GgmlType, number[]][] = [
  [GgmlType.Q4_0, [288, 512]],
  [GgmlType.Q4_1, [288]],
  [GgmlType.Q5_0, [288]],
  [GgmlType.Q5_1, [288]],
  [GgmlType.Q8_0, [288, 512]],
  [GgmlType.Q2_K, [512]],
  [GgmlType.Q3_K, [768]],
  [GgmlType.Q4_K, [512, 768]],
  [GgmlType.Q5_K, [512]],
  [GgmlType.Q6_K, [512, 768]],
  [GgmlType.IQ4_NL, [288]],
  [GgmlType.IQ4_XS, [512]],
  [GgmlType.MXFP4, [288]],
  [GgmlType.F16, [96]],
  [GgmlType.BF16, [96]],
  [GgmlType.F32, [64]],
];
const ROWS = 37; // tails for the pair and four-row kernels and for tasks
const M = [1, 2, 3, 5, 8, 9, 33]; // decode, batched steps, prefill with a tile tail (tiles of 8 and 32)

/** An f16 by truncation (the values here are normal numbers far from f16's limits). */
function f16Bits(v: number): number {
  const u = new Uint32Array(new Float32Array([v]).buffer)[0]!;
  const exp = ((u >>> 23) & 0xff) - 127 + 15;
  return ((u >>> 16) & 0x8000) | (exp <= 0 ? 0 : (exp << 10) | ((u & 0x7fffff) >>> 13));
}

/**
 * Random weights: through our quantizer where it has the type; otherwise random blocks (every bit pattern
 * of the quants is an encoding) with sane scales: IQ4_NL and IQ4_XS an f16 d at byte 0 of 18 / 136, MXFP4 an
 * E8M0 exponent at byte 0 of 17; F16 and BF16 the values' own bits.
 */
function weightBytes(type: GgmlType, k: number, seed: number): Uint8Array {
  const values = randomFloats(ROWS * k, seed, 0.05);
  if (type === GgmlType.F32) return new Uint8Array(values.buffer);
  if (type === GgmlType.F16 || type === GgmlType.BF16) {
    const bits = new Uint16Array(values.length);
    const words = new Uint32Array(values.buffer);
    for (let i = 0; i < values.length; i++) bits[i] = type === GgmlType.F16 ? f16Bits(values[i]!) : words[i]! >>> 16;
    return new Uint8Array(bits.buffer);
  }
  const block = { [GgmlType.IQ4_NL]: [32, 18], [GgmlType.IQ4_XS]: [256, 136], [GgmlType.MXFP4]: [32, 17] }[type as number];
  if (!block) return quantizeTensor(type, values);
  const [blockValues, bytes] = block as [number, number];
  const blocks = (ROWS * k) / blockValues;
  const out = new Uint8Array(blocks * bytes);
  const noise = randomFloats(out.length, seed + 1, 1);
  for (let i = 0; i < out.length; i++) out[i] = Math.floor((noise[i]! + 1) * 128) & 0xff;
  for (let b = 0; b < blocks; b++) {
    if (type === GgmlType.MXFP4) {
      out[b * bytes] = 120 + (b % 8);
    } else {
      const d = f16Bits(0.002 + 0.001 * (b % 5));
      out[b * bytes] = d & 0xff;
      out[b * bytes + 1] = d >>> 8;
    }
  }
  return out;
}

describe.skipIf(reason !== undefined)(
  `AVX-512 kernels (emulated) give the AVX2 level's bits${reason ? ` (skipped: ${reason})` : ""}`,
  () => {
    it("the emulated addon runs its avx512 level", () => {
      expect(emulated!.buildInfo().isaAvailable).toContain("avx512");
      expect(emulated!.getIsa()).toBe("avx512");
    });

    for (const threads of [1, 2]) {
      for (const [type, ks] of TYPES) {
        for (const k of ks) {
          it(`${GgmlType[type]} K=${k}, ${threads} thread(s): decode variants, batched steps and prefill`, () => {
            addon!.setThreads(threads);
            emulated!.setThreads(threads);
            addon!.setIsa("avx2");
            emulated!.setIsa("avx512");
            try {
              const w = weightBytes(type, k, 101 + type + k);
              for (const m of M) {
                const x = randomFloats(m * k, 7 + m + type);
                const expected = new Float32Array(ROWS * m);
                addon!.matmulLlama(type, w, ROWS, k, x, m, expected);
                const got = new Float32Array(ROWS * m);
                emulated!.matmulLlama(type, w, ROWS, k, x, m, got);
                const at = firstBitMismatch(got, expected);
                if (at >= 0) expect.fail(`m=${m}: output ${at} is ${got[at]} at avx512, ${expected[at]} at avx2`);
                if (m > 8) continue;
                const variants =
                  m === 1
                    ? [0, 1, 2, 4].flatMap((weightRows) => [0, 16].map((prefetch) => ({ weightRows, prefetch })))
                    : [{ batchKernel: 0 }, { batchKernel: 1 }];
                for (const v of variants) {
                  const variant = { isa: "current" as const, weightRows: 0, prefetch: 0, rowsPerTask: 0, threads: 0, batchKernel: 0, ...v };
                  const y = new Float32Array(ROWS * m);
                  emulated!.matmulDecodeVariant(type, w, ROWS, k, x, y, variant, m);
                  const vat = firstBitMismatch(y, expected);
                  if (vat >= 0)
                    expect.fail(`m=${m} variant ${JSON.stringify(v)}: output ${vat} is ${y[vat]} at avx512, ${expected[vat]} at avx2`);
                }
              }
            } finally {
              addon!.setIsa("best");
              emulated!.setIsa("best");
            }
          });
        }
      }
    }
  },
);
