/**
 * Opening a model file for an engine: the GGUF file (every shard of a split model, or a Hugging Face
 * cache entry), its load plan (refusals fail here, before any compute), the weight source (memory-
 * mapped with the native addon, read without), the bound weights and the tokenizer.
 */
import { buildLoadPlan, readGgufModel } from "@keepquant/gguf";
import type { EngineOptions, WeightMemory } from "./engine-types.js";
import type { ResolvedOptions } from "./engine-options.js";
import { EngineLoadError, EngineOptionError } from "./errors.js";
import { loadQwen35Weights } from "./model/load.js";
import { loadTtNative } from "./model/native-module.js";
import { openWeightSource } from "./model/weight-source.js";
import type { ModelWeights } from "./model/weights.js";
import { resolveModelFile } from "./model-source.js";
import { Tokenizer } from "./tokenizer/index.js";

export interface OpenedModel {
  weights: ModelWeights;
  tokenizer: Tokenizer | undefined;
  diagnostics: string[];
  weightMemory: WeightMemory;
  /** the model's context_length */
  contextLength: number;
}

/** Opens `model` (a path or an `hf:` reference) and binds its weights. */
export async function openModelFile(model: string, resolved: ResolvedOptions, options: EngineOptions): Promise<OpenedModel> {
  const path = await resolveModelFile(model, options.hub);
  const file = await readGgufModel(path);
  const mtp = resolved.speculative?.method === "mtp";
  const plan = buildLoadPlan(file, mtp ? { speculative: "mtp" } : {});
  if (mtp && plan.config.nextnPredictLayers === 0) {
    throw new EngineOptionError(
      "ENGINE_BAD_OPTION",
      `${path}: speculative method "mtp" needs an MTP drafter block, but the file has no qwen35.nextn_predict_layers (block_count ${plan.config.blockCount} = the trunk's layers only); run it without speculative decoding`,
      { field: "speculative.method" },
    );
  }
  if (!plan.ok) {
    const first = plan.refused.slice(0, 5).map((r) => `${r.name}: ${r.reason}`);
    throw new EngineLoadError(
      "ENGINE_LOAD_REFUSED",
      `${path}: the load plan refuses ${plan.refused.length} tensor(s): ${first.join("; ")}${plan.refused.length > 5 ? "; ..." : ""}`,
      { field: plan.refused[0]?.name },
    );
  }
  const diagnostics: string[] = plan.diagnostics.filter((d) => d.level !== "info" || d.code === "MTP_SKIPPED").map((d) => d.message);
  const { native } = await loadTtNative();
  const { bytes, weightMemory } = openWeightSource(file, path, native, resolved.weightMemory, diagnostics);
  const loaded = await loadQwen35Weights(plan, bytes, resolved.numerics, options.onProgress);
  diagnostics.push(...loaded.diagnostics);
  let tokenizer: Tokenizer | undefined;
  try {
    tokenizer = Tokenizer.fromGguf(file);
  } catch (error) {
    diagnostics.push(`tokenizer unavailable: ${(error as Error).message}; string prompts are refused`);
  }
  return { weights: loaded.weights, tokenizer, diagnostics, weightMemory, contextLength: plan.config.contextLength };
}
