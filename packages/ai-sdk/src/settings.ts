/**
 * What a keepquant model is configured with: load-time settings (`keepquant(model, settings)`, one engine
 * per model and settings) and per-call provider options (`providerOptions.keepquant` of a generateText /
 * streamText call). Both are checked once, at the boundary, with errors that name the field.
 */
import { InvalidArgumentError } from "@ai-sdk/provider";
import type { CpuMemory, EngineOptions, SpeculativeOptions } from "@keepquant/engine";
import type { ImageUrlLimits } from "./images.js";

/** The provider's name: the key of `providerOptions` and `providerMetadata`. */
export const PROVIDER_NAME = "keepquant";

/**
 * Settings of one keepquant model. Everything that sizes or selects the engine is fixed when the model's
 * engine loads (lazily, on the first call), so it is set here, not per call.
 */
export interface KeepquantModelSettings {
  /** `llama` (default, llama.cpp's CPU numerics), `bf16` (the keep-quant contract) or `exact` (a slow TypeScript reference). */
  numerics?: EngineOptions["numerics"];
  /** Threads of the native thread pool (default: the hardware threads). */
  threads?: number;
  /** Speculative decoding: `{ method: "mtp", draftTokens }` when the file has an MTP drafter block. */
  speculative?: SpeculativeOptions;
  /** The longest sequence, prompt plus output (default: the file's context_length). */
  contextLength?: number;
  /** KV cache capacity in tokens, shared by concurrent calls (default 8192). */
  kvCacheTokens?: number;
  /** Calls that run at once (GDN state slots, default 4); more wait in the engine's queue. */
  maxSequences?: number;
  /** Prefix cache snapshots (0 = off, the default): repeated system prompts and conversations skip their shared prefix. */
  prefixCacheSnapshots?: number;
  /**
   * A Jinja chat template that replaces the file's own `tokenizer.chat_template` (e.g. the engine's
   * `QWEN_STYLE_TEMPLATE`, which opens a `<think>` block).
   */
  chatTemplate?: string;
  /**
   * Check with the residency planner, before loading a file, that it fits the memory available (default
   * true). `memory` replaces what this machine reports (e.g. to plan for a smaller container).
   */
  checkFits?: boolean;
  memory?: CpuMemory;
  /**
   * A vision projector loaded beside the model: an `mmproj-*.gguf` path, or `hf:<owner>/<repo>[:<quant>]` for that
   * repository's (fetched alone into the Hugging Face cache, with `engine.hub`'s environment, signal and progress).
   * User messages may then hold image file parts (PNG, JPEG, WebP, GIF); without one, an image part is an
   * UnsupportedFunctionalityError.
   */
  projector?: string;
  /**
   * Image parts whose data is a URL object: refused unless set; `true` or limits fetch them (http and https only,
   * at most `maxBytes` per image, default 20 MiB, within `timeoutMs`, default 30 s). generateText and streamText
   * download URLs themselves unless this is set (then the model is told it takes http(s) image URLs).
   */
  imageUrls?: true | ImageUrlLimits;
  /** Further engine options (kvType, flashAttention, blockSize, maxBatchTokens, provider, ...). */
  engine?: Omit<EngineOptions, "onProgress">;
}

/** `providerOptions.keepquant` of one call: sampling and thinking knobs the AI SDK has no field for. */
export interface KeepquantCallOptions {
  /** Min-p sampling (0 .. 1). */
  minP?: number;
  /** Repetition penalty (1 = off). */
  repeatPenalty?: number;
  /** How many of the last tokens the penalties look at. */
  penaltyLastN?: number;
  /**
   * Thinking: passed to the chat template as `enable_thinking`. Templates that open `<think>` in the
   * generation prompt make the model reason first; its reasoning comes back as reasoning parts.
   */
  thinking?: boolean;
  /**
   * Most reasoning tokens before the engine closes the think block with `</think>` (needs a prompt that opens
   * one: a template with thinking on).
   */
  thinkingBudget?: number;
  /** Keep generating past end-of-generation tokens (tests, benchmarks). */
  ignoreEog?: boolean;
  /**
   * A JSON schema (generateObject, Output.object) is enforced whole or refused (`true`: a keyword the engine
   * cannot enforce is an UnsupportedFunctionalityError), or best effort (`false`, the default: such keywords are
   * relaxed, the SDK validates the object as it always does, and `providerMetadata.keepquant.schemaCheck` says
   * what the engine relaxed and whether the output met the whole schema).
   */
  strictJsonSchema?: boolean;
}

/** Keys of `providerOptions.keepquant` that are load-time settings: set them in `keepquant(model, settings)`. */
const LOAD_TIME_KEYS = new Set([
  "numerics",
  "threads",
  "speculative",
  "contextLength",
  "kvCacheTokens",
  "maxSequences",
  "projector",
  "imageUrls",
]);

const CALL_OPTION_KEYS: Readonly<Record<keyof KeepquantCallOptions, "number" | "boolean">> = {
  minP: "number",
  repeatPenalty: "number",
  penaltyLastN: "number",
  thinking: "boolean",
  thinkingBudget: "number",
  ignoreEog: "boolean",
  strictJsonSchema: "boolean",
};

/** Reads `providerOptions.keepquant`; InvalidArgumentError naming the key when it is unknown or of the wrong type. */
export function parseCallOptions(providerOptions: Record<string, unknown> | undefined): KeepquantCallOptions {
  const raw = providerOptions?.[PROVIDER_NAME];
  if (raw === undefined) return {};
  const base = `providerOptions.${PROVIDER_NAME}`;
  if (raw === null || typeof raw !== "object" || Array.isArray(raw)) {
    throw new InvalidArgumentError({ argument: base, message: `${base} must be an object, got ${JSON.stringify(raw)}` });
  }
  const options: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(raw)) {
    const argument = `${base}.${key}`;
    if (LOAD_TIME_KEYS.has(key)) {
      throw new InvalidArgumentError({
        argument,
        message: `${argument} is a load-time setting of the model's engine: pass it as keepquant(model, { ${key} }) instead`,
      });
    }
    const kind = CALL_OPTION_KEYS[key as keyof KeepquantCallOptions];
    if (kind === undefined) {
      throw new InvalidArgumentError({
        argument,
        message: `${argument} is not an option of keepquant (known: ${Object.keys(CALL_OPTION_KEYS).join(", ")})`,
      });
    }
    if (value === undefined) continue;
    if (typeof value !== kind || (kind === "number" && !Number.isFinite(value))) {
      throw new InvalidArgumentError({
        argument,
        message: `${argument} must be a ${kind === "number" ? "finite number" : kind}, got ${JSON.stringify(value)}`,
      });
    }
    options[key] = value;
  }
  return options as KeepquantCallOptions;
}

/** The engine options of a model's settings. */
export function engineOptionsOf(settings: KeepquantModelSettings): EngineOptions {
  const options: EngineOptions = { ...settings.engine };
  if (settings.numerics !== undefined) options.numerics = settings.numerics;
  if (settings.threads !== undefined) options.threads = settings.threads;
  if (settings.speculative !== undefined) options.speculative = settings.speculative;
  if (settings.contextLength !== undefined) options.contextLength = settings.contextLength;
  if (settings.kvCacheTokens !== undefined) options.kvCacheTokens = settings.kvCacheTokens;
  if (settings.maxSequences !== undefined) options.maxSequences = settings.maxSequences;
  if (settings.prefixCacheSnapshots !== undefined) options.prefixCacheSnapshots = settings.prefixCacheSnapshots;
  if (settings.projector !== undefined) options.projector = settings.projector;
  return options;
}
