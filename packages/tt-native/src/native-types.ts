/**
 * The exact surface of build/Release/keepquant_native.node (src/napi/addon.cc). One hand-written type:
 * when the addon changes, bump kAbiVersion there and NATIVE_ABI_VERSION here together.
 */
import type { FfnKind, GgmlType, TokenMixer } from "@keepquant/gguf";
import type { NativeHparams } from "./model-hparams.js";

export const NATIVE_ABI_VERSION = 11;

export type IsaLevelName = "generic" | "avx2" | "avx512" | "neon";

/** One ISA level's entry of the addon's kernel menu (NativeAddon.kernelMenu). */
export interface NativeKernelMenuLevel {
  isa: IsaLevelName;
  /** weight types with decode row kernels (one activation row against a task's weight rows) */
  rows: readonly GgmlType[];
  /** weight types with the block kernels' register form (a batched decode step, prefill tiles) */
  registers: readonly GgmlType[];
}

export interface NativeBuildInfo {
  abiVersion: number;
  compiler: string;
  arch: "x64" | "arm64" | "other";
  /** levels this CPU can run with this binary, best last */
  isaAvailable: IsaLevelName[];
  isaBest: IsaLevelName;
  tt: { built: boolean; loaded: boolean; reason: string };
}

/** One type of the addon's per-type table (src/core/common.h) with what the current kernel level has for it. */
export interface NativeTypeSupport {
  type: GgmlType;
  /** ggml's name */
  name: string;
  blockSize: number;
  typeSize: number;
  /** the table's vec_dot_type (ggml-cpu's), -1 when ggml has no vec_dot for the type */
  vecDotType: GgmlType | -1;
  /** a keep-quant contract encoding */
  registered: boolean;
  /** dequantizeRows decodes it */
  dequantize: boolean;
  /** matmulLlama has a dot kernel for weights of this type */
  vecDot: boolean;
  /** quantizeActivations encodes to it */
  activation: boolean;
}

/** Any typed array view over packed bytes (Uint8Array, Buffer, ...). */
export type ByteView = ArrayBufferView & { readonly length: number };

/** A matmul weight as the native model borrows it (exactly as stored in GGUF). */
export interface NativeModelMatrix {
  type: GgmlType;
  rows: number;
  cols: number;
  rowBytes: number;
  data: ByteView;
}

/**
 * One tensor of the native model's table: a slot of the model description (@keepquant/gguf's
 * `describeQwen35`), its layer, its shape as named dimensions (ggml `ne` order: columns, then rows)
 * and its bytes. An f32 vector is an F32 matrix of `rows` x `cols` (1 x n for a 1-D tensor).
 */
export interface NativeModelTensor extends NativeModelMatrix {
  /** stacked matrices of `rows` x `cols` each (an MoE expert tensor; its third dim), 1 when absent */
  groups?: number;
  slot: string;
  /** blk index; -1 for a global tensor */
  layer: number;
  /** names of `hparams` entries: cols (and rows) must equal them */
  dims: readonly string[];
}

/** One block of the native model: its token mixer and FFN, and its cache plane. */
export interface NativeModelLayer {
  /** blk index */
  index: number;
  role: "trunk" | "mtp";
  /** a registered token mixer (@keepquant/gguf's TOKEN_MIXERS; model_kinds.h is generated from them) */
  mixer: TokenMixer;
  /** a registered FFN kind: dense SwiGLU (qwen35), the MoE FFN (qwen35moe: router, routed experts, shared expert), ... */
  ffn: FfnKind;
  /** KV plane (attention) or GDN state layer (gdn), in layer order; the MTP block's KV plane follows the trunk's */
  cacheIndex: number;
}

/**
 * Everything the native model borrows: one table read and checked generically (named
 * hyperparameters, layers, tensors by slot and layer), then the storage. Typed arrays are kept alive
 * by the model until dispose(); the caller must not write the weights, and touches the KV/state
 * planes only between steps.
 */
