import type { KvType } from "./kv/paged-kv.js";
import type { Numerics } from "./model/matmul.js";
import type { PrefixCacheStats } from "./kv/prefix-cache.js";
import type { SamplingParams as SamplingModuleParams, StopReason, TokenLogprob } from "./sampling/index.js";
import type { ToolCallFormat } from "./chat/tool-format.js";
import type { GrammarLimits } from "./constrain/limits.js";
import type { SchemaCheck } from "./constrain/validate.js";

/**
 * Constrained decoding (docs/usage/structured-output.md): every sampled token keeps the output a
 * prefix of a valid document, checked by the grammar engine (xgrammar's WebAssembly build, loaded on
 * the first constrained request).
 * - `json_schema`: one JSON document valid for `schema`. Strict (the default): keywords the engine cannot
 *   enforce are refused with CONSTRAINT_UNSUPPORTED_KEYWORD. `strict: false`: best effort; those keywords
 *   are relaxed, the output is checked against the whole schema when done (`GenerationResult.schemaCheck`),
 *   and the output may carry properties the schema does not declare where it allows them.
 *   Objects hold their listed properties only (a subset of what a schema without `additionalProperties: false`
 *   allows: every output is valid, and a model does not spend its budget inventing keys); `openObjects: true`
 *   (not with `strict: true`) gives them JSON Schema's own semantics: any other key, between the listed ones, with a
 *   value of the `additionalProperties` schema (the listed keys keep their order).
 * - `json_object`: one JSON object.
 * - `tool_call`: calls in the model's own format (`toolCallFormatOf(template)`), arguments valid for
 *   the tool's `parameters`. `required`: one or more calls; `{ name }`: exactly one call of that
 *   tool; `auto`: free text or calls (arguments checked for tools with `strict: true`).
 * - `grammar`: an EBNF grammar (xgrammar's dialect, root rule `root`).
 */
export type ConstraintSpec =
  | { type: "json_schema"; schema: Record<string, unknown>; strict?: boolean; openObjects?: boolean }
  | { type: "json_object" }
  | {
      type: "tool_call";
      format: ToolCallFormat;
      tools: readonly { name: string; parameters?: Record<string, unknown>; strict?: boolean }[];
      choice: "required" | "auto" | { name: string };
    }
  | { type: "grammar"; ebnf: string };

/**
 * The part of an AbortSignal the engine uses (declared here so that the type declarations need
 * neither the DOM library nor @types/node; a real AbortSignal fits it).
 */
export interface AbortSignalLike {
  readonly aborted: boolean;
  addEventListener(type: "abort", listener: () => void, options?: { once?: boolean }): void;
  removeEventListener(type: "abort", listener: () => void): void;
}

/** Most tokens a speculative step drafts per sequence (`speculative.draftTokens`). */
export const MAX_DRAFT_TOKENS = 8;

/**
 * Speculative decoding. `mtp`: the file's MTP/NextN drafter block (`blk.{n_layer}.*`, present when
 * `qwen35.nextn_predict_layers` = 1) drafts `draftTokens` tokens per step, chained on its own hidden
 * state; the target verifies them in one multi-row step. Greedy output is the same token for token
 * as without speculation; sampled output keeps its distribution (the speculative-sampling rule).
 * `function` (tests and benchmarks only): `propose` supplies the drafts instead of a drafter, e.g.
 * the known greedy continuation (acceptance 1.0) to measure the verification path alone.
 */
export type SpeculativeOptions =
  | {
      method: "mtp";
      /** 1 .. 8 (default 3) */
      draftTokens?: number;
      /**
       * A cheaper drafter: its head scores only the first `draftVocab` token ids (a prefix of the
       * shared head's rows, read in place), so each draft step reads that share of the head. Drafts
       * are then always among those ids; verification keeps greedy output identical either way.
       * 1 .. vocabulary size; default: the whole vocabulary (the exact drafter).
       */
      draftVocab?: number;
      /**
       * Tests and benchmarks only (greedy): the drafter runs and its cost is paid, but each draft it
       * picks is replaced by `propose`'s (the chain goes on from the replaced token), e.g. the
       * known greedy continuation to measure speculation with the real drafter at acceptance 1.0.
       */
      propose?: (tokens: readonly number[], count: number) => readonly number[];
    }
  | {
      method: "function";
      /** 1 .. 8 (default 3) */
      draftTokens?: number;
      /** Drafts (at most `count`) to follow `tokens` (prompt and generated tokens so far). Greedy only. */
      propose: (tokens: readonly number[], count: number) => readonly number[];
    };

