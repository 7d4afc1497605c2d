/**
 * The decode tuner's bookkeeping with an injected timer and clock (no timing of this machine): which
 * groups it times, the search, the noise guard, the budget, the cache key, the cache file (absent,
 * broken, stale, unwritable) and KEEPQUANT_TUNE. Which variant wins on a real CPU is never asserted.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { GgmlType } from "@keepquant/gguf";
import { afterAll, describe, expect, it } from "vitest";
import type { DecodeVariant, MatmulRole, NativeAddon } from "./index.js";
import { X86_KERNEL_MENU } from "./test-support.js";
import {
  batchSlice,
  candidateStages,
  DEFAULT_VARIANT,
  kernelMenuOf,
  parseTuneMode,
  searchVariants,
  TUNE_CACHE_FILE,
  TUNE_MIN_GROUP_BYTES,
  TUNE_BATCH_PASS_BYTES,
  TUNE_BATCH_ROWS,
  TUNE_PREFILL_PASS_BYTES,
  TUNE_PREFILL_ROWS,
  TUNE_PASS_BYTES,
  tuneCacheDir,
  tuneDecode,
  tuneGroups,
  tuneKey,
  TUNE_SEARCH_VERSION,
  type FullVariant,
  type KernelMenu,
  type TuneChoice,
  type TuneGroup,
  type TunerMatrix,
} from "./tuner.js";

const scratch = mkdtempSync(path.join(tmpdir(), "kq-tuner-"));

/** The x86 build's kernel menu (kernel-menu.test.ts holds the addon to it), by type name. */
const MENU: KernelMenu = kernelMenuOf({ kernelMenu: () => X86_KERNEL_MENU });
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** A matrix of `rows` x `rowBytes` zero bytes (the fake timer never reads them). */
function matrix(role: MatmulRole, type: GgmlType, rows: number, cols: number, rowBytes: number): TunerMatrix {
  return { role, type, rows, cols, rowBytes, data: new Uint8Array(rows * rowBytes) };
}

// A Q4_K_M-like model: layer Q4_K at two widths, layer Q6_K, a tall Q6_K head, a tiny F32 matrix.
const MODEL: TunerMatrix[] = [
  ...Array.from({ length: 6 }, () => matrix("layer", GgmlType.Q4_K, 3584, 1024, 576)),
  ...Array.from({ length: 2 }, () => matrix("layer", GgmlType.Q4_K, 1024, 3584, 2016)),
  ...Array.from({ length: 4 }, () => matrix("layer", GgmlType.Q6_K, 1024, 3584, 2940)),
  matrix("head", GgmlType.Q6_K, 120_000, 1024, 840),
  matrix("layer", GgmlType.F32, 16, 1024, 4096),
];

/** A fake clock the fake timer advances by the time it reports. */
function fakeClock() {
  let now = 0;
  return { now: () => now, advance: (ms: number) => (now += ms) };
}

/** Cost of a variant in ns per pass: a base, minus what each field is "worth" here. */
function costModel(gains: Partial<Record<keyof FullVariant, Record<string, number>>>, base = 1_000_000) {
  return (v: FullVariant) => {
    let ns = base;
    for (const [field, table] of Object.entries(gains)) ns -= table?.[String(v[field as keyof FullVariant])] ?? 0;
    return ns;
  };
}

/** MODEL's group `name` ("role/type"). */
function group(name: string): TuneGroup {
  const found = tuneGroups(MODEL).find((g) => `${g.role}/${g.typeName}` === name);
  if (!found) throw new Error(`no group ${name}`);
  return found;
}

/** The choice of group `name` ("role/type"). */
function choice(choices: readonly TuneChoice[], name: string): TuneChoice {
  const found = choices.find((c) => `${c.role}/${c.type}` === name);
  if (!found) throw new Error(`no choice ${name}`);
  return found;
}