export interface NativeModelSpec {
  /**
   * Every named dimension of the description (nEmbd, nVocab, qDim, kvDim, convDim, ...; see
   * @keepquant/gguf's ModelDims), plus `drafterVocab` (the drafter head's rows), `eps` and
   * `ropeThetaScale` (powf(rope_freq_base, -2 / n_rot) as the caller's libm computes it).
   * `createNativeModel` passes them to the addon as one Float64Array in the order of NATIVE_HPARAMS
   * (src/model-hparams.ts), which src/model/model_hparams.h is generated from.
   */
  hparams: NativeHparams;
  /** The trunk's layers in order, then the MTP drafter block when it runs (its KV plane is the last of `kv`). */
  layers: NativeModelLayer[];
  tensors: NativeModelTensor[];
  numerics: "llama" | "bf16";
  flashAttention: boolean;
  maxBatchTokens: number;
  /** bf16 twin of the token embedding (bf16 numerics) */
  tokenEmbdTwin?: Uint16Array | undefined;
  kv: { f16: boolean; blockSize: number; numBlocks: number; k: (Uint16Array | Float32Array)[]; v: (Uint16Array | Float32Array)[] };
  states: { numSlots: number; conv: Float32Array[]; ssm: Float32Array[] };
  /** Where a step entry's snapshotRow copies its slot's GDN state (same layout and slots as `states`). */
  snapshots?: { numSlots: number; conv: Float32Array[]; ssm: Float32Array[] } | undefined;
  /**
   * The rotary section each rotated pair turns with, nRot / 2 values: 0 = t, 1 = h, 2 = w (the
   * interleaved M-RoPE of the engine's `imropeSections`). Absent: every pair turns with t.
   */
  ropeSections?: Uint8Array | undefined;
}

/** The native model object (src/napi/model_napi.cc). */
export interface NativeModelHandle {
  /**
   * One forward step off the JS thread. `descriptor`: as `encodeStepDescriptor` writes it
   * (src/step-descriptor.ts: [kind (0 trunk, 1 drafter), entryCount, then per entry nTokens,
   * startPos, stateSlot, nLogitRows, blockCount, flags (1 = keep every row's hidden state),
   * snapshotRow (-1, or the row after which the slot's GDN state is copied to `snapshots`),
   * nRopePositions (0 or 3 * nTokens), nEmbeddingRows, tokens..., logitRows..., blockTable...,
   * ropePositions..., embeddingRows...]); `logits` receives [logit rows, vocab]; `hidden`
   * (optional) the kept post-norm hidden rows [rows, D]; `hiddenIn` (drafter steps) is the hidden
   * state paired with each row [tokens, D]; `embeddings` (trunk steps with embedding rows) the
   * inputs of every entry's embedding rows [rows, D], in entry order. Rejects (or throws
   * synchronously for a bad descriptor) with the reason.
   */
  step(
    descriptor: Int32Array,
    logits: Float32Array,
    hidden?: Float32Array,
    hiddenIn?: Float32Array,
    embeddings?: Float32Array,
  ): Promise<void>;
  /** The same step on the calling thread (tools, tests). */
  stepSync(descriptor: Int32Array, logits: Float32Array, hidden?: Float32Array, hiddenIn?: Float32Array, embeddings?: Float32Array): void;
  /** `lastHold`: what the last held step saw ("none", "armed", "released" or "timeout"). */
  info(): { scratchBytes: number; maxBatchTokens: number; lastHold: "none" | "armed" | "released" | "timeout" };
  dispose(): void;
  /**
   * Test hook of the async contract: the next step waits on its worker thread until releaseHold()
   * is called from the JS thread (at most 30 s; then `info().lastHold` is "timeout").
   */
  holdNextStep(): void;
  releaseHold(): void;
}

/** A matrix of the vision encoder in its GGUF encoding (@keepquant/quant's PackedWeight; `groups` must be 1). */
export interface NativeVisionMatrix {
  readonly type: GgmlType;
  readonly rows: number;
  readonly cols: number;
  readonly groups?: number;
  readonly data: Uint8Array;
}

export interface NativeVisionLinear {
  readonly weight: NativeVisionMatrix;
  readonly bias: Float32Array;
}

export interface NativeVisionNorm {
  readonly weight: Float32Array;
  readonly bias: Float32Array;
}

/**
 * The vision encoder (llama.cpp's qwen3vl_merger projector) as the native arm builds it: the engine's
 * VisionEncoderDims and VisionEncoderWeights as they are (src/model/vision_encoder.h). Typed arrays are
 * borrowed and kept alive until dispose(); the caller must not write them.
 */
export interface NativeVisionEncoderSpec {
  readonly dims: {
    readonly patchSize: number;
    readonly hidden: number;
    readonly heads: number;
    readonly ffn: number;
    readonly eps: number;
    readonly merge: number;
    readonly projection: number;
    readonly positionSide: number;
  };
  /** the temporal pair of the patch convolution, [hidden, 3 * patch^2] each, F32 or F16 */
  readonly patch: readonly [NativeVisionMatrix, NativeVisionMatrix];
  readonly patchBias: Float32Array;
  /** [positionSide^2, hidden] */
  readonly position: Float32Array;
  readonly preNorm?: NativeVisionNorm | undefined;
  readonly layers: readonly {
    readonly ln1: NativeVisionNorm;
    readonly qkv: NativeVisionLinear;
    readonly out: NativeVisionLinear;
    readonly ln2: NativeVisionNorm;
    readonly up: NativeVisionLinear;
    readonly down: NativeVisionLinear;
    readonly deepstack?:
      | { readonly norm: NativeVisionNorm; readonly fc1: NativeVisionLinear; readonly fc2: NativeVisionLinear }
      | undefined;
  }[];
  readonly postNorm?: NativeVisionNorm | undefined;
  readonly mm0: NativeVisionLinear;
  readonly mm2: NativeVisionLinear;
}

