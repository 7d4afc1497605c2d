/**
 * A synthetic qwen35 GGUF written directly in llama.cpp's Q4_K_M type mix, streamed tensor by
 * tensor: no F32 intermediate (for the 27B shape it would be 108 GB).
 *
 * The weights. Every matrix is a sequence of 256-value super-blocks (Q4_K and Q6_K quantize each
 * super-block on its own). For each (quantized type, value scale) pair the recipe draws a pool of
 * `POOL_BLOCKS` F32 super-blocks, uniform in [-scale, scale], and quantizes the pool once with our
 * bit-exact `quantize_row_<type>_ref` port (`quantizeTensor`). A tensor's F32 weights are then
 * defined as pool super-blocks picked by a per-tensor PRNG, and its file bytes are the picked
 * blocks' codes: exactly what quantizing those F32 weights gives, with ~20 s of quantization for the
 * whole 27B instead of hours (our TS Q4_K quantizer runs at ~1.2 M weights/s). `expandTensorF32`
 * returns those F32 weights, so a test can hand them to llama.cpp's quantizer and compare bytes.
 *
 * Scales (ORACLE.md, calm models): std 1/sqrt(fan_in); residual output projections (attn_output,
 * ssm_out, ffn_down, and a qwen35moe file's ffn_down_exps / ffn_down_shexp) further times RESIDUAL_GAIN / sqrt(2 n_layer); token embedding and head std
 * 3/sqrt(D) (logit std about 3); norms 1 +- 0.05; ssm_a = -(1..16); ssm_dt.bias = softplus^-1(dt)
 * with dt log-uniform in [1e-3, 1e-1]; ssm_conv1d std 1/sqrt(kernel).
 *
 * Restartable: bytes go to `<path>.partial`, with `<path>.partial.json` recording the tensors done;
 * a new run with the same recipe truncates the partial file to the last finished tensor and goes
 * on (the sha256 of the prefix is recomputed by reading it back). The finished file is renamed to
 * `path` only when complete.
 */
import { createHash, type Hash } from "node:crypto";
import fs from "node:fs";
import {
  encodeGgufHeader,
  GGML_TYPE_TRAITS,
  GgmlType,
  gguf,
  qwen35Q4KMClassMix,
  qwen35SpecLayout,
  type GgufMetadataEntry,
  type Qwen35Config,
  type Qwen35ExpectedTensor,
  type Qwen35Spec,
} from "@keepquant/gguf";
import { quantizeTensor } from "@keepquant/quant";

/** Super-blocks per (type, scale) pool: 2 Mi weights each, ~2 s of TS Q4_K quantization. */
export const POOL_BLOCKS = 8192;
/** Values per K-quant super-block (QK_K). */
const SUPER_BLOCK = 256;
/** Gain on the residual output projections when the spec gives none (as the F32 synthesizer's default). */
export const RESIDUAL_GAIN = 4;
/** The recipe's version: bump when the weights it writes change. */
export const RECIPE_VERSION = "pooled-q4km/1";
/** llama_ftype of Q4_K_M, written as general.file_type. */
const LLAMA_FTYPE_MOSTLY_Q4_K_M = 15;
/** GGML_QNT_VERSION, written as general.quantization_version. */
const GGML_QUANTIZATION_VERSION = 2;
/** Bytes of tensor data assembled before each write. */
const WRITE_CHUNK_BYTES = 32 * 2 ** 20;

/** A qwen35 spec plus the recipe's own scale: `residualGain` (Qwen35Spec) and `embeddingStd`. */
export interface PooledQwen35Spec extends Qwen35Spec {
  /** Std of the token embedding's values (default 3/sqrt(D), like the head). */
  embeddingStd?: number;
}

export class SyntheticModelError extends Error {
  readonly code: "SYNTHETIC_SHAPE" | "SYNTHETIC_PARTIAL";
  constructor(code: SyntheticModelError["code"], message: string) {
    super(message);
    this.name = "SyntheticModelError";
    this.code = code;
  }
}

/** mulberry32 over a 32-bit seed: returns uniform 32-bit integers. */
function mulberry32(seed: number): () => number {
  let state = seed | 0;
  return () => {
    state = (state + 0x6d2b79f5) | 0;
    let t = Math.imul(state ^ (state >>> 15), 1 | state);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return (t ^ (t >>> 14)) >>> 0;
  };
}

/** FNV-1a of a string mixed with the seed. */
function streamSeed(seed: number, name: string): number {
  let h = 0x811c9dc5 ^ seed;
  for (let i = 0; i < name.length; i++) h = Math.imul(h ^ name.charCodeAt(i), 0x01000193);
  return h >>> 0 || 1;
}

