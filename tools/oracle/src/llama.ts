/**
 * The raw llama C API of the npm-shipped libllama.v0.5.0.so (the oracle), called through koffi.
 * Test and script support only: published packages never import this.
 *
 * Two ways to use it:
 *
 * 1. In this process (fast, but a GGML_ASSERT inside llama.cpp aborts the whole process):
 *      const llama = loadLlamaOracle();
 *      const model = llama.loadModel("m.gguf", { repack: false });      // use_extra_bufts = false
 *      const ids = model.tokenize("hello", { addSpecial: false, parseSpecial: true });
 *      const ctx = model.createContext({ nCtx: 256, threads: 2 });      // F32 K/V, no flash-attn
 *      const logits = ctx.evaluate(ids);                                // Float32Array[] per position
 *      const run = ctx.greedy(ids, 16);                                 // { tokens, logits[] }
 *      ctx.free(); model.free();
 *      llama.quantize("in.gguf", "out.gguf", "Q4_K_M");                // llama_model_quantize
 *
 * 2. In a child process (safe: an abort becomes a rejected promise with llama.cpp's stderr):
 *      const result = await runOracle({ kind: "greedy", model: "m.gguf", prompts: [[1, 2]], nTokens: 16 });
 *    Jobs and results are plain JSON (`OracleJob` / `OracleResult` below); float vectors travel as
 *    base64 of little-endian f32 (`decodeF32`). The worker is `llama-worker.ts`, run with tsx.
 *
 * Struct layouts are those of this exact build (llama.cpp "0.5.0-dev" as packaged by
 * @node-llama-cpp/linux-x64 3.22.1), verified against the bytes llama_*_default_params() write:
 * llama_model_params is 80 bytes (load_mode/lazy_mode enums, no use_mmap bool), llama_context_params
 * 160 bytes, llama_model_quantize_params 64 bytes, llama_batch 56 bytes. `llama.test.ts` re-checks them.
 */
