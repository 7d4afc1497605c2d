/**
 * @keepquant/tt-native: native providers of the keep-quant contract.
 *
 * - CPU-native arm (always built): bit-exact dequantization, `matmulLlama` (llama.cpp's CPU
 *   numerics: the engine's default CPU path) and the `cpu-native` KeepQuantProvider (the bf16
 *   contract). SIMD levels generic / AVX2 / AVX-512 (VNNI) are chosen at run time.
 * - TT-Metal arm: a seam only (built with KEEPQUANT_TT=ON); `nativeStatus().tt` says why it is absent.
 *
 * Importing never throws and does not load the addon; the first call does.
 */
import fs from "node:fs";
import { type GgmlType, GGML_TYPE_TRAITS, ggmlTypeLabel } from "@keepquant/gguf";
import {
  checkGroupedMatmulShape,
  checkMatmulBTQuantGroupedArgs,
  chunkRows,
  isKeepQuantEncoding,
  MATMUL_BT_QUANT_GROUPED,
  QuantArgumentError,
  runDenseGroups,
  UnsupportedGgmlTypeError,
  type EnvSource,
  type KeepQuantProvider,
  type MatmulBTQuantGroupedArgs,
  type MatmulProvider,
  type PackedWeight,
} from "@keepquant/quant";
import { NativeArgumentError, NativeIsaError, NativeUnavailableError } from "./errors.js";
import { encodeNativeHparams } from "./model-hparams.js";
import { loadNativeAddon, nativeThreadLimits, NATIVE_THREADS_PER_CORE, type LoadResult, type NativeStatus } from "./loader.js";
import type {
  IsaLevelName,
  NativeAddon,
  NativeBf16Args,
  NativeLibm,
  NativeModelHandle,
  NativeModelSpec,
  NativeTypeSupport,
} from "./native-types.js";
import type { DecodeVariant, MatmulRole, NativeProfile, NativeVisionEncoderHandle, NativeVisionEncoderSpec } from "./native-types.js";
import { tuneDecode, type TuneOptions, type TuneReport, type TunerMatrix } from "./tuner.js";

export * from "./errors.js";
export {
  KEEPQUANT_NATIVE_BINARY,
  KEEPQUANT_NATIVE_ISA,
  KEEPQUANT_NATIVE_THREADS,
  NATIVE_THREADS_HARD_LIMIT,
  NATIVE_THREADS_PER_CORE,
  binaryCandidates,
  defaultBinaryPath,
  prebuiltBinaryPath,
  loadNativeAddon,
  nativeThreadLimits,
  type NativeThreadLimits,
  type CpuArmStatus,
  type TtArmStatus,
  type NativeStatus,
  type LoadResult,
} from "./loader.js";
export {
  NATIVE_ABI_VERSION,
  type DecodeVariant,
  type MatmulRole,
  type NativeProfile,
  type IsaLevelName,
  type NativeAddon,
  type NativeBuildInfo,
  type NativeKernelMenuLevel,
  type NativeTypeSupport,
} from "./native-types.js";

export {
  DEFAULT_VARIANT,
  KEEPQUANT_TUNE,
  TUNE_CACHE_FILE,
  TUNE_CACHE_VERSION,
  TUNE_FULL_BUDGET_MS,
  TUNE_LOAD_BUDGET_MS,
  TUNE_MIN_GAIN,
  TUNE_MIN_GROUP_BYTES,
  TUNE_PASS_BYTES,
  TUNE_PREFILL_PASS_BYTES,
  TUNE_PREFILL_ROWS,
  candidateStages,
  kernelMenuOf,
  parseTuneMode,
  readTuneCache,
  searchVariants,
  tuneCacheDir,
  tuneGroups,
  tuneKey,
  writeTuneCache,
  type FullVariant,
  type KernelMenu,
  type TuneChoice,
  type TuneGroup,
  type TuneMode,
  type TuneOptions,
  type TuneReport,
  type TunerMatrix,
  type TuneTimer,
} from "./tuner.js";

let loaded: LoadResult | undefined;

function load(): LoadResult {
  loaded ??= loadNativeAddon(process.env);
  return loaded;
}

