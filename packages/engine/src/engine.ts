import type {
  ConstraintSpec,
  DecodeTuning,
  EngineOptions,
  EngineStats,
  GenerationEvent,
  GenerationResult,
  GenerateParams,
  WeightMemory,
} from "./engine-types.js";
import { chooseCompute } from "./engine-compute.js";
import { openModelFile } from "./engine-model-file.js";
import { type ResolvedOptions, resolveOptions } from "./engine-options.js";
import { createPools } from "./engine-pools.js";
import { GuidedDecoding, planGuide } from "./constrain/index.js";
import { EngineError, EngineOptionError } from "./errors.js";
import { Generation } from "./generation/generation.js";
import { setUpGeneration } from "./generation/setup.js";
import { StepLoop } from "./generation/step-loop.js";
import { allocateJsStorage, type AllocateStorage, type PagedKvCache } from "./kv/paged-kv.js";
import type { GdnStatePool } from "./kv/state-pool.js";
import type { PrefixCache } from "./kv/prefix-cache.js";
import { modelDescription } from "./model/config.js";
import { FLASH_ATTN_TILED_MIN_ROWS, Qwen35Forward } from "./model/forward.js";
import { SpeculativeDecoder, type SpeculativeHost } from "./generation/speculative.js";
import type { TtNative } from "./model/native-module.js";
import { NativeStep } from "./model/native-step.js";
import { tuneNativeDecode } from "./model/native-tuning.js";
import { SpecStepBackend, type StepBackend } from "./model/step-backend.js";
import type { MatmulProvider, Numerics } from "./model/matmul.js";
import { quantDequantizeRow, residentWeightBytes } from "./model/providers.js";
import type { ProjectorConfig } from "@keepquant/gguf";
import { assemblePrompt, type EncodedImage, type PromptMedia } from "./vision/media.js";
import { hasMultimodalRope, VisionRuntime } from "./vision/runtime.js";
import type { ImageDecodeLimits } from "./vision/image/decode.js";
import type { ModelWeights, PackedMatrix } from "./model/weights.js";
import { Scheduler } from "./scheduler.js";
import type { Tokenizer } from "./tokenizer/index.js";
import { defaultModelPath } from "./default-model.js";

/**
 * A prompt with images: token runs and encoded images (`Engine.encodeImage`), in order. The images'
 * tokens take their embeddings and multimodal rotary positions (vision/media.ts).
 */
export interface MultimodalPrompt {
  readonly pieces: readonly (readonly number[] | EncodedImage)[];
}

