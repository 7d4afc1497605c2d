import { describeEntry, readArchitectureName } from "../architecture-key.js";
import { Qwen35ConfigError } from "../errors.js";
import type { GgufFile, GgufMetadataEntry } from "../types.js";
import { GgufValueType } from "../value-type.js";

export type Qwen35LayerKind = "attention" | "gdn";

/** The dense Qwen3.5 (`qwen35`) and its MoE sibling (`qwen35moe`): the same token mixers, another FFN. */
export type Qwen35Architecture = "qwen35" | "qwen35moe";
const QWEN35_ARCHITECTURES: readonly Qwen35Architecture[] = ["qwen35", "qwen35moe"];

/** The MoE FFN's hyperparameters (`qwen35moe`; llama.cpp's load_arch_hparams and load_hparams). */
export interface Qwen35MoeConfig {
  /** `expert_count`: E routed experts per layer */
  expertCount: number;
  /** `expert_used_count`: top-k experts per token, 1 <= k <= E */
  expertUsedCount: number;
  /** `expert_feed_forward_length`, else feed_forward_length / expert_used_count (as llama.cpp) */
  expertFeedForwardLength: number;
  /** `expert_shared_feed_forward_length`, else feed_forward_length (as llama.cpp) */
  sharedFeedForwardLength: number;
}

/** Typed qwen35 hyperparameters (qwen35.md section 2), validated. */
export interface Qwen35Config {
  /** `general.architecture`: qwen35, qwen35moe, or another registered architecture that shares this shape (qwen3) */
  architecture: string;
  /** The MoE FFN (`qwen35moe` only). */
  moe: Qwen35MoeConfig | undefined;
  /** `qwen35.block_count`: trunk layers plus MTP layers. */
  blockCount: number;
  /** `qwen35.nextn_predict_layers` (0 when absent). */
  nextnPredictLayers: number;
  /** Trunk depth `n_layer = block_count - nextn_predict_layers`. */
  nLayer: number;
  contextLength: number;
  /** D */
  embeddingLength: number;
  /** The dense FFN width (qwen35); for qwen35moe, the key's value when present (else 0). */
  feedForwardLength: number;
  /** H */
  headCount: number;
  /** Hkv */
  headCountKv: number;
  /** Dh (key_length = value_length). */
  headDim: number;
  rmsEps: number;
  ropeDimensionCount: number;
  ropeFreqBase: number;
  ropeSections: [number, number, number, number];
  /** K */
  ssmConvKernel: number;
  /** Dk = Dv */
  ssmStateSize: number;
  /** Hk */
  ssmGroupCount: number;
  /** Hv */
  ssmTimeStepRank: number;
  /** value_dim = Hv * Dv */
  ssmInnerSize: number;
  /** `full_attention_interval` (default 4); ignored when `recurrentLayers` is set. */
  fullAttentionInterval: number;
  /** `attention.recurrent_layers` when present (length block_count). */
  recurrentLayers: boolean[] | undefined;
  /** Kind of each trunk layer (length nLayer). */
  layerKinds: Qwen35LayerKind[];
  /** Derived: Hk * Dk. */
  keyDim: number;
  /** Derived: inner_size. */
  valueDim: number;
  /** Derived: 2 * keyDim + valueDim. */
  convDim: number;
  /** Derived: inner_size / Hv. */
  headVDim: number;
  /** Length of `tokenizer.ggml.tokens`, when present. */
  vocabSize: number | undefined;
}

type Entries = GgufFile["metadata"];

/** A typed config error naming the key (and where it is in the file). */
export function bad(
  code: "QWEN35_MISSING_KEY" | "QWEN35_BAD_KEY_TYPE" | "QWEN35_BAD_VALUE",
  key: string,
  message: string,
  entry?: GgufMetadataEntry,
): never {
  throw new Qwen35ConfigError(code, `${key}: ${message}${entry?.offset !== undefined ? ` (at offset ${entry.offset})` : ""}`, {
    field: key,
    offset: entry?.offset,
  });
}

/**
 * The number `key` holds, checked to be of `type` (`typeName` in errors), with its entry; `fallback` (and
 * no entry) when absent, else a missing-key error.
 */
function typedNumber(
  m: Entries,
  key: string,
  type: GgufValueType,
  typeName: string,
  fallback: number | undefined,
): { value: number; entry?: GgufMetadataEntry } {
  const entry = m.get(key);
  if (!entry) {
    if (fallback !== undefined) return { value: fallback };
    return bad("QWEN35_MISSING_KEY", key, `required key is missing (expected ${typeName})`);
  }
  if (entry.type !== type) bad("QWEN35_BAD_KEY_TYPE", key, `expected ${typeName}, found ${describeEntry(entry)}`, entry);
  return { value: entry.value as number, entry };
}