/** Which arms loaded, and every reason for those that did not. Loads the addon on first call. */
export function nativeStatus(): NativeStatus {
  const { status, addon } = load();
  if (addon) {
    status.cpu.isa = addon.getIsa();
    status.cpu.threads = addon.getThreads();
  }
  return structuredClone(status);
}

/** The raw addon (see native-types.ts), or undefined when the CPU arm did not load. */
export function nativeAddon(): NativeAddon | undefined {
  return load().addon;
}

function requireAddon(operation: string): NativeAddon {
  const { addon, status } = load();
  if (!addon) throw new NativeUnavailableError(operation, status.cpu.reasons);
  return addon;
}

// ---------------------------------------------------------------- configuration

/** Selects the kernel level ("generic" | "avx2" | "avx512" | "neon" | "best"); throws NativeIsaError. */
export function setNativeIsa(level: IsaLevelName | "best"): void {
  const addon = requireAddon("setNativeIsa");
  try {
    addon.setIsa(level);
  } catch (error) {
    throw new NativeIsaError(level, (error as Error).message);
  }
}

export function getNativeIsa(): IsaLevelName {
  return requireAddon("getNativeIsa").getIsa();
}

/** Levels this CPU can run, best last. */
export function availableNativeIsas(): IsaLevelName[] {
  return requireAddon("availableNativeIsas").buildInfo().isaAvailable;
}

/**
 * Why `threads` is not an acceptable pool size, or undefined when it is. The policy: 1 .. 4x the
 * logical cores (more threads only oversubscribe the CPU); with `force`, up to
 * NATIVE_THREADS_HARD_LIMIT. The CLI checks its `--threads` with this same function.
 */
export function nativeThreadsProblem(threads: number, options: { force?: boolean } = {}): string | undefined {
  const { max, forcedMax, logicalCores } = nativeThreadLimits();
  const limit = options.force ? forcedMax : max;
  if (Number.isSafeInteger(threads) && threads >= 1 && threads <= limit) return undefined;
  const shown = Number.isNaN(threads) ? "not an integer" : String(threads);
  return options.force
    ? `expected an integer in [1, ${forcedMax}] (the pool's hard limit), got ${shown}`
    : `expected an integer in [1, ${max}] (at most ${NATIVE_THREADS_PER_CORE}x the ${logicalCores} logical cores; --force allows up to ${forcedMax}), got ${shown}`;
}

/**
 * Threads of the persistent pool (0 = one per logical core). Results never depend on it. A count
 * outside nativeThreadLimits() throws NativeArgumentError naming the allowed range.
 */
export function setNativeThreads(threads: number, options: { force?: boolean } = {}): void {
  if (threads !== 0) {
    const problem = nativeThreadsProblem(threads, options);
    if (problem) throw new NativeArgumentError("setNativeThreads", "threads", problem);
  }
  requireAddon("setNativeThreads").setThreads(threads);
}

export function getNativeThreads(): number {
  return requireAddon("getNativeThreads").getThreads();
}

// ---------------------------------------------------------------- dequantization

// ---------------------------------------------------------------- the types the addon supports

let supported: readonly NativeTypeSupport[] | undefined;

/** Every type the addon's table knows and what the current kernel level has for it (empty when the CPU arm did not load). */
export function nativeSupportedTypes(): readonly NativeTypeSupport[] {
  const addon = load().addon;
  if (!addon) return [];
  // every level has the same types (tested); the first answer stands
  supported ??= Object.freeze(addon.supportedTypes().map((t) => Object.freeze(t)));
  return supported;
}

/**
 * A list of types the addon reports, computed on first use: importing this module does not load the
 * addon. Reads like a frozen array (iteration, length, indexing, array methods).
 */
function reportedTypes(pick: (t: NativeTypeSupport) => boolean): readonly GgmlType[] {
  const list: GgmlType[] = [];
  let filled = false;
  // the list itself, filled on first use (the proxy's target, so every invariant holds)
  const fill = (): GgmlType[] => {
    if (!filled) {
      filled = true;
      list.push(
        ...nativeSupportedTypes()
          .filter(pick)
          .map((t) => t.type),
      );
      Object.freeze(list);
    }
    return list;
  };
  return new Proxy(list, {
    get: (_target, key, receiver) => Reflect.get(fill(), key, receiver),
    has: (_target, key) => Reflect.has(fill(), key),
    ownKeys: () => Reflect.ownKeys(fill()),
    getOwnPropertyDescriptor: (_target, key) => Reflect.getOwnPropertyDescriptor(fill(), key),
  });
}

