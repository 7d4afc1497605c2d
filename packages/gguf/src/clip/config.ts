/**
 * The hyperparameters of a vision projector: llama.cpp's `mmproj-*.gguf` (`general.architecture =
 * "clip"`), the ViT and merger that turn an image into language-model input embeddings. Only the
 * Qwen3-VL merger (`clip.projector_type = "qwen3vl_merger"`, llama.cpp's PROJECTOR_TYPE_QWEN3VL) is
 * supported: the projector of every Qwen3.5 checkpoint. The keys are the ones llama.cpp's converter
 * writes for Qwen3_5ForConditionalGeneration and its `clip.cpp` reads.
 *
 * A projector is not a language-model architecture: it is not in ARCHITECTURES, and has its own entry
 * points (`parseProjector`, `describeProjector`, `projectorLoadPlan`).
 */
import { describeEntry } from "../architecture-key.js";
import { ClipProjectorError, GgufLimitError } from "../errors.js";
import { CLIP_LIMITS, type ClipLimits } from "../limits.js";
import type { GgufFile, GgufMetadataEntry } from "../types.js";
import { GgufValueType } from "../value-type.js";

/** `general.architecture` of every projector file. */
export const CLIP_ARCHITECTURE = "clip";
/** The projector types we load (llama.cpp's names, `clip.projector_type`). */
export const SUPPORTED_PROJECTOR_TYPES = ["qwen3vl_merger"] as const;
export type ProjectorType = (typeof SUPPORTED_PROJECTOR_TYPES)[number];

/**
 * The image-token bounds llama.cpp applies to a qwen3vl_merger projector (`set_limit_image_tokens(8,
 * 4096)` in clip.cpp's load_hparams): an image is resized to between 8 and 4096 merged tokens.
 */
export const QWEN3VL_MIN_IMAGE_TOKENS = 8;
export const QWEN3VL_MAX_IMAGE_TOKENS = 4096;
/** llama.cpp's spatial merge default for the Qwen-VL projectors when the key is absent. */
export const QWEN3VL_DEFAULT_SPATIAL_MERGE = 2;

/** The metadata keys of a projector (clip-impl.h's KEY_* names, the vision prefix filled in). */
export const CLIP_KEYS = {
  architecture: "general.architecture",
  fileType: "general.file_type",
  name: "general.name",
  projectorType: "clip.projector_type",
  visionProjectorType: "clip.vision.projector_type",
  hasVisionEncoder: "clip.has_vision_encoder",
  hasAudioEncoder: "clip.has_audio_encoder",
  useGelu: "clip.use_gelu",
  useSilu: "clip.use_silu",
  embeddingLength: "clip.vision.embedding_length",
  feedForwardLength: "clip.vision.feed_forward_length",
  blockCount: "clip.vision.block_count",
  projectionDim: "clip.vision.projection_dim",
  headCount: "clip.vision.attention.head_count",
  headCountKv: "clip.vision.attention.head_count_kv",
  headDim: "clip.vision.attention.head_dim",
  layerNormEpsilon: "clip.vision.attention.layer_norm_epsilon",
  imageSize: "clip.vision.image_size",
  patchSize: "clip.vision.patch_size",
  imageMean: "clip.vision.image_mean",
  imageStd: "clip.vision.image_std",
  spatialMergeSize: "clip.vision.spatial_merge_size",
  isDeepstackLayers: "clip.vision.is_deepstack_layers",
  imageMinPixels: "clip.vision.image_min_pixels",
  imageMaxPixels: "clip.vision.image_max_pixels",
} as const;

/** The ViT blocks' FFN activation: `clip.use_gelu` -> gelu, `clip.use_silu` -> silu, neither -> gelu_quick (llama.cpp). */
export type ProjectorFfnOp = "gelu" | "silu" | "gelu_quick";

