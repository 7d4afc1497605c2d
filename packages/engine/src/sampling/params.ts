/** Sampling parameters, their defaults and validation. */
import { TokenizerError } from "../tokenizer/errors.js";

export interface SamplingParams {
  /** 0 (or below) = greedy. Default 0.8 (llama.cpp's default). */
  temperature?: number;
  /** Keep the k most likely tokens; 0 = off. Default 40. */
  topK?: number;
  /** Nucleus probability; 1 = off. Default 0.95. */
  topP?: number;
  /** Keep tokens with probability >= minP x the top one's; 0 = off. Default 0.05. */
  minP?: number;
  /** Repetition penalty; 1 = off. Default 1. */
  repeatPenalty?: number;
  /** Presence penalty; 0 = off. Default 0. */
  presencePenalty?: number;
  /** Frequency penalty; 0 = off. Default 0. */
  frequencyPenalty?: number;
  /** Penalty window in tokens; 0 = off, -1 = the whole history. Default 64. */
  penaltyLastN?: number;
  /** RNG seed; the same seed, logits and parameters give the same tokens. Default 0xC0FFEE. */
  seed?: number;
  /** Stop after this many generated tokens. Default: no limit (the caller's context decides). */
  maxTokens?: number;
  /** Stop when the generated text contains one of these; the stop string is not emitted. */
  stop?: readonly string[];
  /** Keep going after an end-of-generation token. Default false. */
  ignoreEog?: boolean;
}

export type ResolvedSamplingParams = Required<Omit<SamplingParams, "maxTokens" | "stop">> & {
  maxTokens: number;
  stop: readonly string[];
};

export const DEFAULT_SAMPLING: Readonly<ResolvedSamplingParams> = Object.freeze({
  temperature: 0.8,
  topK: 40,
  topP: 0.95,
  minP: 0.05,
  repeatPenalty: 1,
  presencePenalty: 0,
  frequencyPenalty: 0,
  penaltyLastN: 64,
  seed: 0xc0ffee,
  maxTokens: Number.POSITIVE_INFINITY,
  stop: [],
  ignoreEog: false,
});

/** Greedy decoding (temperature 0), otherwise the defaults. */
export const GREEDY_SAMPLING: Readonly<SamplingParams> = Object.freeze({ temperature: 0 });

function bad(field: string, message: string): never {
  throw new TokenizerError("SAMPLING_BAD_PARAM", `${field} ${message}`, { field });
}

/** Fills defaults and checks ranges; throws TokenizerError("SAMPLING_BAD_PARAM") naming the field. */
export function resolveSamplingParams(params: SamplingParams = {}): ResolvedSamplingParams {
  const resolved: ResolvedSamplingParams = { ...DEFAULT_SAMPLING };
  for (const [key, value] of Object.entries(params)) {
    if (value !== undefined) (resolved as Record<string, unknown>)[key] = value;
  }
  const finite = (field: keyof ResolvedSamplingParams): number => {
    const value = resolved[field];
    if (typeof value !== "number" || Number.isNaN(value)) bad(field, `must be a number (got ${String(value)})`);
    return value;
  };
  if (!Number.isFinite(finite("temperature"))) bad("temperature", "must be finite");
  if (!Number.isInteger(finite("topK")) || resolved.topK < 0) bad("topK", `must be an integer >= 0 (got ${resolved.topK})`);
  if (!(finite("topP") > 0 && resolved.topP <= 1)) bad("topP", `must be in (0, 1] (got ${resolved.topP})`);
  if (!(finite("minP") >= 0 && resolved.minP <= 1)) bad("minP", `must be in [0, 1] (got ${resolved.minP})`);
  if (!(finite("repeatPenalty") > 0) || !Number.isFinite(resolved.repeatPenalty)) {
    bad("repeatPenalty", `must be a finite number > 0 (got ${resolved.repeatPenalty})`);
  }
  if (!Number.isFinite(finite("presencePenalty"))) bad("presencePenalty", "must be finite");
  if (!Number.isFinite(finite("frequencyPenalty"))) bad("frequencyPenalty", "must be finite");
  if (!Number.isInteger(finite("penaltyLastN")) || resolved.penaltyLastN < -1) {
    bad("penaltyLastN", `must be an integer >= -1 (got ${resolved.penaltyLastN})`);
  }
  if (!Number.isFinite(finite("seed"))) bad("seed", "must be finite");
  const maxTokens = finite("maxTokens");
  if (!(maxTokens >= 0) || (Number.isFinite(maxTokens) && !Number.isInteger(maxTokens))) {
    bad("maxTokens", `must be an integer >= 0 (got ${maxTokens})`);
  }
  if (!Array.isArray(resolved.stop) || !resolved.stop.every((s) => typeof s === "string" && s.length > 0)) {
    bad("stop", "must be an array of non-empty strings");
  }
  if (typeof resolved.ignoreEog !== "boolean") bad("ignoreEog", "must be a boolean");
  return resolved;
}