/**
 * How `Engine.load` fetches an `hf:` model (the part of @keepquant/hub's DownloadOptions the engine passes on;
 * declared here so the engine's types need neither that package's nor Node's).
 */
export interface HubLoadOptions {
  /** Where HF_TOKEN, HF_ENDPOINT, HF_HOME, HF_HUB_CACHE and HF_HUB_OFFLINE are read (default process.env). */
  env?: Readonly<Record<string, string | undefined>>;
  /** Aborts the download (the partial file stays for a resume). */
  signal?: AbortSignalLike;
  /** Bytes of each file as they arrive (`resumed`: bytes already there when it started). */
  onProgress?: (progress: { file: string; downloaded: number; total: number; resumed: number }) => void;
  /** Also fetch the vision projector / the separate MTP drafter GGUF. */
  mmproj?: boolean;
  mtp?: boolean;
}

export interface EngineOptions {
  /**
   * `llama` (default): llama.cpp's CPU numerics; `bf16`: the keep-quant contract; `exact`: a
   * test/diagnostic reference (file weights decoded exactly, f32 activations, f64 accumulation,
   * exact embedding rows; TypeScript provider only, slow).
   */
  numerics?: Numerics;
  /** Threads of the native thread pool (default: the pool's own default, the hardware threads). */
  threads?: number;
  /** KV cache element type (default f16, as llama.cpp). */
  kvType?: KvType;
  /**
   * Attention kernel numerics: true (default) = llama.cpp's CPU flash attention (its auto default);
   * false = llama.cpp with `-fa off` (mul_mat, soft_max_ext, mul_mat).
   */
  flashAttention?: boolean;
  /** Tokens per KV block (default 16). */
  blockSize?: number;
  /** Total KV capacity in tokens, shared by all sequences (default 8192). */
  kvCacheTokens?: number;
  /**
   * The longest sequence, prompt plus generated tokens (default: the file's `context_length` for
   * `Engine.load`, else kvCacheTokens). A longer prompt is refused with
   * ENGINE_PROMPT_TOO_LONG; a generation that reaches it stops with stopReason "context".
   */
  contextLength?: number;
  /** Concurrent sequences = GDN state slots (default 4). */
  maxSequences?: number;
  /** Token budget of one forward step (default 512, llama.cpp's n_ubatch). */
  maxBatchTokens?: number;
  /**
   * `auto` (default) runs the native step (the whole forward in @keepquant/tt-native, off the JS
   * thread) when the addon loads, else the TypeScript forward; `ts` forces the TypeScript
   * specification (forward and matmuls).
   */
  provider?: "auto" | "ts";
  /**
   * A vision projector (`mmproj-*.gguf`, projector type qwen3vl_merger) to load beside the model
   * (`Engine.load` only; `Engine.loadProjector` attaches one later): prompts may then carry images
   * (`Engine.encodeImage`). Checked against the model (output width = embedding length) before any
   * compute.
   */
  projector?: string;
  /**
   * With `provider: "auto"`: true (default) = the native step; false = the TypeScript forward with
   * the native matmul kernels only (the specification of the native step's non-matmul ops, for
   * comparisons). `numerics: "exact"` always runs the TypeScript forward.
   */
  nativeStep?: boolean;
  /**
   * Prefix cache: how many GDN state snapshots to keep (0 = off, the default). Each entry is the KV
   * blocks of a prompt up to its last full-block boundary plus a copy of the GDN state there; a
   * new request whose prompt starts with a cached prefix skips recomputing it. Prefill chunks are
   * cut at that boundary, which changes batch shapes (llama-exact parity assumes it off).
   */
  prefixCacheSnapshots?: number;
  /**
   * `llama` numerics: probe the native kernels at load (16 rows of one weight, 1 and 4 tokens)
   * against the TypeScript kernels known to be bit-exact with llama.cpp's CPU backend (today Q4_K)
   * and run a type whose native kernel differs on the exact TypeScript kernel (slower), said in
   * `stats().diagnostics` and `stats().providers`. Default true: `llama` numerics mean llama.cpp's
   * tokens. `false` keeps the native kernel whatever the probe would say (faster).
   */
  exactKernels?: boolean;
  /** Called while tensors are read (bytes done, bytes total). */
  onProgress?: (done: number, total: number) => void;
  /**
   * For an `hf:<owner>/<repo>[:<quant>][@<revision>]` model: how it is fetched into the Hugging Face cache when
   * missing (progress, abort, the environment HF_TOKEN, HF_ENDPOINT, HF_HOME, HF_HUB_CACHE and HF_HUB_OFFLINE
   * are read from; default process.env). See @keepquant/hub.
   */
  hub?: HubLoadOptions;
  /**
   * The native step's decode tuner (@keepquant/tt-native's tuneNativeDecode): true (default) = the
   * cached choice for this CPU, addon and model shape, else measured within about 300 ms at load;
   * false = the built-in defaults; an object sets the budget (ms) or forces a new measurement
   * (`keepquant bench --tune`). KEEPQUANT_TUNE overrides it (docs/USAGE.md). Every variant gives the
   * same bits; `stats().tuning` says what was chosen and why.
   */
  tune?: boolean | { budgetMs?: number; force?: boolean };
  /**
   * Where `Engine.load` keeps the weights when the native addon is there. `huge-pages`: read into process-private
   * memory advised to be backed by transparent huge pages, which decode streams through far fewer TLB entries
   * (on an AMD Zen 4, the 35B-A3B 4-layer file decoded 1.2-1.5x faster than from the page cache's mapping); it
   * costs the read at load. `mapped`: the file memory-mapped (no copy; the page cache's 4 KiB pages). `auto`
   * (default): `huge-pages` when the file is at most a quarter of the available memory and the kernel's
   * transparent huge pages are not `never`, else `mapped` (a 16.5 GB file read so with 22 GB available decoded
   * 0.85x its mapping). `huge-pages` for a file larger than the available memory maps it instead (said in
   * diagnostics). KEEPQUANT_WEIGHT_MEMORY (docs/USAGE.md) sets the default. `stats().weightMemory`
   * says what was done.
   */
  weightMemory?: "auto" | "huge-pages" | "mapped";
  /** Speculative decoding (off by default); see SpeculativeOptions. */
  speculative?: SpeculativeOptions;
  /**
   * Bounds of constrained decoding's grammar engine (docs/usage/structured-output.md), each optional:
   * `compileTimeoutMs` (30000), `maxRepetition` (256), `maxRepetitionSum` (2048), `memoryMiB` (1024),
   * `workers` (2). A constraint past one is refused with ConstraintError CONSTRAINT_TOO_COMPLEX.
   */
  grammarLimits?: Partial<GrammarLimits>;
}

