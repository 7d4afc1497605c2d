import { open } from "node:fs/promises";
import { GgufIoError } from "../errors.js";
import { GgmlType } from "../ggml-type.js";
import type { GgufByteSource } from "../source.js";
import { parseQwen35Config, type Qwen35Config } from "../qwen35/config.js";
import { qwen35ExpectedTensors, type Qwen35ExpectedTensor } from "../qwen35/tensors.js";
import type { GgufMetadataEntry } from "../types.js";
import { GgufValueType } from "../value-type.js";
import { encodeGgufHeader, gguf, writeGguf, type GgufTensorHeader } from "../writer.js";
import { defaultQwen35Tokenizer, type Qwen35TokenizerSpec } from "./tokenizer.js";
import type { Qwen35TensorTypeMix } from "./type-mix.js";
import { writeHeaderOnlyFile } from "./header-only.js";

/** Shape and options of a synthetic qwen35 model (all tensors F32). */
export interface Qwen35Spec {
  vocab: number;
  /** D */
  hidden: number;
  /** Trunk layers (n_layer); the MTP block, when enabled, is added on top. */
  layers: number;
  ffn: number;
  heads: number;
  headsKv: number;
  headDim: number;
  /** Hk */
  ssmGroups: number;
  /** Hv */
  ssmHeads: number;
  /** Dk = Dv */
  ssmStateSize: number;
  convKernel: number;
  ropeDims: number;
  ropeSections: [number, number, number, number];
  ropeTheta: number;
  eps: number;
  contextLength: number;
  /** Tied head: no `output.weight`, the head is `token_embd.weight`. */
  tied: boolean;
  /** Add the MTP block `blk.{layers}.*` (nextn_predict_layers = 1). */
  mtp?: boolean;
  /**
   * A `qwen35moe` file: every FFN is `experts` routed experts (top `used`) of width `ffnExp`, plus a shared
   * expert of width `ffnShared` behind a scalar gate; `ffn` is then written as feed_forward_length.
   */
  moe?: { experts: number; used: number; ffnExp: number; ffnShared: number };
  /** Written as `qwen35.full_attention_interval` when set (llama.cpp default 4). */
  fullAttentionInterval?: number;
  /** Written as `qwen35.attention.recurrent_layers` (length layers + mtp) when set. */
  recurrentLayers?: boolean[];
  tokenizer?: Qwen35TokenizerSpec;
  /** PRNG seed (default 1). */
  seed?: number;
  name?: string;
  /**
   * Gain on the residual output projections (default 4): their std is
   * gain / sqrt(fan_in * 2 n_layer). With a tied head the embedding of the last token otherwise
   * dominates the final hidden state and greedy decoding repeats the input token.
   */
  residualGain?: number;
  /** Extra metadata entries appended after the model keys. */
  extraMetadata?: GgufMetadataEntry[];
}

/** What the released Qwen3.5 models share (qwen35.md 13): vocabulary, head and state sizes, RoPE, norm eps, context. */
const QWEN35_RELEASED: Omit<Qwen35Spec, "hidden" | "layers" | "ffn" | "heads" | "headsKv" | "ssmHeads" | "tied" | "name"> = {
  vocab: 248_320,
  headDim: 256,
  ssmGroups: 16,
  ssmStateSize: 128,
  convKernel: 4,
  ropeDims: 64,
  ropeSections: [11, 11, 10, 0],
  ropeTheta: 10_000_000,
  eps: 1e-6,
  contextLength: 262_144,
};

/** Qwen3.5-0.8B (qwen35.md 13.1): tied head. */
export const QWEN35_0_8B_SHAPE: Qwen35Spec = Object.freeze({
  ...QWEN35_RELEASED,
  hidden: 1024,
  layers: 24,
  ffn: 3584,
  heads: 8,
  headsKv: 2,
  ssmHeads: 16,
  tied: true,
  name: "synthetic-qwen35-0.8b",
}) as Qwen35Spec;

