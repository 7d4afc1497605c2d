/**
 * A request's parameters checked and turned into what its generation runs with: the sampler, the
 * token limits, the detokenizer and the stop strings (typed errors naming the request field).
 */
import type { GenerateParams } from "../engine-types.js";
import { EngineError, EngineOptionError } from "../errors.js";
import { MAX_TOP_LOGPROBS, Sampler, type SamplerKernels, StopStringMatcher } from "../sampling/index.js";
import { StreamingDetokenizer, type Tokenizer } from "../tokenizer/index.js";
import type { GenerationSetup } from "./generation.js";

/** What bounds a generation on this engine. */
export interface GenerationBounds {
  /** the longest sequence (prompt + generated tokens) */
  contextLength: number;
  /** the tokens the KV cache holds */
  kvTokens: number;
  tokenizer: Tokenizer | undefined;
  argmax: SamplerKernels["argmax"];
}

/** Checks `params` for a prompt of `ids` (token ids already checked) and returns its generation's setup. */
export function setUpGeneration(
  ids: number[],
  params: GenerateParams,
  bounds: GenerationBounds,
): Omit<GenerationSetup, "id" | "validation" | "speculation"> {
  const { signal, parseSpecial, stopAtEog, logprobs, prefixCachePoints, constraint, reasoning, thinkingBudget, ...samplingParams } = params;
  void signal;
  void parseSpecial;
  void constraint;
  void reasoning;
  void thinkingBudget;
  if (logprobs !== undefined && (!Number.isInteger(logprobs) || logprobs < 0 || logprobs > MAX_TOP_LOGPROBS)) {
    throw new EngineOptionError("ENGINE_BAD_REQUEST", `logprobs must be an integer in [0, ${MAX_TOP_LOGPROBS}], got ${String(logprobs)}`, {
      field: "logprobs",
    });
  }
  let sampler: Sampler;
  try {
    sampler = new Sampler({ ...samplingParams, temperature: samplingParams.temperature ?? 0 }, { argmax: bounds.argmax });
  } catch (error) {
    throw new EngineOptionError("ENGINE_BAD_REQUEST", (error as Error).message, {
      field: (error as { field?: string }).field,
      cause: error,
    });
  }
  if (ids.length + 1 > bounds.contextLength) {
    throw new EngineError(
      "ENGINE_PROMPT_TOO_LONG",
      `prompt of ${ids.length} tokens does not fit the context of ${bounds.contextLength} tokens (one more is needed to generate): shorten it or raise contextLength (--ctx)`,
      { field: "prompt" },
    );
  }
  const capacity = Math.min(bounds.contextLength, bounds.kvTokens);
  if (ids.length + 1 > capacity) {
    throw new EngineError(
      "ENGINE_CAPACITY",
      `prompt of ${ids.length} tokens does not fit the KV cache (${capacity} tokens; raise kvCacheTokens, --ctx in the CLI)`,
      { field: "prompt" },
    );
  }
  const detokenizer = bounds.tokenizer ? new StreamingDetokenizer(bounds.tokenizer) : undefined;
  if (sampler.params.stop.length > 0 && !detokenizer) {
    throw new EngineError("ENGINE_NO_TOKENIZER", "stop strings need a tokenizer", { field: "stop" });
  }
  const stops = new StopStringMatcher(sampler.params.stop);
  if (
    prefixCachePoints !== undefined &&
    (!Array.isArray(prefixCachePoints) || prefixCachePoints.some((p) => !Number.isSafeInteger(p) || p < 0))
  ) {
    throw new EngineOptionError("ENGINE_BAD_REQUEST", "prefixCachePoints must be an array of token counts >= 0", {
      field: "prefixCachePoints",
    });
  }
  return {
    tokens: ids,
    params,
    maxTokens: Number.isFinite(sampler.params.maxTokens) ? sampler.params.maxTokens : 256,
    ignoreEog: sampler.params.ignoreEog || stopAtEog === false,
    maxLength: capacity,
    sampler,
    detokenizer,
    stops,
    snapshotPoints: prefixCachePoints,
  };
}