/** The native vision encoder object (src/napi/vision_napi.cc). */
export interface NativeVisionEncoderHandle {
  /**
   * Encodes one image off the JS thread: `pixels` f32 planes [3][height][width], sides multiples of patch *
   * merge; `out` receives [tokens, outputWidth()] (tokens = (width / (patch * merge)) * (height / (patch * merge))).
   * Bad arguments throw synchronously (TypeError / RangeError naming the argument) before any work.
   */
  encode(pixels: Float32Array, width: number, height: number, out: Float32Array): Promise<void>;
  /** The same encode on the calling thread (tests, tools). */
  encodeSync(pixels: Float32Array, width: number, height: number, out: Float32Array): void;
  /** projection * (1 + deepstack layers) */
  outputWidth(): number;
  dispose(): void;
}

/** The C library's libm (f32), the functions the native step calls. */
export interface NativeLibm {
  expf(x: number): number;
  logf(x: number): number;
  cosf(x: number): number;
  sinf(x: number): number;
  powf(x: number, y: number): number;
  fmaf(a: number, b: number, c: number): number;
}

/** The arguments of the contract-numerics matmul (matmulBf16 and matmulBf16Async). */
export type NativeBf16Args = [
  type: GgmlType,
  weight: ByteView,
  k: number,
  rowStart: number,
  rowCount: number,
  x: Float32Array,
  m: number,
  y: Float32Array,
  ldy: number,
  yOffset: number,
];

/**
 * One variant of the decode (one activation row) matmul. Every variant gives the same bits as every
 * other; they differ only in speed. Absent fields keep the default (0, or the current ISA level).
 */
export interface DecodeVariant {
  /** the ISA level of the decode kernels ("current": the level the addon runs) */
  isa?: IsaLevelName | "current";
  /** weight rows per kernel call: 1 (single), 2 (the pair kernels), 4; 0 = the level's default */
  weightRows?: number;
  /** software prefetch distance in weight blocks (0 = the level's default) */
  prefetch?: number;
  /** weight rows per pool task (0 = automatic) */
  rowsPerTask?: number;
  /** 1: on the calling thread alone (no dispatch); 0: every pool thread */
  threads?: number;
  /**
   * A batched decode step (2 .. 8 activation rows, one per sequence): 0 = the block kernels, 1 = their
   * register form (one weight row against up to 8 activation rows) where the type has one. The other fields
   * are one-row fields; a batched step runs at the current level with automatic tasks.
   */
  batchKernel?: number;
  /**
   * A prefill matmul (more than 8 activation rows): 0 = the block kernels over tiles of 32 rows, 1 = their
   * register form over tiles of 8 rows where the type has one (the tuner times both).
   */
  prefillKernel?: number;
}

/** Which decode matmuls a variant applies to: the layers' dense matmuls or the output head. */
export type MatmulRole = "layer" | "head";

/** The native step's phase timers (exclusive nanoseconds and scope entries) and the pool's counters. */
export interface NativeProfile {
  on: boolean;
  phases: Record<
    "other" | "embed" | "norm" | "activationQuant" | "matmulLayers" | "matmulHead" | "matmulMoe" | "gdn" | "attention" | "ffn",
    { ns: number; calls: number }
  >;
  /**
   * jobs dispatched to the workers, jobs run inline (one task), the caller's wait for other threads
   * (ns), jobs where it waited for a descheduled thread, and jobs the contention guard ran on the
   * calling thread alone
   */
  pool: { jobs: number; inlineJobs: number; waitNs: number; stalledJobs: number; soloJobs: number };
}