describe("tuneGroups", () => {
  const groups = tuneGroups(MODEL);
  it("one group per (role, type) with enough bytes; the K with the most bytes; the groups a token reads most of first", () => {
    // the head's 100.8 MB, the layers' Q4_K at both widths (16.5 MB), the layers' Q6_K (12.0 MB)
    expect(groups.map((g) => `${g.role}/${g.typeName}/K=${g.k}`)).toEqual(["head/Q6_K/K=1024", "layer/Q4_K/K=1024", "layer/Q6_K/K=3584"]);
    expect(groups.map((g) => g.modelBytes)).toEqual([120_000 * 840, 6 * 3584 * 576 + 2 * 1024 * 2016, 4 * 1024 * 2940]);
    expect(MODEL.filter((m) => m.type === GgmlType.F32)[0]!.rows * 4096).toBeLessThan(TUNE_MIN_GROUP_BYTES);
  });
  it("a pass reads at most about TUNE_PASS_BYTES: whole matrices, then a slice of a tall one", () => {
    const q4 = group("layer/Q4_K");
    expect(q4.weights.length).toBe(6); // 6 x 2 MiB: all of them, under the pass size
    expect(q4.bytes).toBe(6 * 3584 * 576);
    const head = group("head/Q6_K");
    expect(head.weights.length).toBe(1);
    expect(head.rows[0]).toBe(Math.ceil(TUNE_PASS_BYTES / 840));
    expect(head.weights[0]!.byteLength).toBe(head.rows[0]! * 840);
    expect(head.maxRows).toBe(120_000);
  });
  it("the cache key changes with the CPU, the addon, the threads and the shapes", () => {
    const key = tuneKey("cpu A", "abi 5", 2, groups);
    expect(tuneKey("cpu A", "abi 5", 2, tuneGroups(MODEL))).toBe(key);
    expect(tuneKey("cpu B", "abi 5", 2, groups)).not.toBe(key);
    expect(tuneKey("cpu A", "abi 6", 2, groups)).not.toBe(key);
    expect(tuneKey("cpu A", "abi 5", 1, groups)).not.toBe(key);
    expect(tuneKey("cpu A", "abi 5", 2, groups.slice(1))).not.toBe(key);
    // a cache written by another candidate set is measured again
    expect(tuneKey("cpu A", "abi 5", 2, groups, TUNE_SEARCH_VERSION)).toBe(key);
    expect(tuneKey("cpu A", "abi 5", 2, groups, TUNE_SEARCH_VERSION - 1)).not.toBe(key);
  });
});