/** How many merged tokens an image may become, and the pixel budget that follows (llama.cpp's rule). */
export interface ProjectorTokenLimits {
  minTokens: number;
  maxTokens: number;
  /** Pixels per merged token: (patch_size * spatial_merge)^2. */
  pixelsPerToken: number;
  /** minTokens * pixelsPerToken: a smaller image is upscaled. */
  minPixels: number;
  /** maxTokens * pixelsPerToken: a larger image is downscaled. */
  maxPixels: number;
}

/** Typed, validated hyperparameters of a qwen3vl_merger projector. */
export interface ProjectorConfig {
  projectorType: ProjectorType;
  name: string | undefined;
  /** `general.file_type`, when present. */
  fileType: number | undefined;
  /** `clip.vision.image_size`: the side of the learned position grid in pixels. */
  imageSize: number;
  /** `clip.vision.patch_size` (one Conv2D per temporal half, stride = kernel = patch). */
  patchSize: number;
  /** image_size / patch_size: patches per side of the learned position grid. */
  positionGrid: number;
  /** positionGrid^2: rows of `v.position_embd.weight`. */
  positionCount: number;
  /** `clip.vision.spatial_merge_size` (default 2): merge x merge patches become one token. */
  spatialMerge: number;
  /** `clip.vision.embedding_length`: the ViT width. */
  hiddenSize: number;
  /** `clip.vision.feed_forward_length`: the ViT MLP width. */
  feedForwardLength: number;
  /** `clip.vision.attention.head_count`. */
  headCount: number;
  /** hidden_size / head_count (a multiple of 4: 2D M-RoPE rotates four sections of head_dim / 4). */
  headDim: number;
  /** `clip.vision.block_count`. */
  blockCount: number;
  /** `clip.vision.attention.layer_norm_epsilon`. */
  layerNormEps: number;
  /** `clip.vision.projection_dim`: the merger's output width (mm.2 rows), the language model's embedding_length. */
  projectionDim: number;
  /** `clip.vision.image_mean` (first three items, RGB). */
  imageMean: [number, number, number];
  /** `clip.vision.image_std` (first three items, RGB). */
  imageStd: [number, number, number];
  /** `clip.use_gelu` as written (false when absent). */
  useGelu: boolean;
  ffnOp: ProjectorFfnOp;
  /**
   * Blocks whose output also feeds a deepstack merger (`clip.vision.is_deepstack_layers`), ascending;
   * undefined when the key is absent (llama.cpp then counts the `v.deepstack.N.*` tensors; the load
   * plan does the same).
   */
  deepstackLayers: number[] | undefined;
  /** hidden_size * spatial_merge^2: the width of one merged token (mm.0 rows and columns). */
  mergedWidth: number;
  tokenLimits: ProjectorTokenLimits;
  /**
   * `clip.vision.image_min_pixels` / `image_max_pixels` when the file has them. llama.cpp's qwen3vl path
   * does not read them (its token limits decide); they are reported, not applied.
   */
  fileImageMinPixels: number | undefined;
  fileImageMaxPixels: number | undefined;
}

type Entries = GgufFile["metadata"];
type ClipConfigCode = "CLIP_MISSING_KEY" | "CLIP_BAD_KEY_TYPE" | "CLIP_BAD_VALUE";

const at = (entry: GgufMetadataEntry | undefined): string => (entry?.offset !== undefined ? ` (at offset ${entry.offset})` : "");

/** A typed projector error naming the key (and where it is in the file). */
function bad(
  code: ClipConfigCode | "CLIP_NOT_A_PROJECTOR" | "CLIP_NO_VISION_ENCODER",
  key: string,
  message: string,
  entry?: GgufMetadataEntry,
): never {
  throw new ClipProjectorError(code, `${key}: ${message}${at(entry)}`, { field: key, offset: entry?.offset });
}

function u32(m: Entries, key: string, fallback?: number): number {
  const entry = m.get(key);
  if (!entry) {
    if (fallback !== undefined) return fallback;
    return bad("CLIP_MISSING_KEY", key, "required key is missing (expected u32)");
  }
  if (entry.type !== GgufValueType.UINT32) bad("CLIP_BAD_KEY_TYPE", key, `expected u32, found ${describeEntry(entry)}`, entry);
  return entry.value as number;
}