/** Qwen3.5-27B (qwen35.md 13.2): untied head, Hk 16 < Hv 48. */
export const QWEN35_27B_SHAPE: Qwen35Spec = Object.freeze({
  ...QWEN35_RELEASED,
  hidden: 5120,
  layers: 64,
  ffn: 17_408,
  heads: 24,
  headsKv: 4,
  ssmHeads: 48,
  tied: false,
  name: "synthetic-qwen35-27b",
}) as Qwen35Spec;

/**
 * Qwen3.5-35B-A3B (`qwen35moe`): hidden 2048, 40 layers (attention every 4th), 16 query / 2 KV heads of
 * 256, GDN Hk 16 / Hv 32 of 128, 256 experts of width 512 (8 used) and a 512-wide shared expert, untied
 * head, one MTP block.
 */
export const QWEN35_35B_A3B_SHAPE: Qwen35Spec = Object.freeze({
  vocab: 248_320,
  hidden: 2048,
  layers: 40,
  ffn: 512,
  heads: 16,
  headsKv: 2,
  headDim: 256,
  ssmGroups: 16,
  ssmHeads: 32,
  ssmStateSize: 128,
  convKernel: 4,
  ropeDims: 64,
  ropeSections: [11, 11, 10, 0],
  ropeTheta: 10_000_000,
  eps: 1e-6,
  contextLength: 262_144,
  tied: false,
  mtp: true,
  moe: { experts: 256, used: 8, ffnExp: 512, ffnShared: 512 },
  name: "synthetic-qwen35-35b-a3b",
}) as Qwen35Spec;

/**
 * Qwen3.5-397B-A17B (`qwen35moe`), a planning preset (header-only files: what fits where). Verified from a
 * public training recipe (THUDM/slime, scripts/models/qwen3.5-397B-A17B.sh): 60 layers, hidden 4096, 32
 * query / 2 KV heads of 256, rotary on 0.25 of the head (64 dims), rope base 1e7, 512 experts of width
 * 1024 with 10 used, a 1024-wide gated shared expert, vocabulary 248,320, untied head. NOT verified (no
 * public source found by this work's search tools): the Gated DeltaNet widths (taken as the 35B-A3B's:
 * Hk 16, Hv 64 of 128, i.e. Hv doubled with the hidden size), the attention interval (4, as every
 * Qwen3.5) and the MTP block (assumed present).
 */
export const QWEN35_397B_A17B_SHAPE: Qwen35Spec = Object.freeze({
  ...QWEN35_35B_A3B_SHAPE,
  hidden: 4096,
  layers: 60,
  ffn: 1024,
  heads: 32,
  headsKv: 2,
  ssmGroups: 16,
  ssmHeads: 64,
  moe: { experts: 512, used: 10, ffnExp: 1024, ffnShared: 1024 },
  name: "synthetic-qwen35moe-397b-a17b",
}) as Qwen35Spec;

/**
 * Qwen3.5-122B-A10B (`qwen35moe`), a planning preset. **Not verified**: no public config of this
 * checkpoint was found by this work's search tools (only its name, in Transformers' qwen3_5_moe docs).
 * Assumed, from the family's pattern between 35B-A3B and 397B-A17B: 48 layers, hidden 3072, 32 query /
 * 2 KV heads of 256, GDN Hk 16 / Hv 48 of 128, 256 experts of width 1024 with 8 used, a 1024-wide shared
 * expert, vocabulary 248,320, untied head, an MTP block (about 122e9 weights with these numbers).
 */
export const QWEN35_122B_A10B_SHAPE: Qwen35Spec = Object.freeze({
  ...QWEN35_35B_A3B_SHAPE,
  hidden: 3072,
  layers: 48,
  ffn: 1024,
  heads: 32,
  headsKv: 2,
  ssmGroups: 16,
  ssmHeads: 48,
  moe: { experts: 256, used: 8, ffnExp: 1024, ffnShared: 1024 },
  name: "synthetic-qwen35moe-122b-a10b",
}) as Qwen35Spec;