/** Types the native dequantizer decodes (bit-exact with ggml and @keepquant/quant), as the addon reports them. */
export const NATIVE_DEQUANTIZE_TYPES: readonly GgmlType[] = reportedTypes((t) => t.dequantize);

function rowBytesOf(type: GgmlType, cols: number, operation: string, argument: string): number {
  const { blockSize, typeSize } = GGML_TYPE_TRAITS[type];
  if (!Number.isSafeInteger(cols) || cols < 1 || cols % blockSize !== 0) {
    throw new QuantArgumentError(
      operation,
      argument,
      `${cols} is not a whole number of ${ggmlTypeLabel(type)} blocks (${blockSize} per block)`,
    );
  }
  return (cols / blockSize) * typeSize;
}

/**
 * Decodes `rows` rows of `dst.length / rows` values of `type` from `src` (multithreaded). With
 * `roundBf16`, each value is rounded once to bf16 (RNE), as the contract's decode. Returns dst.
 */
export function nativeDequantizeRows(
  type: GgmlType,
  src: Uint8Array,
  dst: Float32Array,
  rows = 1,
  options: { roundBf16?: boolean } = {},
): Float32Array {
  const op = "nativeDequantizeRows";
  const addon = requireAddon(op);
  if (!addon.dequantSupported(type))
    throw new UnsupportedGgmlTypeError(ggmlTypeLabel(type), op, NATIVE_DEQUANTIZE_TYPES.map(ggmlTypeLabel));
  if (!Number.isSafeInteger(rows) || rows < 1 || dst.length % rows !== 0) {
    throw new QuantArgumentError(op, "rows", `${rows} does not divide dst.length ${dst.length}`);
  }
  const k = dst.length / rows;
  const bytes = rowBytesOf(type, k, op, "dst.length / rows") * rows;
  if (src.length < bytes) throw new QuantArgumentError(op, "src", `needs ${bytes} bytes, has ${src.length}`);
  addon.dequantizeRows(type, src, dst, rows, options.roundBf16 === true);
  return dst;
}

/** Native twin of @keepquant/quant's dequantizeRow: one row of dst.length values. */
export function nativeDequantizeRow(type: GgmlType, src: Uint8Array, dst: Float32Array): Float32Array {
  return nativeDequantizeRows(type, src, dst, 1);
}

// ---------------------------------------------------------------- llama.cpp numerics

/** A dense [rows, cols] weight exactly as stored in GGUF (row = output feature). */
export interface NativeLlamaWeight {
  type: GgmlType;
  /** N */
  rows: number;
  /** K */
  cols: number;
  data: Uint8Array;
}

/** Weight types matmulLlama accepts (those with a dot kernel), as the addon reports them. */
export const NATIVE_LLAMA_TYPES: readonly GgmlType[] = reportedTypes((t) => t.vecDot);

function checkLlama(op: string, addon: NativeAddon, weight: NativeLlamaWeight, x: Float32Array, m: number, out?: Float32Array) {
  if (typeof weight !== "object" || weight === null) throw new QuantArgumentError(op, "weight", "missing");
  const act = addon.vecDotType(weight.type);
  if (act === -1) throw new UnsupportedGgmlTypeError(ggmlTypeLabel(weight.type), op, NATIVE_LLAMA_TYPES.map(ggmlTypeLabel));
  const { rows: n, cols: k } = weight;
  if (!Number.isSafeInteger(n) || n < 1) throw new QuantArgumentError(op, "weight.rows", `expected a positive integer, got ${n}`);
  const rowBytes = rowBytesOf(weight.type, k, op, "weight.cols");
  rowBytesOf(act, k, op, "weight.cols");
  if (!(weight.data instanceof Uint8Array) || weight.data.length < n * rowBytes) {
    throw new QuantArgumentError(op, "weight.data", `[${n}, ${k}] ${ggmlTypeLabel(weight.type)} needs ${n * rowBytes} bytes`);
  }
  if (!Number.isSafeInteger(m) || m < 1) throw new QuantArgumentError(op, "m", `expected a positive integer, got ${m}`);
  if (!(x instanceof Float32Array) || x.length !== m * k) {
    throw new QuantArgumentError(op, "x", `expected [${m}, ${k}] = ${m * k} f32 values`);
  }
  const y = out ?? new Float32Array(m * n);
  if (!(y instanceof Float32Array) || y.length !== m * n) throw new QuantArgumentError(op, "out", `expected [${m}, ${n}] f32 values`);
  return y;
}