import { createRequire } from "node:module";
import { spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import koffi from "koffi";
import { oracleLibDir, oracleUnavailableReason } from "./ggml.js";

export const LLAMA_LIBRARY = "libllama.v0.5.0.so";

/** Why the llama oracle cannot be used here, or undefined when it can. */
export function llamaUnavailableReason(): string | undefined {
  const reason = oracleUnavailableReason();
  if (reason) return reason;
  if (!fs.existsSync(path.join(oracleLibDir(), LLAMA_LIBRARY))) return `${LLAMA_LIBRARY} not found in ${oracleLibDir()}`;
  return undefined;
}

/**
 * The ggml CPU backend variant the oracle loads: ggml would pick the best one for the machine
 * (haswell = AVX2+FMA+F16C, skylakex/icelake/zen4 = AVX-512, ...), and the variants sum dot
 * products in different orders, so logits (at the ulp level) would depend on the machine. Pinning
 * the AVX2 variant makes goldens reproducible on any x86-64 machine with AVX2, FMA and F16C.
 */
export const ORACLE_CPU_VARIANT = "haswell";

function cpuSupportsPinnedVariant(): boolean {
  try {
    const flags = new Set(/^flags\s*:\s*(.*)$/m.exec(fs.readFileSync("/proc/cpuinfo", "utf8"))?.[1]?.split(/\s+/) ?? []);
    return ["avx2", "fma", "f16c"].every((flag) => flags.has(flag));
  } catch {
    return false;
  }
}

/** The libggml-cpu-<variant>.so mapped into this process ("none" before the oracle is loaded). */
function loadedCpuVariant(): string {
  try {
    const maps = fs.readFileSync("/proc/self/maps", "utf8");
    const variants = new Set([...maps.matchAll(/libggml-cpu-([\w-]+)\.so/g)].map((m) => m[1]!));
    return variants.size === 0 ? "none" : [...variants].sort().join("+");
  } catch {
    return "unknown";
  }
}

/** llama_ftype ids accepted by llama_model_quantize (include/llama.h). */
export const LLAMA_FTYPE = {
  F32: 0,
  F16: 1,
  Q4_0: 2,
  Q4_1: 3,
  Q8_0: 7,
  Q5_0: 8,
  Q5_1: 9,
  Q2_K: 10,
  Q3_K_S: 11,
  Q3_K_M: 12,
  Q3_K_L: 13,
  Q4_K_S: 14,
  Q4_K_M: 15,
  Q5_K_S: 16,
  Q5_K_M: 17,
  Q6_K: 18,
  IQ4_NL: 25,
  IQ4_XS: 30,
  BF16: 32,
} as const;
export type LlamaFtypeName = keyof typeof LLAMA_FTYPE;

/**
 * ggml_type ids used for the K/V cache. The oracle names the two it needs itself: it cannot import
 * @keepquant/gguf's GgmlType (the gguf package's tests depend on this package).
 */
export const GGML_TYPE_F32 = 0;
export const GGML_TYPE_F16 = 1;

// ---------------------------------------------------------------------------------------------
// Struct layouts of this build

/** ggml_tensor field offsets (ggml's, with GGML_MAX_SRC = 10): type, ne[4], nb[4], data, name[64]. */
const GGML_TENSOR_TYPE = 0;
const GGML_TENSOR_NE = 16;
const GGML_TENSOR_NB = 48;
const GGML_TENSOR_DATA = 248;
const GGML_TENSOR_NAME = 256;
/** Bytes of a ggml_tensor read by the eval callback: up to the end of its 64-byte name. */
const GGML_TENSOR_BYTES_READ = 320;

const ModelParams = koffi.struct("llama_model_params", {
  devices: "void *",
  tensor_buft_overrides: "void *",
  n_gpu_layers: "int32_t",
  split_mode: "int",
  load_mode: "int", // enum llama_load_mode: -1 auto, 0 none, 1 mmap, 2 mlock, 3 mmap+mlock, 4 dio
  lazy_mode: "int",
  main_gpu: "int32_t",
  tensor_split: "void *",
  progress_callback: "void *",
  progress_callback_user_data: "void *",
  kv_overrides: "void *",
  vocab_only: "bool",
  check_tensors: "bool",
  use_extra_bufts: "bool", // CPU weight repacking (e.g. Q4_K -> Q4_Kx8)
  no_host: "bool",
  no_alloc: "bool",
  load_mtp: "bool",
});

const ContextParams = koffi.struct("llama_context_params", {
  n_ctx: "uint32_t",
  n_batch: "uint32_t",
  n_ubatch: "uint32_t",
  n_seq_max: "uint32_t",
  n_rs_seq: "uint32_t",
  n_outputs_max: "uint32_t",
  n_outputs_max_per_seq: "uint32_t",
  n_threads: "int32_t",
  n_threads_batch: "int32_t",
  ctx_type: "int",
  rope_scaling_type: "int",
  pooling_type: "int",
  attention_type: "int",
  flash_attn_type: "int", // -1 auto, 0 disabled, 1 enabled
  rope_freq_base: "float",
  rope_freq_scale: "float",
  yarn_ext_factor: "float",
  yarn_attn_factor: "float",
  yarn_beta_fast: "float",
  yarn_beta_slow: "float",
  yarn_orig_ctx: "uint32_t",
  defrag_thold: "float",
  cb_eval: "void *",
  cb_eval_user_data: "void *",
  type_k: "int",
  type_v: "int",
  abort_callback: "void *",
  abort_callback_data: "void *",
  embeddings: "bool",
  offload_kqv: "bool",
  no_perf: "bool",
  op_offload: "bool",
  swa_full: "bool",
  kv_unified: "bool",
  samplers: "void *",
  n_samplers: "size_t",
  ctx_other: "void *",
});

const QuantizeParams = koffi.struct("llama_model_quantize_params", {
  nthread: "int32_t",
  ftype: "int",
  output_tensor_type: "int",
  token_embedding_type: "int",
  allow_requantize: "bool",
  quantize_output_tensor: "bool",
  only_copy: "bool",
  pure: "bool",
  keep_split: "bool",
  dry_run: "bool",
  imatrix: "void *",
  kv_overrides: "void *",
  tt_overrides: "void *",
  prune_layers: "void *",
  // 8 bytes this build has beyond the documented fields (defaults 0 and 2): carried through untouched
  tail: koffi.array("uint8_t", 8),
});

const Batch = koffi.struct("llama_batch", {
  n_tokens: "int32_t",
  token: "void *",
  embd: "void *",
  pos: "void *",
  n_seq_id: "void *",
  seq_id: "void *",
  logits: "void *",
});

/** Byte sizes of the structs as declared here; `llama.test.ts` checks them against the library. */
export const LLAMA_STRUCT_SIZES = {
  llama_model_params: koffi.sizeof(ModelParams),
  llama_context_params: koffi.sizeof(ContextParams),
  llama_model_quantize_params: koffi.sizeof(QuantizeParams),
  llama_batch: koffi.sizeof(Batch),
} as const;

// ---------------------------------------------------------------------------------------------
// Public types

export interface LoadModelOptions {
  /** Only the vocabulary (tokenize/detokenize), no weights. Default false. */
  vocabOnly?: boolean;
  /** mmap the file (load_mode mmap) or read it (load_mode none). Default true. */
  useMmap?: boolean;
  /** CPU weight repacking (`use_extra_bufts`). Default false: decode equals batched prefill. */
  repack?: boolean;
  /** Load the MTP/NextN drafter block (`load_mtp`; skipped by default in this build). Default false. */
  loadMtp?: boolean;
}

/**
 * MTP drafter evaluations through llama.cpp's own draft path (see `OracleModel.mtpDraft`): the
 * target's post-norm hidden rows of the prompt, its logits at the last prompt row, and per draft
 * step the drafter's logits and its own hidden state.
 */
export interface MtpDraftRun {
  /** [prompt.length rows] the target's `h_nextn` rows (llama_get_embeddings_nextn, unmasked) */
  targetHidden: Float32Array[];
  targetLogits: Float32Array;
  /** per draft step s: the drafter's logits (step 0 for `next` at prompt.length, step s for its argmax at prompt.length + s) */
  draftLogits: Float32Array[];
  /** per draft step: the drafter's own `h_nextn` at that row (the next step's hidden input) */
  draftHidden: Float32Array[];
}

export interface ContextOptions {
  /** Context length in tokens (also the batch size). Default 512. */
  nCtx?: number;
  /**
   * Threads for decode and batch. Default 1: results do not depend on it, and on a loaded machine
   * ggml's spinning thread pool makes 2 threads up to 200x slower for these tiny models.
   */
  threads?: number;
  /** K/V cache type. Default "f32". */
  kvType?: "f32" | "f16";
  /** Flash attention. Default false. */
  flashAttention?: boolean;
  /**
   * Tokens per compute pass (llama.cpp's n_ubatch; a longer decode call is split into passes of this many).
   * Default nCtx (one pass); llama.cpp's own default is 512.
   */
  ubatch?: number;
  /**
   * Sequences the context holds at once (llama.cpp's n_seq_max; each sequence gets its own KV stream of
   * nCtx / sequences cells and its own recurrent state). Default 1.
   */
  sequences?: number;
  /**
   * A persistent ggml thread pool attached to the context (`llama_attach_threadpool`), as llama-server and
   * llama-cli run (their `--poll`: 0 = the workers sleep between graphs, 100 = they spin; theirs is 50).
   * Without it (the default) ggml starts and joins a pool for every graph it computes.
   */
  threadPool?: { poll: number };
  /**
   * llama.cpp's eval callback (`cb_eval`): called after the graph computes each contiguous F32 tensor,
   * with its callback name (`attn_norm-0`) and a copy of its values. For per-layer comparisons.
   */
  onF32Tensor?: (name: string, values: Float32Array) => void;
}

/** One row of a multi-sequence batch (`OracleContext.decodeRows`): `token` at position `pos` of sequence `seq`. */
export interface BatchRow {
  token: number;
  pos: number;
  seq: number;
  /** Whether llama.cpp computes this row's logits (readable afterwards with `argmaxRow`). */
  logits: boolean;
}

export interface TokenizeOptions {
  /** Add BOS/EOS as the vocab says. Default false. */
  addSpecial?: boolean;
  /** Parse special/control tokens written in the text. Default true. */
  parseSpecial?: boolean;
}

export interface GreedyRun {
  /** The generated token ids (argmax, ties -> lowest id). */
  tokens: number[];
  /** logits[s] = the full logit vector that chose tokens[s]. */
  logits: Float32Array[];
}

export interface OracleContext {
  readonly nVocab: number;
  /** Clears the KV cache and recurrent state. */
  clear(): void;
  /**
   * Feeds `ids` at positions startPos.. in batches of nCtx and returns the logits of every
   * position (`wantAll`) or only of the last one.
   */
  decode(ids: readonly number[], startPos: number, wantAll: boolean): Float32Array[];
  /** Fresh sequence: the logits at every position of `ids` (teacher forcing, batched prefill). */
  evaluate(ids: readonly number[]): Float32Array[];
  /** Fresh sequence: batched prefill of `prompt`, then `nTokens` greedy steps decoded one by one. */
  greedy(prompt: readonly number[], nTokens: number): GreedyRun;
  /**
   * One llama_decode of rows that may belong to different sequences (at most nCtx rows; `seq` below
   * `sequences`), as llama-server's parallel slots decode: e.g. one token of every sequence per step.
   */
  decodeRows(rows: readonly BatchRow[]): void;
  /** The greedy token (ties -> lowest id) of row `i` of the last `decodeRows`, read in place (no copy). */
  argmaxRow(i: number): number;
  free(): void;
}

export interface OracleModel {
  readonly nVocab: number;
  readonly nEmbd: number;
  readonly nLayer: number;
  readonly bos: number;
  readonly eos: number;
  isEog(token: number): boolean;
  tokenize(text: string | Uint8Array, options?: TokenizeOptions): number[];
  /** llama_token_to_piece bytes (special: render control tokens). */
  tokenToPiece(token: number, special?: boolean): Uint8Array;
  /** llama_detokenize bytes. */
  detokenize(tokens: readonly number[], options?: { removeSpecial?: boolean; unparseSpecial?: boolean }): Uint8Array;
  createContext(options?: ContextOptions): OracleContext;
  /**
   * llama.cpp's MTP draft (common/speculative.cpp's draft-mtp convention): a target context with
   * `llama_set_embeddings_nextn(ctx, true, false)` decodes `prompt`; an MTP context
   * (LLAMA_CONTEXT_TYPE_MTP, its own 1-layer KV cache) decodes rows p = 0 .. prompt.length - 1 with
   * token p and the target's hidden row p - 1 (zeros for p = 0) ("process"), then one row at a
   * time ("draft"): `next` at prompt.length with the target's last hidden row, then `steps - 1`
   * more, each its previous argmax with the drafter's own hidden state. Single-row draft decodes
   * also sidestep this build's masked `llama_get_embeddings_nextn_ith`, which returns the batch's
   * first row rather than the logit row. Needs a model loaded with `loadMtp`.
   */
  mtpDraft(prompt: readonly number[], next: number, steps: number, options?: ContextOptions): MtpDraftRun;
  free(): void;
}

export interface LlamaOracle {
  loadModel(file: string, options?: LoadModelOptions): OracleModel;
  /** llama_model_quantize(input, output, { ftype, nthread }); throws LlamaOracleError when it fails. */
  quantize(input: string, output: string, ftype: LlamaFtypeName | number, nthread?: number): void;
  /** The struct bytes llama_*_default_params() write, as decoded objects (for layout checks). */
  defaults(): { model: Record<string, unknown>; context: Record<string, unknown>; quantize: Record<string, unknown> };
  /** llama_version() string. */
  version(): string;
  /** The ggml CPU backend variant loaded in this process, e.g. "haswell". */
  cpuVariant(): string;
}

export class LlamaOracleError extends Error {
  readonly code: string;
  constructor(code: string, message: string) {
    super(message);
    this.name = "LlamaOracleError";
    this.code = code;
  }
}

// ---------------------------------------------------------------------------------------------
// In-process binding

type Fn = (...args: unknown[]) => unknown;
let cached: LlamaOracle | undefined;

export interface LoadLlamaOracleOptions {
  /**
   * "pinned" (default): ggml's CPU backend is the haswell variant (ORACLE_CPU_VARIANT), what our
   * kernels match bit for bit and what goldens are made with. "best": the variant ggml itself picks
   * for this CPU (AVX-512 ones where available), as an application would run it: for benchmarks.
   * The first call of a process decides.
   */
  cpuVariant?: "pinned" | "best";
}

/** Loads libllama (once per process), initialises the backend, silences its log. */
export function loadLlamaOracle(options: LoadLlamaOracleOptions = {}): LlamaOracle {
  if (cached) return cached;
  const reason = llamaUnavailableReason();
  if (reason) throw new LlamaOracleError("ORACLE_UNAVAILABLE", `llama oracle unavailable: ${reason}`);
  const dir = oracleLibDir();
  // libllama's RUNPATH finds libggml*.so beside it; the CPU backend variants are loaded by path.
  const ggml = koffi.load(path.join(dir, "libggml.v0.5.0.so"));
  const lib = koffi.load(path.join(dir, LLAMA_LIBRARY));
  const f = (signature: string): Fn => lib.func(signature) as Fn;

  const LogCallback = koffi.proto("void llama_oracle_log_cb(int level, const char *text, void *user_data)");
  const logSet = f("void llama_log_set(llama_oracle_log_cb *cb, void *user_data)");
  // Discard llama.cpp's log in-process (the child runner captures stderr instead).
  if (process.env.KEEPQUANT_ORACLE_LOG !== "1") {
    const silent = koffi.register(() => {}, koffi.pointer(LogCallback));
    logSet(silent, null);
  }
  // Pin the CPU variant (see ORACLE_CPU_VARIANT) so goldens do not depend on the machine's ISA;
  // KEEPQUANT_ORACLE_CPU_VARIANT picks another one for measurements (docs/usage/parity.md).
  const variant = process.env.KEEPQUANT_ORACLE_CPU_VARIANT || ORACLE_CPU_VARIANT;
  const variantFile = path.join(dir, `libggml-cpu-${variant}.so`);
  if (variant !== ORACLE_CPU_VARIANT && !fs.existsSync(variantFile)) {
    throw new LlamaOracleError("ORACLE_UNAVAILABLE", `KEEPQUANT_ORACLE_CPU_VARIANT=${variant}: no ${variantFile}`);
  }
  if ((options.cpuVariant ?? "pinned") === "pinned" && cpuSupportsPinnedVariant() && fs.existsSync(variantFile)) {
    const registered = (ggml.func("void *ggml_backend_load(const char *path)") as Fn)(variantFile);
    if (!registered) throw new LlamaOracleError("ORACLE_UNAVAILABLE", `ggml_backend_load failed for ${variantFile}`);
  }
  f("void llama_backend_init(void)")();
  const backendCount = ggml.func("size_t ggml_backend_reg_count(void)") as Fn;
  if (Number(backendCount()) === 0) {
    (ggml.func("void ggml_backend_load_all_from_path(const char *dir)") as Fn)(dir);
  }

  const api = {
    modelDefault: f("llama_model_params llama_model_default_params(void)"),
    contextDefault: f("llama_context_params llama_context_default_params(void)"),
    quantizeDefault: f("llama_model_quantize_params llama_model_quantize_default_params(void)"),
    quantize: f("uint32_t llama_model_quantize(const char *in, const char *out, const llama_model_quantize_params *params)"),
    loadModel: f("void *llama_model_load_from_file(const char *path, llama_model_params params)"),
    freeModel: f("void llama_model_free(void *model)"),
    initContext: f("void *llama_init_from_model(void *model, llama_context_params params)"),
    freeContext: f("void llama_free(void *ctx)"),
    getVocab: f("void *llama_model_get_vocab(void *model)"),
    nTokens: f("int32_t llama_vocab_n_tokens(void *vocab)"),
    nEmbd: f("int32_t llama_model_n_embd(void *model)"),
    nLayer: f("int32_t llama_model_n_layer(void *model)"),
    bos: f("int32_t llama_vocab_bos(void *vocab)"),
    eos: f("int32_t llama_vocab_eos(void *vocab)"),
    isEog: f("bool llama_vocab_is_eog(void *vocab, int32_t token)"),
    tokenize: f(
      "int32_t llama_tokenize(void *vocab, const uint8_t *text, int32_t len, _Out_ int32_t *tokens, int32_t max, bool add_special, bool parse_special)",
    ),
    tokenToPiece: f(
      "int32_t llama_token_to_piece(void *vocab, int32_t token, _Out_ uint8_t *buf, int32_t len, int32_t lstrip, bool special)",
    ),
    detokenize: f(
      "int32_t llama_detokenize(void *vocab, const int32_t *tokens, int32_t n, _Out_ uint8_t *text, int32_t max, bool remove_special, bool unparse_special)",
    ),
    batchInit: f("llama_batch llama_batch_init(int32_t n_tokens, int32_t embd, int32_t n_seq_max)"),
    batchFree: f("void llama_batch_free(llama_batch batch)"),
    decode: f("int32_t llama_decode(void *ctx, llama_batch batch)"),
    logitsIth: f("float *llama_get_logits_ith(void *ctx, int32_t i)"),
    getMemory: f("void *llama_get_memory(void *ctx)"),
    memoryClear: f("void llama_memory_clear(void *mem, bool data)"),
    // C++ (mangled) exports of this build's speculative-decoding staging API (src/llama-ext.h)
    setEmbeddingsNextn: lib.func("_Z26llama_set_embeddings_nextnP13llama_contextbb", "void", ["void *", "bool", "bool"]) as Fn,
    getEmbeddingsNextn: lib.func("_Z26llama_get_embeddings_nextnP13llama_context", "float *", ["void *"]) as Fn,
    getEmbeddingsNextnIth: lib.func("_Z30llama_get_embeddings_nextn_ithP13llama_contexti", "float *", ["void *", "int32_t"]) as Fn,
    version: f("const char *llama_version(void)"),
    attachThreadpool: f("void llama_attach_threadpool(void *ctx, void *threadpool, void *threadpool_batch)"),
    threadpoolParamsInit: ggml.func("void ggml_threadpool_params_init(_Out_ uint8_t *params, int n_threads)") as Fn,
    devByType: ggml.func("void *ggml_backend_dev_by_type(int type)") as Fn,
    devBackendReg: ggml.func("void *ggml_backend_dev_backend_reg(void *device)") as Fn,
    regProcAddress: ggml.func("void *ggml_backend_reg_get_proc_address(void *reg, const char *name)") as Fn,
  };
  const EvalCallback = koffi.proto("bool llama_oracle_eval_cb(void *tensor, bool ask, void *user_data)");
  /** The eval callback that hands `onF32Tensor` every contiguous F32 tensor (ggml_tensor offsets below). */
  const registerEvalCallback = (onF32Tensor: (name: string, values: Float32Array) => void): bigint =>
    koffi.register((tensor: unknown, ask: boolean) => {
      if (ask) return true;
      const raw = new Uint8Array(koffi.view(tensor, GGML_TENSOR_BYTES_READ));
      let name = "";
      for (let i = GGML_TENSOR_NAME; i < GGML_TENSOR_BYTES_READ && raw[i]; i++) name += String.fromCharCode(raw[i]!);
      const view = new DataView(raw.buffer);
      const ne = [0, 1, 2, 3].map((i) => Number(view.getBigInt64(GGML_TENSOR_NE + 8 * i, true)));
      const nb = [0, 1, 2, 3].map((i) => Number(view.getBigUint64(GGML_TENSOR_NB + 8 * i, true)));
      const data = koffi.decode(tensor, GGML_TENSOR_DATA, "void *");
      const contiguous = nb[0] === 4 && nb[1] === 4 * ne[0]! && nb[2] === nb[1]! * ne[1]!;
      if (view.getInt32(GGML_TENSOR_TYPE, true) === GGML_TYPE_F32 && data && contiguous) {
        onF32Tensor(name, new Float32Array(koffi.view(data, ne[0]! * ne[1]! * ne[2]! * ne[3]! * 4)).slice());
      }
      return true;
    }, koffi.pointer(EvalCallback));
  /** struct ggml_threadpool_params: cpumask[512] bools, n_threads, prio, poll (at 520), strict_cpu, paused. */
  const THREADPOOL_PARAMS_BYTES = 528;
  const THREADPOOL_POLL_OFFSET = 520;
  const ThreadpoolNew = koffi.proto("void *llama_oracle_threadpool_new(const uint8_t *params)");
  const ThreadpoolFree = koffi.proto("void llama_oracle_threadpool_free(void *threadpool)");
  /** The CPU backend's (the loaded variant's) ggml_threadpool_new / _free, as llama.cpp's common code finds them. */
  const cpuProc = (name: string): unknown => {
    const device = api.devByType(0); // GGML_BACKEND_DEVICE_TYPE_CPU
    const pointer = device ? api.regProcAddress(api.devBackendReg(device), name) : null;
    if (!pointer) throw new LlamaOracleError("NO_THREADPOOL", `the CPU backend does not export ${name}`);
    return pointer;
  };

  const loadModel = (file: string, options: LoadModelOptions = {}): OracleModel => {
    if (!fs.existsSync(file)) throw new LlamaOracleError("MODEL_NOT_FOUND", `model file not found: ${file}`);
    const params = api.modelDefault() as Record<string, unknown>;
    params.vocab_only = options.vocabOnly ?? false;
    params.load_mode = (options.useMmap ?? true) ? 1 : 0;
    params.use_extra_bufts = options.repack ?? false;
    params.load_mtp = options.loadMtp ?? false;
    params.n_gpu_layers = 0;
    const model = api.loadModel(file, params);
    if (!model) throw new LlamaOracleError("MODEL_LOAD_FAILED", `llama_model_load_from_file failed for ${file}`);
    const vocab = api.getVocab(model);
    const nVocab = api.nTokens(vocab) as number;
    let freed = false;

    const tokenize = (text: string | Uint8Array, tokenizeOptions: TokenizeOptions = {}): number[] => {
      const bytes = typeof text === "string" ? Buffer.from(text, "utf8") : Buffer.from(text);
      const add = tokenizeOptions.addSpecial ?? false;
      const special = tokenizeOptions.parseSpecial ?? true;
      let capacity = bytes.length + 8;
      for (;;) {
        const out = new Int32Array(capacity);
        const n = api.tokenize(vocab, bytes, bytes.length, out, capacity, add, special) as number;
        if (n >= 0) return Array.from(out.subarray(0, n));
        if (n === -2147483648) throw new LlamaOracleError("TOKENIZE_FAILED", "llama_tokenize overflowed int32");
        capacity = -n;
      }
    };
    const tokenToPiece = (token: number, special = true): Uint8Array => {
      let capacity = 64;
      for (;;) {
        const out = Buffer.alloc(capacity);
        const n = api.tokenToPiece(vocab, token, out, capacity, 0, special) as number;
        if (n >= 0) return new Uint8Array(out.subarray(0, n));
        capacity = -n;
      }
    };
    const detokenize = (
      tokens: readonly number[],
      detokenizeOptions: { removeSpecial?: boolean; unparseSpecial?: boolean } = {},
    ): Uint8Array => {
      const ids = Int32Array.from(tokens);
      let capacity = tokens.length * 16 + 16;
      for (;;) {
        const out = Buffer.alloc(capacity);
        const n = api.detokenize(
          vocab,
          ids,
          ids.length,
          out,
          capacity,
          detokenizeOptions.removeSpecial ?? false,
          detokenizeOptions.unparseSpecial ?? true,
        ) as number;
        if (n >= 0) return new Uint8Array(out.subarray(0, n));
        capacity = -n;
      }
    };

    const contextParams = (
      contextOptions: ContextOptions,
      nCtx: number,
      ctxType?: number,
      evalCallback?: bigint,
    ): Record<string, unknown> => {
      const threads = contextOptions.threads ?? 1;
      const cp = api.contextDefault() as Record<string, unknown>;
      cp.n_ctx = nCtx;
      cp.n_batch = nCtx;
      cp.n_ubatch = Math.min(nCtx, contextOptions.ubatch ?? nCtx);
      cp.n_seq_max = contextOptions.sequences ?? 1;
      cp.n_threads = threads;
      cp.n_threads_batch = threads;
      cp.type_k = contextOptions.kvType === "f16" ? GGML_TYPE_F16 : GGML_TYPE_F32;
      cp.type_v = cp.type_k;
      cp.flash_attn_type = contextOptions.flashAttention ? 1 : 0;
      cp.no_perf = true;
      if (ctxType !== undefined) cp.ctx_type = ctxType;
      if (evalCallback) cp.cb_eval = evalCallback;
      return cp;
    };
    const createContext = (contextOptions: ContextOptions = {}): OracleContext => {
      const nCtx = contextOptions.nCtx ?? 512;
      const evalCallback = contextOptions.onF32Tensor ? registerEvalCallback(contextOptions.onF32Tensor) : undefined;
      const cp = contextParams(contextOptions, nCtx, undefined, evalCallback);
      const ctx = api.initContext(model, cp);
      if (!ctx) {
        if (evalCallback) koffi.unregister(evalCallback);
        throw new LlamaOracleError("CONTEXT_FAILED", `llama_init_from_model failed (n_ctx ${nCtx})`);
      }
      let threadpool: unknown = null;
      if (contextOptions.threadPool) {
        const params = Buffer.alloc(THREADPOOL_PARAMS_BYTES);
        api.threadpoolParamsInit(params, cp.n_threads as number);
        params.writeUInt32LE(contextOptions.threadPool.poll, THREADPOOL_POLL_OFFSET);
        threadpool = koffi.call(cpuProc("ggml_threadpool_new"), ThreadpoolNew, params);
        if (!threadpool) {
          api.freeContext(ctx);
          throw new LlamaOracleError("NO_THREADPOOL", `ggml_threadpool_new failed (${cp.n_threads} threads)`);
        }
        api.attachThreadpool(ctx, threadpool, null);
      }
      const memory = api.getMemory(ctx);
      const batch = api.batchInit(nCtx, 0, 1) as Record<string, unknown>;
      const tokenView = new Int32Array(koffi.view(batch.token, nCtx * 4));
      const posView = new Int32Array(koffi.view(batch.pos, nCtx * 4));
      const nSeqView = new Int32Array(koffi.view(batch.n_seq_id, nCtx * 4));
      const logitsView = new Int8Array(koffi.view(batch.logits, nCtx));
      const seqViews = (koffi.decode(batch.seq_id, koffi.array("void *", nCtx)) as unknown[]).map(
        (pointer) => new Int32Array(koffi.view(pointer, 4)),
      );
      for (let i = 0; i < nCtx; i++) {
        nSeqView[i] = 1;
        seqViews[i]![0] = 0;
      }
      const sequences = cp.n_seq_max as number;
      let contextFreed = false;

      const readLogits = (i: number): Float32Array => {
        const pointer = api.logitsIth(ctx, i);
        if (!pointer) throw new LlamaOracleError("NO_LOGITS", `llama_get_logits_ith(${i}) returned NULL`);
        return new Float32Array(koffi.view(pointer, nVocab * 4)).slice();
      };
      const decode = (ids: readonly number[], startPos: number, wantAll: boolean): Float32Array[] => {
        if (contextFreed) throw new LlamaOracleError("CONTEXT_FREED", "context already freed");
        if (startPos + ids.length > nCtx) {
          throw new LlamaOracleError("CONTEXT_FULL", `positions ${startPos}+${ids.length} exceed n_ctx ${nCtx}`);
        }
        const out: Float32Array[] = [];
        for (let start = 0; start < ids.length; start += nCtx) {
          const count = Math.min(nCtx, ids.length - start);
          const last = start + count === ids.length;
          for (let i = 0; i < count; i++) {
            const id = ids[start + i]!;
            if (!(id >= 0 && id < nVocab)) throw new LlamaOracleError("BAD_TOKEN", `token ${id} outside vocab ${nVocab}`);
            tokenView[i] = id;
            posView[i] = startPos + start + i;
            seqViews[i]![0] = 0;
            logitsView[i] = wantAll || (last && i === count - 1) ? 1 : 0;
          }
          const status = api.decode(ctx, { ...batch, n_tokens: count }) as number;
          if (status !== 0) throw new LlamaOracleError("DECODE_FAILED", `llama_decode returned ${status}`);
          for (let i = 0; i < count; i++) if (logitsView[i]) out.push(readLogits(i));
        }
        return out;
      };
      const decodeRows = (rows: readonly BatchRow[]): void => {
        if (contextFreed) throw new LlamaOracleError("CONTEXT_FREED", "context already freed");
        if (rows.length === 0 || rows.length > nCtx) {
          throw new LlamaOracleError("BAD_BATCH", `a batch holds 1 to ${nCtx} rows (n_ctx), got ${rows.length}`);
        }
        rows.forEach((row, i) => {
          if (!(row.token >= 0 && row.token < nVocab))
            throw new LlamaOracleError("BAD_TOKEN", `row ${i}: token ${row.token} outside vocab ${nVocab}`);
          if (!(Number.isInteger(row.seq) && row.seq >= 0 && row.seq < sequences)) {
            throw new LlamaOracleError(
              "BAD_SEQUENCE",
              `row ${i}: sequence ${row.seq} outside 0..${sequences - 1} (n_seq_max ${sequences})`,
            );
          }
          tokenView[i] = row.token;
          posView[i] = row.pos;
          seqViews[i]![0] = row.seq;
          logitsView[i] = row.logits ? 1 : 0;
        });
        const status = api.decode(ctx, { ...batch, n_tokens: rows.length }) as number;
        if (status !== 0) throw new LlamaOracleError("DECODE_FAILED", `llama_decode returned ${status}`);
      };
      const argmaxRow = (i: number): number => {
        const pointer = api.logitsIth(ctx, i);
        if (!pointer) throw new LlamaOracleError("NO_LOGITS", `llama_get_logits_ith(${i}) returned NULL`);
        return argmax(new Float32Array(koffi.view(pointer, nVocab * 4)));
      };
      const clear = (): void => {
        api.memoryClear(memory, true);
      };
      return {
        nVocab,
        clear,
        decode,
        decodeRows,
        argmaxRow,
        evaluate: (ids) => {
          clear();
          return decode(ids, 0, true);
        },
        greedy: (prompt, nTokens) => {
          clear();
          if (prompt.length === 0) throw new LlamaOracleError("EMPTY_PROMPT", "greedy needs at least one prompt token");
          const tokens: number[] = [];
          const logits: Float32Array[] = [];
          let current = decode(prompt, 0, false)[0]!;
          for (let step = 0; step < nTokens; step++) {
            const next = argmax(current);
            tokens.push(next);
            logits.push(current);
            if (step + 1 < nTokens) current = decode([next], prompt.length + step, false)[0]!;
          }
          return { tokens, logits };
        },
        free: () => {
          if (contextFreed) return;
          contextFreed = true;
          api.batchFree(batch);
          api.freeContext(ctx);
          if (threadpool) koffi.call(cpuProc("ggml_threadpool_free"), ThreadpoolFree, threadpool);
          if (evalCallback) koffi.unregister(evalCallback);
        },
      };
    };

    const nEmbd = api.nEmbd(model) as number;
    const mtpDraft = (prompt: readonly number[], next: number, steps: number, contextOptions: ContextOptions = {}): MtpDraftRun => {
      const n = prompt.length;
      if (n === 0) throw new LlamaOracleError("EMPTY_PROMPT", "mtpDraft needs at least one prompt token");
      if (!Number.isInteger(steps) || steps < 1)
        throw new LlamaOracleError("BAD_STEPS", `mtpDraft steps must be a positive integer, got ${steps}`);
      const nCtx = Math.max(32, Math.ceil((n + steps) / 32) * 32);
      // target: every row's h_nextn (unmasked), logits at the last row
      const target = api.initContext(model, contextParams(contextOptions, nCtx, 0));
      if (!target) throw new LlamaOracleError("CONTEXT_FAILED", "llama_init_from_model failed for the target context");
      const targetBatch = api.batchInit(nCtx, 0, 1) as Record<string, unknown>;
      const draft = api.initContext(model, contextParams(contextOptions, nCtx, 1));
      // the MTP batch carries tokens and hidden rows: llama_batch_init allocates only the embd part
      const draftBatch = api.batchInit(nCtx, nEmbd, 1) as Record<string, unknown>;
      const draftTokens = koffi.alloc("int32_t", nCtx);
      try {
        if (!draft) {
          throw new LlamaOracleError(
            "CONTEXT_FAILED",
            "llama_init_from_model failed for the MTP context (LLAMA_CONTEXT_TYPE_MTP): load the model with loadMtp on a file with an MTP block",
          );
        }
        const fill = (batch: Record<string, unknown>, count: number, logitRow: number, startPos = 0) => {
          const posView = new Int32Array(koffi.view(batch.pos, nCtx * 4));
          const nSeqView = new Int32Array(koffi.view(batch.n_seq_id, nCtx * 4));
          const logitsView = new Int8Array(koffi.view(batch.logits, nCtx));
          const seqPointers = koffi.decode(batch.seq_id, koffi.array("void *", nCtx)) as unknown[];
          for (let i = 0; i < count; i++) {
            posView[i] = startPos + i;
            nSeqView[i] = 1;
            new Int32Array(koffi.view(seqPointers[i], 4))[0] = 0;
            logitsView[i] = i === logitRow ? 1 : 0;
          }
        };
        api.setEmbeddingsNextn(target, true, false);
        const targetTokens = new Int32Array(koffi.view(targetBatch.token, nCtx * 4));
        prompt.forEach((t, i) => (targetTokens[i] = t));
        fill(targetBatch, n, n - 1);
        const status = api.decode(target, { ...targetBatch, n_tokens: n }) as number;
        if (status !== 0) throw new LlamaOracleError("DECODE_FAILED", `llama_decode (target) returned ${status}`);
        const hiddenPointer = api.getEmbeddingsNextn(target);
        if (!hiddenPointer) throw new LlamaOracleError("NO_EMBEDDINGS", "llama_get_embeddings_nextn (target) returned NULL");
        const hidden = new Float32Array(koffi.view(hiddenPointer, n * nEmbd * 4)).slice();
        const targetLogits = new Float32Array(koffi.view(api.logitsIth(target, n - 1), nVocab * 4)).slice();
        // drafter "process": rows p = 0 .. n - 1 = (token p, target h_{p-1}), no logits
        api.setEmbeddingsNextn(draft, true, true);
        const tokens = new Int32Array(koffi.view(draftTokens, nCtx * 4));
        const embd = new Float32Array(koffi.view(draftBatch.embd, nCtx * nEmbd * 4));
        const decodeDraft = (rowTokens: readonly number[], rowHidden: Float32Array, startPos: number, logitRow: number): void => {
          rowTokens.forEach((t, i) => (tokens[i] = t));
          embd.set(rowHidden.subarray(0, rowTokens.length * nEmbd));
          fill(draftBatch, rowTokens.length, logitRow, startPos);
          const code = api.decode(draft, { ...draftBatch, token: draftTokens, n_tokens: rowTokens.length }) as number;
          if (code !== 0) throw new LlamaOracleError("DECODE_FAILED", `llama_decode (MTP context) returned ${code}`);
        };
        const shifted = new Float32Array(n * nEmbd);
        shifted.set(hidden.subarray(0, (n - 1) * nEmbd), nEmbd);
        decodeDraft(prompt, shifted, 0, -1);
        // drafter "draft": one row at a time
        const draftLogits: Float32Array[] = [];
        const draftHidden: Float32Array[] = [];
        let token = next;
        let rowHidden = hidden.slice((n - 1) * nEmbd, n * nEmbd);
        for (let step = 0; step < steps; step++) {
          decodeDraft([token], rowHidden, n + step, 0);
          const logits = new Float32Array(koffi.view(api.logitsIth(draft, 0), nVocab * 4)).slice();
          const pointer = api.getEmbeddingsNextnIth(draft, 0);
          if (!pointer) throw new LlamaOracleError("NO_EMBEDDINGS", "llama_get_embeddings_nextn_ith (MTP context) returned NULL");
          rowHidden = new Float32Array(koffi.view(pointer, nEmbd * 4)).slice();
          draftLogits.push(logits);
          draftHidden.push(rowHidden);
          token = argmax(logits);
        }
        const targetHidden = Array.from({ length: n }, (_, i) => hidden.slice(i * nEmbd, (i + 1) * nEmbd));
        return { targetHidden, targetLogits, draftLogits, draftHidden };
      } finally {
        koffi.free(draftTokens);
        api.batchFree(draftBatch);
        if (draft) api.freeContext(draft);
        api.batchFree(targetBatch);
        api.freeContext(target);
      }
    };
    return {
      nVocab,
      nEmbd,
      mtpDraft,
      nLayer: api.nLayer(model) as number,
      bos: api.bos(vocab) as number,
      eos: api.eos(vocab) as number,
      isEog: (token) => api.isEog(vocab, token) as boolean,
      tokenize,
      tokenToPiece,
      detokenize,
      createContext,
      free: () => {
        if (freed) return;
        freed = true;
        api.freeModel(model);
      },
    };
  };

  cached = {
    loadModel,
    quantize: (input, output, ftype, nthread = 2) => {
      const id = typeof ftype === "number" ? ftype : LLAMA_FTYPE[ftype];
      if (id === undefined) throw new LlamaOracleError("BAD_FTYPE", `unknown llama ftype ${String(ftype)}`);
      if (!fs.existsSync(input)) throw new LlamaOracleError("MODEL_NOT_FOUND", `model file not found: ${input}`);
      const params = api.quantizeDefault() as Record<string, unknown>;
      params.ftype = id;
      params.nthread = nthread;
      const status = api.quantize(input, output, params) as number;
      if (status !== 0) throw new LlamaOracleError("QUANTIZE_FAILED", `llama_model_quantize returned ${status} for ${input}`);
    },
    defaults: () => ({
      model: api.modelDefault() as Record<string, unknown>,
      context: api.contextDefault() as Record<string, unknown>,
      quantize: api.quantizeDefault() as Record<string, unknown>,
    }),
    version: () => api.version() as string,
    cpuVariant: loadedCpuVariant,
  };
  return cached;
}

/** Index of the largest value; ties go to the lowest index (our sampler's greedy rule). */
export function argmax(values: Float32Array): number {
  let best = 0;
  let bestValue = values[0] ?? Number.NEGATIVE_INFINITY;
  for (let i = 1; i < values.length; i++) {
    const value = values[i]!;
    if (value > bestValue) {
      bestValue = value;
      best = i;
    }
  }
  return best;
}

// ---------------------------------------------------------------------------------------------
// Child-process runner

/** Common model-loading fields of the jobs that need weights. */
interface ModelJob {
  model: string;
  threads?: number;
  /** CPU repacking; default false. */
  repack?: boolean;
  kvType?: "f32" | "f16";
  nCtx?: number;
}

export type OracleJob =
  | { kind: "info"; model: string }
  | { kind: "quantize"; input: string; output: string; ftype: LlamaFtypeName | number; nthread?: number }
  | { kind: "tokenize"; model: string; texts: string[]; addSpecial?: boolean; parseSpecial?: boolean }
  | { kind: "detokenize"; model: string; sequences: number[][]; removeSpecial?: boolean; unparseSpecial?: boolean }
  | { kind: "pieces"; model: string; tokens: number[]; special?: boolean }
  | (ModelJob & { kind: "greedy"; prompts: number[][]; nTokens: number; withLogits?: boolean })
  | (ModelJob & { kind: "logits"; sequences: number[][]; flashAttention?: boolean })
  | (ModelJob & { kind: "mtp-draft"; prompt: number[]; next: number; steps: number; flashAttention?: boolean });

export interface OracleResults {
  info: { nVocab: number; nEmbd: number; nLayer: number; bos: number; eos: number; version: string; cpuVariant: string };
  quantize: { output: string; bytes: number };
  tokenize: { tokens: number[][] };
  /** Texts as base64 bytes: llama.cpp may return bytes that are not valid UTF-8. */
  detokenize: { texts: string[] };
  pieces: { pieces: string[] };
  /** logits[p][s]: base64 f32 vector of prompt p step s (only with withLogits). */
  greedy: { tokens: number[][]; logits?: string[][] };
  /** logits[q][i]: base64 f32 vector at position i of sequence q. */
  logits: { logits: string[][] };
  /** base64 f32 vectors (MtpDraftRun). */
  "mtp-draft": { targetHidden: string[]; targetLogits: string; draftLogits: string[]; draftHidden: string[] };
}
export type OracleResult<K extends OracleJob["kind"] = OracleJob["kind"]> = OracleResults[K];

/** Float32Array -> base64 of its little-endian bytes. */
export function encodeF32(values: Float32Array): string {
  return Buffer.from(values.buffer, values.byteOffset, values.byteLength).toString("base64");
}
/** base64 of little-endian f32 bytes -> Float32Array. */
export function decodeF32(text: string): Float32Array {
  const bytes = Buffer.from(text, "base64");
  const out = new Float32Array(bytes.length / 4);
  new Uint8Array(out.buffer).set(bytes);
  return out;
}

/** Runs one job in this process (the worker calls this). */
export function executeJob(job: OracleJob): OracleResult {
  const llama = loadLlamaOracle();
  switch (job.kind) {
    case "quantize": {
      llama.quantize(job.input, job.output, job.ftype, job.nthread);
      return { output: job.output, bytes: fs.statSync(job.output).size };
    }
    case "info": {
      const model = llama.loadModel(job.model, { repack: false });
      try {
        const info = { nVocab: model.nVocab, nEmbd: model.nEmbd, nLayer: model.nLayer, bos: model.bos, eos: model.eos };
        return { ...info, version: llama.version(), cpuVariant: llama.cpuVariant() };
      } finally {
        model.free();
      }
    }
    case "tokenize":
    case "detokenize":
    case "pieces": {
      const model = llama.loadModel(job.model, { vocabOnly: true });
      try {
        if (job.kind === "tokenize") {
          const options = { addSpecial: job.addSpecial ?? false, parseSpecial: job.parseSpecial ?? true };
          return { tokens: job.texts.map((text) => model.tokenize(text, options)) };
        }
        if (job.kind === "pieces") {
          return { pieces: job.tokens.map((t) => Buffer.from(model.tokenToPiece(t, job.special ?? true)).toString("base64")) };
        }
        const options = { removeSpecial: job.removeSpecial ?? false, unparseSpecial: job.unparseSpecial ?? true };
        return { texts: job.sequences.map((ids) => Buffer.from(model.detokenize(ids, options)).toString("base64")) };
      } finally {
        model.free();
      }
    }
    case "mtp-draft": {
      const model = llama.loadModel(job.model, { repack: job.repack ?? false, loadMtp: true });
      try {
        const run = model.mtpDraft(job.prompt, job.next, job.steps, {
          threads: job.threads ?? 1,
          kvType: job.kvType ?? "f32",
          flashAttention: job.flashAttention ?? false,
        });
        return {
          targetHidden: run.targetHidden.map(encodeF32),
          targetLogits: encodeF32(run.targetLogits),
          draftLogits: run.draftLogits.map(encodeF32),
          draftHidden: run.draftHidden.map(encodeF32),
        };
      } finally {
        model.free();
      }
    }
    case "greedy":
    case "logits": {
      const model = llama.loadModel(job.model, { repack: job.repack ?? false });
      const lengths = job.kind === "greedy" ? job.prompts.map((p) => p.length + job.nTokens) : job.sequences.map((s) => s.length);
      const nCtx = job.nCtx ?? Math.max(32, Math.ceil(Math.max(...lengths, 1) / 32) * 32);
      const ctx = model.createContext({
        nCtx,
        threads: job.threads ?? 1,
        kvType: job.kvType ?? "f32",
        flashAttention: job.kind === "logits" && job.flashAttention === true,
      });
      try {
        if (job.kind === "logits") {
          return { logits: job.sequences.map((ids) => ctx.evaluate(ids).map(encodeF32)) };
        }
        const runs = job.prompts.map((prompt) => ctx.greedy(prompt, job.nTokens));
        const result: OracleResults["greedy"] = { tokens: runs.map((r) => r.tokens) };
        if (job.withLogits) result.logits = runs.map((r) => r.logits.map(encodeF32));
        return result;
      } finally {
        ctx.free();
        model.free();
      }
    }
  }
}

const requireHere = createRequire(import.meta.url);

/**
 * Runs `job` in a child process (node --import tsx llama-worker.ts) and returns its JSON result.
 * A llama.cpp abort rejects with LlamaOracleError("ORACLE_CRASHED") carrying the tail of its stderr.
 */
export async function runOracle<K extends OracleJob["kind"]>(
  job: OracleJob & { kind: K },
  options: { timeoutMs?: number } = {},
): Promise<OracleResult<K>> {
  const reason = llamaUnavailableReason();
  if (reason) throw new LlamaOracleError("ORACLE_UNAVAILABLE", `llama oracle unavailable: ${reason}`);
  const folder = fs.mkdtempSync(path.join(os.tmpdir(), "keepquant-oracle-"));
  const jobFile = path.join(folder, "job.json");
  const resultFile = path.join(folder, "result.json");
  fs.writeFileSync(jobFile, JSON.stringify(job));
  const worker = fileURLToPath(new URL("./llama-worker.ts", import.meta.url));
  const tsx = pathToFileURL(requireHere.resolve("tsx")).href;
  try {
    const { code, signal, stderr } = await new Promise<{ code: number | null; signal: string | null; stderr: string }>(
      (resolve, reject) => {
        const child = spawn(process.execPath, ["--import", tsx, worker, jobFile, resultFile], {
          stdio: ["ignore", "ignore", "pipe"],
          env: { ...process.env, KEEPQUANT_ORACLE_LOG: "1" },
        });
        let stderrText = "";
        child.stderr.on("data", (chunk: Buffer) => {
          stderrText += chunk.toString("utf8");
          if (stderrText.length > 200_000) stderrText = stderrText.slice(-100_000);
        });
        const timer = options.timeoutMs ? setTimeout(() => child.kill("SIGKILL"), options.timeoutMs) : undefined;
        child.on("error", reject);
        child.on("close", (exitCode, exitSignal) => {
          if (timer) clearTimeout(timer);
          resolve({ code: exitCode, signal: exitSignal, stderr: stderrText });
        });
      },
    );
    if (code !== 0 || !fs.existsSync(resultFile)) {
      const tail = stderr
        .split("\n")
        .filter((line) => line.trim() !== "")
        .slice(-12)
        .join("\n");
      throw new LlamaOracleError(
        "ORACLE_CRASHED",
        `oracle job ${job.kind} failed (exit ${code ?? "none"}${signal ? `, signal ${signal}` : ""}):\n${tail}`,
      );
    }
    const parsed = JSON.parse(fs.readFileSync(resultFile, "utf8")) as {
      ok: boolean;
      result?: OracleResult<K>;
      error?: { code: string; message: string };
    };
    if (!parsed.ok) throw new LlamaOracleError(parsed.error?.code ?? "ORACLE_FAILED", parsed.error?.message ?? "oracle job failed");
    return parsed.result as OracleResult<K>;
  } finally {
    fs.rmSync(folder, { recursive: true, force: true });
  }
}