export type Init =
  | { kind: "pooled"; type: GgmlType; scale: number }
  | { kind: "uniform"; center: number; scale: number }
  | { kind: "ssm_a" }
  | { kind: "ssm_dt" };

/** How a tensor's values are drawn (see the module comment). */
function initFor(tensor: Qwen35ExpectedTensor, config: Qwen35Config, type: GgmlType, spec: PooledQwen35Spec): Init {
  const name = tensor.name;
  const sqrt3 = Math.sqrt(3);
  if (name.endsWith("ssm_a")) return { kind: "ssm_a" };
  if (name.endsWith("ssm_dt.bias")) return { kind: "ssm_dt" };
  if (name.endsWith("norm.weight")) return { kind: "uniform", center: 1, scale: 0.05 };
  const fanIn = tensor.ne[0]!;
  let std = 1 / Math.sqrt(fanIn);
  if (name === "output.weight") std = 3 / Math.sqrt(config.embeddingLength);
  else if (name === "token_embd.weight") std = spec.embeddingStd ?? 3 / Math.sqrt(config.embeddingLength);
  else if (/(attn_output|ssm_out|ffn_down|ffn_down_exps|ffn_down_shexp|nextn\.eh_proj)\.weight$/.test(name)) {
    std *= (spec.residualGain ?? RESIDUAL_GAIN) / Math.sqrt(2 * config.nLayer);
  }
  // Round the scale to f32 so the pool key is stable text.
  const scale = Math.fround(std * sqrt3);
  if (type === GgmlType.F32) return { kind: "uniform", center: 0, scale };
  if (type !== GgmlType.Q4_K && type !== GgmlType.Q6_K) {
    throw new SyntheticModelError("SYNTHETIC_SHAPE", `${name}: type ${GGML_TYPE_TRAITS[type].name} is not Q4_K, Q6_K or F32`);
  }
  if (fanIn % SUPER_BLOCK !== 0) {
    throw new SyntheticModelError(
      "SYNTHETIC_SHAPE",
      `${name}: rows of ${fanIn} values are not a multiple of ${SUPER_BLOCK} (llama.cpp would fall back to another type)`,
    );
  }
  return { kind: "pooled", type, scale };
}

interface Pool {
  f32: Float32Array;
  /** The quantized pool, made on first use (expanding F32 weights does not need it). */
  codes?: Uint8Array;
  blockBytes: number;
  type: GgmlType;
}

/** The pools of one recipe, each made on first use. */
export class PoolSet {
  private readonly pools = new Map<string, Pool>();
  constructor(private readonly seed: number) {}

  f32(type: GgmlType, scale: number): Pool {
    const key = `${GGML_TYPE_TRAITS[type].name}:${scale}`;
    let pool = this.pools.get(key);
    if (!pool) {
      const next = mulberry32(streamSeed(this.seed, `pool:${key}`));
      const f32 = new Float32Array(POOL_BLOCKS * SUPER_BLOCK);
      for (let i = 0; i < f32.length; i++) f32[i] = (2 * (next() / 4294967296) - 1) * scale;
      pool = { f32, blockBytes: GGML_TYPE_TRAITS[type].typeSize, type };
      this.pools.set(key, pool);
    }
    return pool;
  }

  codes(type: GgmlType, scale: number): Pool & { codes: Uint8Array } {
    const pool = this.f32(type, scale);
    pool.codes ??= quantizeTensor(type, pool.f32);
    return pool as Pool & { codes: Uint8Array };
  }
}

/** Everything a writer needs, derived from the spec. */
export interface QuantizedQwen35Layout {
  spec: Qwen35Spec;
  config: Qwen35Config;
  metadata: GgufMetadataEntry[];
  tensors: { tensor: Qwen35ExpectedTensor; type: GgmlType; init: Init; bytes: number }[];
  header: Uint8Array;
  fileSize: number;
  alignment: number;
  placements: { relativeOffset: number; byteLength: number }[];
  /** The super-block pools (shared by the writer and `expandTensorF32`). */
  pools: PoolSet;
}

/** The file's layout: metadata (general.file_type Q4_K_M), tensor types from `qwen35Q4KMClassMix`. */
export function quantizedQwen35Layout(spec: PooledQwen35Spec): QuantizedQwen35Layout {
  const { config, metadata: base, tensors } = qwen35SpecLayout(spec);
  const metadata = base
    .filter((e) => e.key !== "general.file_type")
    .concat([
      gguf.u32("general.quantization_version", GGML_QUANTIZATION_VERSION),
      gguf.u32("general.file_type", LLAMA_FTYPE_MOSTLY_Q4_K_M),
    ]);
  const mix = qwen35Q4KMClassMix(config.blockCount, spec.tied);
  const typed = tensors.map((tensor) => {
    const type = mix(tensor);
    const traits = GGML_TYPE_TRAITS[type];
    const elements = tensor.ne.reduce((a, b) => a * b, 1);
    return { tensor, type, init: initFor(tensor, config, type, spec), bytes: (elements / traits.blockSize) * traits.typeSize };
  });
  const encoded = encodeGgufHeader({ metadata, tensors: typed.map((t) => ({ name: t.tensor.name, type: t.type, ne: t.tensor.ne })) });
  return {
    spec,
    config,
    metadata,
    tensors: typed,
    header: encoded.header,
    fileSize: encoded.dataOffset + encoded.dataBytes,
    alignment: encoded.alignment,
    placements: encoded.placements,
    pools: new PoolSet(spec.seed ?? 1),
  };
}