/**
 * y [M, N] = W [N, K] x x [M, K] with llama.cpp's CPU numerics: each x row quantized to the
 * weight type's vec_dot_type (Q8_K / Q8_0 / Q8_1 / f16 / bf16 / f32), integer block dots, ggml's
 * per-block scale arithmetic. Results do not depend on the thread count. Blocks the calling thread.
 */
export function matmulLlama(weight: NativeLlamaWeight, x: Float32Array, m: number, out?: Float32Array): Float32Array {
  const op = "matmulLlama";
  const addon = requireAddon(op);
  const y = checkLlama(op, addon, weight, x, m, out);
  addon.matmulLlama(weight.type, weight.data, weight.rows, weight.cols, x, m, y);
  return y;
}

/** matmulLlama on a libuv worker thread: the event loop keeps running. Do not touch x/out until it settles. */
export async function matmulLlamaAsync(weight: NativeLlamaWeight, x: Float32Array, m: number, out?: Float32Array): Promise<Float32Array> {
  const op = "matmulLlamaAsync";
  const addon = requireAddon(op);
  const y = checkLlama(op, addon, weight, x, m, out);
  await addon.matmulLlamaAsync(weight.type, weight.data, weight.rows, weight.cols, x, m, y);
  return y;
}

/** The activation encoding matmulLlama uses for `type` (undefined when there is no kernel). */
export function nativeVecDotType(type: GgmlType): GgmlType | undefined {
  const act = requireAddon("nativeVecDotType").vecDotType(type);
  return act === -1 ? undefined : act;
}

// ---------------------------------------------------------------- keep-quant contract provider

export const CPU_NATIVE_PROVIDER_NAME = "cpu-native";
/** Above the TS reference (priority 0) and @keepquant/quant's wasm-simd (10). */
export const CPU_NATIVE_PROVIDER_PRIORITY = 100;

export interface NativeProviderOptions {
  /** the provider's name (default `cpu-native`; the engine adds the kernel level, e.g. `cpu-native-avx2`) */
  name?: string;
  /** where KEEPQUANT_CHUNK_BYTES is read from at each call (default process.env) */
  env?: EnvSource;
  /** called with every chunk's [rowStart, rowEnd) */
  onChunk?: (group: number, rowStart: number, rowEnd: number) => void;
}

/** A native provider (quant's MatmulProvider) that also runs the operation off the event loop. */
export interface NativeMatmulProvider extends MatmulProvider {
  /** the same operation on worker threads (chunks or groups one after another); the event loop keeps running */
  matmulBTQuantGroupedAsync(args: MatmulBTQuantGroupedArgs): Promise<Float32Array>;
}

/** The native provider of the keep-quant contract. */
export type NativeKeepQuantProvider = NativeMatmulProvider & KeepQuantProvider;

type Bf16Call = (...args: NativeBf16Args) => unknown;

/** Plans the contract call and issues one native call per (output p, chunk). */
function planCalls(
  args: MatmulBTQuantGroupedArgs,
  options: NativeProviderOptions,
  call: Bf16Call,
): { out: Float32Array; pending: unknown[] } {
  const shape = checkMatmulBTQuantGroupedArgs(args);
  const { n, k, m, p, pa, groupBytes, groupOf } = shape;
  const out = args.out ?? new Float32Array(p * m * n);
  const chunk = chunkRows(n, k, options.env ?? process.env);
  const pending: unknown[] = [];
  for (let pi = 0; pi < p; pi++) {
    const g = groupOf[pi]!;
    const w = args.weight.data.subarray(g * groupBytes, (g + 1) * groupBytes);
    const xGroup = pa === 1 ? 0 : pi;
    const x = args.x.subarray(xGroup * m * k, (xGroup + 1) * m * k);
    const y = out.subarray(pi * m * n, (pi + 1) * m * n);
    for (let r0 = 0; r0 < n; r0 += chunk) {
      const r1 = Math.min(n, r0 + chunk);
      options.onChunk?.(g, r0, r1);
      pending.push(call(args.weight.type, w, k, r0, r1 - r0, x, m, y, n, r0));
    }
  }
  return { out, pending };
}

