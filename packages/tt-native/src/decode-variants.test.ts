/**
 * Every decode variant the tuner chooses among (ISA path, weight rows per kernel call, prefetch
 * distance, rows per task, threads per matmul) gives the same bits as the default decode matmul, for
 * every type with a decode kernel, with row counts that leave tails for the pair and four-row kernels
 * and a Q8_0 row with an odd block count. Then the tuner's native side: a measured choice is applied
 * and cached, read back from the cache, and a broken or stale cache file is ignored with a note.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { GgmlType, GGML_TYPE_TRAITS } from "@keepquant/gguf";
import { quantizeTensor } from "@keepquant/quant";
import { afterAll, describe, expect, it } from "vitest";
import {
  availableNativeIsas,
  DEFAULT_VARIANT,
  getNativeDecodeVariant,
  MATMUL_VARIANT_MAX_ROWS,
  matmulDecodeVariant,
  matmulLlama,
  nativeAddon,
  NativeArgumentError,
  resetNativeDecodeVariants,
  setNativeIsa,
  setNativeThreads,
  TUNE_CACHE_FILE,
  tuneNativeDecode,
  type DecodeVariant,
  type NativeLlamaWeight,
  type TunerMatrix,
} from "./index.js";
import { firstBitMismatch, randomFloats } from "./test-support.js";

const addon = nativeAddon();
const NO_ADDON = addon ? undefined : "the native addon is not built";
const scratch = mkdtempSync(path.join(tmpdir(), "kq-decode-variants-"));
afterAll(() => {
  rmSync(scratch, { recursive: true, force: true });
  resetNativeDecodeVariants();
  setNativeThreads(0);
});

function weight(type: GgmlType, n: number, k: number, seed: number): NativeLlamaWeight {
  const values = randomFloats(n * k, seed, 0.05);
  const data = type === GgmlType.F32 ? new Uint8Array(values.buffer) : quantizeTensor(type, values);
  return { type, rows: n, cols: k, data };
}

/** Every combination of the tunable fields (isa x weightRows x prefetch x rowsPerTask x threads). */
function variants(isaLevels: readonly string[]): DecodeVariant[] {
  const out: DecodeVariant[] = [];
  for (const isa of ["current", ...isaLevels.filter((l) => l !== "generic")])
    for (const weightRows of [0, 1, 2, 4])
      for (const prefetch of [0, 1, 16, 256])
        for (const rowsPerTask of [0, 1, 3, 64])
          for (const threads of [0, 1]) out.push({ isa: isa as DecodeVariant["isa"], weightRows, prefetch, rowsPerTask, threads });
  return out;
}