/** Identity of the recipe (shape, seed, pool size, version): the cache key of the written file. */
export function recipeKey(spec: PooledQwen35Spec): string {
  const hash = createHash("sha256");
  hash.update(JSON.stringify({ version: RECIPE_VERSION, poolBlocks: POOL_BLOCKS, residualGain: RESIDUAL_GAIN, spec }));
  return hash.digest("hex");
}

/** Streams one tensor's file bytes (at most `WRITE_CHUNK_BYTES` per piece, padding not included). */
function* tensorBytes(entry: QuantizedQwen35Layout["tensors"][number], seed: number, pools: PoolSet): Generator<Uint8Array> {
  const { tensor, init } = entry;
  const next = mulberry32(streamSeed(seed, tensor.name));
  if (init.kind === "pooled") {
    const pool = pools.codes(init.type, init.scale);
    const blocks = entry.bytes / pool.blockBytes;
    const perChunk = Math.floor(WRITE_CHUNK_BYTES / pool.blockBytes);
    for (let done = 0; done < blocks; done += perChunk) {
      const n = Math.min(perChunk, blocks - done);
      const out = new Uint8Array(n * pool.blockBytes);
      for (let b = 0; b < n; b++) {
        const pick = next() % POOL_BLOCKS;
        out.set(pool.codes.subarray(pick * pool.blockBytes, (pick + 1) * pool.blockBytes), b * pool.blockBytes);
      }
      yield out;
    }
    return;
  }
  // F32 tensors are small (norms, ssm_a, ssm_dt.bias, ssm_conv1d): one piece.
  const values = expandF32Values(entry, next);
  yield new Uint8Array(values.buffer, values.byteOffset, values.byteLength);
}

function expandF32Values(entry: QuantizedQwen35Layout["tensors"][number], next: () => number): Float32Array {
  const { init } = entry;
  const out = new Float32Array(entry.tensor.ne.reduce((a, b) => a * b, 1));
  const uniform = (): number => next() / 4294967296;
  if (init.kind === "uniform") for (let i = 0; i < out.length; i++) out[i] = init.center + (2 * uniform() - 1) * init.scale;
  else if (init.kind === "ssm_a") for (let i = 0; i < out.length; i++) out[i] = -(1 + 15 * uniform());
  else if (init.kind === "ssm_dt") {
    for (let i = 0; i < out.length; i++) {
      const dt = Math.exp(Math.log(1e-3) + uniform() * (Math.log(1e-1) - Math.log(1e-3)));
      out[i] = dt + Math.log(-Math.expm1(-dt));
    }
  } else throw new SyntheticModelError("SYNTHETIC_SHAPE", `${entry.tensor.name} is a quantized tensor`);
  return out;
}

/**
 * The F32 weights a tensor's file bytes quantize (for tests on small shapes: it allocates the whole
 * tensor). Quantizing them with Q4_K/Q6_K gives exactly the bytes the writer streams.
 */
export function expandTensorF32(layout: QuantizedQwen35Layout, name: string): Float32Array {
  const entry = layout.tensors.find((t) => t.tensor.name === name);
  if (!entry) throw new SyntheticModelError("SYNTHETIC_SHAPE", `no tensor ${name} in the layout`);
  const seed = layout.spec.seed ?? 1;
  const next = mulberry32(streamSeed(seed, name));
  if (entry.init.kind !== "pooled") return expandF32Values(entry, next);
  const pool = layout.pools.f32(entry.init.type, entry.init.scale);
  const blocks = entry.bytes / pool.blockBytes;
  const out = new Float32Array(blocks * SUPER_BLOCK);
  for (let b = 0; b < blocks; b++) {
    const pick = next() % POOL_BLOCKS;
    out.set(pool.f32.subarray(pick * SUPER_BLOCK, (pick + 1) * SUPER_BLOCK), b * SUPER_BLOCK);
  }
  return out;
}

export interface WriteProgress {
  /** Tensors finished, of `tensorCount`. */
  tensorsDone: number;
  tensorCount: number;
  bytesDone: number;
  bytesTotal: number;
  /** The tensor just finished. */
  tensor: string;
  /** True for the first event of a run that resumed a partial file. */
  resumed?: boolean;
}