/**
 * The `cpu-native` provider of MatmulBTQuantGrouped: each weight row of a chunk is decoded from its
 * packed words (bit-exact), rounded once to bf16 and dotted with x in f32 (SIMD lanes), rows split
 * across the thread pool. Refuses unregistered encodings with the contract's message.
 */
export function createNativeProvider(options: NativeProviderOptions = {}): NativeKeepQuantProvider {
  const op = MATMUL_BT_QUANT_GROUPED;
  return {
    name: options.name ?? CPU_NATIVE_PROVIDER_NAME,
    priority: CPU_NATIVE_PROVIDER_PRIORITY,
    numerics: "bf16",
    supports: isKeepQuantEncoding,
    matmulBTQuantGrouped(args: MatmulBTQuantGroupedArgs): Float32Array {
      checkMatmulBTQuantGroupedArgs(args);
      const addon = requireAddon(op);
      return planCalls(args, options, addon.matmulBf16.bind(addon)).out;
    },
    async matmulBTQuantGroupedAsync(args: MatmulBTQuantGroupedArgs): Promise<Float32Array> {
      checkMatmulBTQuantGroupedArgs(args);
      const addon = requireAddon(op);
      // one chunk at a time: never more than one chunk in flight
      const calls: (() => Promise<void>)[] = [];
      const { out } = planCalls(args, options, (...a) => {
        calls.push(() => addon.matmulBf16Async(...a));
        return undefined;
      });
      for (const run of calls) await run();
      return out;
    },
  };
}

/** The cpu-native provider when the CPU arm loaded, else undefined (see nativeStatus() for why). */
export function nativeProvider(options: NativeProviderOptions = {}): NativeKeepQuantProvider | undefined {
  return load().addon ? createNativeProvider(options) : undefined;
}

// ---------------------------------------------------------------- llama.cpp numerics provider

export const CPU_NATIVE_LLAMA_PROVIDER_NAME = "cpu-native-llama";

export interface NativeLlamaProviderOptions {
  /** the provider's name (default `cpu-native-llama`; the engine adds the kernel level) */
  name?: string;
}

/**
 * The `cpu-native-llama` provider: MatmulBTQuantGrouped in llama.cpp's CPU numerics (`matmulLlama`
 * per selected group) for every type of NATIVE_LLAMA_TYPES, priority 100. Any other type is refused
 * with UnsupportedGgmlTypeError naming it.
 */
export function createNativeLlamaProvider(options: NativeLlamaProviderOptions = {}): NativeMatmulProvider {
  const op = MATMUL_BT_QUANT_GROUPED;
  const checked = (args: MatmulBTQuantGroupedArgs): { addon: NativeAddon; shape: ReturnType<typeof checkGroupedMatmulShape> } => {
    const shape = checkGroupedMatmulShape(args, op);
    const addon = requireAddon(op);
    if (addon.vecDotType(args.weight.type) < 0)
      throw new UnsupportedGgmlTypeError(ggmlTypeLabel(args.weight.type), op, NATIVE_LLAMA_TYPES.map(ggmlTypeLabel));
    return { addon, shape };
  };
  return {
    name: options.name ?? CPU_NATIVE_LLAMA_PROVIDER_NAME,
    priority: CPU_NATIVE_PROVIDER_PRIORITY,
    numerics: "llama",
    supports(type: GgmlType): boolean {
      const addon = load().addon;
      return addon !== undefined && addon.vecDotType(type) >= 0;
    },
    matmulBTQuantGrouped(args: MatmulBTQuantGroupedArgs): Float32Array {
      const { addon, shape } = checked(args);
      return runDenseGroups(args, shape, (weight: PackedWeight, x: Float32Array, y: Float32Array) => {
        checkLlama(op, addon, weight, x, shape.m, y);
        addon.matmulLlama(weight.type, weight.data, weight.rows, weight.cols, x, shape.m, y);
      });
    },
    async matmulBTQuantGroupedAsync(args: MatmulBTQuantGroupedArgs): Promise<Float32Array> {
      const { addon, shape } = checked(args);
      const calls: (() => Promise<void>)[] = [];
      const out = runDenseGroups(args, shape, (weight: PackedWeight, x: Float32Array, y: Float32Array) => {
        checkLlama(op, addon, weight, x, shape.m, y);
        calls.push(() => addon.matmulLlamaAsync(weight.type, weight.data, weight.rows, weight.cols, x, shape.m, y));
      });
      for (const run of calls) await run();
      return out;
    },
  };
}

