/**
 * The decode tuner: times the addon's bit-identical decode (one activation row) matmul variants on the
 * loaded model's own weights, within a time budget, picks the fastest per (role, weight type), applies
 * it, and caches the choice per CPU model, addon version, thread count and model shape in the user's
 * cache directory. Every variant gives the same bits as every other (tests hold them so), so the
 * choice is purely a speed question. Library code: it returns notes, it never prints.
 *
 * `KEEPQUANT_TUNE`: unset or empty = tune at load (the cache first), `off` = the built-in defaults,
 * `force` = measure again (ignore the cache), `pin:<field>=<value>,...` = this variant for every
 * matmul (fields of DecodeVariant: isa, weightRows, prefetch, rowsPerTask, threads, batchKernel, prefillKernel).
 *
 * Besides the one-row fields it times the batched decode step's kernel (`batchKernel`: the block kernels
 * or their register form, at TUNE_BATCH_ROWS activation rows) where the level has both, and for the layers'
 * groups the prefill's (`prefillKernel`: the block kernels over 32-row tiles or the register form over 8-row
 * tiles, at TUNE_PREFILL_ROWS activation rows).
 */
import { createHash } from "node:crypto";
import { mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { cpus, homedir } from "node:os";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { GGML_TYPE_TRAITS, type GgmlType } from "@keepquant/gguf";
import { NativeArgumentError } from "./errors.js";
import type { ByteView, DecodeVariant, IsaLevelName, MatmulRole, NativeAddon, NativeKernelMenuLevel } from "./native-types.js";

/** The environment variables the tuner reads (a structural type, so the declarations need no @types/node). */
export type TunerEnv = Readonly<Record<string, string | undefined>>;

export const KEEPQUANT_TUNE = "KEEPQUANT_TUNE";

/** The budget of a tuning at load (milliseconds of measuring, soft: a started timing finishes). */
export const TUNE_LOAD_BUDGET_MS = 300;
/** The budget of `keepquant bench --tune`. */
export const TUNE_FULL_BUDGET_MS = 5000;
/** Bytes one timing pass reads: more than a last-level cache holds, so weights stream from memory as in decode. */
export const TUNE_PASS_BYTES = 64 * 2 ** 20;
/** Groups smaller than this (bytes over all their matrices) keep the default: too little of a token to matter. */
export const TUNE_MIN_GROUP_BYTES = 4 * 2 ** 20;
/** Activation rows of the batched-step timing (a step of 8 sequences; the kernels' choice applies to 2 .. 8). */
export const TUNE_BATCH_ROWS = 8;
/** Bytes one batched-step pass reads: those kernels are compute-bound, so a smaller slice of the group serves. */
export const TUNE_BATCH_PASS_BYTES = 16 * 2 ** 20;
/** Activation rows of the prefill timing: a 32-row tile of the block kernels, four of the register form. */
export const TUNE_PREFILL_ROWS = 32;
/**
 * Bytes one prefill pass reads: more than two cores' L2 caches hold (a prefill reads each weight row from memory once, then
 * from cache for its other tiles; at 2 MiB, L2-resident on an AMD Zen 4, the block kernel won where 128-row prefill tasks of
 * Q4_K ran 1.15x faster through the register form, one thread, K = 1024 and 2048), and little enough for the budget at
 * load (about 2 ms a pass at 32 rows).
 */
export const TUNE_PREFILL_PASS_BYTES = 4 * 2 ** 20;
/** A candidate replaces the incumbent only when faster by more than this fraction (noise guard). */
export const TUNE_MIN_GAIN = 0.03;
/** Version of the cache file's layout; another version is ignored with a note. */
export const TUNE_CACHE_VERSION = 1;
export const TUNE_CACHE_FILE = "decode-tuning.json";

/**
 * The addon's kernel menu by level (NativeAddon.kernelMenu, type names): which weight types have decode row
 * kernels (`rows`: weightRows and prefetch act only there; elsewhere they move nothing and are not timed) and
 * which the block kernels' register form (`registers`: a batchKernel / prefillKernel to time). The tuner
 * reads it from the addon (kernelMenuOf); it lists no kernel itself.
 */
export type KernelMenu = Partial<Record<IsaLevelName, { rows: readonly string[]; registers: readonly string[] }>>;

/** The addon's kernel menu, by level and type name. */
export function kernelMenuOf(addon: { kernelMenu(): readonly NativeKernelMenuLevel[] }): KernelMenu {
  const name = (type: GgmlType) => GGML_TYPE_TRAITS[type]?.name ?? String(type);
  const menu: KernelMenu = {};
  for (const level of addon.kernelMenu()) menu[level.isa] = { rows: level.rows.map(name), registers: level.registers.map(name) };
  return menu;
}

/**
 * The candidates around each level's row kernels' defaults (where the menu lists row kernels for the type).
 * AVX2: one row at a time (interleaved rows were slower on Zen 4, so no count is timed) and 8 blocks ahead by
 * default; AVX-512: two rows, 32 K-quant blocks and 128 Q8_0 blocks ahead (cpu/x86/simd_x86.inc, simd_avx512.inc).
 */
const ROWS_SEARCH: Partial<Record<IsaLevelName, { weightRows: readonly number[]; prefetch: (kQuant: boolean) => number[] }>> = {
  avx2: { weightRows: [], prefetch: (kQuant) => (kQuant ? [16, 32] : [32, 128]) },
  avx512: { weightRows: [1, 4], prefetch: (kQuant) => (kQuant ? [16, 64] : [64, 256]) },
};

/** A decode matmul weight of the loaded model. */
export interface TunerMatrix {
  role: MatmulRole;
  type: GgmlType;
  /** N */
  rows: number;
  /** K */
  cols: number;
  rowBytes: number;
  data: ByteView;
}

/** The matrices one (role, type) choice is timed on: one K, at most about TUNE_PASS_BYTES per pass. */
export interface TuneGroup {
  role: MatmulRole;
  type: GgmlType;
  typeName: string;
  k: number;
  weights: ByteView[];
  rows: number[];
  /** bytes one pass reads */
  bytes: number;
  /** rows of the tallest matrix (the split into tasks depends on it) */
  maxRows: number;
  /** bytes of every matrix of this (role, type) in the model, every K: what one decode token reads of it */
  modelBytes: number;
}

export type FullVariant = Required<DecodeVariant>;

export interface TuneChoice {
  role: MatmulRole;
  type: string;
  variant: FullVariant;
  /** median nanoseconds of one pass: the chosen variant and the default */
  chosenNs: number;
  defaultNs: number;
  /** variants timed for this group */
  timed: number;
  /** bytes one pass reads */
  passBytes: number;
  /** the batched-step timing (median ns of one pass of TUNE_BATCH_ROWS rows), where both kernels exist */
  batch?: { rows: number; blockNs: number; registersNs: number; passBytes: number };
  /** the prefill timing (median ns of one pass of TUNE_PREFILL_ROWS rows), for the layers where both kernels exist */
  prefill?: { rows: number; blockNs: number; registersNs: number; passBytes: number };
}

export interface TuneReport {
  /** measured now, read from the cache, pinned by KEEPQUANT_TUNE, off, or not possible here */
  source: "measured" | "cache" | "pinned" | "off" | "unavailable";
  /** one sentence: why this source */
  reason: string;
  /** the cache key (CPU model, addon version, threads, shapes), hex */
  key: string;
  cacheFile?: string;
  choices: TuneChoice[];
  /** what the caller should know (a broken cache file ignored, the budget reached, a write that failed) */
  notes: string[];
  /** time spent measuring (ms; 0 from the cache) */
  measureMs: number;
  budgetMs: number;
}

/**
 * One timing: nanoseconds of each pass of `group` with `variant` (the native timer by default), with
 * `actRows` activation rows (1, or TUNE_BATCH_ROWS for the batched-step kernel over batchSlice(group)).
 */
export type TuneTimer = (group: TuneGroup, variant: FullVariant, passes: number, actRows?: number) => number[];

export interface TuneOptions {
  /** measuring budget in ms (default TUNE_LOAD_BUDGET_MS) */
  budgetMs?: number;
  /** measure even when the cache has an entry (bench --tune) */
  force?: boolean;
  /** cache directory; default $XDG_CACHE_HOME/keepquant or ~/.cache/keepquant; null: no cache */
  cacheDir?: string | null;
  env?: TunerEnv;
  /** injected for tests: the timer, the budget clock (ms), the CPU model and addon version of the key */
  timer?: TuneTimer;
  now?: () => number;
  cpuModel?: string;
  addonVersion?: string;
  threads?: number;
  isaLevels?: readonly IsaLevelName[];
  /** the kernel menu (default: the addon's, kernelMenuOf(addon)) */
  kernelMenu?: KernelMenu;
  /** passes per timing (default 2 at load, 3 with force) */
  passes?: number;
}

export const DEFAULT_VARIANT: FullVariant = {
  isa: "current",
  weightRows: 0,
  prefetch: 0,
  rowsPerTask: 0,
  threads: 0,
  batchKernel: 0,
  prefillKernel: 0,
};

function full(v: DecodeVariant): FullVariant {
  return { ...DEFAULT_VARIANT, ...v };
}

// ---------------------------------------------------------------- KEEPQUANT_TUNE

export type TuneMode = { mode: "auto" } | { mode: "off" } | { mode: "force" } | { mode: "pin"; variant: FullVariant };

const VARIANT_FIELDS = ["isa", "weightRows", "prefetch", "rowsPerTask", "threads", "batchKernel", "prefillKernel"] as const;
const ISA_VALUES = ["current", "generic", "avx2", "avx512", "neon"] as const;

/** KEEPQUANT_TUNE parsed; a bad value is a NativeArgumentError that names the variable. */
export function parseTuneMode(env: TunerEnv = process.env): TuneMode {
  const raw = env[KEEPQUANT_TUNE]?.trim() ?? "";
  if (raw === "" || raw === "on") return { mode: "auto" };
  if (raw === "off" || raw === "0") return { mode: "off" };
  if (raw === "force") return { mode: "force" };
  const bad = (detail: string) =>
    new NativeArgumentError(
      "decode tuning",
      KEEPQUANT_TUNE,
      `${JSON.stringify(raw)}: ${detail} (expected off, force, or pin:<field>=<value>,... with fields ${VARIANT_FIELDS.join(", ")})`,
    );
  if (!raw.startsWith("pin:")) throw bad("unknown value");
  const variant: FullVariant = { ...DEFAULT_VARIANT };
  for (const part of raw.slice(4).split(",")) {
    if (part.trim() === "") continue;
    const [name, value, extra] = part.split("=").map((s) => s.trim());
    if (value === undefined || extra !== undefined) throw bad(`"${part}" is not <field>=<value>`);
    if (name === "isa") {
      if (!(ISA_VALUES as readonly string[]).includes(value)) throw bad(`isa must be one of ${ISA_VALUES.join(", ")}, got "${value}"`);
      variant.isa = value as FullVariant["isa"];
    } else if ((VARIANT_FIELDS as readonly string[]).includes(name!)) {
      // every field but isa is a non-negative integer
      if (!/^\d+$/.test(value)) throw bad(`${name} must be a non-negative integer, got "${value}"`);
      variant[name as Exclude<(typeof VARIANT_FIELDS)[number], "isa">] = Number(value);
    } else {
      throw bad(`unknown field "${name}"`);
    }
  }
  return { mode: "pin", variant };
}

/** $XDG_CACHE_HOME/keepquant, else ~/.cache/keepquant. */
export function tuneCacheDir(env: TunerEnv = process.env): string {
  const xdg = env.XDG_CACHE_HOME;
  return path.join(xdg && path.isAbsolute(xdg) ? xdg : path.join(env.HOME || homedir(), ".cache"), "keepquant");
}

// ---------------------------------------------------------------- groups

/**
 * The (role, type) groups worth tuning: per group the K with the most bytes, its matrices up to TUNE_PASS_BYTES;
 * the groups in order of the bytes a decode token reads of them, most first.
 */
export function tuneGroups(matrices: readonly TunerMatrix[]): TuneGroup[] {
  const byKey = new Map<string, TunerMatrix[]>();
  for (const m of matrices) {
    const key = `${m.role}/${m.type}/${m.cols}`;
    const list = byKey.get(key) ?? [];
    list.push(m);
    byKey.set(key, list);
  }
  const best = new Map<string, { bytes: number; list: TunerMatrix[] }>();
  const modelBytes = new Map<string, number>();
  for (const list of byKey.values()) {
    const first = list[0]!;
    const bytes = list.reduce((s, m) => s + m.rows * m.rowBytes, 0);
    const key = `${first.role}/${first.type}`;
    modelBytes.set(key, (modelBytes.get(key) ?? 0) + bytes);
    const current = best.get(key);
    if (!current || bytes > current.bytes) best.set(key, { bytes, list });
  }
  const groups: TuneGroup[] = [];
  for (const [key, { bytes: total, list }] of best) {
    if (total < TUNE_MIN_GROUP_BYTES) continue;
    const first = list[0]!;
    const group: TuneGroup = {
      role: first.role,
      type: first.type,
      typeName: GGML_TYPE_TRAITS[first.type]?.name ?? String(first.type),
      k: first.cols,
      weights: [],
      rows: [],
      bytes: 0,
      maxRows: 0,
      modelBytes: modelBytes.get(key)!,
    };
    for (const m of list) {
      if (group.bytes >= TUNE_PASS_BYTES) break;
      // a matrix taller than the pass: its first rows (a tall head is tuned on a slice of itself)
      const rows = Math.min(m.rows, Math.max(1, Math.ceil((TUNE_PASS_BYTES - group.bytes) / m.rowBytes)));
      group.weights.push(new Uint8Array(m.data.buffer, m.data.byteOffset, rows * m.rowBytes));
      group.rows.push(rows);
      group.bytes += rows * m.rowBytes;
      group.maxRows = Math.max(group.maxRows, m.rows);
    }
    groups.push(group);
  }
  // the groups a token reads most of first, so that the budget at load runs out on the smallest (in role order
  // the 0.8B Q4_K_M file's head came last); ties in role, then type order
  groups.sort((a, b) => b.modelBytes - a.modelBytes || (a.role === b.role ? a.type - b.type : a.role < b.role ? 1 : -1));
  return groups;
}

/**
 * The search's version in the cache key: a choice made from another candidate set, or among kernels whose speeds
 * have since changed, is measured again. 5: the AVX-512 block kernels' dot4 form (December 2026) made them faster
 * than the register kernels for some batched-step groups (batchKernel). 6: the AVX-512 Q4_K register kernel's dot4
 * form, which now takes every tile size, and the Q4_K decode row kernel's (December 2026) changed the batched-step
 * and the AVX2-against-AVX-512 comparisons of Q4_K groups. 7: the prefill's kernel (prefillKernel) is timed.
 */
export const TUNE_SEARCH_VERSION = 7;

/** The cache key: CPU model, addon version, the search's version, threads and every group's shape. */
export function tuneKey(
  cpuModel: string,
  addonVersion: string,
  threads: number,
  groups: readonly TuneGroup[],
  searchVersion = TUNE_SEARCH_VERSION,
): string {
  const shape = groups.map((g) => `${g.role}:${g.typeName}:${g.k}:${g.maxRows}:${g.bytes}`).join(";");
  return createHash("sha256").update(`${cpuModel}\n${addonVersion}\nsearch=${searchVersion}\nthreads=${threads}\n${shape}`).digest("hex");
}

/**
 * The first matrices of `group` up to `passBytes` (a slice of the last one): what a batched-step pass reads
 * (TUNE_BATCH_PASS_BYTES) or a prefill pass (TUNE_PREFILL_PASS_BYTES).
 */
export function batchSlice(group: TuneGroup, passBytes = TUNE_BATCH_PASS_BYTES): { weights: ByteView[]; rows: number[]; bytes: number } {
  const rowBytes = group.bytes / group.rows.reduce((s, r) => s + r, 0);
  const out = { weights: [] as ByteView[], rows: [] as number[], bytes: 0 };
  for (let i = 0; i < group.weights.length && out.bytes < passBytes; i++) {
    const rows = Math.min(group.rows[i]!, Math.max(1, Math.ceil((passBytes - out.bytes) / rowBytes)));
    const w = group.weights[i]!;
    out.weights.push(new Uint8Array(w.buffer, w.byteOffset, rows * rowBytes));
    out.rows.push(rows);
    out.bytes += rows * rowBytes;
  }
  return out;
}

/** Whether the best level has the register form of the block kernels for this group's type (a batchKernel to time). */
export function hasBatchChoice(group: TuneGroup, isaLevels: readonly IsaLevelName[], menu: KernelMenu): boolean {
  return menu[isaLevels.at(-1) ?? "generic"]?.registers.includes(group.typeName) ?? false;
}

/** Whether a prefillKernel is timed for this group: a layers' group with both kernels (the head's prefill is one row). */
export function hasPrefillChoice(group: TuneGroup, isaLevels: readonly IsaLevelName[], menu: KernelMenu): boolean {
  return group.role === "layer" && hasBatchChoice(group, isaLevels, menu);
}

// ---------------------------------------------------------------- candidates

/** The stages of the search: each varies one field of the incumbent (coordinate descent from the default). */
export function candidateStages(
  group: TuneGroup,
  isaLevels: readonly IsaLevelName[],
  threads: number,
  menu: KernelMenu,
): ((v: FullVariant) => FullVariant[])[] {
  const kQuant = group.typeName.endsWith("_K");
  const stages: ((v: FullVariant) => FullVariant[])[] = [];
  // ISA path (AVX2 vs AVX-512 where both exist): "current" is the best level
  const levels = isaLevels.filter((l) => l !== "generic");
  if (levels.length > 1) stages.push((v) => levels.slice(0, -1).map((isa) => ({ ...v, isa })));
  const rowsKernels = (v: FullVariant) => {
    const level = v.isa === "current" ? (isaLevels.at(-1) ?? "generic") : v.isa;
    return menu[level]?.rows.includes(group.typeName) ? ROWS_SEARCH[level] : undefined;
  };
  // single vs pair (vs four-row) kernels: the level's other counts (Q8_0 at AVX-512: one row only)
  stages.push((v) => (rowsKernels(v)?.weightRows.filter((r) => kQuant || r === 1) ?? []).map((weightRows) => ({ ...v, weightRows })));
  // prefetch distance around the level's default (its own default included, for the second sweep below)
  const prefetchStage = (v: FullVariant) => {
    const rows = rowsKernels(v);
    return rows ? [0, ...rows.prefetch(kQuant)].filter((p) => p !== v.prefetch).map((prefetch) => ({ ...v, prefetch })) : [];
  };
  stages.push(prefetchStage);
  // rows per task: fine (balance), coarse (fewer claims), coarser (each thread streams a longer run of rows: on an
  // AMD Zen 1, 1024-2048 rows of a 248,320-row Q6_K head read 1.1-1.2x faster than 64 or 256), one task per thread
  const perThread = Math.ceil(group.maxRows / Math.max(1, threads));
  stages.push((v) =>
    [16, 256, 1024, 4096, perThread]
      .filter((r, i, all) => r < group.maxRows && all.indexOf(r) === i)
      .map((rowsPerTask) => ({ ...v, rowsPerTask })),
  );
  // the prefetch distance again, over the chosen tasks: how far ahead a thread must read depends on how long a run
  // of rows it streams (on an AMD Zen 5, a Q4_K layer group streamed 1.40x faster with 4096-row tasks and 64 blocks
  // ahead than with 64-row tasks, where 64 blocks gained nothing and 4096 rows under 3%: a single sweep of each kept
  // neither). Candidates timed already are not timed again.
  stages.push(prefetchStage);
  // threads per matmul: the caller alone (no dispatch) against the pool
  if (threads > 1) stages.push((v) => [{ ...v, threads: 1, rowsPerTask: 0 }]);
  return stages;
}

function median(values: readonly number[]): number {
  const s = [...values].sort((a, b) => a - b);
  return s.length === 0 ? Number.POSITIVE_INFINITY : s.length % 2 ? s[s.length >> 1]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
}

/**
 * Times the candidates of every group within `budgetMs` (coordinate descent: each stage varies one
 * field of the best so far). A group whose budget share runs out keeps what it found. Pure
 * bookkeeping over `timer` and `now`: the tests drive it with a fake timer.
 */
export function searchVariants(
  groups: readonly TuneGroup[],
  timer: TuneTimer,
  options: {
    budgetMs: number;
    passes: number;
    now: () => number;
    isaLevels: readonly IsaLevelName[];
    threads: number;
    /** the addon's kernel menu (kernelMenuOf) */
    kernelMenu: KernelMenu;
  },
): { choices: TuneChoice[]; notes: string[]; measureMs: number } {
  const start = options.now();
  const notes: string[] = [];
  const choices: TuneChoice[] = [];
  let budgetHit = false;
  const inBudget = () => options.now() - start < options.budgetMs;
  for (const group of groups) {
    // warm-up pass (page faults of a freshly mapped file, frequency), not counted
    timer(group, DEFAULT_VARIANT, 1);
    const defaultNs = median(timer(group, DEFAULT_VARIANT, options.passes));
    let best = DEFAULT_VARIANT;
    let bestNs = defaultNs;
    let timed = 1;
    // the block kernels (`field` 0) against their register form (1) at `rows` activation rows over a slice of
    // `passBytes`; the register form is kept when faster by more than TUNE_MIN_GAIN
    const timeKernels = (field: "batchKernel" | "prefillKernel", rows: number, passBytes: number) => {
      const block: FullVariant = { ...best, [field]: 0 };
      const registers: FullVariant = { ...best, [field]: 1 };
      timer(group, registers, 1, rows); // warm-up
      const blockNs = median(timer(group, block, options.passes, rows));
      const registersNs = median(timer(group, registers, options.passes, rows));
      if (registersNs < blockNs * (1 - TUNE_MIN_GAIN)) best = registers;
      return { rows, blockNs, registersNs, passBytes: batchSlice(group, passBytes).bytes };
    };
    // the batched step's kernel first (it is independent of the one-row fields, and cheap: a slice of the group),
    // then the prefill's (independent of the other fields too; a smaller slice at more rows)
    const batch =
      hasBatchChoice(group, options.isaLevels, options.kernelMenu) && inBudget()
        ? timeKernels("batchKernel", TUNE_BATCH_ROWS, TUNE_BATCH_PASS_BYTES)
        : undefined;
    const prefill =
      hasPrefillChoice(group, options.isaLevels, options.kernelMenu) && inBudget()
        ? timeKernels("prefillKernel", TUNE_PREFILL_ROWS, TUNE_PREFILL_PASS_BYTES)
        : undefined;
    const seen = new Set<string>([JSON.stringify(DEFAULT_VARIANT), JSON.stringify(best)]);
    for (const stage of candidateStages(group, options.isaLevels, options.threads, options.kernelMenu)) {
      for (const candidate of stage(best)) {
        const key = JSON.stringify(candidate);
        if (seen.has(key)) continue;
        seen.add(key);
        if (!inBudget()) {
          budgetHit = true;
          break;
        }
        const ns = median(timer(group, candidate, options.passes));
        timed++;
        if (ns < bestNs * (1 - TUNE_MIN_GAIN)) {
          best = candidate;
          bestNs = ns;
        }
      }
      if (budgetHit) break;
    }
    choices.push({
      role: group.role,
      type: group.typeName,
      variant: best,
      chosenNs: bestNs,
      defaultNs,
      timed,
      passBytes: group.bytes,
      ...(batch ? { batch } : {}),
      ...(prefill ? { prefill } : {}),
    });
    if (budgetHit) break;
  }
  for (const group of groups.slice(choices.length))
    choices.push({
      role: group.role,
      type: group.typeName,
      variant: DEFAULT_VARIANT,
      chosenNs: 0,
      defaultNs: 0,
      timed: 0,
      passBytes: group.bytes,
    });
  if (budgetHit) notes.push(`the tuning budget (${options.budgetMs} ms) was reached: untimed fields keep their defaults`);
  return { choices, notes, measureMs: options.now() - start };
}

// ---------------------------------------------------------------- cache

interface CacheFile {
  version: number;
  entries: Record<string, { cpuModel: string; addonVersion: string; measuredAt: string; choices: TuneChoice[] }>;
}

function validChoice(c: unknown, isaLevels: readonly IsaLevelName[]): c is TuneChoice {
  if (typeof c !== "object" || c === null) return false;
  const o = c as Record<string, unknown>;
  const v = o.variant as Record<string, unknown> | undefined;
  if ((o.role !== "layer" && o.role !== "head") || typeof o.type !== "string" || typeof v !== "object" || v === null) return false;
  if (v.isa !== "current" && (v.isa === "generic" || !isaLevels.includes(v.isa as IsaLevelName))) return false;
  if (v.batchKernel !== undefined && v.batchKernel !== 0 && v.batchKernel !== 1) return false;
  if (v.prefillKernel !== undefined && v.prefillKernel !== 0 && v.prefillKernel !== 1) return false;
  return ["weightRows", "prefetch", "rowsPerTask", "threads"].every((f) => Number.isInteger(v[f]) && (v[f] as number) >= 0);
}

/** The cache file's entry for `key`, or undefined with a note when the file is absent, broken or stale. */
export function readTuneCache(
  file: string,
  key: string,
  groups: readonly TuneGroup[],
  isaLevels: readonly IsaLevelName[],
  notes: string[],
): TuneChoice[] | undefined {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch {
    return undefined; // no cache yet: nothing to say
  }
  let parsed: CacheFile;
  try {
    parsed = JSON.parse(text) as CacheFile;
  } catch (error) {
    notes.push(`tuning cache ${file} is not valid JSON (${(error as Error).message}); ignored, measuring again`);
    return undefined;
  }
  if (typeof parsed !== "object" || parsed === null || parsed.version !== TUNE_CACHE_VERSION || typeof parsed.entries !== "object") {
    notes.push(
      `tuning cache ${file} has layout version ${JSON.stringify((parsed as { version?: unknown })?.version)}, not ${TUNE_CACHE_VERSION}; ignored, measuring again`,
    );
    return undefined;
  }
  const entry = parsed.entries[key];
  if (!entry) return undefined;
  const choices = entry.choices;
  const wanted = groups.map((g) => `${g.role}/${g.typeName}`).join(",");
  if (
    !Array.isArray(choices) ||
    !choices.every((c) => validChoice(c, isaLevels)) ||
    choices.map((c) => `${c.role}/${c.type}`).join(",") !== wanted
  ) {
    notes.push(`tuning cache ${file}: the entry for this CPU and model is stale or malformed; ignored, measuring again`);
    return undefined;
  }
  return choices.map((c) => ({ ...c, variant: full(c.variant) }));
}

/** Adds (or replaces) `key`'s entry, keeping the other entries of a readable file; returns a note on failure. */
export function writeTuneCache(file: string, key: string, entry: CacheFile["entries"][string]): string | undefined {
  let cache: CacheFile = { version: TUNE_CACHE_VERSION, entries: {} };
  try {
    const old = JSON.parse(readFileSync(file, "utf8")) as CacheFile;
    if (old?.version === TUNE_CACHE_VERSION && typeof old.entries === "object" && old.entries !== null) cache = old;
  } catch {
    // absent or broken: start over
  }
  cache.entries[key] = entry;
  try {
    mkdirSync(path.dirname(file), { recursive: true });
    const tmp = `${file}.${process.pid}.tmp`;
    writeFileSync(tmp, `${JSON.stringify(cache, null, 1)}\n`);
    renameSync(tmp, file);
    return undefined;
  } catch (error) {
    return `tuning cache ${file} could not be written (${(error as Error).message}); the choice holds for this process only`;
  }
}

// ---------------------------------------------------------------- the tuner

export function nativeTimer(addon: NativeAddon): TuneTimer {
  return (group, variant, passes, actRows = 1) => {
    if (actRows <= 1) return Array.from(addon.timeDecodeMatmul(group.type, group.k, group.weights, group.rows, variant, passes));
    const slice = batchSlice(group, actRows > TUNE_BATCH_ROWS ? TUNE_PREFILL_PASS_BYTES : TUNE_BATCH_PASS_BYTES);
    return Array.from(addon.timeDecodeMatmul(group.type, group.k, slice.weights, slice.rows, variant, passes, actRows));
  };
}

/**
 * Tunes the decode matmuls of `matrices` and applies the choice through `addon.setDecodeVariant`.
 * Never throws for a cache problem (a note instead); throws NativeArgumentError for a bad KEEPQUANT_TUNE.
 */
export function tuneDecode(addon: NativeAddon, matrices: readonly TunerMatrix[], options: TuneOptions = {}): TuneReport {
  const env = options.env ?? process.env;
  const mode = parseTuneMode(env);
  const budgetMs = options.budgetMs ?? TUNE_LOAD_BUDGET_MS;
  const threads = options.threads ?? addon.getThreads();
  const isaLevels = options.isaLevels ?? addon.buildInfo().isaAvailable;
  const cpuModel = options.cpuModel ?? cpus()[0]?.model ?? "unknown CPU";
  const addonVersion = options.addonVersion ?? `abi ${addon.abiVersion()}`;
  const groups = tuneGroups(matrices);
  const key = tuneKey(cpuModel, addonVersion, threads, groups);
  const notes: string[] = [];
  const apply = (choices: TuneChoice[]) => {
    addon.resetDecodeVariants();
    for (const c of choices) {
      const group = groups.find((g) => g.role === c.role && g.typeName === c.type);
      if (group) addon.setDecodeVariant(c.role, group.type, c.variant);
    }
  };
  const report = (source: TuneReport["source"], reason: string, choices: TuneChoice[], measureMs = 0, cacheFile?: string): TuneReport => ({
    source,
    reason,
    key,
    ...(cacheFile ? { cacheFile } : {}),
    choices,
    notes,
    measureMs,
    budgetMs,
  });
  if (mode.mode === "off") {
    addon.resetDecodeVariants();
    return report("off", `${KEEPQUANT_TUNE}=off: the built-in defaults`, []);
  }
  if (mode.mode === "pin") {
    addon.resetDecodeVariants();
    const choices = groups.map((g) => ({
      role: g.role,
      type: g.typeName,
      variant: mode.variant,
      chosenNs: 0,
      defaultNs: 0,
      timed: 0,
      passBytes: g.bytes,
    }));
    // every matrix type, not only the tuned groups: a pin is for every decode matmul
    const types = new Set(matrices.map((m) => `${m.role}/${m.type}`));
    try {
      for (const t of types) {
        const [role, type] = t.split("/") as [MatmulRole, string];
        addon.setDecodeVariant(role, Number(type) as GgmlType, mode.variant);
      }
    } catch (error) {
      addon.resetDecodeVariants();
      throw new NativeArgumentError("decode tuning", KEEPQUANT_TUNE, (error as Error).message);
    }
    return report("pinned", `${KEEPQUANT_TUNE} pins one variant for every decode matmul`, choices);
  }
  if (groups.length === 0) {
    addon.resetDecodeVariants();
    return report("unavailable", "no decode matmul of this model is large enough to tune", []);
  }
  const dir = options.cacheDir === undefined ? tuneCacheDir(env) : options.cacheDir;
  const cacheFile = dir === null ? undefined : path.join(dir, TUNE_CACHE_FILE);
  const force = options.force || mode.mode === "force";
  if (cacheFile && !force) {
    const cached = readTuneCache(cacheFile, key, groups, isaLevels, notes);
    if (cached) {
      try {
        apply(cached);
        return report("cache", "read from the cache (measured before on this CPU, addon and model shape)", cached, 0, cacheFile);
      } catch (error) {
        notes.push(`tuning cache ${cacheFile}: the cached variant cannot run here (${(error as Error).message}); ignored, measuring again`);
      }
    }
  }
  addon.resetDecodeVariants();
  const searched = searchVariants(groups, options.timer ?? nativeTimer(addon), {
    budgetMs,
    passes: options.passes ?? (force ? 3 : 2),
    now: options.now ?? (() => performance.now()),
    isaLevels,
    threads,
    kernelMenu: options.kernelMenu ?? kernelMenuOf(addon),
  });
  notes.push(...searched.notes);
  apply(searched.choices);
  if (cacheFile) {
    const failed = writeTuneCache(cacheFile, key, {
      cpuModel,
      addonVersion,
      measuredAt: new Date().toISOString(),
      choices: searched.choices,
    });
    if (failed) notes.push(failed);
  }
  const why = force ? "measured again whatever the cache holds (forced)" : "no cache entry for this CPU, addon and model shape";
  return report("measured", why, searched.choices, searched.measureMs, cacheFile);
}