/**
 * Per-request parameters: the sampling module's parameters (temperature, topK, topP, minP,
 * repeatPenalty, presencePenalty, frequencyPenalty, penaltyLastN, seed, maxTokens, stop,
 * ignoreEog) plus what the engine itself handles. Unlike the sampling module's defaults,
 * `generate` is greedy unless `temperature` is given.
 */
export interface GenerateParams extends SamplingModuleParams {
  /** Aborts the request; the stream then ends with stopReason "abort". An AbortSignal. */
  signal?: AbortSignalLike;
  /**
   * Recognize special-token texts (e.g. "<|im_start|>") in a string prompt. Default false: the
   * prompt is plain text. Opt in only for trusted prompts; chats go through `encodeChat`.
   */
  parseSpecial?: boolean;
  /** Same as `ignoreEog: !stopAtEog` (default true). */
  stopAtEog?: boolean;
  /**
   * When set, each token event carries `logprob` (of the raw model distribution, before penalties
   * and temperature) and `topLogprobs`: this many most likely tokens (0 to MAX_TOP_LOGPROBS).
   */
  logprobs?: number;
  /**
   * With the prefix cache on: further prompt lengths (in tokens) where this prompt's prefix is
   * cached, rounded down to a KV block, besides its last full block. A server passes the end of a
   * shared system prompt so that other conversations starting with it skip recomputing it.
   */
  prefixCachePoints?: readonly number[];
  /** Constrained decoding of this sequence (see ConstraintSpec); needs the model's tokenizer. */
  constraint?: ConstraintSpec;
  /** the prompt ends inside an open <think> block: constraint and thinkingBudget apply after </think> */
  reasoning?: boolean;
  /** most tokens of reasoning before the engine closes it with </think> (needs reasoning: true) */
  thinkingBudget?: number;
}

/** @deprecated use GenerateParams */
export type SamplingParams = GenerateParams;

export type { StopReason };