// ---------------------------------------------------------------- the native model (forward step)

export type {
  NativeLibm,
  NativeModelHandle,
  NativeModelLayer,
  NativeModelMatrix,
  NativeModelSpec,
  NativeModelTensor,
} from "./native-types.js";
export {
  NATIVE_HPARAMS,
  encodeNativeHparams,
  renderModelHparamsHeader,
  type NativeHparamField,
  type NativeHparamName,
  type NativeHparams,
} from "./model-hparams.js";
export {
  STEP_DESCRIPTOR,
  encodeStepDescriptor,
  stepDescriptorLength,
  renderStepDescriptorHeader,
  type StepDescriptorEntry,
  type StepKind,
} from "./step-descriptor.js";

/**
 * Builds the native qwen35 model over borrowed weights and storage (see NativeModelSpec). The
 * whole spec is checked once; a bad one throws NativeArgumentError naming the field.
 */
export function createNativeModel(spec: NativeModelSpec): NativeModelHandle {
  const op = "createNativeModel";
  const addon = requireAddon(op);
  const hparams = encodeNativeHparams(spec.hparams);
  try {
    return new addon.NativeModel({ ...spec, hparams });
  } catch (error) {
    const message = (error as Error).message;
    const field = /^native model spec: ([^\s:]+)/.exec(message)?.[1] ?? "spec";
    throw new NativeArgumentError(op, field, message.replace(/^native model spec: /, ""));
  }
}

// ---------------------------------------------------------------- the vision encoder

export type {
  NativeVisionEncoderHandle,
  NativeVisionEncoderSpec,
  NativeVisionLinear,
  NativeVisionMatrix,
  NativeVisionNorm,
} from "./native-types.js";

/**
 * Builds the native vision encoder (llama.cpp's qwen3vl_merger projector) over borrowed weights: the same
 * computation as @keepquant/engine's VisionEncoderSpec, bit for bit, with the llama-numerics matmuls of
 * `createNativeLlamaProvider`. The whole spec is checked once; a bad one throws NativeArgumentError naming the field.
 */
export function createNativeVisionEncoder(spec: NativeVisionEncoderSpec): NativeVisionEncoderHandle {
  const op = "createNativeVisionEncoder";
  const addon = requireAddon(op);
  try {
    return new addon.VisionEncoder(spec);
  } catch (error) {
    const message = (error as Error).message;
    const field = /^vision encoder spec: ([^\s:]+)/.exec(message)?.[1] ?? "spec";
    throw new NativeArgumentError(op, field, message.replace(/^vision encoder spec: /, ""));
  }
}

/**
 * Maps a file copy-on-write into one ArrayBuffer (no copy: the pages are the page cache's; writes
 * through a view stay private). With `populate`, every page is faulted in before this returns.
 */
export function mapFile(path: string, options: { populate?: boolean } = {}): ArrayBuffer {
  const size = fs.statSync(path).size;
  if (size > MAX_MAPPED_RANGE_BYTES) {
    // Node 20 refuses (and its addon layer aborts on) an external ArrayBuffer over 2^32 bytes.
    throw new NativeArgumentError(
      "mapFile",
      "path",
      `${path} is ${size} bytes, more than one mapping can hold (${MAX_MAPPED_RANGE_BYTES}); map it in ranges with mapFileRange`,
    );
  }
  return requireAddon("mapFile").mapFile(path, options.populate ?? true);
}