/** A small test model: hidden 256, 4 layers (attention at 3), Hk 2 < Hv 4, vocab 512 (~5 MB F32). */
export const QWEN35_TEST_SHAPE: Qwen35Spec = Object.freeze({
  vocab: 512,
  hidden: 256,
  layers: 4,
  ffn: 512,
  heads: 4,
  headsKv: 2,
  headDim: 64,
  ssmGroups: 2,
  ssmHeads: 4,
  ssmStateSize: 32,
  convKernel: 4,
  ropeDims: 16,
  ropeSections: [3, 3, 2, 0],
  ropeTheta: 10_000_000,
  eps: 1e-6,
  contextLength: 4096,
  tied: true,
  name: "synthetic-qwen35-test",
}) as Qwen35Spec;

/**
 * The smallest shape the engine's unit tests run: the test shape's layout (4 layers, attention at 3,
 * Hk 2 < Hv 4, RoPE sections) at hidden 64, with vocab 97 of placeholder tokens `<t0>` .. `<t96>` (tests
 * pass token ids; override `vocab` and `tokenizer` together for a real vocabulary).
 */
export const QWEN35_TINY_SHAPE: Qwen35Spec = Object.freeze({
  ...QWEN35_TEST_SHAPE,
  vocab: 97,
  hidden: 64,
  ffn: 96,
  headDim: 32,
  ssmStateSize: 16,
  ropeTheta: 10_000,
  tokenizer: { tokens: Array.from({ length: 97 }, (_, i) => `<t${i}>`) },
  name: "synthetic-qwen35-tiny",
}) as Qwen35Spec;