describe.skipIf(NO_ADDON)("decode variants are bit-identical", () => {
  const isaLevels = availableNativeIsas();
  // 37 rows: tails of 1 for the pair kernels and of 1 for four-row kernels; Q8_0 with 9 blocks per row: an odd last block;
  // Q4_K with K = 3584 (14 blocks): the activation row's per-block values, prepared once per call, over a longer row
  const cases: [GgmlType, number][] = [
    [GgmlType.Q4_K, 512],
    [GgmlType.Q4_K, 3584],
    [GgmlType.Q6_K, 512],
    [GgmlType.Q5_K, 256],
    [GgmlType.Q8_0, 288],
    [GgmlType.Q4_0, 256],
    [GgmlType.F32, 64],
  ];
  for (const threads of [1, 2]) {
    for (const [type, k] of cases) {
      it(`${GGML_TYPE_TRAITS[type].name} K=${k}, ${threads} pool thread(s): ${variants(isaLevels).length} variants`, () => {
        setNativeThreads(threads);
        resetNativeDecodeVariants();
        const w = weight(type, 37, k, 11 + type);
        const x = randomFloats(k, 7 + type);
        const expected = matmulLlama(w, x, 1);
        for (const v of variants(isaLevels)) {
          const y = matmulDecodeVariant(w, x, v);
          const at = firstBitMismatch(y, expected);
          if (at >= 0) expect.fail(`variant ${JSON.stringify(v)}: output ${at} is ${y[at]}, the default gives ${expected[at]}`);
        }
      });
    }
  }

  // a batched decode step (2 .. 8 activation rows): the block kernels and their register form, at every
  // row count, with 37 weight rows (odd tails) and a K of several blocks, against matmulLlama's default;
  // K = 3584 (a down projection's): the register form's tile of 7-8 rows outgrows L1 and runs one row at a time
  const batchCases: [GgmlType, number][] = [...cases, [GgmlType.Q6_K, 3584]];
  for (const threads of [1, 2]) {
    for (const [type, k] of batchCases) {
      it(`${GGML_TYPE_TRAITS[type].name} K=${k}, ${threads} pool thread(s): batched steps of 2..8 rows under both batch kernels`, () => {
        setNativeThreads(threads);
        resetNativeDecodeVariants();
        const w = weight(type, 37, k, 21 + type);
        for (let m = 2; m <= 8; m++) {
          const x = randomFloats(m * k, 17 + m + type);
          const expected = matmulLlama(w, x, m);
          for (const batchKernel of [0, 1]) {
            const y = matmulDecodeVariant(w, x, { batchKernel }, undefined, m);
            const at = firstBitMismatch(y, expected);
            if (at >= 0) expect.fail(`m=${m} batchKernel=${batchKernel}: output ${at} is ${y[at]}, the default gives ${expected[at]}`);
          }
          // and against one row at a time (each output one kernel chain whatever the batch)
          for (let r = 0; r < m; r++) {
            const one = matmulLlama(w, x.subarray(r * k, (r + 1) * k), 1);
            const at = firstBitMismatch(expected.subarray(r * 37, (r + 1) * 37), one);
            if (at >= 0) expect.fail(`m=${m}: row ${r} output ${at} differs from the one-row matmul`);
          }
        }
      });
    }
  }

  // a prefill (more than 8 activation rows): the block kernels over 32-row tiles and the register form over 8-row tiles
  // (a last tile of 1 .. 8 rows), with 37 weight rows, against matmulLlama's default and one row at a time
  for (const threads of [1, 2]) {
    for (const [type, k] of batchCases) {
      it(`${GGML_TYPE_TRAITS[type].name} K=${k}, ${threads} pool thread(s): prefills of 9..64 rows under both prefill kernels`, () => {
        setNativeThreads(threads);
        resetNativeDecodeVariants();
        const w = weight(type, 37, k, 31 + type);
        for (const m of [9, 10, 16, 17, 23, 32, 33, 64]) {
          const x = randomFloats(m * k, 27 + m + type);
          const expected = matmulLlama(w, x, m);
          for (const variant of [{ prefillKernel: 1 }, { prefillKernel: 1, batchKernel: 1 }, { prefillKernel: 0, batchKernel: 1 }]) {
            const y = matmulDecodeVariant(w, x, variant, undefined, m);
            const at = firstBitMismatch(y, expected);
            if (at >= 0) expect.fail(`m=${m} ${JSON.stringify(variant)}: output ${at} is ${y[at]}, the default gives ${expected[at]}`);
          }
          for (const r of [0, m - 1]) {
            const one = matmulLlama(w, x.subarray(r * k, (r + 1) * k), 1);
            const at = firstBitMismatch(expected.subarray(r * 37, (r + 1) * 37), one);
            if (at >= 0) expect.fail(`m=${m}: row ${r} output ${at} differs from the one-row matmul`);
          }
        }
      });
    }
  }

  // a pinned prefill kernel at every SIMD level, those without the register form included (which keep the block
  // kernels' 32-row tiles): the same bits as the level's default
  it("a prefill kernel pinned at every SIMD level gives that level's default bits", () => {
    setNativeThreads(2);
    resetNativeDecodeVariants();
    const w = weight(GgmlType.Q4_K, 37, 512, 41);
    const x = randomFloats(33 * 512, 42);
    try {
      for (const isa of availableNativeIsas().filter((l) => l !== "generic")) {
        setNativeIsa(isa);
        const expected = matmulLlama(w, x, 33);
        const y = matmulDecodeVariant(w, x, { prefillKernel: 1 }, undefined, 33);
        const at = firstBitMismatch(y, expected);
        if (at >= 0) expect.fail(`isa ${isa}: output ${at} is ${y[at]}, the default gives ${expected[at]}`);
      }
    } finally {
      setNativeIsa("best");
    }
  });

  // a kernel choice set for (role, type) as the tuner sets it: a batched step's (8 rows) and a prefill's (40 rows)
  const tunedKernels: [string, GgmlType, number, number, "batchKernel" | "prefillKernel"][] = [
    ["batch", GgmlType.Q6_K, 512, 8, "batchKernel"],
    ["prefill", GgmlType.Q4_K, 1024, 40, "prefillKernel"],
  ];
  for (const [what, type, k, m, field] of tunedKernels) {
    it(`a tuned ${what} kernel set for (role, type) changes no bit of matmulLlama at ${m} rows`, () => {
      setNativeThreads(2);
      const w = weight(type, 37, k, 8 + m);
      const x = randomFloats(m * k, 9 + m);
      resetNativeDecodeVariants();
      const expected = matmulLlama(w, x, m);
      nativeAddon()!.setDecodeVariant("layer", type, { [field]: 1 });
      expect(nativeAddon()!.getDecodeVariant("layer", type)[field]).toBe(1);
      expect(firstBitMismatch(matmulLlama(w, x, m), expected)).toBe(-1);
      resetNativeDecodeVariants();
    });
  }

  it("a tuned variant set for (role, type) changes no bit of matmulLlama", () => {
    setNativeThreads(2);
    const w = weight(GgmlType.Q4_K, 37, 512, 5);
    const x = randomFloats(512, 6);
    resetNativeDecodeVariants();
    const expected = matmulLlama(w, x, 1);
    const native = nativeAddon()!;
    for (const v of variants(isaLevels).filter((_, i) => i % 7 === 0)) {
      native.setDecodeVariant("layer", GgmlType.Q4_K, v);
      expect(firstBitMismatch(matmulLlama(w, x, 1), expected)).toBe(-1);
    }
    resetNativeDecodeVariants();
  });

  it("a variant this CPU or build cannot run is refused with the field named", () => {
    const w = weight(GgmlType.Q4_K, 4, 256, 1);
    const x = randomFloats(256, 2);
    expect(() => matmulDecodeVariant(w, x, { weightRows: 3 })).toThrow(/weightRows must be 0 \(default\), 1, 2 or 4, got 3/);
    expect(() => matmulDecodeVariant(w, x, { threads: 5 })).toThrow(/threads must be 0/);
    expect(() => matmulDecodeVariant(w, x, { prefetch: -1 })).toThrow(/prefetch must be/);
    expect(() => matmulDecodeVariant(w, x, { batchKernel: 2 })).toThrow(/batchKernel must be 0 \(the block kernels\) or 1/);
    expect(() => matmulDecodeVariant(w, x, { prefillKernel: -1 })).toThrow(/prefillKernel must be 0 \(the block kernels\) or 1/);
    expect(() => matmulDecodeVariant(w, x, {}, undefined, MATMUL_VARIANT_MAX_ROWS + 1)).toThrow(
      new RegExp(`invalid argument m: must be an integer 1 \\.\\. ${MATMUL_VARIANT_MAX_ROWS}, got ${MATMUL_VARIANT_MAX_ROWS + 1}`),
    );
    expect(() => matmulDecodeVariant(w, x, { isa: "sse9" as never })).toThrow(/unknown ISA level 'sse9'/);
    expect(() => matmulDecodeVariant(w, x, { isa: "neon" })).toThrow(NativeArgumentError);
    if (availableNativeIsas().length > 1)
      expect(() => matmulDecodeVariant(w, x, { isa: "generic" })).toThrow(/generic sums in another order/);
  });
});

