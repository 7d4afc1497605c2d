import { GgmlType } from "../ggml-type.js";
import type { Qwen35Config } from "../qwen35/config.js";
import type { TensorDescription } from "../qwen35/tensors.js";
import { mulberry32 } from "../synthetic/random.js";
import { defaultQwen35Tokenizer, type Qwen35TokenizerSpec } from "../synthetic/tokenizer.js";
import type { GgufMetadataEntry } from "../types.js";
import { GgufValueType } from "../value-type.js";
import { gguf, writeGguf } from "../writer.js";
import { parseQwen3Config } from "./config.js";
import { describeQwen3 } from "./tensors.js";

/** Shape and options of a synthetic qwen3 model (all tensors F32). */
export interface Qwen3Spec {
  vocab: number;
  /** D */
  hidden: number;
  layers: number;
  ffn: number;
  /** H */
  heads: number;
  /** Hkv */
  headsKv: number;
  /** Dh (written as attention.key_length and value_length) */
  headDim: number;
  ropeTheta: number;
  eps: number;
  contextLength: number;
  /** Tied head: no `output.weight`, the head is `token_embd.weight`. */
  tied: boolean;
  tokenizer?: Qwen35TokenizerSpec;
  /** PRNG seed (default 1). */
  seed?: number;
  name?: string;
  /** Gain on the residual output projections (attn_output, ffn_down; default 4), as the qwen35 synthesizer's. */
  residualGain?: number;
}

/** A small qwen3 test model: hidden 256, 4 layers, 4 query / 2 KV heads of 64, vocab 512 (~4 MB F32). */
export const QWEN3_TEST_SHAPE: Qwen3Spec = Object.freeze({
  vocab: 512,
  hidden: 256,
  layers: 4,
  ffn: 512,
  heads: 4,
  headsKv: 2,
  headDim: 64,
  ropeTheta: 1_000_000,
  eps: 1e-6,
  contextLength: 4096,
  tied: true,
  name: "synthetic-qwen3-test",
}) as Qwen3Spec;

/** Qwen3-0.6B's shape (a planning preset): hidden 1024, 28 layers, 16 query / 8 KV heads of 128, ffn 3072, tied head. */
export const QWEN3_0_6B_SHAPE: Qwen3Spec = Object.freeze({
  vocab: 151_936,
  hidden: 1024,
  layers: 28,
  ffn: 3072,
  heads: 16,
  headsKv: 8,
  headDim: 128,
  ropeTheta: 1_000_000,
  eps: 1e-6,
  contextLength: 40_960,
  tied: true,
  name: "synthetic-qwen3-0.6b",
}) as Qwen3Spec;

/** The metadata of a synthetic qwen3 file, every key typed as llama.cpp reads it. */
export function qwen3Metadata(spec: Qwen3Spec): GgufMetadataEntry[] {
  const P = "qwen3.";
  const tokenizer = spec.tokenizer ?? defaultQwen35Tokenizer(spec.vocab);
  if (tokenizer.tokens.length !== spec.vocab) {
    throw new RangeError(`tokenizer has ${tokenizer.tokens.length} tokens but vocab is ${spec.vocab}`);
  }
  const m: GgufMetadataEntry[] = [
    gguf.str("general.architecture", "qwen3"),
    gguf.str("general.name", spec.name ?? "synthetic-qwen3"),
    gguf.u32("general.file_type", 0),
    gguf.u32(`${P}block_count`, spec.layers),
    gguf.u32(`${P}context_length`, spec.contextLength),
    gguf.u32(`${P}embedding_length`, spec.hidden),
    gguf.u32(`${P}feed_forward_length`, spec.ffn),
    gguf.u32(`${P}attention.head_count`, spec.heads),
    gguf.u32(`${P}attention.head_count_kv`, spec.headsKv),
    gguf.u32(`${P}attention.key_length`, spec.headDim),
    gguf.u32(`${P}attention.value_length`, spec.headDim),
    gguf.f32(`${P}attention.layer_norm_rms_epsilon`, spec.eps),
    gguf.u32(`${P}rope.dimension_count`, spec.headDim),
    gguf.f32(`${P}rope.freq_base`, spec.ropeTheta),
    gguf.str("tokenizer.ggml.model", tokenizer.model ?? "gpt2"),
    gguf.str("tokenizer.ggml.pre", tokenizer.pre ?? "qwen2"),
    gguf.arr("tokenizer.ggml.tokens", GgufValueType.STRING, tokenizer.tokens),
    gguf.arr("tokenizer.ggml.token_type", GgufValueType.INT32, tokenizer.tokenTypes ?? new Array(spec.vocab).fill(1)),
    gguf.arr("tokenizer.ggml.merges", GgufValueType.STRING, tokenizer.merges ?? []),
  ];
  if (tokenizer.bosId !== undefined) m.push(gguf.u32("tokenizer.ggml.bos_token_id", tokenizer.bosId));
  if (tokenizer.eosId !== undefined) m.push(gguf.u32("tokenizer.ggml.eos_token_id", tokenizer.eosId));
  if (tokenizer.eotId !== undefined) m.push(gguf.u32("tokenizer.ggml.eot_token_id", tokenizer.eotId));
  if (tokenizer.padId !== undefined) m.push(gguf.u32("tokenizer.ggml.padding_token_id", tokenizer.padId));
  if (tokenizer.addBosToken !== undefined) m.push(gguf.bool("tokenizer.ggml.add_bos_token", tokenizer.addBosToken));
  if (tokenizer.chatTemplate !== undefined) m.push(gguf.str("tokenizer.chat_template", tokenizer.chatTemplate));
  return m;
}