/** The metadata of a synthetic qwen35 (or qwen35moe) file, every key typed as llama.cpp checks it. */
export function qwen35Metadata(spec: Qwen35Spec): GgufMetadataEntry[] {
  const architecture = spec.moe ? "qwen35moe" : "qwen35";
  const P = `${architecture}.`;
  const blockCount = spec.layers + (spec.mtp ? 1 : 0);
  const tokenizer = spec.tokenizer ?? defaultQwen35Tokenizer(spec.vocab);
  if (tokenizer.tokens.length !== spec.vocab) {
    throw new RangeError(`tokenizer has ${tokenizer.tokens.length} tokens but vocab is ${spec.vocab}`);
  }
  const m: GgufMetadataEntry[] = [
    gguf.str("general.architecture", architecture),
    gguf.str("general.name", spec.name ?? "synthetic-qwen35"),
    gguf.u32("general.file_type", 0),
    gguf.u32(`${P}block_count`, blockCount),
    gguf.u32(`${P}context_length`, spec.contextLength),
    gguf.u32(`${P}embedding_length`, spec.hidden),
    gguf.u32(`${P}feed_forward_length`, spec.ffn),
    gguf.u32(`${P}attention.head_count`, spec.heads),
    gguf.u32(`${P}attention.head_count_kv`, spec.headsKv),
    gguf.u32(`${P}attention.key_length`, spec.headDim),
    gguf.u32(`${P}attention.value_length`, spec.headDim),
    gguf.f32(`${P}attention.layer_norm_rms_epsilon`, spec.eps),
    gguf.u32(`${P}rope.dimension_count`, spec.ropeDims),
    gguf.f32(`${P}rope.freq_base`, spec.ropeTheta),
    gguf.arr(`${P}rope.dimension_sections`, GgufValueType.INT32, spec.ropeSections),
    gguf.u32(`${P}ssm.conv_kernel`, spec.convKernel),
    gguf.u32(`${P}ssm.state_size`, spec.ssmStateSize),
    gguf.u32(`${P}ssm.group_count`, spec.ssmGroups),
    gguf.u32(`${P}ssm.time_step_rank`, spec.ssmHeads),
    gguf.u32(`${P}ssm.inner_size`, spec.ssmHeads * spec.ssmStateSize),
  ];
  if (spec.fullAttentionInterval !== undefined) m.push(gguf.u32(`${P}full_attention_interval`, spec.fullAttentionInterval));
  if (spec.recurrentLayers !== undefined) m.push(gguf.arr(`${P}attention.recurrent_layers`, GgufValueType.BOOL, spec.recurrentLayers));
  if (spec.mtp) m.push(gguf.u32(`${P}nextn_predict_layers`, 1));
  if (spec.moe) {
    m.push(
      gguf.u32(`${P}expert_count`, spec.moe.experts),
      gguf.u32(`${P}expert_used_count`, spec.moe.used),
      gguf.u32(`${P}expert_feed_forward_length`, spec.moe.ffnExp),
      gguf.u32(`${P}expert_shared_feed_forward_length`, spec.moe.ffnShared),
    );
  }
  m.push(gguf.str("tokenizer.ggml.model", tokenizer.model ?? "gpt2"), gguf.str("tokenizer.ggml.pre", tokenizer.pre ?? "qwen35"));
  m.push(gguf.arr("tokenizer.ggml.tokens", GgufValueType.STRING, tokenizer.tokens));
  m.push(gguf.arr("tokenizer.ggml.token_type", GgufValueType.INT32, tokenizer.tokenTypes ?? new Array(spec.vocab).fill(1)));
  m.push(gguf.arr("tokenizer.ggml.merges", GgufValueType.STRING, tokenizer.merges ?? []));
  if (tokenizer.bosId !== undefined) m.push(gguf.u32("tokenizer.ggml.bos_token_id", tokenizer.bosId));
  if (tokenizer.eosId !== undefined) m.push(gguf.u32("tokenizer.ggml.eos_token_id", tokenizer.eosId));
  if (tokenizer.eotId !== undefined) m.push(gguf.u32("tokenizer.ggml.eot_token_id", tokenizer.eotId));
  if (tokenizer.padId !== undefined) m.push(gguf.u32("tokenizer.ggml.padding_token_id", tokenizer.padId));
  if (tokenizer.addBosToken !== undefined) m.push(gguf.bool("tokenizer.ggml.add_bos_token", tokenizer.addBosToken));
  if (tokenizer.chatTemplate !== undefined) m.push(gguf.str("tokenizer.chat_template", tokenizer.chatTemplate));
  m.push(...(spec.extraMetadata ?? []));
  return m;
}

/** Config and tensor list of a spec (the same tables the load plan checks files against). */
export function qwen35SpecLayout(spec: Qwen35Spec): {
  config: Qwen35Config;
  metadata: GgufMetadataEntry[];
  tensors: Qwen35ExpectedTensor[];
} {
  const metadata = qwen35Metadata(spec);
  const config = parseQwen35Config({ metadata: new Map(metadata.map((e) => [e.key, e])) });
  const tensors = qwen35ExpectedTensors(config, spec.vocab).filter((t) => {
    if (t.name === "output.weight") return !spec.tied;
    return !t.optional;
  });
  return { config, metadata, tensors };
}

/** FNV-1a of a string, mixed with the seed: each tensor gets its own stream, independent of order. */
function tensorSeed(seed: number, name: string): number {
  let h = 0x811c9dc5 ^ seed;
  for (let i = 0; i < name.length; i++) h = Math.imul(h ^ name.charCodeAt(i), 0x01000193);
  return h >>> 0 || 1;
}

type Init = { kind: "uniform"; scale: number; center: number } | { kind: "ssm_a" } | { kind: "ssm_dt" };