export interface GenerationStats {
  promptTokens: number;
  generatedTokens: number;
  /** ms from submission to the first generated token */
  timeToFirstTokenMs: number;
  totalMs: number;
  /** prompt tokens / time to first token */
  prefillTokensPerSecond: number;
  /** (generated - 1) / time after the first token */
  decodeTokensPerSecond: number;
  preemptions: number;
  /** prompt tokens served from the prefix cache */
  cachedPromptTokens: number;
  /** speculative decoding: tokens drafted for this request and how many the target accepted */
  speculative?: { drafted: number; accepted: number };
}

export interface GenerationResult {
  tokens: number[];
  text: string;
  stopReason: StopReason;
  /** Which of the request's stop strings ended it (stop reason "stop_string"). */
  stopString?: string;
  /**
   * A `json_schema` constraint with `strict: false` whose keywords could not all be enforced (they were relaxed):
   * whether the output is valid for the whole schema, checked when done (docs/usage/structured-output.md).
   */
  schemaCheck?: SchemaCheck;
  stats: GenerationStats;
}

export type GenerationEvent =
  | { type: "token"; token: number; text: string; logprob?: number; topLogprobs?: TokenLogprob[] }
  | { type: "done"; result: GenerationResult };

export interface ResidentBytes {
  /** Matmul weights in their file encoding. */
  packed: number;
  /** Decoded twins (bf16 token embedding for gathers). */
  twin: number;
  /** 1-D tensors decoded to f32 (norms, conv, ssm_a, dt bias). */
  f32: number;
  kvCache: number;
  gdnState: number;
  scratch: number;
}

/**
 * Where the weights are: `huge-pages` (read into memory advised to take transparent huge pages), `anonymous`
 * (read so, but the kernel refused the advice), `mapped` (the file memory-mapped), `read` (tensors read
 * without the native addon), `in-memory` (an engine built over weights already in memory).
 */
export type WeightMemory = "huge-pages" | "anonymous" | "mapped" | "read" | "in-memory";

export interface EngineStats {
  numerics: Numerics;
  /** Where the weights are (EngineOptions.weightMemory). */
  weightMemory: WeightMemory;
  residentBytes: ResidentBytes;
  /** op class -> provider that ran it */
  providers: Record<string, string>;
  /** Said once: fallbacks, skipped tensors, anything the caller should know. */
  diagnostics: string[];
  kv: { kvType: KvType; blockSize: number; blocksTotal: number; blocksFree: number };
  states: { slotsTotal: number; slotsFree: number };
  requests: { running: number; waiting: number };
  /** lookups, hits, hit tokens, entries, evictions (undefined when the prefix cache is off) */
  prefixCache: PrefixCacheStats | undefined;
  /** Speculative decoding counters (undefined when it is off). */
  speculative: SpeculativeStats | undefined;
  /** What the native decode tuner chose and why (undefined without the native step or with `tune: false`). */
  tuning: DecodeTuning | undefined;
  counters: {
    steps: number;
    prefillTokens: number;
    decodeTokens: number;
    preemptions: number;
    forwardMs: number;
  };
}

/**
 * The decode tuner's report: @keepquant/tt-native's TuneReport (a type-only import: the engine's types
 * load no addon).
 */
export type DecodeTuning = import("@keepquant/tt-native").TuneReport;

export interface SpeculativeStats {
  method: "mtp" | "function";
  draftTokens: number;
  /** token ids the MTP drafter's head scores (the vocabulary unless `speculative.draftVocab` reduced it); absent for "function" */
  draftVocab?: number;
  /** tokens drafted and verified */
  drafted: number;
  /** drafted tokens the target accepted */
  accepted: number;
  /** accepted / drafted (0 before any draft) */
  acceptanceRate: number;
  /**
   * per draft position i (0-based): tokens drafted there, accepted there (a draft counts only when
   * every draft before it was accepted too), and their ratio (vLLM's acceptance per position)
   */
  draftedByPosition: number[];
  acceptedByPosition: number[];
  acceptanceRateByPosition: number[];
  /** target steps that verified drafts, per sequence (a batched step counts once per sequence) */
  verifications: number;
  /** tokens produced by those verifications (accepted drafts plus the target's own token) */
  verifiedTokens: number;
  /** verifiedTokens / verifications */
  tokensPerTargetStep: number;
  /** rejections that restored the GDN state and recompute the accepted prefix in the next step */
  rollbacks: number;
  /** drafter steps run and the time they took */
  drafterSteps: number;
  drafterMs: number;
}