describe("searchVariants (fake timer and clock)", () => {
  const groups = tuneGroups(MODEL);
  const levels = ["generic", "avx2", "avx512"] as const;

  function run(cost: (v: FullVariant, g: TuneGroup, actRows: number) => number, budgetMs = 1e9, isaLevels: readonly string[] = levels) {
    const clock = fakeClock();
    const calls: { group: string; variant: FullVariant; passes: number; actRows: number }[] = [];
    const result = searchVariants(
      groups,
      (group, variant, passes, actRows = 1) => {
        calls.push({ group: `${group.role}/${group.typeName}`, variant, passes, actRows });
        const ns = cost(variant, group, actRows);
        clock.advance((ns * passes) / 1e6);
        return Array.from({ length: passes }, () => ns);
      },
      { budgetMs, passes: 2, now: clock.now, isaLevels: isaLevels as typeof levels, threads: 2, kernelMenu: MENU },
    );
    return { ...result, calls };
  }

  it("coordinate descent: each stage keeps the best so far and the next stage varies it", () => {
    const cost = costModel({ weightRows: { "1": 200_000, "4": 100_000 }, prefetch: { "64": 50_000 }, threads: { "1": 10_000 } });
    const { choices, calls } = run((v) => cost(v));
    for (const c of choices) {
      expect(c.variant).toEqual({ ...DEFAULT_VARIANT, weightRows: 1, prefetch: 64 });
      expect(c.chosenNs).toBe(750_000);
      expect(c.defaultNs).toBe(1_000_000);
    }
    // the threads candidate gained only 10 000 / 750 000 = 1.3%: under the noise guard, not taken
    expect(choice(choices, "layer/Q4_K").variant.threads).toBe(0);
    // a warm-up pass per group, then the default, then each candidate; every timing `passes` passes
    const q4 = calls.filter((c) => c.group === "layer/Q4_K" && c.actRows === 1);
    expect(q4[0]).toEqual({ group: "layer/Q4_K", variant: DEFAULT_VARIANT, passes: 1, actRows: 1 });
    expect(q4.length - 1).toBe(choice(choices, "layer/Q4_K").timed);
    expect(q4.slice(1).every((c) => c.passes === 2)).toBe(true);
    // the prefetch stage started from the weightRows winner
    expect(q4.filter((c) => c.variant.prefetch !== 0).every((c) => c.variant.weightRows === 1)).toBe(true);
  });

  it("the prefetch distance is swept again over the chosen rows per task, and no variant is timed twice", () => {
    // prefetch 64 pays only with long tasks (a thread streaming a long run of rows): the first prefetch sweep,
    // over the default short tasks, finds nothing; the rows-per-task sweep then takes long tasks (4% faster);
    // only a second prefetch sweep over them finds the 30% of prefetch 64
    const cost = (v: FullVariant) => {
      const long = v.rowsPerTask >= 1024;
      return 1_000_000 - (long ? 40_000 : 0) - (long && v.prefetch === 64 ? 300_000 : 0);
    };
    const { choices, calls } = run(cost);
    const q4 = choice(choices, "layer/Q4_K");
    expect(q4.variant.rowsPerTask).toBeGreaterThanOrEqual(1024);
    expect(q4.variant.prefetch).toBe(64);
    expect(q4.chosenNs).toBe(660_000);
    const q4Calls = calls.filter((c) => c.group === "layer/Q4_K" && c.actRows === 1).slice(1);
    const keys = q4Calls.map((c) => JSON.stringify(c.variant));
    expect(new Set(keys).size).toBe(keys.length);
    expect(keys.length).toBe(q4.timed);
  });

  it("the ISA stage offers the SIMD levels below the best (never generic); the rows kernels' fields around each level's defaults", () => {
    const cost = costModel({ isa: { avx2: 300_000 } });
    const { choices, calls } = run((v) => cost(v));
    expect(calls.some((c) => c.variant.isa === "generic")).toBe(false);
    expect(choices.every((c) => c.variant.isa === "avx2")).toBe(true);
    // with avx2 chosen, its row kernels' prefetch distances (default 8) are timed, not row counts (one at a time)
    const afterIsa = calls.filter((c) => c.group === "layer/Q4_K" && c.variant.isa === "avx2");
    expect([...new Set(afterIsa.map((c) => c.variant.weightRows))]).toEqual([0]);
    expect([...new Set(afterIsa.map((c) => c.variant.prefetch))].sort((a, b) => a - b)).toEqual([0, 16, 32]);
  });

  it("a type without row kernels at a level gets no weightRows or prefetch candidates there", () => {
    const q5 = tuneGroups([
      { role: "layer", type: GgmlType.Q5_K, rows: 8192, cols: 1024, rowBytes: 704, data: new Uint8Array(8192 * 704) },
    ]);
    expect(q5[0]!.typeName).toBe("Q5_K");
    const fromDefault = candidateStages(q5[0]!, ["generic", "avx2", "avx512"], 2, MENU).flatMap((stage) => stage(DEFAULT_VARIANT));
    expect(fromDefault.some((v) => v.weightRows !== 0 || v.prefetch !== 0)).toBe(false);
    // Q8_0 has a row kernel at both levels: at avx2 its prefetch distances around the default 64 are
    // timed, one row at a time (no weightRows candidates)
    const q8 = tuneGroups([
      { role: "layer", type: GgmlType.Q8_0, rows: 4096, cols: 1024, rowBytes: 1088, data: new Uint8Array(4096 * 1088) },
    ]);
    const atAvx2 = candidateStages(q8[0]!, ["generic", "avx2"], 2, MENU).flatMap((stage) => stage(DEFAULT_VARIANT));
    expect([...new Set(atAvx2.filter((v) => v.prefetch !== 0).map((v) => v.prefetch))]).toEqual([32, 128]);
    expect(atAvx2.some((v) => v.weightRows !== 0)).toBe(false);
    expect(
      candidateStages(q8[0]!, ["generic", "avx2", "avx512"], 2, MENU)
        .flatMap((stage) => stage(DEFAULT_VARIANT))
        .some((v) => v.prefetch === 64),
    ).toBe(true);
    // Q4_K: at avx512 (the best level here) the pair kernels are the default, so one and four rows are
    // the candidates; at avx2 rows run one at a time, so none
    const q4 = tuneGroups(MODEL).find((g) => g.typeName === "Q4_K")!;
    const rowsFrom = (v: FullVariant) =>
      candidateStages(q4, ["generic", "avx2", "avx512"], 2, MENU)
        .flatMap((stage) => stage(v))
        .filter((c) => c.weightRows !== v.weightRows)
        .map((c) => c.weightRows);
    expect(rowsFrom(DEFAULT_VARIANT)).toEqual([1, 4]);
    expect(rowsFrom({ ...DEFAULT_VARIANT, isa: "avx2" })).toEqual([]);
  });

  it("the batched step's kernel: both timed at TUNE_BATCH_ROWS rows where the best level has both, the faster kept", () => {
    // registers faster for the layers' Q4_K, slower for the head (as measured on a Zen 4), a tie for layer Q6_K
    const { choices, calls } = run((v, g, actRows) => {
      if (actRows === 1) return 1_000_000;
      if (v.batchKernel === 0) return 4_000_000;
      return g.role === "head" ? 5_000_000 : g.typeName === "Q4_K" ? 3_000_000 : 3_950_000;
    });
    const batchCalls = calls.filter((c) => c.actRows === TUNE_BATCH_ROWS);
    expect(calls.every((c) => c.actRows === 1 || c.actRows === TUNE_BATCH_ROWS || c.actRows === TUNE_PREFILL_ROWS)).toBe(true);
    // per group: a warm-up pass of the register form, then both forms `passes` passes each
    expect(batchCalls.filter((c) => c.group === "layer/Q4_K").map((c) => [c.variant.batchKernel, c.passes])).toEqual([
      [1, 1],
      [0, 2],
      [1, 2],
    ]);
    // head, layer Q4_K, layer Q6_K (the Q6_K tie is under the noise guard)
    expect(choices.map((c) => c.variant.batchKernel)).toEqual([0, 1, 0]);
    expect(choice(choices, "layer/Q4_K").batch).toEqual({
      rows: TUNE_BATCH_ROWS,
      blockNs: 4_000_000,
      registersNs: 3_000_000,
      passBytes: group("layer/Q4_K").bytes,
    });
    expect(choice(choices, "head/Q6_K").batch?.registersNs).toBe(5_000_000);
    // the one-row search started from the batch winner and its candidates keep it
    expect(
      calls
        .filter((c) => c.group === "layer/Q4_K" && c.actRows === 1 && c.passes === 2)
        .slice(1)
        .every((c) => c.variant.batchKernel === 1),
    ).toBe(true);
  });

  it("the prefill's kernel: both timed at TUNE_PREFILL_ROWS rows for the layers' groups, the faster kept", () => {
    // registers faster for the layers' Q4_K prefill (as measured on a Zen 4), a tie for Q6_K; the batched step's choice
    // (registers everywhere here) is kept beside it
    const { choices, calls } = run((v, g, actRows) => {
      if (actRows === 1) return 1_000_000;
      if (actRows === TUNE_BATCH_ROWS) return v.batchKernel === 1 ? 2_000_000 : 3_000_000;
      if (v.prefillKernel === 0) return 8_000_000;
      return g.typeName === "Q4_K" ? 6_800_000 : 7_900_000;
    });
    const prefillCalls = calls.filter((c) => c.actRows === TUNE_PREFILL_ROWS);
    // never for the head (its prefill is one row)
    expect(prefillCalls.some((c) => c.group === "head/Q6_K")).toBe(false);
    // per layers' group: a warm-up pass of the register form, then both forms `passes` passes each, over the batch winner
    expect(
      prefillCalls.filter((c) => c.group === "layer/Q4_K").map((c) => [c.variant.prefillKernel, c.variant.batchKernel, c.passes]),
    ).toEqual([
      [1, 1, 1],
      [0, 1, 2],
      [1, 1, 2],
    ]);
    // head, layer Q4_K, layer Q6_K (the Q6_K tie is under the noise guard)
    expect(choices.map((c) => [c.variant.batchKernel, c.variant.prefillKernel])).toEqual([
      [1, 0],
      [1, 1],
      [1, 0],
    ]);
    expect(choice(choices, "layer/Q4_K").prefill).toEqual({
      rows: TUNE_PREFILL_ROWS,
      blockNs: 8_000_000,
      registersNs: 6_800_000,
      passBytes: batchSlice(group("layer/Q4_K"), TUNE_PREFILL_PASS_BYTES).bytes,
    });
    expect(choice(choices, "head/Q6_K").prefill).toBeUndefined();
    // the one-row search started from both winners and its candidates keep them
    expect(
      calls
        .filter((c) => c.group === "layer/Q4_K" && c.actRows === 1 && c.passes === 2)
        .slice(1)
        .every((c) => c.variant.prefillKernel === 1 && c.variant.batchKernel === 1),
    ).toBe(true);
  });

  it("a prefill pass reads a slice of the group: at most about TUNE_PREFILL_PASS_BYTES", () => {
    const q4 = group("layer/Q4_K");
    const slice = batchSlice(q4, TUNE_PREFILL_PASS_BYTES);
    expect(slice.bytes).toBeGreaterThanOrEqual(TUNE_PREFILL_PASS_BYTES);
    expect(slice.bytes).toBeLessThan(TUNE_PREFILL_PASS_BYTES + 3584 * 576);
    expect(slice.weights[0]!.byteOffset).toBe(q4.weights[0]!.byteOffset);
  });

  it("no batch or prefill kernel is timed where the best level has only the block kernels", () => {
    const { choices, calls } = run(() => 1_000_000, 1e9, ["generic", "avx2"]);
    expect(calls.some((c) => c.actRows !== 1)).toBe(false);
    expect(choices.every((c) => c.batch === undefined && c.variant.batchKernel === 0)).toBe(true);
    expect(choices.every((c) => c.prefill === undefined && c.variant.prefillKernel === 0)).toBe(true);
  });

  it("a batched-step pass reads a slice of the group: at most about TUNE_BATCH_PASS_BYTES", () => {
    const head = group("head/Q6_K");
    const slice = batchSlice(head);
    expect(slice.weights.length).toBe(1);
    expect(slice.rows[0]).toBe(Math.ceil(TUNE_BATCH_PASS_BYTES / 840));
    expect(slice.weights[0]!.byteLength).toBe(slice.rows[0]! * 840);
    expect(slice.weights[0]!.byteOffset).toBe(head.weights[0]!.byteOffset);
    // a group under the slice size: all of it
    const q4 = batchSlice(group("layer/Q4_K"));
    expect(group("layer/Q4_K").bytes).toBeLessThan(TUNE_BATCH_PASS_BYTES);
    expect(q4.bytes).toBe(group("layer/Q4_K").bytes);
    expect(q4.weights.length).toBe(group("layer/Q4_K").weights.length);
  });

  it("rows per task candidates: fine, coarse, coarser and one task per thread, below the matrix height", () => {
    const { calls } = run(() => 1_000_000);
    const head = calls.filter((c) => c.group === "head/Q6_K").map((c) => c.variant.rowsPerTask);
    expect([...new Set(head)].sort((a, b) => a - b)).toEqual([0, 16, 256, 1024, 4096, 60_000]);
    const q4 = calls.filter((c) => c.group === "layer/Q4_K").map((c) => c.variant.rowsPerTask);
    expect([...new Set(q4)].sort((a, b) => a - b)).toEqual([0, 16, 256, 1024, 1792]);
  });

  it("the budget stops the search: the group keeps what it found, later groups the defaults, with a note", () => {
    // every timing costs 2 x 1 ms on the fake clock (a warm-up 1 ms): a 12 ms budget covers the first
    // group's (the head's: the most bytes) batch kernels (5 ms) and its first one-row candidates
    const cost = costModel({ weightRows: { "1": 100_000 } });
    const { choices, notes, calls } = run((v) => cost(v), 12);
    expect(notes.join("\n")).toMatch(/budget \(12 ms\) was reached/);
    expect(choices[0]!.variant.weightRows).toBe(1);
    expect(choices[0]!.timed).toBeLessThan(8);
    expect(choices.slice(1).every((c) => c.timed === 0 && c.variant === DEFAULT_VARIANT)).toBe(true);
    expect(calls.every((c) => c.group === "head/Q6_K")).toBe(true);
    expect(choices.map((c) => `${c.role}/${c.type}`)).toEqual(["head/Q6_K", "layer/Q4_K", "layer/Q6_K"]);
  });
});