/**
 * Calm initialisation (ORACLE.md): weights with std 1/sqrt(fan_in); residual output projections
 * (attn_output, ssm_out, ffn_down, nextn.eh_proj) further scaled by 1/sqrt(2 n_layer);
 * embeddings and head with std 3/sqrt(D) so logits have std about 3; norms 1 + small;
 * ssm_a = -exp(A_log) with A in [1, 16]; ssm_dt.bias = softplus^-1(dt), dt log-uniform in [1e-3, 1e-1].
 */
function initFor(tensor: Qwen35ExpectedTensor, config: Qwen35Config, residualGain: number): Init {
  const name = tensor.name;
  const sqrt3 = Math.sqrt(3);
  if (name.endsWith("ssm_a")) return { kind: "ssm_a" };
  if (name.endsWith("ssm_dt.bias")) return { kind: "ssm_dt" };
  if (name.endsWith("norm.weight")) return { kind: "uniform", scale: 0.05, center: 1 };
  const D = config.embeddingLength;
  if (
    name === "token_embd.weight" ||
    name === "output.weight" ||
    name.endsWith("nextn.embed_tokens.weight") ||
    name.endsWith("shared_head_head.weight")
  ) {
    return { kind: "uniform", scale: (3 / Math.sqrt(D)) * sqrt3, center: 0 };
  }
  const fanIn = tensor.ne[0]!;
  let std = 1 / Math.sqrt(fanIn);
  if (/(attn_output|ssm_out|ffn_down|ffn_down_exps|ffn_down_shexp|nextn\.eh_proj)\.weight$/.test(name))
    std *= residualGain / Math.sqrt(2 * config.nLayer);
  return { kind: "uniform", scale: std * sqrt3, center: 0 };
}

const CHUNK_ELEMENTS = 1 << 20;
const DEFAULT_RESIDUAL_GAIN = 4;

/** Generates the F32 values of one tensor in chunks (each a fresh Float32Array of at most 1 Mi). */
function* tensorChunks(tensor: Qwen35ExpectedTensor, config: Qwen35Config, spec: Qwen35Spec): Generator<Float32Array> {
  const init = initFor(tensor, config, spec.residualGain ?? DEFAULT_RESIDUAL_GAIN);
  const seed = spec.seed ?? 1;
  const total = tensor.ne.reduce((a, b) => a * b, 1);
  let state = tensorSeed(seed, tensor.name);
  // mulberry32: 32-bit state, good enough statistics for weights, fast in JS.
  const next = (): number => {
    state = (state + 0x6d2b79f5) | 0;
    let t = Math.imul(state ^ (state >>> 15), 1 | state);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  for (let done = 0; done < total; done += CHUNK_ELEMENTS) {
    const n = Math.min(CHUNK_ELEMENTS, total - done);
    const out = new Float32Array(n);
    if (init.kind === "uniform") {
      const { scale, center } = init;
      for (let i = 0; i < n; i++) out[i] = center + (2 * next() - 1) * scale;
    } else if (init.kind === "ssm_a") {
      for (let i = 0; i < n; i++) out[i] = -(1 + 15 * next());
    } else {
      for (let i = 0; i < n; i++) {
        const dt = Math.exp(Math.log(1e-3) + next() * (Math.log(1e-1) - Math.log(1e-3)));
        out[i] = dt + Math.log(-Math.expm1(-dt));
      }
    }
    yield out;
  }
}

function headers(tensors: Qwen35ExpectedTensor[], types?: Qwen35TensorTypeMix): GgufTensorHeader[] {
  return tensors.map((t) => ({ name: t.name, type: types ? types(t) : GgmlType.F32, ne: t.ne }));
}

/** Options of the header-only writers. */
export interface Qwen35HeaderOptions {
  /** Type of each tensor (default: all F32, like the synthesized data); e.g. `qwen35Q4KMClassMix`. */
  types?: Qwen35TensorTypeMix;
}

/** A deterministic synthetic qwen35 GGUF (F32, real layout) in memory. For small shapes. */
export function synthesizeQwen35(spec: Qwen35Spec): Uint8Array {
  const { config, metadata, tensors } = qwen35SpecLayout(spec);
  return writeGguf({
    metadata,
    tensors: tensors.map((t) => {
      const parts = [...tensorChunks(t, config, spec)];
      const data = new Uint8Array(parts.reduce((a, p) => a + p.byteLength, 0));
      let at = 0;
      for (const p of parts) {
        data.set(new Uint8Array(p.buffer, p.byteOffset, p.byteLength), at);
        at += p.byteLength;
      }
      return { name: t.name, type: GgmlType.F32, ne: t.ne, data };
    }),
  });
}

/**
 * Streams the same file as `synthesizeQwen35(spec)` to `path` (bytes identical), holding at most
 * one 4 MiB chunk of tensor data in memory: for real shapes (the 0.8B F32 file is ~3 GB).
 * Returns the file size.
 */
export async function writeSynthesizedQwen35(path: string, spec: Qwen35Spec): Promise<number> {
  const { config, metadata, tensors } = qwen35SpecLayout(spec);
  const encoded = encodeGgufHeader({ metadata, tensors: headers(tensors) });
  const handle = await open(path, "w");
  try {
    let position = 0;
    const write = async (bytes: Uint8Array): Promise<void> => {
      let done = 0;
      while (done < bytes.byteLength) {
        const { bytesWritten } = await handle.write(bytes, done, bytes.byteLength - done, position + done);
        done += bytesWritten;
      }
      position += bytes.byteLength;
    };
    await write(encoded.header);
    for (const [i, tensor] of tensors.entries()) {
      const placement = encoded.placements[i]!;
      for (const chunk of tensorChunks(tensor, config, spec)) await write(new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength));
      const padded = Math.ceil(placement.byteLength / encoded.alignment) * encoded.alignment;
      if (padded > placement.byteLength) await write(new Uint8Array(padded - placement.byteLength));
    }
    return position;
  } finally {
    await handle.close();
  }
}

