import { buildLoadPlan, readGgufModel } from "@keepquant/gguf";
import type {
  ConstraintSpec,
  DecodeTuning,
  EngineOptions,
  EngineStats,
  GenerationEvent,
  GenerationResult,
  GenerateParams,
  StopReason,
  WeightMemory,
} from "./engine-types.js";
import {
  checkOutput,
  type DecodeGuide,
  type GrammarLimits,
  GuidedDecoding,
  planGuide,
  type RelaxedKeyword,
  resolveGrammarLimits,
  type SchemaCheck,
  THINK_END,
} from "./constrain/index.js";
import { EngineError, EngineLoadError, EngineOptionError } from "./errors.js";
import { allocateJsStorage, PagedKvCache, type AllocateStorage, type KvType } from "./kv/paged-kv.js";
import { GdnStatePool } from "./kv/state-pool.js";
import { PrefixCache } from "./kv/prefix-cache.js";
import { modelDescription } from "./model/config.js";
import { FLASH_ATTN_TILED_MIN_ROWS, Qwen35Forward, type DrafterEntry, type StepEntry } from "./model/forward.js";
import {
  type DrafterWork,
  type ResolvedSpeculative,
  resolveSpeculative,
  SpeculativeDecoder,
  type SpeculativeSequence,
} from "./speculative.js";
import { probeExactKernels } from "./model/exact-probe.js";
import { loadQwen35Weights } from "./model/load.js";
import { openWeightSource } from "./model/weight-source.js";
import { loadTtNative, type TtNative } from "./model/native-module.js";
import { NativeStep } from "./model/native-step.js";
import { tuneNativeDecode } from "./model/native-tuning.js";
import { SpecStepBackend, type StepBackend } from "./model/step-backend.js";
import type { MatmulProvider, Numerics } from "./model/matmul.js";
import { quantDequantizeRow, selectProviders, typescriptProviders, allMatrices } from "./model/providers.js";
import { type ModelWeights, type PackedMatrix, withDrafterHeadRows } from "./model/weights.js";
import { Scheduler, type ScheduledSequence } from "./scheduler.js";
import {
  logprobsOf,
  MAX_TOP_LOGPROBS,
  Sampler,
  StopStringMatcher,
  type SampledLogprobs,
  type TokenDistribution,
} from "./sampling/index.js";
import { StreamingDetokenizer, Tokenizer } from "./tokenizer/index.js";
import { defaultModelPath } from "./default-model.js";
import { resolveModelFile } from "./model-source.js";

/**
 * How long the step loop waits, when every schedulable sequence waits on a grammar worker (a compile, a
 * mask), before it schedules again (a request that arrives meanwhile gets in without waiting for it).
 */
const HELD_STEP_RETRY_MS = 5;

/** The check of a relaxed schema's output: the JSON after the reasoning block when the request reasons. */
function outputCheck(text: string, validation: { schema: unknown; relaxed: RelaxedKeyword[]; afterThinking: boolean }): SchemaCheck {
  const end = validation.afterThinking ? text.lastIndexOf(THINK_END) : -1;
  return checkOutput(end < 0 ? text : text.slice(end + THINK_END.length), validation.schema, validation.relaxed);
}

/** The constraint rules of one chunk, asked for before its step (a grammar worker computes them while the forward runs). */
interface PendingRules {
  /** settles when the rules are known or failed (never rejects) */
  promise: Promise<void>;
  settled: boolean;
  failed: boolean;
  error: unknown;
}

/** What a step computed for one chunk, taken in (verified, sampled) by `takeChunk`. */
interface ChunkOutcome {
  request: Request;
  numTokens: number;
  draftTokens: number;
  /** the chunk's first position */
  startPos: number;
  /** its logits rows (the last known row first for a verification; none when it samples nothing) */
  logits: Float32Array;
  /** the target's hidden rows the step kept for it (from position keptFirst; the drafter's and the prefix cache's) */
  keptFirst: number;
  keptHidden: Float32Array | undefined;
  keptCount: number;
  /** its step entry asked for the hidden state of every row */
  allHidden: boolean;
}

/** A chunk whose rules came after its forward: taken in once they are there (its logits copied out of the step's buffer). */
interface DeferredChunk extends ChunkOutcome {
  rules: PendingRules;
  /** the request's preemptions when deferred (a preempted request recomputes the chunk: this outcome is dropped) */
  preemptions: number;
}