/** A u32 key in [1, maximum] (`limit` names the bound in a GgufLimitError). */
function bounded(m: Entries, key: string, maximum: number, limit: keyof ClipLimits, fallback?: number): number {
  const value = u32(m, key, fallback);
  if (value === 0) bad("CLIP_BAD_VALUE", key, "must be at least 1, found 0", m.get(key));
  if (value > maximum)
    throw new GgufLimitError(`${key} (CLIP_LIMITS.${limit})`, value, maximum, { field: key, offset: m.get(key)?.offset });
  return value;
}

function bool(m: Entries, key: string): boolean | undefined {
  const entry = m.get(key);
  if (!entry) return undefined;
  if (entry.type !== GgufValueType.BOOL) bad("CLIP_BAD_KEY_TYPE", key, `expected bool, found ${describeEntry(entry)}`, entry);
  return entry.value as boolean;
}

function str(m: Entries, key: string): string | undefined {
  const entry = m.get(key);
  if (!entry) return undefined;
  if (entry.type !== GgufValueType.STRING) bad("CLIP_BAD_KEY_TYPE", key, `expected str, found ${describeEntry(entry)}`, entry);
  return entry.value as string;
}

/** The first three items of an f32 array key (llama.cpp needs at least three: R, G, B). */
function rgb(m: Entries, key: string, nonZero: boolean): [number, number, number] {
  const entry = m.get(key);
  if (!entry) return bad("CLIP_MISSING_KEY", key, "required key is missing (expected f32[3])");
  if (entry.type !== GgufValueType.ARRAY || entry.itemType !== GgufValueType.FLOAT32 || (entry.value as ArrayLike<number>).length < 3) {
    bad("CLIP_BAD_KEY_TYPE", key, `expected f32[3] (at least three items), found ${describeEntry(entry)}`, entry);
  }
  const values = Array.from(entry.value as ArrayLike<number>).slice(0, 3) as [number, number, number];
  if (!values.every((v) => Number.isFinite(v) && (!nonZero || v !== 0))) {
    bad("CLIP_BAD_VALUE", key, `items must be finite${nonZero ? " and non-zero" : ""}, found [${values.join(", ")}]`, entry);
  }
  return values;
}

function check(condition: boolean, m: Entries, key: string, message: string): void {
  if (!condition) bad("CLIP_BAD_VALUE", key, message, m.get(key));
}

/**
 * Checks that a file is a vision projector at all: `general.architecture = "clip"` (CLIP_NOT_A_PROJECTOR
 * otherwise, naming what it is), a vision encoder (CLIP_NO_VISION_ENCODER) and a supported projector type
 * (CLIP_UNKNOWN_PROJECTOR, naming the type and the supported one). Returns the type.
 */
export function projectorTypeOf(file: Pick<GgufFile, "metadata">): ProjectorType {
  const m = file.metadata;
  const archEntry = m.get(CLIP_KEYS.architecture);
  const arch = archEntry?.type === GgufValueType.STRING ? (archEntry.value as string) : undefined;
  if (arch !== CLIP_ARCHITECTURE) {
    const found = archEntry ? (arch !== undefined ? JSON.stringify(arch) : describeEntry(archEntry)) : "missing";
    bad("CLIP_NOT_A_PROJECTOR", CLIP_KEYS.architecture, `is ${found}, expected "clip": not a vision projector (mmproj) file`, archEntry);
  }
  const hasVision = bool(m, CLIP_KEYS.hasVisionEncoder);
  if (hasVision !== true) {
    const audio = bool(m, CLIP_KEYS.hasAudioEncoder) === true ? " (the file has only an audio encoder)" : "";
    bad(
      "CLIP_NO_VISION_ENCODER",
      CLIP_KEYS.hasVisionEncoder,
      `${hasVision === false ? "is false" : "is missing"}: the projector has no vision encoder${audio}`,
      m.get(CLIP_KEYS.hasVisionEncoder),
    );
  }
  // the default key, else the vision one of a mixed-modality file (as llama.cpp)
  const key = m.has(CLIP_KEYS.projectorType) ? CLIP_KEYS.projectorType : CLIP_KEYS.visionProjectorType;
  const type = str(m, key);
  if (type === undefined)
    bad("CLIP_MISSING_KEY", CLIP_KEYS.projectorType, `required key is missing (expected str "${SUPPORTED_PROJECTOR_TYPES[0]}")`);
  if (!(SUPPORTED_PROJECTOR_TYPES as readonly string[]).includes(type)) {
    throw new ClipProjectorError(
      "CLIP_UNKNOWN_PROJECTOR",
      `${key}: projector type ${JSON.stringify(type)} is not supported (supported: ${SUPPORTED_PROJECTOR_TYPES.map((t) => JSON.stringify(t)).join(", ")})${at(m.get(key))}`,
      { field: key, offset: m.get(key)?.offset },
    );
  }
  return type as ProjectorType;
}