/** The largest range `mapFile` / `mapFileRange` map as one ArrayBuffer: 2^32 bytes (Node 20's external ArrayBuffer limit). */
export const MAX_MAPPED_RANGE_BYTES = 2 ** 32;

/**
 * Maps bytes [offset, offset + length) of a file copy-on-write into one ArrayBuffer of `length`
 * bytes (no copy; the mapping starts at the page at or below `offset`). For files over
 * `MAX_MAPPED_RANGE_BYTES`: map them in ranges. With `populate`, every page is faulted in now.
 */
export function mapFileRange(path: string, offset: number, length: number, options: { populate?: boolean } = {}): ArrayBuffer {
  if (!Number.isSafeInteger(offset) || offset < 0)
    throw new NativeArgumentError("mapFileRange", "offset", `${offset} is not a non-negative integer`);
  if (!Number.isSafeInteger(length) || length < 1 || length > MAX_MAPPED_RANGE_BYTES) {
    throw new NativeArgumentError("mapFileRange", "length", `${length} is not an integer in [1, ${MAX_MAPPED_RANGE_BYTES}]`);
  }
  return requireAddon("mapFileRange").mapFileRange(path, offset, length, options.populate ?? true);
}

/** What `readFileRange` returns. */
export interface ResidentFileRange {
  /** The bytes, `length` of them, in process-private anonymous memory (freed on collection). */
  buffer: ArrayBuffer;
  /** Whether the kernel took the advice to back the memory with transparent huge pages (MADV_HUGEPAGE). */
  hugePages: boolean;
}

/**
 * Reads bytes [offset, offset + length) of a file into fresh anonymous memory advised to be backed by
 * transparent huge pages (not the page cache's 4 KiB pages): decode streams weights through far fewer TLB
 * entries. The buffer starts at the same offset within a page as `offset` (views keep the file's alignment).
 * A copy, so it costs the read (two threads over the halves) and `length` bytes of memory; a read error names the
 * path and the byte.
 */
export function readFileRange(path: string, offset: number, length: number): ResidentFileRange {
  if (!Number.isSafeInteger(offset) || offset < 0)
    throw new NativeArgumentError("readFileRange", "offset", `${offset} is not a non-negative integer`);
  if (!Number.isSafeInteger(length) || length < 1 || length > MAX_MAPPED_RANGE_BYTES) {
    throw new NativeArgumentError("readFileRange", "length", `${length} is not an integer in [1, ${MAX_MAPPED_RANGE_BYTES}]`);
  }
  return requireAddon("readFileRange").readFileRange(path, offset, length);
}

/** Zeroed native memory of `bytes` bytes (pages resident when first touched), freed on collection. */
export function allocNativeBuffer(bytes: number): ArrayBuffer {
  if (!Number.isSafeInteger(bytes) || bytes < 1)
    throw new NativeArgumentError("allocNativeBuffer", "bytes", `expected a positive integer, got ${bytes}`);
  return requireAddon("allocNativeBuffer").allocBuffer(bytes);
}

/** The C library's f32 libm as the native step calls it (to pin the TypeScript specification). */
export function nativeLibm(): NativeLibm {
  return requireAddon("nativeLibm").libm;
}

/**
 * Greedy sampling's argmax over a logits row, natively (vectorized where the CPU allows): the lowest index
 * of the largest value (-0 and +0 equal), NaN never taken, 0 when no value is above -Infinity (or the row is
 * empty). The same index as a linear scan that keeps the first strictly larger value (@keepquant/engine's
 * `greedy`, llama_sampler_greedy's): 0.012 ms against the scan's 0.27-0.41 ms on a 248,320-entry row (AMD Zen 4).
 */
export function nativeArgmax(x: Float32Array): number {
  if (!(x instanceof Float32Array)) throw new NativeArgumentError("nativeArgmax", "x", "expected a Float32Array");
  return requireAddon("nativeArgmax").argmaxF32(x);
}

// ---------------------------------------------------------------- memory bandwidth

export interface ReadBandwidth {
  /** Median bytes per second over the passes. */
  bytesPerSecond: number;
  /** Pool threads that read. */
  threads: number;
  bytes: number;
  passes: number;
}