export interface NativeAddon {
  /** the variant decode matmuls of (role, type) run with; throws on a variant this CPU cannot run */
  setDecodeVariant(role: MatmulRole, type: GgmlType, variant: DecodeVariant): void;
  getDecodeVariant(role: MatmulRole, type: GgmlType): Required<DecodeVariant>;
  resetDecodeVariants(): void;
  /** nanoseconds of each of `passes` passes of matmuls of `actRows` (default 1, at most 8) activation rows over every matrix (`rows[i]` rows of K) */
  timeDecodeMatmul(
    type: GgmlType,
    k: number,
    weights: ByteView[],
    rows: number[],
    variant: DecodeVariant,
    passes: number,
    actRows?: number,
  ): Float64Array;
  /** y[M, N] = x[M, K] W[N, K]^T with `variant` (llama numerics; M = `m`, default 1, at most 8) */
  matmulDecodeVariant(
    type: GgmlType,
    weight: ByteView,
    n: number,
    k: number,
    x: Float32Array,
    y: Float32Array,
    variant: DecodeVariant,
    m?: number,
  ): void;
  /** turns the step phase timers on (reset) or off */
  setProfiling(on: boolean): void;
  profile(): NativeProfile;
  /** The thread pool's contention-guard rule (core/threadpool.h): is this wait a stall? */
  isContentionStall(waitedNs: number, callerWorkNs: number, callerTasks: number): boolean;
  /**
   * Tests only: `jobs` jobs of 1-64 tasks through the pool as configured; with `pauseEvery` > 0 every
   * pauseEvery-th job pickup by a worker (and publication by the caller) sleeps `pauseUs` first, the
   * windows a descheduled thread opens (core/threadpool.h). A correct pool: wrongTasks 0, executions == tasks.
   */
  poolStress(
    jobs: number,
    pauseEvery: number,
    pauseUs: number,
  ): { jobs: number; tasks: number; wrongTasks: number; executions: number; pauses: number };
  abiVersion(): number;
  buildInfo(): NativeBuildInfo;
  /**
   * The kernel menu: per ISA level this CPU and build run (buildInfo().isaAvailable's order), the weight
   * types (ascending ids) with decode row kernels (`rows`) and with the block kernels' register form
   * (`registers`), read from that level's kernel table.
   */
  kernelMenu(): readonly NativeKernelMenuLevel[];
  getIsa(): IsaLevelName;
  /** throws (Error) with the reason when the level is unknown or unsupported here */
  setIsa(level: string): void;
  /** 0 = hardware threads */
  setThreads(threads: number): void;
  getThreads(): number;
  hardwareThreads(): number;
  /** the activation encoding for a weight type, -1 when there is no dot kernel */
  vecDotType(type: GgmlType): GgmlType | -1;
  dequantSupported(type: GgmlType): boolean;
  /** every type the addon knows, ascending ids */
  supportedTypes(): NativeTypeSupport[];
  /** dst = rows x K values decoded from src (rows of whole blocks); roundBf16 rounds each value once */
  dequantizeRows(type: GgmlType, src: ByteView, dst: Float32Array, rows: number, roundBf16?: boolean): void;
  /** activation quantizer (Q8_K, Q8_0, Q8_1, F16, BF16, F32) of `rows` rows of x into dst */
  quantizeActivations(actType: GgmlType, x: Float32Array, dst: ByteView, rows: number): void;
  /** y[M, N] = llama.cpp numerics of W[N, K] x x[M, K] */
  matmulLlama(type: GgmlType, weight: ByteView, n: number, k: number, x: Float32Array, m: number, y: Float32Array): void;
  matmulLlamaAsync(type: GgmlType, weight: ByteView, n: number, k: number, x: Float32Array, m: number, y: Float32Array): Promise<void>;
  /**
   * Contract numerics (decode -> bf16 RNE once -> f32): rows [rowStart, rowStart + rowCount) of
   * W (K columns) against x[M, K]; y[mi * ldy + yOffset + r] for r in [0, rowCount).
   */
  matmulBf16(...args: NativeBf16Args): void;
  /** wrapping sum of the buffer's 8-byte words, read once across the pool (bandwidth probe) */
  sumWords(buffer: ByteView): bigint;
  /** greedy sampling's argmax: the lowest index of the largest value, NaN never taken; 0 when none is above -Infinity */
  argmaxF32(x: Float32Array): number;
  matmulBf16Async(...args: NativeBf16Args): Promise<void>;
  /** `hparams` as encodeNativeHparams writes them (src/model-hparams.ts). */
  NativeModel: new (
    spec: Omit<NativeModelSpec, "hparams"> & { hparams: Float64Array },
  ) => NativeModelHandle;
  /** The vision encoder over borrowed weights (ABI 11). */
  VisionEncoder: new (
    spec: NativeVisionEncoderSpec,
  ) => NativeVisionEncoderHandle;
  /** The file mapped copy-on-write as one external ArrayBuffer; `populate` faults every page in now. */
  mapFile(path: string, populate: boolean): ArrayBuffer;
  /** Bytes [offset, offset + length) of the file mapped copy-on-write (length <= 2^32). */
  mapFileRange(path: string, offset: number, length: number, populate: boolean): ArrayBuffer;
  readFileRange(path: string, offset: number, length: number): { buffer: ArrayBuffer; hugePages: boolean };
  /** Zeroed native memory (resident when first touched), freed when the buffer is collected. */
  allocBuffer(bytes: number): ArrayBuffer;
  libm: NativeLibm;
}