/** Parses and validates the hyperparameters of a qwen3vl_merger projector file. */
export function parseProjector(file: Pick<GgufFile, "metadata">, limits: Readonly<ClipLimits> = CLIP_LIMITS): ProjectorConfig {
  const m = file.metadata;
  const projectorType = projectorTypeOf(file);
  const K = CLIP_KEYS;

  const hiddenSize = bounded(m, K.embeddingLength, limits.maxWidth, "maxWidth");
  const feedForwardLength = bounded(m, K.feedForwardLength, limits.maxWidth, "maxWidth");
  const blockCount = bounded(m, K.blockCount, limits.maxBlockCount, "maxBlockCount");
  const projectionDim = bounded(m, K.projectionDim, limits.maxWidth, "maxWidth");
  const headCount = bounded(m, K.headCount, limits.maxHeadCount, "maxHeadCount");
  check(hiddenSize % headCount === 0, m, K.headCount, `embedding_length ${hiddenSize} is not a multiple of head_count ${headCount}`);
  const headDim = hiddenSize / headCount;
  check(
    headDim % 4 === 0,
    m,
    K.headCount,
    `head_dim = embedding_length / head_count = ${headDim} must be a multiple of 4 (the 2D M-RoPE rotates four sections of head_dim / 4)`,
  );
  // the qwen3vl graph splits one fused QKV into head_count heads each: no grouped K/V
  const headCountKv = u32(m, K.headCountKv, headCount);
  check(
    headCountKv === headCount,
    m,
    K.headCountKv,
    `must equal head_count ${headCount} (qwen3vl_merger has no grouped K/V), found ${headCountKv}`,
  );
  const fileHeadDim = u32(m, K.headDim, headDim);
  check(fileHeadDim === headDim, m, K.headDim, `must equal embedding_length / head_count = ${headDim}, found ${fileHeadDim}`);

  const epsEntry = m.get(K.layerNormEpsilon);
  if (!epsEntry) bad("CLIP_MISSING_KEY", K.layerNormEpsilon, "required key is missing (expected f32)");
  if (epsEntry.type !== GgufValueType.FLOAT32)
    bad("CLIP_BAD_KEY_TYPE", K.layerNormEpsilon, `expected f32, found ${describeEntry(epsEntry)}`, epsEntry);
  const layerNormEps = epsEntry.value as number;
  check(
    Number.isFinite(layerNormEps) && layerNormEps > 0,
    m,
    K.layerNormEpsilon,
    `must be a finite positive number, found ${layerNormEps}`,
  );

  const imageSize = bounded(m, K.imageSize, limits.maxImageSize, "maxImageSize");
  const patchSize = bounded(m, K.patchSize, limits.maxPatchSize, "maxPatchSize");
  check(imageSize % patchSize === 0, m, K.imageSize, `${imageSize} is not a multiple of patch_size ${patchSize}`);
  const positionGrid = imageSize / patchSize;
  const spatialMerge = bounded(m, K.spatialMergeSize, limits.maxSpatialMerge, "maxSpatialMerge", QWEN3VL_DEFAULT_SPATIAL_MERGE);
  // llama.cpp's qwen3vl graph merges 2 x 2 patches whatever the key says (n_embd * 4 rows into mm.0)
  check(spatialMerge === 2, m, K.spatialMergeSize, `qwen3vl_merger merges 2 x 2 patches, found ${spatialMerge}`);
  check(
    positionGrid % spatialMerge === 0,
    m,
    K.imageSize,
    `the position grid (image_size / patch_size = ${positionGrid}) is not a multiple of spatial_merge_size ${spatialMerge}`,
  );

  const imageMean = rgb(m, K.imageMean, false);
  const imageStd = rgb(m, K.imageStd, true);

  const useGelu = bool(m, K.useGelu) ?? false;
  const useSilu = bool(m, K.useSilu) ?? false;
  if (useGelu && useSilu) bad("CLIP_BAD_VALUE", K.useSilu, "clip.use_gelu and clip.use_silu are both true", m.get(K.useSilu));
  const ffnOp: ProjectorFfnOp = useGelu ? "gelu" : useSilu ? "silu" : "gelu_quick";

  let deepstackLayers: number[] | undefined;
  const dsEntry = m.get(K.isDeepstackLayers);
  if (dsEntry) {
    if (dsEntry.type !== GgufValueType.ARRAY || dsEntry.itemType !== GgufValueType.BOOL) {
      bad("CLIP_BAD_KEY_TYPE", K.isDeepstackLayers, `expected bool[${blockCount}], found ${describeEntry(dsEntry)}`, dsEntry);
    }
    const flags = dsEntry.value as readonly boolean[];
    check(flags.length === blockCount, m, K.isDeepstackLayers, `length must equal block_count (${blockCount}), found ${flags.length}`);
    deepstackLayers = flags.flatMap((flag, i) => (flag ? [i] : []));
  }

  const pixelsPerToken = patchSize * patchSize * spatialMerge * spatialMerge;
  const tokenLimits: ProjectorTokenLimits = {
    minTokens: QWEN3VL_MIN_IMAGE_TOKENS,
    maxTokens: QWEN3VL_MAX_IMAGE_TOKENS,
    pixelsPerToken,
    minPixels: QWEN3VL_MIN_IMAGE_TOKENS * pixelsPerToken,
    maxPixels: QWEN3VL_MAX_IMAGE_TOKENS * pixelsPerToken,
  };
  const fileImageMinPixels = m.has(K.imageMinPixels) ? u32(m, K.imageMinPixels) : undefined;
  const fileImageMaxPixels = m.has(K.imageMaxPixels) ? u32(m, K.imageMaxPixels) : undefined;
  if (fileImageMinPixels !== undefined && fileImageMaxPixels !== undefined) {
    check(
      fileImageMaxPixels >= fileImageMinPixels,
      m,
      K.imageMaxPixels,
      `${fileImageMaxPixels} is less than image_min_pixels ${fileImageMinPixels}`,
    );
  }
  const fileTypeEntry = m.get(K.fileType);
  return {
    projectorType,
    name: str(m, K.name),
    fileType: fileTypeEntry && typeof fileTypeEntry.value === "number" ? fileTypeEntry.value : undefined,
    imageSize,
    patchSize,
    positionGrid,
    positionCount: positionGrid * positionGrid,
    spatialMerge,
    hiddenSize,
    feedForwardLength,
    headCount,
    headDim,
    blockCount,
    layerNormEps,
    projectionDim,
    imageMean,
    imageStd,
    useGelu,
    ffnOp,
    deepstackLayers,
    mergedWidth: hiddenSize * spatialMerge * spatialMerge,
    tokenLimits,
    fileImageMinPixels,
    fileImageMaxPixels,
  };
}

/** True when `general.architecture` is "clip" (a projector file; not validated further). */
export function isProjectorFile(file: Pick<GgufFile, "metadata">): boolean {
  const entry = file.metadata.get(CLIP_KEYS.architecture);
  return entry?.type === GgufValueType.STRING && entry.value === CLIP_ARCHITECTURE;
}