/**
 * The machine's memory read bandwidth as this arm sees it: every pool thread sums its share of a
 * natively allocated buffer (written first, so the pages are real), `passes` times; the median
 * pass. The denominator of "decode efficiency" (weight bytes read per token x tok/s / bandwidth).
 */
export function measureReadBandwidth(options: { bytes?: number; passes?: number } = {}): ReadBandwidth {
  const op = "measureReadBandwidth";
  const addon = requireAddon(op);
  const bytes = options.bytes ?? 512 * 2 ** 20;
  const passes = options.passes ?? 7;
  if (!Number.isSafeInteger(bytes) || bytes < 2 ** 20)
    throw new NativeArgumentError(op, "bytes", `expected an integer >= 1 MiB, got ${bytes}`);
  if (!Number.isSafeInteger(passes) || passes < 1 || passes > 1000)
    throw new NativeArgumentError(op, "passes", `expected an integer in [1, 1000], got ${passes}`);
  const buffer = new Uint8Array(addon.allocBuffer(bytes));
  buffer.fill(0x5a);
  addon.sumWords(buffer); // warm-up (page tables, frequency)
  const seconds: number[] = [];
  for (let i = 0; i < passes; i++) {
    const t0 = process.hrtime.bigint();
    addon.sumWords(buffer);
    seconds.push(Number(process.hrtime.bigint() - t0) / 1e9);
  }
  seconds.sort((a, b) => a - b);
  return { bytesPerSecond: bytes / seconds[seconds.length >> 1]!, threads: addon.getThreads(), bytes, passes };
}

// ---------------------------------------------------------------- decode tuning and the step profile

/**
 * Tunes the decode matmuls of a loaded model's weights (src/tuner.ts): the cache first, else measured
 * within `options.budgetMs`; applies the choice to the addon and says what it chose and why.
 */
export function tuneNativeDecode(matrices: readonly TunerMatrix[], options: TuneOptions = {}): TuneReport {
  return tuneDecode(requireAddon("tuneNativeDecode"), matrices, options);
}

/** The variant decode matmuls of (role, type) run with now. */
export function getNativeDecodeVariant(role: MatmulRole, type: GgmlType): Required<DecodeVariant> {
  return requireAddon("getNativeDecodeVariant").getDecodeVariant(role, type);
}

/** Back to the built-in decode defaults for every (role, type). */
export function resetNativeDecodeVariants(): void {
  requireAddon("resetNativeDecodeVariants").resetDecodeVariants();
}

/** The most activation rows matmulDecodeVariant takes (the addon's kTimedMaxRows). */
export const MATMUL_VARIANT_MAX_ROWS = 64;

/**
 * y[M, N] = x[M, K] W^T with `variant` (llama numerics; every variant gives the same bits): M = 1 is a
 * decode step, M = 2 .. 8 a batched one (where `batchKernel` applies), more a prefill (`prefillKernel`).
 */
export function matmulDecodeVariant(
  weight: NativeLlamaWeight,
  x: Float32Array,
  variant: DecodeVariant,
  out?: Float32Array,
  m = 1,
): Float32Array {
  const op = "matmulDecodeVariant";
  const addon = requireAddon(op);
  if (!Number.isInteger(m) || m < 1 || m > MATMUL_VARIANT_MAX_ROWS)
    throw new NativeArgumentError(op, "m", `must be an integer 1 .. ${MATMUL_VARIANT_MAX_ROWS}, got ${m}`);
  checkLlama(op, addon, weight, x, m, out);
  const y = out ?? new Float32Array(weight.rows * m);
  try {
    addon.matmulDecodeVariant(weight.type, weight.data, weight.rows, weight.cols, x, y, variant, m);
  } catch (error) {
    throw new NativeArgumentError(op, "variant", (error as Error).message);
  }
  return y;
}

/** Turns the native step's phase timers on (reset to zero) or off. */
export function setNativeProfiling(on: boolean): void {
  requireAddon("setNativeProfiling").setProfiling(on);
}

/** The native step's phase timers and the pool's counters since profiling was turned on. */
export function nativeProfile(): NativeProfile {
  return requireAddon("nativeProfile").profile();
}
