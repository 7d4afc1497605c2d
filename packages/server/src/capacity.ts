/**
 * Capacity: how many sequences `serve` runs at once and how many tokens its KV cache holds, sized by
 * the residency planner for a memory budget. Every byte count comes from the planner
 * (`planEngineResidency`: weights, KV cache, GDN state slots and snapshots, scratch); this module only
 * searches for the most sequences whose plan fits the budget, each with a whole context of KV cache,
 * up to MAX_PLANNED_SEQUENCES. Explicit values (`--max-seqs`, `--kv-tokens`) are kept as given.
 */
import { customDevice, type EngineMemoryOptions, planEngineResidency } from "@keepquant/engine";

/** The most sequences the planner chooses on its own (an explicit --max-seqs may go to 256). */
export const MAX_PLANNED_SEQUENCES = 32;

/** The share of the available memory `serve` plans for when no budget is given. */
export const DEFAULT_MEMORY_BUDGET_SHARE = 0.5;

/** What the GGUF header gives the planner (`readGguf(path)`). */
export type PlannedFile = Parameters<typeof planEngineResidency>[0];

export interface CapacityInput {
  file: PlannedFile;
  /** Most tokens one request holds (the server's contextTokens). */
  contextTokens: number;
  /** Bytes the whole engine may use: weights, KV cache, state, scratch. */
  memoryBudgetBytes: number;
  /** The engine's other memory options (numerics, KV type, prefix-cache snapshots, ...). */
  engine?: Omit<EngineMemoryOptions, "maxSequences" | "kvCacheTokens">;
  /** Given explicitly: kept as is. */
  maxSequences?: number;
  kvCacheTokens?: number;
}

export interface Capacity {
  maxSequences: number;
  kvCacheTokens: number;
  memoryBudgetBytes: number;
  /** The planner's total for the chosen sizes. */
  plannedBytes: number;
  /** Whether that total is within the budget (false: even one sequence does not fit, or explicit sizes do not). */
  fits: boolean;
  /** What decided the sequence count. */
  limitedBy: "budget" | "cap" | "explicit";
}

function positiveInteger(value: number, name: string): number {
  if (!Number.isSafeInteger(value) || value < 1) throw new RangeError(`${name} must be a positive integer, got ${value}`);
  return value;
}

/** Sizes maxSequences and kvCacheTokens for a budget (see the module comment). */
export function planCapacity(input: CapacityInput): Capacity {
  const context = positiveInteger(input.contextTokens, "contextTokens");
  const budget = input.memoryBudgetBytes;
  if (!Number.isSafeInteger(budget) || budget < 1) throw new RangeError(`memoryBudgetBytes must be a positive integer, got ${budget}`);
  const device = customDevice(budget);
  const plan = (sequences: number) => {
    const kvCacheTokens = input.kvCacheTokens ?? context * sequences;
    const result = planEngineResidency(input.file, { ...input.engine, maxSequences: sequences, kvCacheTokens }, device);
    return { kvCacheTokens, totalBytes: result.totalBytes, fits: result.fits };
  };
  if (input.maxSequences !== undefined) {
    const sequences = positiveInteger(input.maxSequences, "maxSequences");
    const chosen = plan(sequences);
    return { maxSequences: sequences, ...pick(chosen), memoryBudgetBytes: budget, limitedBy: "explicit" };
  }
  // the plan grows with the sequence count: the largest that fits, by bisection
  let low = 1;
  let high = MAX_PLANNED_SEQUENCES;
  if (!plan(1).fits) high = 1;
  while (low < high) {
    const middle = Math.ceil((low + high) / 2);
    if (plan(middle).fits) low = middle;
    else high = middle - 1;
  }
  const chosen = plan(low);
  return {
    maxSequences: low,
    ...pick(chosen),
    memoryBudgetBytes: budget,
    limitedBy: low === MAX_PLANNED_SEQUENCES && chosen.fits ? "cap" : "budget",
  };
}

function pick(plan: {
  kvCacheTokens: number;
  totalBytes: number;
  fits: boolean;
}): Pick<Capacity, "kvCacheTokens" | "plannedBytes" | "fits"> {
  return { kvCacheTokens: plan.kvCacheTokens, plannedBytes: plan.totalBytes, fits: plan.fits };
}

const UNITS: Record<string, number> = {
  b: 1,
  kb: 1e3,
  mb: 1e6,
  gb: 1e9,
  tb: 1e12,
  kib: 2 ** 10,
  mib: 2 ** 20,
  gib: 2 ** 30,
  tib: 2 ** 40,
};

/**
 * Parses a byte size: an integer number of bytes, or a number with a unit: KiB, MiB, GiB, TiB (powers
 * of 1024) or KB, MB, GB, TB (powers of 1000), e.g. `4GiB`, `1.5 GB`. Returns undefined for anything else.
 */
export function parseByteSize(text: string): number | undefined {
  const match = /^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$/.exec(text);
  if (!match) return undefined;
  const unit = UNITS[(match[2] || "b").toLowerCase()];
  if (unit === undefined) return undefined;
  const bytes = Math.floor(Number(match[1]) * unit);
  return Number.isSafeInteger(bytes) && bytes >= 1 ? bytes : undefined;
}