describe.skipIf(NO_ADDON)("the tuner on the native timer", () => {
  // 4 MiB of Q8_0 (the smallest group the tuner times) and a small head
  const layer = weight(GgmlType.Q8_0, 4096, 1024, 21);
  const head = weight(GgmlType.Q8_0, 4096, 1024, 22);
  const matrices: TunerMatrix[] = [
    { role: "layer", type: layer.type, rows: layer.rows, cols: layer.cols, rowBytes: layer.data.length / layer.rows, data: layer.data },
    { role: "head", type: head.type, rows: head.rows, cols: head.cols, rowBytes: head.data.length / head.rows, data: head.data },
  ];
  const env = {};

  it("measures, applies and caches a choice, then reads it back", () => {
    setNativeThreads(2);
    const cacheDir = path.join(scratch, "fresh");
    const first = tuneNativeDecode(matrices, { cacheDir, env, budgetMs: 2000 });
    expect(first.source).toBe("measured");
    expect(first.choices.map((c) => `${c.role}/${c.type}`)).toEqual(["layer/Q8_0", "head/Q8_0"]);
    for (const c of first.choices) {
      expect(c.timed).toBeGreaterThan(1);
      expect(getNativeDecodeVariant(c.role, GgmlType.Q8_0)).toEqual(c.variant);
    }
    const cache = JSON.parse(readFileSync(path.join(cacheDir, TUNE_CACHE_FILE), "utf8"));
    expect(Object.keys(cache.entries)).toEqual([first.key]);
    resetNativeDecodeVariants();
    const second = tuneNativeDecode(matrices, { cacheDir, env });
    expect(second.source).toBe("cache");
    expect(second.choices).toEqual(first.choices);
    for (const c of second.choices) expect(getNativeDecodeVariant(c.role, GgmlType.Q8_0)).toEqual(c.variant);
    // another thread count is another key: measured again, both entries kept
    setNativeThreads(1);
    const third = tuneNativeDecode(matrices, { cacheDir, env, budgetMs: 500 });
    expect(third.source).toBe("measured");
    expect(third.key).not.toBe(first.key);
    expect(Object.keys(JSON.parse(readFileSync(path.join(cacheDir, TUNE_CACHE_FILE), "utf8")).entries).sort()).toEqual(
      [first.key, third.key].sort(),
    );
    setNativeThreads(2);
  });

  it("a broken cache file is ignored with a note, measured again and rewritten", () => {
    const cacheDir = path.join(scratch, "broken");
    tuneNativeDecode(matrices, { cacheDir, env, budgetMs: 300 });
    writeFileSync(path.join(cacheDir, TUNE_CACHE_FILE), "{ not json");
    const report = tuneNativeDecode(matrices, { cacheDir, env, budgetMs: 300 });
    expect(report.source).toBe("measured");
    expect(report.notes.join("\n")).toMatch(/is not valid JSON .*ignored, measuring again/);
    expect(JSON.parse(readFileSync(path.join(cacheDir, TUNE_CACHE_FILE), "utf8")).entries[report.key]).toBeDefined();
  });

  it("a stale entry (an ISA this CPU lacks, another layout version) is ignored with a note", () => {
    const cacheDir = path.join(scratch, "stale");
    const report = tuneNativeDecode(matrices, { cacheDir, env, budgetMs: 300 });
    const file = path.join(cacheDir, TUNE_CACHE_FILE);
    const cache = JSON.parse(readFileSync(file, "utf8"));
    cache.entries[report.key].choices[0].variant.isa = "neon";
    writeFileSync(file, JSON.stringify(cache));
    const stale = tuneNativeDecode(matrices, { cacheDir, env, budgetMs: 300 });
    expect(stale.source).toBe("measured");
    expect(stale.notes.join("\n")).toMatch(/stale or malformed; ignored/);
    writeFileSync(file, JSON.stringify({ ...cache, version: 99 }));
    const other = tuneNativeDecode(matrices, { cacheDir, env, budgetMs: 300 });
    expect(other.source).toBe("measured");
    expect(other.notes.join("\n")).toMatch(/layout version 99, not 1; ignored/);
  });

  it("KEEPQUANT_TUNE=off keeps the defaults, pin: sets one variant everywhere, a bad value names the variable", () => {
    const cacheDir = path.join(scratch, "env");
    const off = tuneNativeDecode(matrices, { cacheDir, env: { KEEPQUANT_TUNE: "off" } });
    expect(off.source).toBe("off");
    // the addon's defaults, field for field, are the tuner's DEFAULT_VARIANT
    expect(getNativeDecodeVariant("layer", GgmlType.Q8_0)).toEqual(DEFAULT_VARIANT);
    const pinned = tuneNativeDecode(matrices, {
      cacheDir,
      env: { KEEPQUANT_TUNE: "pin:weightRows=1,prefetch=64,threads=1,batchKernel=1,prefillKernel=1" },
    });
    expect(pinned.source).toBe("pinned");
    for (const role of ["layer", "head"] as const)
      expect(getNativeDecodeVariant(role, GgmlType.Q8_0)).toEqual({
        isa: "current",
        weightRows: 1,
        prefetch: 64,
        rowsPerTask: 0,
        threads: 1,
        batchKernel: 1,
        prefillKernel: 1,
      });
    expect(() => tuneNativeDecode(matrices, { cacheDir, env: { KEEPQUANT_TUNE: "pin:weightRows=3" } })).toThrow(
      /KEEPQUANT_TUNE: .*weightRows must be 0 \(default\), 1, 2 or 4, got 3/,
    );
    expect(() => tuneNativeDecode(matrices, { cacheDir, env: { KEEPQUANT_TUNE: "fast" } })).toThrow(
      /KEEPQUANT_TUNE: "fast": unknown value/,
    );
    resetNativeDecodeVariants();
  });
});