function isMultimodalPrompt(prompt: readonly number[] | MultimodalPrompt): prompt is MultimodalPrompt {
  return !Array.isArray(prompt) && typeof prompt === "object" && prompt !== null && "pieces" in prompt;
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

/**
 * The qwen35 engine, a facade: it resolves the options, loads the model, owns the step backend, the
 * pools, the scheduler and the step loop, and creates one `Generation` per request (its acceptance,
 * finishing and failure are the generation's; its guide and speculation are the generation's plug-ins).
 */
export class Engine {
  readonly numerics: Numerics;
  readonly tokenizer: Tokenizer | undefined;
  /** The longest sequence (prompt + generated tokens): the model's context_length unless `contextLength` was given. */
  readonly contextLength: number;
  /** What computes a step: the native model, or the TypeScript specification (provider "ts", nativeStep false, numerics "exact"). */
  private readonly backend: StepBackend;
  private readonly kv: PagedKvCache;
  private readonly states: GdnStatePool;
  private readonly scheduler: Scheduler<Generation>;
  private readonly prefixCache: PrefixCache | undefined;
  /** Steps the scheduler's batches; every generation's host. */
  private readonly loop: StepLoop;
  private nextId = 1;
  private disposed = false;
  private readonly snapshotBytes: number;
  /** Speculative decoding, the speculation plug-in of every generation (undefined when off). */
  private readonly spec: SpeculativeDecoder | undefined;
  /** Constrained decoding: the grammar engine is loaded on the first constrained request; it makes the generations' guides. */
  private readonly guided: GuidedDecoding;
  /** The native decode tuner's report (undefined without the native step or with `tune: false`). */
  private tuning: DecodeTuning | undefined;
  /** the vision projector (undefined: text only) */
  private vision: VisionRuntime | undefined;

  private constructor(
    readonly weights: ModelWeights,
    private readonly options: ResolvedOptions,
    private readonly opProviders: Record<string, string>,
    private readonly diagnostics: string[],
    private readonly providersByWeight: Map<PackedMatrix, MatmulProvider>,
    tokenizer: Tokenizer | undefined,
    native: TtNative | undefined,
    /** Where the weights are. */
    private readonly weightMemory: WeightMemory,
  ) {
    this.numerics = options.numerics;
    this.tokenizer = tokenizer;
    this.guided = new GuidedDecoding(tokenizer, options.grammarLimits);
    this.contextLength = options.contextLength;
    const speculative = options.speculative;
    if (speculative?.method === "mtp" && !weights.drafter) {
      throw new EngineOptionError(
        "ENGINE_BAD_OPTION",
        'speculative method "mtp" needs the MTP drafter block (qwen35.nextn_predict_layers = 1, tensors blk.{n_layer}.nextn.*), which these weights do not have',
        { field: "speculative.method" },
      );
    }
    // storage of the pools: natively allocated when the native step owns the compute
    const allocate: AllocateStorage = native ? (bytes) => native.allocNativeBuffer(bytes) : allocateJsStorage;
    const pools = createPools(modelDescription(weights), options, allocate, diagnostics);
    this.kv = pools.kv;
    this.states = pools.states;
    this.prefixCache = pools.prefixCache;
    this.snapshotBytes = pools.snapshotBytes;
    if (speculative) {
      const host: SpeculativeHost = {
        weights,
        maxBatchTokens: options.maxBatchTokens,
        countDecodeTokens: (count) => this.loop.countTokens("decode", count),
        draftStep: (entries, hiddenIn) => this.backend.draft(entries, hiddenIn),
        lastHiddenRows: () => this.backend.hiddenRows,
      };
      this.spec = new SpeculativeDecoder(speculative, host, this.states, allocate);
    }
    this.scheduler = new Scheduler<Generation>(
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
    this.loop = new StepLoop({
      scheduler: this.scheduler,
      backend: this.backend,
      speculation: this.spec,
      drafter: speculative?.method === "mtp",
      kv: this.kv,
      states: this.states,
      maxBatchTokens: options.maxBatchTokens,
      vocab: weights.output.rows,
      hiddenWidth: weights.config.embeddingLength,
      isEog: (token) => tokenizer?.isEog(token) === true,
    });
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
    const { numerics, maxBatchTokens, flashAttention } = this.options;
    const forward = new Qwen35Forward(
      this.weights,
      this.kv,
      this.states,
      this.providersByWeight,
      numerics,
      quantDequantizeRow,
      maxBatchTokens,
      flashAttention,
    );
    forward.snapshots = this.spec?.rollback;
    return new SpecStepBackend(forward, { flashAttention, bf16Twin: this.weights.tokenEmbdTwin !== undefined });
  }

  /**
   * Loads a qwen35 GGUF file (any shard of a split model: every shard is loaded), or an
   * `hf:<owner>/<repo>[:<quant>][@<revision>]` model from the Hugging Face cache (downloaded when missing; see
   * `options.hub`). Refused tensors and unsupported weight types fail here, before any
   * compute. With the native addon the file is memory-mapped (weights are views of the page cache,
   * never copied into JS memory); without it tensors are read.
   */
  static async load(model: string, options: EngineOptions = {}): Promise<Engine> {
    const { weights, tokenizer, diagnostics, weightMemory, contextLength } = await openModelFile(model, resolveOptions(options), options);
    const engine = await Engine.fromWeights(
      weights,
      { ...options, contextLength: options.contextLength ?? contextLength },
      { tokenizer, diagnostics, weightMemory },
    );
    if (options.projector !== undefined) {
      try {
        await engine.loadProjector(options.projector);
      } catch (error) {
        await engine.dispose();
        throw error;
      }
    }
    return engine;
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
    const compute = await chooseCompute(weights, resolved, diagnostics);
    return new Engine(
      compute.weights,
      resolved,
      compute.opProviders,
      diagnostics,
      compute.providersByWeight,
      extras.tokenizer,
      compute.native,
      extras.weightMemory ?? "in-memory",
    );
  }

  /**
   * Loads a vision projector (an `mmproj` GGUF path or its bytes) for this model: its load plan is
   * checked against the model (a mismatch or an unsupported projector is refused, naming both
   * numbers or the key) and its weights bound. Replaces a projector loaded before.
   */
  async loadProjector(source: string | Uint8Array): Promise<void> {
    if (this.disposed) throw new EngineError("ENGINE_DISPOSED", "engine is disposed");
    const vision = await VisionRuntime.open(source, this.weights.config, { provider: this.options.provider }, this.diagnostics);
    // a projector loaded before is released (its native encoder once its encodes are done)
    this.vision?.dispose();
    this.vision = vision;
    Object.assign(this.opProviders, this.vision.providers);
  }

  /** The loaded projector's hyperparameters (undefined: a text-only engine). */
  get projector(): ProjectorConfig | undefined {
    return this.vision?.config;
  }

  /**
   * Encodes an image (PNG, JPEG, WebP or GIF bytes) with the loaded projector, for a
   * `MultimodalPrompt`: decoded, resized and normalized as llama.cpp does for this projector.
   * Bad images throw ImageError (`ENGINE_BAD_IMAGE`) naming the reason and the limit.
   */
  async encodeImage(bytes: Uint8Array, limits?: Partial<ImageDecodeLimits>): Promise<EncodedImage> {
    if (this.disposed) throw new EngineError("ENGINE_DISPOSED", "engine is disposed");
    if (!this.vision) {
      throw new EngineOptionError(
        "ENGINE_BAD_REQUEST",
        "this model takes no images: load a vision projector (the projector option, --mmproj)",
        { field: "image" },
      );
    }
    return this.vision.encode(bytes, limits);
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
  generate(prompt: string | readonly number[] | MultimodalPrompt, params: GenerateParams = {}): GenerationStream {
    if (this.disposed) throw new EngineError("ENGINE_DISPOSED", "engine is disposed");
    let ids: number[];
    let media: PromptMedia | undefined;
    if (typeof prompt === "string") ids = this.tokenize(prompt, params.parseSpecial ?? false);
    else if (isMultimodalPrompt(prompt)) ({ ids, media } = this.assembleMultimodal(prompt));
    else ids = [...prompt];
    if (ids.length === 0) throw new EngineOptionError("ENGINE_BAD_REQUEST", "prompt is empty", { field: "prompt" });
    if (!media) this.checkIds(ids, "prompt");
    // constraint, reasoning and thinkingBudget: checked here (ConstraintError), compiled before the request is scheduled
    const { constraint, reasoning, thinkingBudget } = params;
    const guidePlan = planGuide({ constraint, reasoning, thinkingBudget }, this.options.grammarLimits);
    if (guidePlan) this.guided.checkTokenizer(guidePlan);
    const setup = setUpGeneration(ids, params, {
      contextLength: this.options.contextLength,
      kvTokens: this.kv.numBlocks * this.kv.blockSize,
      tokenizer: this.tokenizer,
      argmax: this.backend.argmax,
    });
    const generation = new Generation(this.loop, {
      ...setup,
      id: this.nextId++,
      validation: guidePlan?.validation ? { ...guidePlan.validation, afterThinking: guidePlan.reasoning } : undefined,
      speculation: media ? undefined : this.spec,
      media,
    });
    this.loop.admit(generation);
    generation.abortOn(params.signal);
    if (guidePlan) {
      // its guide is compiled before it is scheduled (a generation ended meanwhile gives it back)
      this.guided.guide(guidePlan).then(
        (guide) => {
          if (!generation.active) {
            guide.dispose();
            return;
          }
          generation.guide = guide;
          this.loop.schedule(generation);
        },
        (error: unknown) => generation.fail(error),
      );
    } else {
      this.loop.schedule(generation);
    }
    return { [Symbol.asyncIterator]: () => generation.events(), result: generation.result };
  }

  /** Token runs checked, images placed: the ids (with image placeholders) and the media of a multimodal prompt. */
  private assembleMultimodal(prompt: MultimodalPrompt): { ids: number[]; media: PromptMedia | undefined } {
    const images = prompt.pieces.filter((p) => !Array.isArray(p)).length;
    if (images > 0 && !hasMultimodalRope(this.weights.config.ropeSections)) {
      throw new EngineOptionError(
        "ENGINE_BAD_REQUEST",
        `this model (${this.weights.config.architecture}) takes no images: it has no multimodal rotary sections`,
        {
          field: "prompt",
        },
      );
    }
    prompt.pieces.forEach((piece, i) => {
      if (Array.isArray(piece)) this.checkIds(piece, `prompt.pieces[${i}]`);
    });
    try {
      const { tokens, media } = assemblePrompt(prompt.pieces, this.weights.config.embeddingLength);
      return { ids: tokens, media };
    } catch (error) {
      throw new EngineOptionError("ENGINE_BAD_REQUEST", `prompt image: ${(error as Error).message}`, { field: "prompt", cause: error });
    }
  }

  /**
   * Checks and compiles a constraint (cached for the requests that use it), so that a schema the
   * grammar engine refuses fails before a response starts. Throws ConstraintError.
   */
  async prepareConstraint(spec: ConstraintSpec): Promise<void> {
    await this.guided.check(spec);
  }

  /** Runs a generation to the end and returns its result. */
  async generateToEnd(prompt: string | readonly number[] | MultimodalPrompt, params: GenerateParams = {}): Promise<GenerationResult> {
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
    return this.loop.evaluate(ids, positions);
  }

  stats(): EngineStats {
    const { packed, twin, f32 } = residentWeightBytes(this.weights);
    return {
      numerics: this.numerics,
      weightMemory: this.weightMemory,
      residentBytes: {
        packed,
        twin,
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
      counters: { ...this.loop.counters, preemptions: this.scheduler.preemptionCount },
      prefixCache: this.prefixCache ? { ...this.prefixCache.stats } : undefined,
      speculative: this.spec?.stats(),
      tuning: this.tuning,
    };
  }

  /** Drops every prefix-cache entry (their KV blocks and snapshots go back to the pools). */
  clearPrefixCache(): void {
    this.prefixCache?.clear();
  }

  /** Aborts every request and releases the engine (the backend once no step can be running). */
  dispose(): void {
    if (this.disposed) return;
    this.loop.abortAll();
    this.disposed = true;
    void this.guided.dispose();
    this.vision?.dispose();
    this.loop.close();
  }
}
