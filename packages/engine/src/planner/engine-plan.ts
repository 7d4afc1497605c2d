import { readGgufModel, type GgufByteSource, type GgufFile } from "@keepquant/gguf";
import type { EnvSource } from "@keepquant/quant";
import type { EngineOptions } from "../engine-types.js";
import { cpuAvailableMemory, cpuDevice, type CpuMemory, type PlanDevice } from "./devices.js";
import { PlanError } from "./errors.js";
import { planResidency, type ResidencyPlan } from "./residency.js";

/**
 * The Engine's defaults for the options that size memory (engine.ts `resolveOptions`); the planner
 * test checks them against a loaded Engine.
 */
export const ENGINE_MEMORY_DEFAULTS = Object.freeze({ kvCacheTokens: 8192, maxSequences: 4, maxBatchTokens: 512, blockSize: 16 });

/** The options of `Engine.load` that decide its memory. */
export type EngineMemoryOptions = Pick<
  EngineOptions,
  | "numerics"
  | "kvType"
  | "flashAttention"
  | "blockSize"
  | "kvCacheTokens"
  | "maxSequences"
  | "maxBatchTokens"
  | "prefixCacheSnapshots"
  | "speculative"
>;

/**
 * Plans what `Engine.load(path, options)` keeps resident: one KV pool of `kvCacheTokens` shared by
 * `maxSequences` sequences, their GDN state slots (plus prefix-cache snapshots), scratch for
 * `maxBatchTokens` rows. With flash attention (the default) the KV cache is stored as f16 whatever
 * `kvType` says, as the engine does.
 */
export function planEngineResidency(
  file: Pick<GgufFile, "metadata" | "tensors">,
  options: EngineMemoryOptions,
  device: PlanDevice,
  env?: EnvSource,
): ResidencyPlan {
  const kvCacheTokens = options.kvCacheTokens ?? ENGINE_MEMORY_DEFAULTS.kvCacheTokens;
  return planResidency(file, {
    device,
    contextLength: kvCacheTokens,
    sequences: options.maxSequences ?? ENGINE_MEMORY_DEFAULTS.maxSequences,
    kvCacheTokens,
    kvType: (options.flashAttention ?? true) ? "f16" : (options.kvType ?? "f16"),
    numerics: options.numerics ?? "llama",
    policy: "packed",
    batchTokens: options.maxBatchTokens ?? ENGINE_MEMORY_DEFAULTS.maxBatchTokens,
    blockSize: options.blockSize ?? ENGINE_MEMORY_DEFAULTS.blockSize,
    stateSnapshots: options.prefixCacheSnapshots ?? 0,
    ...(options.speculative?.method === "mtp" ? { speculative: "mtp" as const, draftTokens: options.speculative.draftTokens ?? 3 } : {}),
    ...(env === undefined ? {} : { env }),
  });
}

export interface CpuLoadCheck {
  plan: ResidencyPlan;
  /** One paragraph: the verdict, what would make it fit, and how memory-mapped weights are counted. */
  explanation: string;
}

const isGgufFile = (value: string | GgufByteSource | GgufFile): value is GgufFile => typeof value === "object" && "tensors" in value;

/**
 * Asks the planner, from the GGUF header of `path` alone, whether `Engine.load(path, options)` fits
 * this machine's available memory (`cpuAvailableMemory`). Never throws for "does not fit": read
 * `plan.fits`; `assertCpuFits` turns a refusal into a PlanError. `path` may be a byte source (a
 * model on the Hub read by Range requests, before it is downloaded), or a header already read (a split
 * model's shards merged by `readGgufModel`); a path to a split model's shard reads every shard's header.
 */
export async function checkCpuLoad(
  path: string | GgufByteSource | GgufFile,
  options: EngineMemoryOptions = {},
  machine: { memory?: CpuMemory; env?: EnvSource } = {},
): Promise<CpuLoadCheck> {
  const file = isGgufFile(path) ? path : await readGgufModel(path);
  const name = typeof path === "string" ? path : isGgufFile(path) ? path.source : path.description;
  const memory = machine.memory ?? cpuAvailableMemory();
  const plan = planEngineResidency(file, options, cpuDevice(memory), machine.env);
  const capitalized = (text: string): string => text.charAt(0).toUpperCase() + text.slice(1);
  const sentences = [`${name} on this machine: ${plan.verdict}`, `Available memory from ${memory.source}`];
  if (plan.suggestions.length > 0) sentences.push(`Would fit with: ${plan.suggestions.map((s) => s.message).join("; ")}`);
  sentences.push(...plan.notes.map(capitalized));
  return { plan, explanation: sentences.join(". ") };
}

/**
 * Refuses a cpu load that does not fit: throws PlanError `PLAN_DOES_NOT_FIT` with the planner's
 * explanation (for applications that call `Engine.load` themselves). Returns the check when it fits.
 */
export async function assertCpuFits(
  path: string,
  options: EngineMemoryOptions = {},
  machine: { memory?: CpuMemory; env?: EnvSource } = {},
): Promise<CpuLoadCheck> {
  const check = await checkCpuLoad(path, options, machine);
  if (!check.plan.fits) {
    throw new PlanError("PLAN_DOES_NOT_FIT", check.explanation, { field: "model" });
  }
  return check;
}