/** Config, metadata and the file's tensors (the description's, `output.weight` only when untied). */
export function qwen3SpecLayout(spec: Qwen3Spec): { config: Qwen35Config; metadata: GgufMetadataEntry[]; tensors: TensorDescription[] } {
  const metadata = qwen3Metadata(spec);
  const config = parseQwen3Config({ metadata: new Map(metadata.map((e) => [e.key, e])) });
  const d = describeQwen3(config, spec.vocab);
  const tensors = [...d.global, ...d.layers.flatMap((l) => l.tensors)].filter((t) =>
    t.name === "output.weight" ? !spec.tied : !t.optional,
  );
  return { config, metadata, tensors };
}

/** FNV-1a of a tensor's name mixed with the seed: each tensor its own stream, independent of order. */
function tensorSeed(seed: number, name: string): number {
  let h = 0x811c9dc5 ^ seed;
  for (let i = 0; i < name.length; i++) h = Math.imul(h ^ name.charCodeAt(i), 0x01000193);
  return h >>> 0 || 1;
}

/**
 * Calm initialisation (ORACLE.md), as the qwen35 synthesizer's: std 1/sqrt(fan_in); attn_output and
 * ffn_down further scaled by gain/sqrt(2 n_layer); embeddings and head std 3/sqrt(D); norms 1 +- 0.05.
 */
function tensorValues(tensor: TensorDescription, config: Qwen35Config, spec: Qwen3Spec): Float32Array {
  const next = mulberry32(tensorSeed(spec.seed ?? 1, tensor.name));
  const total = tensor.ne.reduce((a, b) => a * b, 1);
  const sqrt3 = Math.sqrt(3);
  let center = 0;
  let scale: number;
  if (tensor.name.endsWith("norm.weight")) {
    center = 1;
    scale = 0.05;
  } else if (tensor.name === "token_embd.weight" || tensor.name === "output.weight") {
    scale = (3 / Math.sqrt(config.embeddingLength)) * sqrt3;
  } else {
    let std = 1 / Math.sqrt(tensor.ne[0]!);
    if (/(attn_output|ffn_down)\.weight$/.test(tensor.name)) std *= (spec.residualGain ?? 4) / Math.sqrt(2 * config.nLayer);
    scale = std * sqrt3;
  }
  const out = new Float32Array(total);
  for (let i = 0; i < total; i++) out[i] = center + (2 * next() - 1) * scale;
  return out;
}

/** A deterministic synthetic qwen3 GGUF (F32) in memory. For small shapes. */
export function synthesizeQwen3(spec: Qwen3Spec): Uint8Array {
  const { config, metadata, tensors } = qwen3SpecLayout(spec);
  return writeGguf({
    metadata,
    tensors: tensors.map((t) => {
      const values = tensorValues(t, config, spec);
      return { name: t.name, type: GgmlType.F32, ne: t.ne, data: new Uint8Array(values.buffer) };
    }),
  });
}