/** Header-only variant: the header of the synthetic file (for config/plan tests of huge shapes). */
export function synthesizeQwen35Header(spec: Qwen35Spec, options: Qwen35HeaderOptions = {}): { header: Uint8Array; fileSize: number } {
  const { metadata, tensors } = qwen35SpecLayout(spec);
  const encoded = encodeGgufHeader({ metadata, tensors: headers(tensors, options.types) });
  return { header: encoded.header, fileSize: encoded.dataOffset + encoded.dataBytes };
}

/**
 * A byte source that holds only the header but reports the full file size: header-only
 * parsing of huge shapes (27B) without touching disk. Tensor bytes read as zeros (a sparse file).
 */
export function synthesizeQwen35HeaderSource(spec: Qwen35Spec, options: Qwen35HeaderOptions = {}): GgufByteSource {
  const { header, fileSize } = synthesizeQwen35Header(spec, options);
  return {
    description: `header-only ${spec.name ?? "qwen35"}`,
    size: fileSize,
    async read(position: number, length: number): Promise<Uint8Array> {
      if (position < 0 || position + length > fileSize) {
        throw new GgufIoError(`read [${position}, ${position + length}) is beyond the end (${fileSize})`, { offset: position });
      }
      // Like a sparse file: the header, then zeros.
      const out = new Uint8Array(length);
      if (position < header.length) out.set(header.subarray(position, Math.min(header.length, position + length)));
      return out;
    },
    async close(): Promise<void> {},
  };
}

/**
 * Writes the header and extends the file to its full size without data (a sparse file: tensor
 * bytes read as zeros and take no disk space). `options.types` gives the tensors other types than F32.
 */
export async function writeQwen35HeaderOnly(path: string, spec: Qwen35Spec, options: Qwen35HeaderOptions = {}): Promise<number> {
  return writeHeaderOnlyFile(path, synthesizeQwen35Header(spec, options));
}