describe("KEEPQUANT_TUNE and the cache directory", () => {
  it("parses off, force, pin and rejects anything else naming the variable", () => {
    expect(parseTuneMode({})).toEqual({ mode: "auto" });
    expect(parseTuneMode({ KEEPQUANT_TUNE: "" })).toEqual({ mode: "auto" });
    expect(parseTuneMode({ KEEPQUANT_TUNE: "off" })).toEqual({ mode: "off" });
    expect(parseTuneMode({ KEEPQUANT_TUNE: "force" })).toEqual({ mode: "force" });
    expect(parseTuneMode({ KEEPQUANT_TUNE: "pin:isa=avx2, rowsPerTask=64" })).toEqual({
      mode: "pin",
      variant: { ...DEFAULT_VARIANT, isa: "avx2", rowsPerTask: 64 },
    });
    expect(parseTuneMode({ KEEPQUANT_TUNE: "pin:prefillKernel=1,batchKernel=1" })).toEqual({
      mode: "pin",
      variant: { ...DEFAULT_VARIANT, prefillKernel: 1, batchKernel: 1 },
    });
    expect(() => parseTuneMode({ KEEPQUANT_TUNE: "pin:speed=11" })).toThrow(/KEEPQUANT_TUNE: "pin:speed=11": unknown field "speed"/);
    expect(() => parseTuneMode({ KEEPQUANT_TUNE: "pin:prefetch=-3" })).toThrow(/prefetch must be a non-negative integer/);
    expect(() => parseTuneMode({ KEEPQUANT_TUNE: "pin:isa=sse2" })).toThrow(/isa must be one of/);
    expect(() => parseTuneMode({ KEEPQUANT_TUNE: "yes" })).toThrow(/KEEPQUANT_TUNE: "yes": unknown value/);
  });
  it("the cache lives in $XDG_CACHE_HOME/keepquant, else ~/.cache/keepquant", () => {
    expect(tuneCacheDir({ XDG_CACHE_HOME: "/x/cache", HOME: "/home/u" })).toBe("/x/cache/keepquant");
    expect(tuneCacheDir({ XDG_CACHE_HOME: "relative", HOME: "/home/u" })).toBe("/home/u/.cache/keepquant");
    expect(tuneCacheDir({ HOME: "/home/u" })).toBe("/home/u/.cache/keepquant");
  });
});

