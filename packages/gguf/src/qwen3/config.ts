import { readArchitectureName } from "../architecture-key.js";
import { check, f32, positive, type Qwen35Config } from "../qwen35/config.js";
import type { GgufFile } from "../types.js";
import { GgufValueType } from "../value-type.js";

/** llama.cpp's default RoPE base when `rope.freq_base` is absent. */
const DEFAULT_ROPE_FREQ_BASE = 10_000;

/**
 * Parses and validates the hyperparameters of a dense Qwen3 file (`qwen3.`, llama.cpp's LLM_ARCH_QWEN3):
 * every layer full attention with per-head Q/K RMSNorm, GQA, NEOX RoPE and a SwiGLU FFN. Optional keys
 * take llama.cpp's defaults: head_count_kv = head_count, key_length = value_length = embedding_length /
 * head_count, rope.dimension_count = key_length, rope.freq_base = 10000. The result has the shared config
 * shape: no recurrent (GDN) or MoE part, no MTP block (those widths are 0), every layer "attention".
 */
export function parseQwen3Config(file: Pick<GgufFile, "metadata">): Qwen35Config {
  const m = file.metadata;
  const architecture = readArchitectureName(file, ["qwen3"]);
  const P = `${architecture}.`;

  const blockCount = positive(m, `${P}block_count`);
  const contextLength = positive(m, `${P}context_length`);
  const embeddingLength = positive(m, `${P}embedding_length`);
  const feedForwardLength = positive(m, `${P}feed_forward_length`);
  const headCount = positive(m, `${P}attention.head_count`);
  const headCountKv = positive(m, `${P}attention.head_count_kv`, headCount);
  check(
    headCount % headCountKv === 0,
    `${P}attention.head_count_kv`,
    `head_count ${headCount} is not a multiple of head_count_kv ${headCountKv}`,
    m,
  );
  const keyKey = `${P}attention.key_length`;
  const defaultHeadDim = Math.floor(embeddingLength / headCount);
  if (!m.has(keyKey)) {
    check(
      defaultHeadDim > 0 && defaultHeadDim * headCount === embeddingLength,
      `${P}embedding_length`,
      `${embeddingLength} is not a multiple of attention.head_count ${headCount} (and attention.key_length is absent)`,
      m,
    );
  }
  const keyLength = positive(m, keyKey, defaultHeadDim);
  const valueLength = positive(m, `${P}attention.value_length`, keyLength);
  check(keyLength === valueLength, `${P}attention.value_length`, `must equal attention.key_length (${keyLength}), found ${valueLength}`, m);
  const rmsEps = f32(m, `${P}attention.layer_norm_rms_epsilon`);
  const ropeDimensionCount = positive(m, `${P}rope.dimension_count`, keyLength);
  check(
    ropeDimensionCount <= keyLength && ropeDimensionCount % 2 === 0,
    `${P}rope.dimension_count`,
    `must be even and at most key_length (${keyLength}), found ${ropeDimensionCount}`,
    m,
  );
  const ropeFreqBase = f32(m, `${P}rope.freq_base`, DEFAULT_ROPE_FREQ_BASE);

  const tokens = m.get("tokenizer.ggml.tokens");
  const vocabSize = tokens && tokens.type === GgufValueType.ARRAY ? (tokens.value as ArrayLike<unknown>).length : undefined;
  const half = ropeDimensionCount / 2;

  return {
    architecture,
    moe: undefined,
    blockCount,
    nextnPredictLayers: 0,
    nLayer: blockCount,
    contextLength,
    embeddingLength,
    feedForwardLength,
    headCount,
    headCountKv,
    headDim: keyLength,
    rmsEps,
    ropeDimensionCount,
    ropeFreqBase,
    // NEOX over the first dimension_count dims: one section (what qwen35's text positions reduce to)
    ropeSections: [half, 0, 0, 0],
    ssmConvKernel: 0,
    ssmStateSize: 0,
    ssmGroupCount: 0,
    ssmTimeStepRank: 0,
    ssmInnerSize: 0,
    fullAttentionInterval: 1,
    recurrentLayers: undefined,
    layerKinds: new Array(blockCount).fill("attention"),
    keyDim: 0,
    valueDim: 0,
    convDim: 0,
    headVDim: 0,
    vocabSize,
  };
}