interface PartialState {
  recipe: string;
  tensorsDone: number;
  bytes: number;
}

/**
 * Writes the file to `path` (via `<path>.partial`, resuming one left by an earlier run of the same
 * recipe). Returns its size and sha256. `onProgress` is called after the header and every tensor.
 */
export async function writeQuantizedQwen35(
  path: string,
  spec: PooledQwen35Spec,
  options: { onProgress?: (progress: WriteProgress) => void } = {},
): Promise<{ bytes: number; sha256: string }> {
  const layout = quantizedQwen35Layout(spec);
  const recipe = recipeKey(spec);
  const partial = `${path}.partial`;
  const statePath = `${partial}.json`;
  const seed = spec.seed ?? 1;
  const pools = layout.pools;
  const hash = createHash("sha256");

  let state: PartialState = { recipe, tensorsDone: -1, bytes: 0 };
  if (fs.existsSync(partial) && fs.existsSync(statePath)) {
    const previous = JSON.parse(fs.readFileSync(statePath, "utf8")) as PartialState;
    if (previous.recipe === recipe && fs.statSync(partial).size >= previous.bytes) state = previous;
  }
  const fd = fs.openSync(partial, state.tensorsDone >= 0 ? "r+" : "w");
  try {
    if (state.tensorsDone >= 0) {
      fs.ftruncateSync(fd, state.bytes);
      rehashPrefix(fd, state.bytes, hash);
    } else {
      fs.ftruncateSync(fd, 0);
    }
    let position = state.bytes;
    const write = (bytes: Uint8Array): void => {
      let done = 0;
      while (done < bytes.byteLength) done += fs.writeSync(fd, bytes, done, bytes.byteLength - done, position + done);
      hash.update(bytes);
      position += bytes.byteLength;
    };
    const save = (tensorsDone: number): void => {
      const temporary = `${statePath}.tmp`;
      fs.writeFileSync(temporary, JSON.stringify({ recipe, tensorsDone, bytes: position } satisfies PartialState));
      fs.renameSync(temporary, statePath);
    };
    const count = layout.tensors.length;
    const progress = (tensorsDone: number, tensor: string, resumed?: boolean): void =>
      options.onProgress?.({
        tensorsDone,
        tensorCount: count,
        bytesDone: position,
        bytesTotal: layout.fileSize,
        tensor,
        ...(resumed ? { resumed } : {}),
      });
    if (state.tensorsDone < 0) {
      write(layout.header);
      save(0);
      state.tensorsDone = 0;
    } else {
      progress(state.tensorsDone, layout.tensors[state.tensorsDone - 1]?.tensor.name ?? "(header)", true);
    }
    for (let i = state.tensorsDone; i < count; i++) {
      const entry = layout.tensors[i]!;
      for (const piece of tensorBytes(entry, seed, pools)) write(piece);
      const placement = layout.placements[i]!;
      if (placement.byteLength !== entry.bytes) {
        throw new SyntheticModelError(
          "SYNTHETIC_SHAPE",
          `${entry.tensor.name}: ${entry.bytes} bytes written, header says ${placement.byteLength}`,
        );
      }
      const padded = Math.ceil(placement.byteLength / layout.alignment) * layout.alignment;
      if (padded > placement.byteLength) write(new Uint8Array(padded - placement.byteLength));
      save(i + 1);
      progress(i + 1, entry.tensor.name);
    }
    if (position !== layout.fileSize) {
      throw new SyntheticModelError("SYNTHETIC_PARTIAL", `wrote ${position} bytes, the layout says ${layout.fileSize}`);
    }
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
  fs.renameSync(partial, path);
  fs.rmSync(statePath, { force: true });
  return { bytes: layout.fileSize, sha256: hash.digest("hex") };
}

function rehashPrefix(fd: number, bytes: number, hash: Hash): void {
  const buffer = Buffer.allocUnsafe(16 * 2 ** 20);
  for (let at = 0; at < bytes; ) {
    const n = fs.readSync(fd, buffer, 0, Math.min(buffer.length, bytes - at), at);
    if (n === 0) throw new SyntheticModelError("SYNTHETIC_PARTIAL", `partial file ended at ${at}, expected ${bytes} bytes`);
    hash.update(buffer.subarray(0, n));
    at += n;
  }
}

/** sha256 of a file, read in 16 MiB pieces. */
export function sha256File(path: string): string {
  const hash = createHash("sha256");
  const fd = fs.openSync(path, "r");
  try {
    rehashPrefix(fd, fs.fstatSync(fd).size, hash);
  } finally {
    fs.closeSync(fd);
  }
  return hash.digest("hex");
}