/** A recording addon: the tuner only sets and resets variants through it here (the timer is injected). */
function recordingAddon() {
  const set = new Map<string, DecodeVariant>();
  let resets = 0;
  const addon = {
    setDecodeVariant: (role: MatmulRole, type: GgmlType, v: DecodeVariant) => void set.set(`${role}/${type}`, v),
    resetDecodeVariants: () => {
      resets++;
      set.clear();
    },
    getThreads: () => 2,
    abiVersion: () => 5,
    buildInfo: () => ({ isaAvailable: ["generic", "avx2", "avx512"] }),
    kernelMenu: () => X86_KERNEL_MENU,
  } as unknown as NativeAddon;
  return { addon, set, resets: () => resets };
}

describe("tuneDecode (fake timer, temp cache)", () => {
  const fixed = { cpuModel: "Test CPU", addonVersion: "abi 5", threads: 2, isaLevels: ["generic", "avx2", "avx512"] as const };
  const cost = costModel({ weightRows: { "1": 200_000 } });
  const timer = (_g: TuneGroup, v: FullVariant, passes: number) => Array.from({ length: passes }, () => cost(v));

  it("measures and writes the cache; the next load reads it and applies the same choice", () => {
    const cacheDir = path.join(scratch, "a");
    const first = recordingAddon();
    const measured = tuneDecode(first.addon, MODEL, { ...fixed, cacheDir, env: {}, timer, now: fakeClock().now });
    expect(measured.source).toBe("measured");
    expect(measured.cacheFile).toBe(path.join(cacheDir, TUNE_CACHE_FILE));
    expect([...first.set.keys()].sort()).toEqual([`head/${GgmlType.Q6_K}`, `layer/${GgmlType.Q4_K}`, `layer/${GgmlType.Q6_K}`]);
    for (const v of first.set.values()) expect(v).toEqual({ ...DEFAULT_VARIANT, weightRows: 1 });
    const second = recordingAddon();
    let timed = 0;
    const counting: typeof timer = (...a) => {
      timed++;
      return timer(...a);
    };
    const cached = tuneDecode(second.addon, MODEL, { ...fixed, cacheDir, env: {}, timer: counting });
    expect(cached.source).toBe("cache");
    expect(timed).toBe(0);
    expect(cached.choices).toEqual(measured.choices);
    expect(second.set).toEqual(first.set);
    // force (bench --tune) measures again
    const forced = tuneDecode(recordingAddon().addon, MODEL, { ...fixed, cacheDir, env: {}, timer, force: true, now: fakeClock().now });
    expect(forced.source).toBe("measured");
  });

  it("an unreadable layout or a cache directory that cannot be written is a note, never an error", () => {
    const blocker = path.join(scratch, "not-a-dir");
    writeFileSync(blocker, "a file where the cache directory would be");
    const report = tuneDecode(recordingAddon().addon, MODEL, {
      ...fixed,
      cacheDir: path.join(blocker, "sub"),
      env: {},
      timer,
      now: fakeClock().now,
    });
    expect(report.source).toBe("measured");
    expect(report.notes.join("\n")).toMatch(/could not be written .* this process only/);
    const cacheDir = path.join(scratch, "b");
    tuneDecode(recordingAddon().addon, MODEL, { ...fixed, cacheDir, env: {}, timer, now: fakeClock().now });
    const file = path.join(cacheDir, TUNE_CACHE_FILE);
    writeFileSync(file, JSON.stringify({ version: 1, entries: { [report.key]: { choices: "nonsense" } } }));
    const stale = tuneDecode(recordingAddon().addon, MODEL, { ...fixed, cacheDir, env: {}, timer, now: fakeClock().now });
    expect(stale.source).toBe("measured");
    expect(stale.notes.join("\n")).toMatch(/stale or malformed/);
    expect(JSON.parse(readFileSync(file, "utf8")).entries[stale.key].choices).toHaveLength(3);
  });

  it("a cached variant the addon refuses (generic, out of range) is ignored with a note, never an error", () => {
    const cacheDir = path.join(scratch, "c");
    const first = tuneDecode(recordingAddon().addon, MODEL, { ...fixed, cacheDir, env: {}, timer, now: fakeClock().now });
    const file = path.join(cacheDir, TUNE_CACHE_FILE);
    const cache = JSON.parse(readFileSync(file, "utf8"));
    cache.entries[first.key].choices[0].variant.isa = "generic";
    writeFileSync(file, JSON.stringify(cache));
    const generic = tuneDecode(recordingAddon().addon, MODEL, { ...fixed, cacheDir, env: {}, timer, now: fakeClock().now });
    expect(generic.source).toBe("measured");
    expect(generic.notes.join("\n")).toMatch(/stale or malformed/);
    cache.entries[first.key].choices[0].variant = { ...DEFAULT_VARIANT, prefillKernel: 2 };
    writeFileSync(file, JSON.stringify(cache));
    const prefill = tuneDecode(recordingAddon().addon, MODEL, { ...fixed, cacheDir, env: {}, timer, now: fakeClock().now });
    expect(prefill.source).toBe("measured");
    expect(prefill.notes.join("\n")).toMatch(/stale or malformed/);
    cache.entries[first.key].choices[0].variant = { ...DEFAULT_VARIANT, weightRows: 3 };
    writeFileSync(file, JSON.stringify(cache));
    const refusing = recordingAddon();
    const setVariant = refusing.addon.setDecodeVariant;
    refusing.addon.setDecodeVariant = (role, type, v) => {
      if (v.weightRows === 3) throw new Error("variant: weightRows must be 0 (default), 1, 2 or 4, got 3");
      setVariant(role, type, v);
    };
    const refused = tuneDecode(refusing.addon, MODEL, { ...fixed, cacheDir, env: {}, timer, now: fakeClock().now });
    expect(refused.source).toBe("measured");
    expect(refused.notes.join("\n")).toMatch(/cannot run here \(variant: weightRows must be/);
  });

  it("off resets to the defaults without timing; a model with nothing to tune says so", () => {
    const off = recordingAddon();
    let timed = 0;
    const counting: typeof timer = (...a) => {
      timed++;
      return timer(...a);
    };
    const report = tuneDecode(off.addon, MODEL, {
      ...fixed,
      cacheDir: null,
      env: { KEEPQUANT_TUNE: "off" },
      timer: counting,
    });
    expect(report.source).toBe("off");
    expect(timed).toBe(0);
    expect(off.resets()).toBe(1);
    const tiny = tuneDecode(recordingAddon().addon, MODEL.slice(-1), { ...fixed, cacheDir: null, env: {}, timer });
    expect(tiny.source).toBe("unavailable");
  });
});