/** A u32 key; `fallback` when absent (else a missing-key error). */
export function u32(m: Entries, key: string, fallback?: number): number {
  return typedNumber(m, key, GgufValueType.UINT32, "u32", fallback).value;
}

/** A u32 key at least 1; `fallback` when absent (else a missing-key error). */
export function positive(m: Entries, key: string, fallback?: number): number {
  const value = u32(m, key, fallback);
  if (value === 0) bad("QWEN35_BAD_VALUE", key, "must be at least 1, found 0", m.get(key));
  return value;
}

/** A finite positive f32 key; `fallback` when absent (else a missing-key error). */
export function f32(m: Entries, key: string, fallback?: number): number {
  const { value, entry } = typedNumber(m, key, GgufValueType.FLOAT32, "f32", fallback);
  if (entry && (!Number.isFinite(value) || value <= 0))
    bad("QWEN35_BAD_VALUE", key, `must be a finite positive number, found ${value}`, entry);
  return value;
}

/** A config error on `key` unless `condition`. */
export function check(condition: boolean, key: string, message: string, m: Entries): void {
  if (!condition) bad("QWEN35_BAD_VALUE", key, message, m.get(key));
}

/** Parses and validates the qwen35 hyperparameters of a GGUF file. */
export function parseQwen35Config(file: Pick<GgufFile, "metadata">): Qwen35Config {
  const m = file.metadata;
  const architecture = readArchitectureName(file, QWEN35_ARCHITECTURES) as Qwen35Architecture;
  const P = `${architecture}.`;

  const blockCount = positive(m, `${P}block_count`);
  const nextnPredictLayers = u32(m, `${P}nextn_predict_layers`, 0);
  check(nextnPredictLayers <= 1, `${P}nextn_predict_layers`, `only 0 or 1 is supported, found ${nextnPredictLayers}`, m);
  check(
    nextnPredictLayers < blockCount,
    `${P}nextn_predict_layers`,
    `must be less than block_count (${blockCount}), found ${nextnPredictLayers}`,
    m,
  );
  const nLayer = blockCount - nextnPredictLayers;

  const contextLength = positive(m, `${P}context_length`);
  const embeddingLength = positive(m, `${P}embedding_length`);
  const feedForwardLength = architecture === "qwen35moe" ? u32(m, `${P}feed_forward_length`, 0) : positive(m, `${P}feed_forward_length`);
  const headCount = positive(m, `${P}attention.head_count`);
  const headCountKv = positive(m, `${P}attention.head_count_kv`);
  check(
    headCount % headCountKv === 0,
    `${P}attention.head_count_kv`,
    `head_count ${headCount} is not a multiple of head_count_kv ${headCountKv}`,
    m,
  );
  const keyLength = positive(m, `${P}attention.key_length`);
  const valueLength = positive(m, `${P}attention.value_length`);
  check(keyLength === valueLength, `${P}attention.value_length`, `must equal attention.key_length (${keyLength}), found ${valueLength}`, m);
  const rmsEps = f32(m, `${P}attention.layer_norm_rms_epsilon`);
  const ropeDimensionCount = positive(m, `${P}rope.dimension_count`);
  check(
    ropeDimensionCount <= keyLength && ropeDimensionCount % 2 === 0,
    `${P}rope.dimension_count`,
    `must be even and at most key_length (${keyLength}), found ${ropeDimensionCount}`,
    m,
  );
  const ropeFreqBase = f32(m, `${P}rope.freq_base`);

  const sectionsKey = `${P}rope.dimension_sections`;
  const sections = m.get(sectionsKey);
  if (!sections) bad("QWEN35_MISSING_KEY", sectionsKey, "required key is missing (expected i32[4])");
  if (sections.type !== GgufValueType.ARRAY || sections.itemType !== GgufValueType.INT32 || (sections.value as Int32Array).length !== 4) {
    bad("QWEN35_BAD_KEY_TYPE", sectionsKey, `expected i32[4], found ${describeEntry(sections)}`, sections);
  }
  const sectionValues = Array.from(sections.value as Int32Array) as [number, number, number, number];
  check(
    sectionValues.every((s) => s >= 0),
    sectionsKey,
    `sections must be non-negative, found [${sectionValues.join(", ")}]`,
    m,
  );

  const ssmConvKernel = positive(m, `${P}ssm.conv_kernel`);
  const ssmStateSize = positive(m, `${P}ssm.state_size`);
  const ssmGroupCount = positive(m, `${P}ssm.group_count`);
  const ssmTimeStepRank = positive(m, `${P}ssm.time_step_rank`);
  check(
    ssmTimeStepRank % ssmGroupCount === 0,
    `${P}ssm.time_step_rank`,
    `Hv ${ssmTimeStepRank} is not a multiple of Hk (ssm.group_count) ${ssmGroupCount}`,
    m,
  );
  const ssmInnerSize = positive(m, `${P}ssm.inner_size`);
  check(
    ssmInnerSize % ssmTimeStepRank === 0,
    `${P}ssm.inner_size`,
    `${ssmInnerSize} is not a multiple of ssm.time_step_rank ${ssmTimeStepRank}`,
    m,
  );
  const headVDim = ssmInnerSize / ssmTimeStepRank;
  check(
    headVDim === ssmStateSize,
    `${P}ssm.inner_size`,
    `inner_size / time_step_rank = ${headVDim} must equal ssm.state_size ${ssmStateSize}`,
    m,
  );

  const fullAttentionInterval = positive(m, `${P}full_attention_interval`, 4);
  const recurrentKey = `${P}attention.recurrent_layers`;
  const recurrentEntry = m.get(recurrentKey);
  let recurrentLayers: boolean[] | undefined;
  if (recurrentEntry) {
    const integerTypes = [
      GgufValueType.BOOL,
      GgufValueType.UINT8,
      GgufValueType.INT8,
      GgufValueType.UINT16,
      GgufValueType.INT16,
      GgufValueType.UINT32,
      GgufValueType.INT32,
    ];
    if (
      recurrentEntry.type !== GgufValueType.ARRAY ||
      recurrentEntry.itemType === undefined ||
      !integerTypes.includes(recurrentEntry.itemType)
    ) {
      bad("QWEN35_BAD_KEY_TYPE", recurrentKey, `expected a bool or integer array, found ${describeEntry(recurrentEntry)}`, recurrentEntry);
    }
    recurrentLayers = Array.from(
      recurrentEntry.value as ArrayLike<number | boolean>,
      (v) => v === true || (typeof v === "number" && v !== 0),
    );
    check(
      recurrentLayers.length === blockCount,
      recurrentKey,
      `length must equal block_count (${blockCount}), found ${recurrentLayers.length}`,
      m,
    );
  }
  const layerKinds: Qwen35LayerKind[] = [];
  for (let il = 0; il < nLayer; il++) {
    const recurrent = recurrentLayers ? recurrentLayers[il]! : (il + 1) % fullAttentionInterval !== 0;
    layerKinds.push(recurrent ? "gdn" : "attention");
  }
  const layerSource = recurrentLayers ? recurrentKey : `${P}full_attention_interval`;
  check(layerKinds.includes("attention"), layerSource, `the ${nLayer} trunk layers need at least one full-attention layer`, m);
  check(layerKinds.includes("gdn"), layerSource, `the ${nLayer} trunk layers need at least one GDN (recurrent) layer`, m);

  const tokens = m.get("tokenizer.ggml.tokens");
  const vocabSize = tokens && tokens.type === GgufValueType.ARRAY ? (tokens.value as ArrayLike<unknown>).length : undefined;

  let moe: Qwen35MoeConfig | undefined;
  if (architecture === "qwen35moe") {
    const expertCount = positive(m, `${P}expert_count`);
    const usedKey = `${P}expert_used_count`;
    const expertUsedCount = positive(m, usedKey);
    check(expertUsedCount <= expertCount, usedKey, `must be at most expert_count (${expertCount}), found ${expertUsedCount}`, m);
    const expKey = `${P}expert_feed_forward_length`;
    const expertFeedForwardLength = u32(m, expKey, Math.floor(feedForwardLength / expertUsedCount));
    check(expertFeedForwardLength > 0, expKey, "must be at least 1 (or feed_forward_length must be given)", m);
    const sharedKey = `${P}expert_shared_feed_forward_length`;
    const sharedFeedForwardLength = u32(m, sharedKey, feedForwardLength);
    check(sharedFeedForwardLength > 0, sharedKey, "must be at least 1 (or feed_forward_length must be given)", m);
    moe = { expertCount, expertUsedCount, expertFeedForwardLength, sharedFeedForwardLength };
  }

  const keyDim = ssmGroupCount * ssmStateSize;
  return {
    architecture,
    moe,
    blockCount,
    nextnPredictLayers,
    nLayer,
    contextLength,
    embeddingLength,
    feedForwardLength,
    headCount,
    headCountKv,
    headDim: keyLength,
    rmsEps,
    ropeDimensionCount,
    ropeFreqBase,
    ropeSections: sectionValues,
    ssmConvKernel,
    ssmStateSize,
    ssmGroupCount,
    ssmTimeStepRank,
    ssmInnerSize,
    fullAttentionInterval,
    recurrentLayers,
    layerKinds,
    keyDim,
    valueDim: ssmInnerSize,
    convDim: 2 * keyDim + ssmInnerSize,
    headVDim,
    vocabSize,
  };
}