interface ResolvedOptions {
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

function positiveInteger(value: unknown, field: string, fallback: number): number {
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

function resolveOptions(options: EngineOptions): ResolvedOptions {
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

/** Loads the native CPU arm when present; undefined (with the reason in diagnostics) otherwise. */
async function nativeProviders(numerics: Numerics, threads: number | undefined, diagnostics: string[]): Promise<MatmulProvider[]> {
  try {
    const { createNativeMatmulProviders } = await import("./model/native-provider.js");
    return await createNativeMatmulProviders(numerics, threads, diagnostics);
  } catch (error) {
    // a bad thread count is the caller's error, never a reason to run the slow path
    if ((error as { code?: unknown }).code === "KEEPQUANT_NATIVE_ARGUMENT") {
      throw new EngineOptionError("ENGINE_BAD_OPTION", (error as Error).message, { field: "threads", cause: error });
    }
    diagnostics.push(`native CPU provider unavailable (${(error as Error).message}); using the TypeScript reference`);
    return [];
  }
}

class Request implements ScheduledSequence, SpeculativeSequence {
  numComputed = 0;
  cachedTokens = 0;
  blockTable: number[] = [];
  stateSlot = -1;
  finished = false;
  snapshotPoints: readonly number[] | undefined;
  preemptions = 0;
  /** speculative decoding: drafts to verify in the next step, and the drafter distribution of each (sampling) */
  drafts: number[] = [];
  draftDistributions: TokenDistribution[] = [];
  /** KV positions the drafter's chain writes past the verified ones (reserved by the scheduler) */
  lookahead = 0;
  /** the next position the MTP drafter computes with the target's hidden state */
  drafterFrontier = 0;
  resumed: { position: number; hidden: Float32Array | undefined } | undefined = undefined;
  specDrafted = 0;
  specAccepted = 0;
  /** constrained decoding and the thinking budget (undefined: unguided) */
  guide: DecodeGuide | undefined;
  /** a step's outcome whose constraint rules were not ready when its forward was done (sampled once they are) */
  deferred: DeferredChunk | undefined;
  readonly generated: number[] = [];
  text = "";
  /** the stop string that ended the generation (stop reason "stop_string") */
  stopString: string | undefined;
  /** a relaxed best-effort schema: the output is checked against the whole schema when done */
  validation: { schema: unknown; relaxed: RelaxedKeyword[]; afterThinking: boolean } | undefined;
  readonly submittedAt = performance.now();
  firstTokenAt = 0;
  private readonly queue: GenerationEvent[] = [];
  private wake: (() => void) | undefined;
  private done = false;
  private failure: unknown;
  private resolveResult!: (result: GenerationResult) => void;
  private rejectResult!: (error: unknown) => void;
  readonly result: Promise<GenerationResult>;
  onAbort: (() => void) | undefined;

  constructor(
    readonly id: number,
    readonly tokens: number[],
    readonly promptLength: number,
    readonly params: GenerateParams,
    readonly maxTokens: number,
    readonly ignoreEog: boolean,
    readonly maxLength: number,
    readonly sampler: Sampler,
    readonly detokenizer: StreamingDetokenizer | undefined,
    readonly stops: StopStringMatcher,
  ) {
    this.result = new Promise((resolve, reject) => {
      this.resolveResult = resolve;
      this.rejectResult = reject;
    });
    this.result.catch(() => undefined);
  }

  push(event: GenerationEvent): void {
    this.queue.push(event);
    this.wake?.();
  }

  finish(result: GenerationResult): void {
    if (this.done) return;
    this.done = true;
    this.push({ type: "done", result });
    this.resolveResult(result);
  }

  fail(error: unknown): void {
    if (this.done) return;
    this.done = true;
    this.failure = error;
    this.rejectResult(error);
    this.wake?.();
  }

  async *events(): AsyncGenerator<GenerationEvent> {
    for (;;) {
      const event = this.queue.shift();
      if (event) {
        yield event;
        if (event.type === "done") return;
        continue;
      }
      if (this.done && this.failure !== undefined) throw this.failure;
      await new Promise<void>((resolve) => (this.wake = resolve));
      this.wake = undefined;
    }
  }
}

/** A running generation: iterate it for token/text deltas (the last event carries the result). */
export interface GenerationStream extends AsyncIterable<GenerationEvent> {
  /** Resolves with the final result (also after an abort, with stopReason "abort"). */
  readonly result: Promise<GenerationResult>;
}

export interface EvaluateOptions {
  /** Positions whose logits to return (default: every position). */
  positions?: readonly number[];
}

/** The qwen35 engine: weights, paged KV cache, GDN state pool, scheduler and sampling. */
export class Engine {
  readonly numerics: Numerics;
  readonly tokenizer: Tokenizer | undefined;
  /** The longest sequence (prompt + generated tokens): the model's context_length unless `contextLength` was given. */
  readonly contextLength: number;
  /** What computes a step: the native model, or the TypeScript specification (provider "ts", nativeStep false, numerics "exact"). */
  private readonly backend: StepBackend;
  private readonly kv: PagedKvCache;
  private readonly states: GdnStatePool;
  private readonly scheduler: Scheduler<Request>;
  private readonly prefixCache: PrefixCache | undefined;
  private readonly requests = new Set<Request>();
  private nextId = 1;
  private loopRunning = false;
  /** Serializes every use of the forward (scheduler steps and evaluate) and of the pools' storage. */
  private forwardLock: Promise<void> = Promise.resolve();
  private disposed = false;
  private readonly counters = { steps: 0, prefillTokens: 0, decodeTokens: 0, forwardMs: 0 };
  private snapshotBytes = 0;
  /** Speculative decoding (undefined when off). */
  private readonly spec: SpeculativeDecoder | undefined;
  /** Constrained decoding: the grammar engine is loaded on the first constrained request. */
  private readonly guided: GuidedDecoding;
  /** The native decode tuner's report (undefined without the native step or with `tune: false`). */
  private tuning: DecodeTuning | undefined;
  /** Where the weights are (set once by fromWeights). */
  private weightMemory: WeightMemory = "in-memory";

  private constructor(
    readonly weights: ModelWeights,
    private readonly options: ResolvedOptions,
    private readonly opProviders: Record<string, string>,
    private readonly diagnostics: string[],
    private readonly providersByWeight: Map<PackedMatrix, MatmulProvider>,
    tokenizer: Tokenizer | undefined,
    native: TtNative | undefined,
  ) {
    const description = modelDescription(weights);
    this.numerics = options.numerics;
    this.tokenizer = tokenizer;
    this.guided = new GuidedDecoding(tokenizer, options.grammarLimits);
    this.contextLength = options.contextLength;
    const numBlocks = Math.ceil(options.kvCacheTokens / options.blockSize);
    // llama.cpp casts an F32 K/V cache to F16 for flash attention: same numbers, so store f16.
    const kvType: KvType = options.flashAttention ? "f16" : options.kvType;
    if (kvType !== options.kvType) {
      diagnostics.push(
        'kvType "f32" with flash attention computes as f16 (llama.cpp casts K/V to F16 for flash attention); the cache is stored as f16. Pass flashAttention: false for an f32 cache.',
      );
    }
    // storage of the pools: natively allocated when the native step owns the compute
    const allocate: AllocateStorage = native ? (bytes) => native.allocNativeBuffer(bytes) : allocateJsStorage;
    const speculative = options.speculative;
    if (speculative?.method === "mtp" && !weights.drafter) {
      throw new EngineOptionError(
        "ENGINE_BAD_OPTION",
        'speculative method "mtp" needs the MTP drafter block (qwen35.nextn_predict_layers = 1, tensors blk.{n_layer}.nextn.*), which these weights do not have',
        { field: "speculative.method" },
      );
    }
    this.kv = PagedKvCache.forModel(description, numBlocks, options.blockSize, kvType, allocate, speculative?.method === "mtp");
    const statePool = (slots: number, storage: AllocateStorage) => GdnStatePool.forModel(description, slots, storage);
    this.states = statePool(options.maxSequences, allocate);
    if (speculative) {
      this.spec = new SpeculativeDecoder(
        speculative,
        {
          weights,
          maxBatchTokens: options.maxBatchTokens,
          alive: (request) => this.requests.has(request as Request),
          acceptToken: (request, token, logprobs) => this.acceptToken(request as Request, token, logprobs),
          truncateBlocks: (request, positions) => this.scheduler.truncateBlocks(request as Request, positions),
          countDecodeTokens: (count) => {
            this.counters.decodeTokens += count;
          },
          draftStep: (entries, hiddenIn) => this.runDraft(entries, hiddenIn),
          lastHiddenRows: () => this.lastHiddenRows(),
        },
        this.states,
        allocate,
      );
    }
    if (options.prefixCacheSnapshots > 0) {
      const snapshots = statePool(options.prefixCacheSnapshots, allocateJsStorage);
      this.prefixCache = new PrefixCache(this.kv, this.states, snapshots);
      this.snapshotBytes = snapshots.bytes;
    }
    this.scheduler = new Scheduler<Request>(
      this.kv,
      this.states,
      options.maxBatchTokens,
      options.maxBatchTokens,
      this.prefixCache,
      // drafts never push a step onto the tiled attention path a plain decode step would not take
      options.flashAttention ? FLASH_ATTN_TILED_MIN_ROWS - 1 : Number.POSITIVE_INFINITY,
      speculative?.method === "mtp",
    );
    this.backend = native ? this.nativeBackend(native) : this.specBackend();
    Object.assign(this.opProviders, this.backend.labels);
  }

  /** The native model over this engine's pools. */
  private nativeBackend(native: TtNative): StepBackend {
    const backend = NativeStep.create(native, this.weights, this.kv, this.states, {
      numerics: this.options.numerics as "llama" | "bf16",
      flashAttention: this.options.flashAttention,
      maxBatchTokens: this.options.maxBatchTokens,
      snapshots: this.spec?.rollback,
    });
    this.tuning = tuneNativeDecode(native, this.weights, this.options);
    return backend;
  }

  /** The TypeScript specification over this engine's pools (its scratch is allocated up front, as the native step's is). */
  private specBackend(): StepBackend {
    const forward = new Qwen35Forward(
      this.weights,
      this.kv,
      this.states,
      this.providersByWeight,
      this.options.numerics,
      quantDequantizeRow,
      this.options.maxBatchTokens,
      this.options.flashAttention,
    );
    forward.snapshots = this.spec?.rollback;
    return new SpecStepBackend(forward, {
      flashAttention: this.options.flashAttention,
      bf16Twin: this.weights.tokenEmbdTwin !== undefined,
    });
  }

  /** One forward step (see `stats().providers.step` for what ran). */
  private async runForward(entries: readonly StepEntry[]): Promise<Float32Array> {
    const t0 = performance.now();
    try {
      return await this.backend.forward(entries);
    } finally {
      this.counters.forwardMs += performance.now() - t0;
    }
  }

  /** The post-norm hidden rows of the last step (see Qwen35Forward.hiddenRows); valid until the next step. */
  private lastHiddenRows(): Float32Array {
    return this.backend.hiddenRows;
  }

  /** One MTP drafter step; returns its logits (the hidden rows in `lastHiddenRows`). */
  private async runDraft(entries: readonly DrafterEntry[], hiddenIn: Float32Array): Promise<Float32Array> {
    return this.backend.draft(entries, hiddenIn);
  }

  /** Runs `work` when no other forward or pool mutation is in flight. */
  private async exclusive<T>(work: () => Promise<T>): Promise<T> {
    const previous = this.forwardLock;
    let release!: () => void;
    this.forwardLock = new Promise<void>((resolve) => (release = resolve));
    await previous;
    try {
      return await work();
    } finally {
      release();
    }
  }

  /**
   * Loads a qwen35 GGUF file (any shard of a split model: every shard is loaded), or an
   * `hf:<owner>/<repo>[:<quant>][@<revision>]` model from the Hugging Face cache (downloaded when missing; see
   * `options.hub`). Refused tensors and unsupported weight types fail here, before any
   * compute. With the native addon the file is memory-mapped (weights are views of the page cache,
   * never copied into JS memory); without it tensors are read.
   */
  static async load(model: string, options: EngineOptions = {}): Promise<Engine> {
    const resolved = resolveOptions(options);
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
    return Engine.fromWeights(
      loaded.weights,
      { ...options, contextLength: options.contextLength ?? plan.config.contextLength },
      { tokenizer, diagnostics, weightMemory },
    );
  }

  /**
   * Loads the embedded default model of `@keepquant/default-model` (checked against its sha256).
   * The engine does not need that package: without it this throws ENGINE_NO_DEFAULT_MODEL.
   */
  static async loadDefault(options: EngineOptions = {}): Promise<Engine> {
    return Engine.load(await defaultModelPath(), options);
  }

  /** Builds an engine over weights already in memory (tests, tools). */
  static async fromWeights(
    weights: ModelWeights,
    options: EngineOptions = {},
    extras: { tokenizer?: Tokenizer | undefined; diagnostics?: string[]; weightMemory?: WeightMemory } = {},
  ): Promise<Engine> {
    const resolved = resolveOptions(options);
    const diagnostics = extras.diagnostics ?? [];
    const draftVocab = resolved.speculative?.draftVocab;
    if (draftVocab !== undefined && weights.drafter) {
      if (draftVocab > weights.vocab) {
        throw new EngineOptionError(
          "ENGINE_BAD_OPTION",
          `speculative.draftVocab ${draftVocab} is larger than the vocabulary (${weights.vocab} tokens)`,
          { field: "speculative.draftVocab" },
        );
      }
      weights = withDrafterHeadRows(weights, draftVocab);
    }
    const candidates: MatmulProvider[] = [];
    // `exact` is a TypeScript-only reference: no native arm computes it
    const wantsNative = resolved.provider === "auto" && resolved.numerics !== "exact";
    if (wantsNative) candidates.push(...(await nativeProviders(resolved.numerics, resolved.threads, diagnostics)));
    candidates.push(...typescriptProviders(resolved.numerics, diagnostics));
    const selection = selectProviders(
      weights,
      candidates,
      resolved.numerics,
      resolved.numerics === "llama" ? '; numerics "bf16" computes every type the quant package dequantizes' : "",
    );
    let exactFallback = false;
    if (resolved.exactKernels && resolved.numerics === "llama") {
      const before = diagnostics.length;
      probeExactKernels(weights, selection.byWeight, selection.opProviders, typescriptProviders("llama", diagnostics), diagnostics);
      exactFallback = diagnostics.length > before;
    }
    let native: TtNative | undefined;
    if (wantsNative && resolved.nativeStep) {
      const loaded = await loadTtNative();
      if (!loaded.native) diagnostics.push(`native step unavailable (${loaded.reason}); the TypeScript forward runs`);
      else if (exactFallback)
        diagnostics.push("native step off: a native kernel is not bit-exact with llama.cpp (see above); the TypeScript forward runs");
      else native = loaded.native;
    }
    const engine = new Engine(weights, resolved, { ...selection.opProviders }, diagnostics, selection.byWeight, extras.tokenizer, native);
    engine.weightMemory = extras.weightMemory ?? "in-memory";
    return engine;
  }

  /**
   * Encodes a prompt with the file's tokenizer. Plain text by default: "<|im_start|>" in `text`
   * stays text; `parseSpecial: true` (an explicit opt-in, for trusted prompts) turns special-token
   * texts into their tokens.
   */
  tokenize(text: string, parseSpecial = false): number[] {
    if (!this.tokenizer) throw new EngineError("ENGINE_NO_TOKENIZER", "this model has no usable tokenizer: pass token ids");
    return this.tokenizer.encode(text, { parseSpecial });
  }

  private checkIds(ids: readonly number[], field: string): void {
    const n = this.weights.vocab;
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i]!;
      if (!Number.isInteger(id) || id < 0 || id >= n) {
        throw new EngineOptionError("ENGINE_BAD_REQUEST", `${field}[${i}] = ${id} is not a token id in [0, ${n})`, { field });
      }
    }
  }

  /**
   * Starts a generation. The prompt is a string (tokenized with the file's tokenizer) or token ids.
   * Returns an async iterable of token/text deltas ending with a `done` event; abort through
   * `params.signal` (the stream then ends with stopReason "abort").
   */
  generate(prompt: string | readonly number[], params: GenerateParams = {}): GenerationStream {
    if (this.disposed) throw new EngineError("ENGINE_DISPOSED", "engine is disposed");
    const ids = typeof prompt === "string" ? this.tokenize(prompt, params.parseSpecial ?? false) : [...prompt];
    if (ids.length === 0) throw new EngineOptionError("ENGINE_BAD_REQUEST", "prompt is empty", { field: "prompt" });
    this.checkIds(ids, "prompt");
    const { signal, parseSpecial, stopAtEog, logprobs, prefixCachePoints, constraint, reasoning, thinkingBudget, ...samplingParams } =
      params;
    void parseSpecial;
    // constraint, reasoning and thinkingBudget: checked here (ConstraintError), compiled before the request is scheduled
    const guidePlan = planGuide({ constraint, reasoning, thinkingBudget }, this.options.grammarLimits);
    if (guidePlan) this.guided.checkTokenizer(guidePlan);
    if (logprobs !== undefined && (!Number.isInteger(logprobs) || logprobs < 0 || logprobs > MAX_TOP_LOGPROBS)) {
      throw new EngineOptionError(
        "ENGINE_BAD_REQUEST",
        `logprobs must be an integer in [0, ${MAX_TOP_LOGPROBS}], got ${String(logprobs)}`,
        { field: "logprobs" },
      );
    }
    let sampler: Sampler;
    try {
      sampler = new Sampler({ ...samplingParams, temperature: samplingParams.temperature ?? 0 }, { argmax: this.backend.argmax });
    } catch (error) {
      throw new EngineOptionError("ENGINE_BAD_REQUEST", (error as Error).message, {
        field: (error as { field?: string }).field,
        cause: error,
      });
    }
    const maxTokens = Number.isFinite(sampler.params.maxTokens) ? sampler.params.maxTokens : 256;
    const ignoreEog = sampler.params.ignoreEog || stopAtEog === false;
    if (ids.length + 1 > this.options.contextLength) {
      throw new EngineError(
        "ENGINE_PROMPT_TOO_LONG",
        `prompt of ${ids.length} tokens does not fit the context of ${this.options.contextLength} tokens (one more is needed to generate): shorten it or raise contextLength (--ctx)`,
        { field: "prompt" },
      );
    }
    const capacity = Math.min(this.options.contextLength, this.kv.numBlocks * this.kv.blockSize);
    if (ids.length + 1 > capacity) {
      throw new EngineError(
        "ENGINE_CAPACITY",
        `prompt of ${ids.length} tokens does not fit the KV cache (${capacity} tokens; raise kvCacheTokens, --ctx in the CLI)`,
        {
          field: "prompt",
        },
      );
    }
    const detokenizer = this.tokenizer ? new StreamingDetokenizer(this.tokenizer) : undefined;
    if (sampler.params.stop.length > 0 && !detokenizer) {
      throw new EngineError("ENGINE_NO_TOKENIZER", "stop strings need a tokenizer", { field: "stop" });
    }
    const request = new Request(
      this.nextId++,
      ids,
      ids.length,
      params,
      maxTokens,
      ignoreEog,
      capacity,
      sampler,
      detokenizer,
      new StopStringMatcher(sampler.params.stop),
    );
    if (
      prefixCachePoints !== undefined &&
      (!Array.isArray(prefixCachePoints) || prefixCachePoints.some((p) => !Number.isSafeInteger(p) || p < 0))
    ) {
      throw new EngineOptionError("ENGINE_BAD_REQUEST", "prefixCachePoints must be an array of token counts >= 0", {
        field: "prefixCachePoints",
      });
    }
    request.snapshotPoints = prefixCachePoints;
    // the drafter's chain writes KV up to draftTokens - 1 positions past a verification's last token
    if (this.spec) request.lookahead = this.spec.lookahead;
    this.requests.add(request);
    if (signal) {
      if (signal.aborted) {
        queueMicrotask(() => this.abortRequest(request));
      } else {
        request.onAbort = () => this.abortRequest(request);
        signal.addEventListener("abort", request.onAbort, { once: true });
      }
    }
    if (guidePlan?.validation) request.validation = { ...guidePlan.validation, afterThinking: guidePlan.reasoning };
    if (guidePlan) {
      this.guided.guide(guidePlan).then(
        (guide) => {
          if (!this.requests.has(request)) {
            guide.dispose();
            return;
          }
          request.guide = guide;
          this.scheduler.add(request);
          this.kick();
        },
        (error: unknown) => this.failRequest(request, error),
      );
    } else {
      this.scheduler.add(request);
      this.kick();
    }
    return { [Symbol.asyncIterator]: () => request.events(), result: request.result };
  }

  /**
   * Checks and compiles a constraint (cached for the requests that use it), so that a schema the
   * grammar engine refuses fails before a response starts. Throws ConstraintError.
   */
  async prepareConstraint(spec: ConstraintSpec): Promise<void> {
    await this.guided.check(spec);
  }

  /** Runs a generation to the end and returns its result. */
  async generateToEnd(prompt: string | readonly number[], params: GenerateParams = {}): Promise<GenerationResult> {
    return this.generate(prompt, params).result;
  }

  /**
   * Teacher-forced logits: runs `ids` as one fresh sequence (ubatches of maxBatchTokens) and returns
   * a copy of the logits at every requested position.
   */
  async evaluate(ids: readonly number[], options: EvaluateOptions = {}): Promise<Float32Array[]> {
    if (this.disposed) throw new EngineError("ENGINE_DISPOSED", "engine is disposed");
    if (ids.length === 0) return [];
    this.checkIds(ids, "ids");
    const positions = options.positions ?? ids.map((_, i) => i);
    for (const p of positions) {
      if (!Number.isInteger(p) || p < 0 || p >= ids.length) {
        throw new EngineOptionError("ENGINE_BAD_REQUEST", `position ${p} is outside [0, ${ids.length})`, { field: "positions" });
      }
    }
    const wanted = new Set(positions);
    return this.exclusive(async () => {
      const slot = this.states.allocate();
      const blocksNeeded = this.kv.blocksFor(ids.length);
      if (slot < 0 || this.kv.pool.freeCount < blocksNeeded) {
        if (slot >= 0) this.states.release(slot);
        throw new EngineError("ENGINE_CAPACITY", `evaluate needs a free state slot and ${blocksNeeded} KV blocks`);
      }
      const blockTable: number[] = [];
      for (let i = 0; i < blocksNeeded; i++) blockTable.push(this.kv.pool.allocate());
      const vocab = this.weights.output.rows;
      const byPosition = new Map<number, Float32Array>();
      try {
        for (let start = 0; start < ids.length; start += this.options.maxBatchTokens) {
          const chunk = ids.slice(start, start + this.options.maxBatchTokens);
          const rows: number[] = [];
          for (let i = 0; i < chunk.length; i++) if (wanted.has(start + i)) rows.push(i);
          const entry: StepEntry = {
            tokens: chunk,
            startPos: start,
            blockTable,
            stateSlot: slot,
            logits: rows.length === chunk.length ? "all" : "none",
            logitRows: rows,
          };
          const logits = await this.runForward([entry]);
          this.counters.prefillTokens += chunk.length;
          rows.forEach((r, k) => byPosition.set(start + r, logits.slice(k * vocab, (k + 1) * vocab)));
        }
      } finally {
        for (const block of blockTable) this.kv.pool.release(block);
        this.states.release(slot);
      }
      return positions.map((p) => byPosition.get(p)!);
    });
  }

  private kick(): void {
    if (this.loopRunning || this.disposed) return;
    this.loopRunning = true;
    setImmediate(() => void this.loop());
  }

  /** Steps while there is work. The native step awaits its promise (the event loop runs meanwhile); the TypeScript forward yields between steps. */
  private async loop(): Promise<void> {
    try {
      while (!this.disposed && this.scheduler.hasWork) {
        await this.exclusive(() => this.step());
        if (!this.backend.offThread) await new Promise<void>((resolve) => setImmediate(resolve));
      }
    } catch (error) {
      for (const request of [...this.requests]) this.failRequest(request, error);
    } finally {
      this.loopRunning = false;
      if (this.disposed) this.releaseNative();
      else if (this.scheduler.hasWork) this.kick();
    }
  }

  /** One scheduler step: pick chunks, run the batched forward, sample where logits came back. */
  private async step(): Promise<void> {
    await this.takeDeferred();
    // a constrained sequence that cannot sample now sits this step out, so that the sequences batched with it do
    // not wait: its last step's rules have not come yet, or its next mask would wait behind a compile on its
    // grammar worker (up to seconds for a new schema) or for its matcher's move to a new worker
    const held = new Set<Promise<void>>();
    const chunks = this.scheduler.schedule((sequence) => {
      const request = sequence;
      const waits = request.deferred ? request.deferred.rules.promise : request.guide?.blockedBy();
      if (waits) held.add(waits);
      return waits !== undefined;
    });
    if (chunks.length === 0 && held.size > 0) {
      // every sequence waits on a grammar worker: step again when one is done, or soon (new requests get in)
      await Promise.race([...held, new Promise<void>((resolve) => setTimeout(resolve, HELD_STEP_RETRY_MS))]);
      return;
    }
    if (chunks.length === 0) {
      // nothing fits: the head of the queue needs more blocks than the whole pool holds
      const head = this.scheduler.waiting[0];
      if (head) this.finishRequest(head, "context");
      return;
    }
    const drafter = this.spec?.options.method === "mtp";
    const entries: StepEntry[] = chunks.map((chunk) => {
      const s = chunk.sequence;
      const known = s.tokens.slice(s.numComputed, s.numComputed + chunk.numTokens);
      const base = { startPos: s.numComputed, blockTable: s.blockTable, stateSlot: s.stateSlot };
      if (chunk.draftTokens > 0) {
        // verification: the known tokens, then the drafts; logits (and hidden states) from the last known row on
        const tokens = [...known, ...s.drafts.slice(0, chunk.draftTokens)];
        const logitRows = Array.from({ length: chunk.draftTokens + 1 }, (_, i) => known.length - 1 + i);
        // the GDN state after the last known token is kept aside: a rejected draft rolls back to it
        return { ...base, tokens, logits: "none", logitRows, snapshotRow: known.length - 1 };
      }
      return { ...base, tokens: known, logits: chunk.needsLogits ? "last" : "none", ...(drafter ? { hidden: true } : {}) };
    });
    // the grammar workers compute the next rules while the native step runs; nothing waits for them after it
    const rules = this.prepareGuides(chunks);
    const logits = await this.runForward(entries);
    // the drafter needs the target's hidden states after the next forward overwrote them
    const hidden = drafter ? this.lastHiddenRows().slice() : undefined;
    this.counters.steps++;
    const vocab = this.weights.output.rows;
    const D = this.weights.config.embeddingLength;
    const drafterWork: DrafterWork[] = [];
    let row = 0;
    let hiddenRow = 0;
    chunks.forEach((chunk, ci) => {
      const request = chunk.sequence;
      const entry = entries[ci]!;
      const logitCount = chunk.draftTokens > 0 ? chunk.draftTokens + 1 : chunk.needsLogits ? 1 : 0;
      const rowsLogits = logits.subarray(row * vocab, (row + logitCount) * vocab);
      row += logitCount;
      const keptCount = entry.hidden ? entry.tokens.length : logitCount;
      const keptFirst = entry.hidden ? entry.startPos : entry.startPos + chunk.numTokens - 1;
      const keptHidden = hidden?.subarray(hiddenRow * D, (hiddenRow + keptCount) * D);
      hiddenRow += keptCount;
      // a request aborted while the step ran has left the scheduler: its results are dropped
      if (!this.requests.has(request)) return;
      const outcome: ChunkOutcome = {
        request,
        numTokens: chunk.numTokens,
        draftTokens: chunk.draftTokens,
        startPos: entry.startPos,
        logits: rowsLogits,
        keptFirst,
        keptHidden,
        keptCount,
        allHidden: entry.hidden === true,
      };
      const pending = rules.get(request);
      if (pending && !pending.settled) {
        // its rules have not come: it samples once they have (meanwhile it sits out), the others go on now
        request.deferred = { ...outcome, logits: rowsLogits.slice(), rules: pending, preemptions: request.preemptions };
        return;
      }
      if (pending?.failed) {
        // its grammar engine failed (its worker died): it fails alone
        this.failRequest(request, pending.error);
        return;
      }
      const work = this.takeChunk(outcome);
      if (work) drafterWork.push(work);
    });
    await this.spec?.draft(drafterWork);
  }

  /**
   * Takes in what a step computed for one chunk: verifies its drafts, or counts it and samples its next
   * token. Returns the drafter's work for it (speculative decoding).
   */
  private takeChunk(outcome: ChunkOutcome): DrafterWork | undefined {
    const { request, numTokens, draftTokens, logits, keptFirst, keptHidden, keptCount } = outcome;
    let lastValid: number;
    if (draftTokens > 0) {
      lastValid = this.spec!.verify(request, numTokens, draftTokens, logits);
    } else {
      lastValid = outcome.startPos + numTokens - 1;
      // drafts the step had no room for are stale now
      request.drafts = [];
      request.draftDistributions = [];
      if (numTokens === 1 && request.numComputed >= request.promptLength) this.counters.decodeTokens++;
      else this.counters.prefillTokens += numTokens;
      request.numComputed += numTokens;
      // the target's hidden state at the chunk's last row, for a prefix-cache entry the drafter can resume from
      const D = this.weights.config.embeddingLength;
      this.scheduler.afterStep(request, outcome.allHidden ? keptHidden?.subarray((keptCount - 1) * D, keptCount * D) : undefined);
      if (logits.length > 0) {
        const row = request.guide ? request.guide.apply(logits) : logits;
        const token = request.sampler.sample(row, request.tokens);
        const n = request.params.logprobs;
        this.acceptToken(request, token, n === undefined ? undefined : logprobsOf(logits, token, n));
      }
    }
    return this.spec && this.requests.has(request) ? { request, lastValid, keptFirst, keptHidden } : undefined;
  }

  /**
   * The chunks deferred by earlier steps whose rules have come: taken in now (before scheduling, so that
   * their sequences step again at once), with their drafter work. One whose request was preempted
   * meanwhile is dropped: its recompute gives the same logits again.
   */
  private async takeDeferred(): Promise<void> {
    const drafterWork: DrafterWork[] = [];
    for (const request of [...this.requests]) {
      const deferred = request.deferred;
      if (!deferred?.rules.settled) continue;
      request.deferred = undefined;
      if (request.preemptions !== deferred.preemptions || !this.requests.has(request)) continue;
      if (deferred.rules.failed) {
        this.failRequest(request, deferred.rules.error);
        continue;
      }
      const work = this.takeChunk(deferred);
      if (work) drafterWork.push(work);
    }
    if (drafterWork.length > 0) await this.spec?.draft(drafterWork);
  }

  /**
   * Asks for the constraint rules of the positions each chunk samples (the next token, and after each
   * draft); they settle while the forward runs, or later (never rejected: `failed` and `error` say why).
   */
  private prepareGuides(chunks: readonly { sequence: Request; needsLogits: boolean; draftTokens: number }[]): Map<Request, PendingRules> {
    const pending = new Map<Request, PendingRules>();
    for (const chunk of chunks) {
      const request = chunk.sequence;
      if (!request.guide || (!chunk.needsLogits && chunk.draftTokens === 0)) continue;
      const rules: PendingRules = { promise: Promise.resolve(), settled: false, failed: false, error: undefined };
      // the tokens it may still write: a constrained answer is closed within them (guide.ts)
      const tokensLeft = Math.min(request.maxTokens - request.generated.length, request.maxLength - request.tokens.length);
      rules.promise = request.guide.prepare(request.drafts.slice(0, chunk.draftTokens), tokensLeft).then(
        () => {
          rules.settled = true;
        },
        (error: unknown) => {
          rules.settled = true;
          rules.failed = true;
          rules.error = error;
        },
      );
      pending.set(request, rules);
    }
    return pending;
  }

  private acceptToken(request: Request, token: number, logprobs?: SampledLogprobs): void {
    if (request.finished) return;
    if (request.generated.length === 0) request.firstTokenAt = performance.now();
    if (request.guide && !request.guide.advance(token)) {
      throw new Error(`internal: token ${token} was sampled against the constraint of request ${request.id}`);
    }
    // the grammar accepted its stop token: the document is complete
    if (request.guide?.done) {
      this.finishRequest(request, "eog");
      return;
    }
    if (!request.ignoreEog && this.tokenizer?.isEog(token) === true) {
      this.finishRequest(request, "eog");
      return;
    }
    request.tokens.push(token);
    request.generated.push(token);
    let text = "";
    let stopped = false;
    if (request.detokenizer) {
      const match = request.stops.push(request.detokenizer.push(token));
      text = match.text;
      stopped = match.stop !== undefined;
      if (match.stop !== undefined) request.stopString = match.stop;
      request.text += text;
    }
    request.push(
      logprobs ? { type: "token", token, text, logprob: logprobs.logprob, topLogprobs: logprobs.top } : { type: "token", token, text },
    );
    // out of tokens just as a forced close completed the document: it is finished, not cut off
    const complete = request.guide?.endsNext === true;
    if (stopped) this.finishRequest(request, "stop_string");
    else if (request.generated.length >= request.maxTokens) this.finishRequest(request, complete ? "eog" : "max_tokens");
    else if (request.tokens.length >= request.maxLength) this.finishRequest(request, complete ? "eog" : "context");
  }

  private finishRequest(request: Request, stopReason: StopReason): void {
    if (!this.requests.has(request)) return;
    this.requests.delete(request);
    this.scheduler.remove(request);
    request.guide?.dispose();
    if (request.onAbort) request.params.signal?.removeEventListener("abort", request.onAbort);
    if (request.detokenizer && stopReason !== "stop_string") {
      const tail = request.stops.push(request.detokenizer.flush()).text + request.stops.flush();
      if (tail) {
        request.text += tail;
        request.push({ type: "token", token: -1, text: tail });
      }
    }
    const now = performance.now();
    const first = request.firstTokenAt || now;
    const ttft = first - request.submittedAt;
    const generated = request.generated.length;
    request.finish({
      tokens: [...request.generated],
      text: request.text,
      stopReason,
      ...(stopReason === "stop_string" && request.stopString !== undefined ? { stopString: request.stopString } : {}),
      ...(request.validation === undefined ? {} : { schemaCheck: outputCheck(request.text, request.validation) }),
      stats: {
        promptTokens: request.promptLength,
        generatedTokens: generated,
        timeToFirstTokenMs: ttft,
        totalMs: now - request.submittedAt,
        prefillTokensPerSecond: ttft > 0 ? (request.promptLength / ttft) * 1000 : 0,
        decodeTokensPerSecond: generated > 1 && now > first ? ((generated - 1) / (now - first)) * 1000 : 0,
        preemptions: request.preemptions,
        cachedPromptTokens: request.cachedTokens,
        ...(this.spec ? { speculative: { drafted: request.specDrafted, accepted: request.specAccepted } } : {}),
      },
    });
  }

  private failRequest(request: Request, error: unknown): void {
    this.requests.delete(request);
    this.scheduler.remove(request);
    request.guide?.dispose();
    if (request.onAbort) request.params.signal?.removeEventListener("abort", request.onAbort);
    request.fail(error);
  }

  private abortRequest(request: Request): void {
    this.finishRequest(request, "abort");
  }

  stats(): EngineStats {
    const packedSeen = new Set<Uint8Array>();
    let packed = 0;
    for (const w of allMatrices(this.weights)) {
      if (packedSeen.has(w.data)) continue;
      packedSeen.add(w.data);
      packed += w.data.byteLength;
    }
    if (!packedSeen.has(this.weights.tokenEmbd.data)) packed += this.weights.tokenEmbd.data.byteLength;
    let f32 = this.weights.outputNorm.byteLength;
    for (const layer of this.weights.layers) {
      f32 += layer.attnNorm.byteLength + layer.postAttnNorm.byteLength;
      if (layer.kind !== "gdn") f32 += layer.qNorm.byteLength + layer.kNorm.byteLength;
      else f32 += layer.conv.byteLength + layer.dtBias.byteLength + layer.a.byteLength + layer.norm.byteLength;
    }
    return {
      numerics: this.numerics,
      weightMemory: this.weightMemory,
      residentBytes: {
        packed,
        twin: this.weights.tokenEmbdTwin?.byteLength ?? 0,
        f32,
        kvCache: this.kv.bytes,
        gdnState: this.states.bytes + this.snapshotBytes + (this.spec?.bytes ?? 0),
        scratch: this.backend.scratchBytes,
      },
      providers: { ...this.opProviders },
      diagnostics: [...this.diagnostics],
      kv: {
        kvType: this.kv.kvType,
        blockSize: this.kv.blockSize,
        blocksTotal: this.kv.numBlocks,
        blocksFree: this.kv.pool.freeCount,
      },
      states: { slotsTotal: this.states.numSlots, slotsFree: this.states.pool.freeCount },
      requests: { running: this.scheduler.running.length, waiting: this.scheduler.waiting.length },
      counters: { ...this.counters, preemptions: this.scheduler.preemptionCount },
      prefixCache: this.prefixCache ? { ...this.prefixCache.stats } : undefined,
      speculative: this.spec?.stats(),
      tuning: this.tuning,
    };
  }

  /** Drops every prefix-cache entry (their KV blocks and snapshots go back to the pools). */
  clearPrefixCache(): void {
    this.prefixCache?.clear();
  }

  /** Aborts every request and releases the engine. */
  dispose(): void {
    if (this.disposed) return;
    for (const request of [...this.requests]) this.finishRequest(request, "abort");
    this.disposed = true;
    void this.guided.dispose();
    if (!this.loopRunning) this.releaseNative();
  }

  /** Frees the native model once no step can be running. */
  private releaseNative(): void {
    void this.exclusive(async () => this.backend.dispose());
  }
}
