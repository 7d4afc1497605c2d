/**
 * The engine's options, checked and defaulted once (`EngineOptions` -> `ResolvedOptions`); every
 * bad value is an EngineOptionError naming its field.
 */
import type { EngineOptions } from "./engine-types.js";
import { type GrammarLimits, resolveGrammarLimits } from "./constrain/index.js";
import { EngineOptionError } from "./errors.js";
import type { KvType } from "./kv/paged-kv.js";
import type { Numerics } from "./model/matmul.js";
import { type ResolvedSpeculative, resolveSpeculative } from "./generation/speculative.js";

export interface ResolvedOptions {
  numerics: Numerics;
  threads: number | undefined;
  kvType: KvType;
  weightMemory: "auto" | "huge-pages" | "mapped";
  blockSize: number;
  kvCacheTokens: number;
  contextLength: number;
  maxSequences: number;
  maxBatchTokens: number;
  provider: "auto" | "ts";
  nativeStep: boolean;
  flashAttention: boolean;
  prefixCacheSnapshots: number;
  exactKernels: boolean;
  speculative: ResolvedSpeculative | undefined;
  tune: boolean | { budgetMs?: number; force?: boolean };
  grammarLimits: GrammarLimits;
}

export function positiveInteger(value: unknown, field: string, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== "number" || !Number.isInteger(value) || value < 1) {
    throw new EngineOptionError("ENGINE_BAD_OPTION", `${field} must be a positive integer, got ${String(value)}`, { field });
  }
  return value;
}

/** KEEPQUANT_WEIGHT_MEMORY: the default of EngineOptions.weightMemory (unset or empty: none). */
function weightMemoryFromEnv(): EngineOptions["weightMemory"] | undefined {
  const value = process.env.KEEPQUANT_WEIGHT_MEMORY;
  return value ? (value as EngineOptions["weightMemory"]) : undefined;
}

export function resolveOptions(options: EngineOptions): ResolvedOptions {
  const numerics = options.numerics ?? "llama";
  if (numerics !== "llama" && numerics !== "bf16" && numerics !== "exact") {
    throw new EngineOptionError("ENGINE_BAD_OPTION", `numerics must be "llama", "bf16" or "exact", got ${String(numerics)}`, {
      field: "numerics",
    });
  }
  const kvType = options.kvType ?? "f16";
  if (kvType !== "f16" && kvType !== "f32") {
    throw new EngineOptionError("ENGINE_BAD_OPTION", `kvType must be "f16" or "f32", got ${String(kvType)}`, { field: "kvType" });
  }
  const fromEnv = options.weightMemory === undefined ? weightMemoryFromEnv() : undefined;
  const weightMemory = options.weightMemory ?? fromEnv ?? "auto";
  if (weightMemory !== "auto" && weightMemory !== "huge-pages" && weightMemory !== "mapped") {
    const source = fromEnv === undefined ? "" : " (from KEEPQUANT_WEIGHT_MEMORY)";
    throw new EngineOptionError(
      "ENGINE_BAD_OPTION",
      `weightMemory must be "auto", "huge-pages" or "mapped", got ${String(weightMemory)}${source}`,
      { field: "weightMemory" },
    );
  }
  const provider = options.provider ?? "auto";
  if (provider !== "auto" && provider !== "ts") {
    throw new EngineOptionError("ENGINE_BAD_OPTION", `provider must be "auto" or "ts", got ${String(provider)}`, { field: "provider" });
  }
  // the context is the model's context_length unless given (Engine.load passes it); the KV pool is its own option
  const speculative = resolveSpeculative(options.speculative);

  const kvCacheTokens = positiveInteger(options.kvCacheTokens, "kvCacheTokens", 8192);
  const contextLength = positiveInteger(options.contextLength, "contextLength", kvCacheTokens);
  return {
    numerics,
    threads: options.threads === undefined ? undefined : positiveInteger(options.threads, "threads", 1),
    kvType,
    weightMemory,
    blockSize: positiveInteger(options.blockSize, "blockSize", 16),
    kvCacheTokens,
    contextLength,
    maxSequences: positiveInteger(options.maxSequences, "maxSequences", 4),
    maxBatchTokens: positiveInteger(options.maxBatchTokens, "maxBatchTokens", 512),
    provider,
    nativeStep: options.nativeStep ?? true,
    tune: resolveTune(options.tune),
    flashAttention: options.flashAttention ?? true,
    exactKernels: options.exactKernels ?? true,
    speculative,
    prefixCacheSnapshots:
      options.prefixCacheSnapshots === undefined || options.prefixCacheSnapshots === 0
        ? 0
        : positiveInteger(options.prefixCacheSnapshots, "prefixCacheSnapshots", 0),
    grammarLimits: resolveGrammarLimits(options.grammarLimits),
  };
}

function resolveTune(tune: EngineOptions["tune"]): ResolvedOptions["tune"] {
  if (tune === undefined || typeof tune === "boolean") return tune ?? true;
  if (typeof tune !== "object" || tune === null) {
    throw new EngineOptionError("ENGINE_BAD_OPTION", `tune must be a boolean or { budgetMs?, force? }, got ${String(tune)}`, {
      field: "tune",
    });
  }
  if (tune.budgetMs !== undefined) positiveInteger(tune.budgetMs, "tune.budgetMs", 1);
  return { ...tune };
}
