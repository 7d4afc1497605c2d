/**
 * Parse limits. Every byte of a GGUF file is untrusted: these bound what a header may make us
 * allocate or loop over. Each limit names its reason. Callers may tighten or loosen them per call.
 */
export interface GgufLimits {
  /** Longest string value. Real files: the longest is a chat template of tens of KiB. */
  maxStringBytes: number;
  /** Longest metadata key. The GGUF spec caps keys at 65535 bytes. */
  maxKeyBytes: number;
  /** Longest tensor name: ggml's GGML_MAX_NAME is 64 bytes including the terminating NUL. */
  maxTensorNameBytes: number;
  /** Longest array. Real files: the largest is a 248,320-entry vocabulary (60x headroom). */
  maxArrayLength: number;
  /** Deepest array nesting. Real files never nest; a bound keeps recursion shallow. */
  maxArrayNesting: number;
  /** Most metadata keys. Real files have tens; 65536 bounds the key map. */
  maxKeyCount: number;
  /** Most tensors. A 27B dense file has under 1,000; MoE files a few thousand. */
  maxTensorCount: number;
  /** Most dimensions per tensor: GGML_MAX_DIMS in ggml.h. */
  maxDims: number;
  /** Largest element count of one tensor: 2^53 - 1 keeps byte arithmetic exact in JS numbers. */
  maxTensorElements: number;
  /** Largest header (metadata plus tensor infos) we will read. Real 248k-vocab headers are ~10 MiB. */
  maxHeaderBytes: number;
}

export const GGUF_LIMITS: Readonly<GgufLimits> = Object.freeze({
  maxStringBytes: 16 * 1024 * 1024,
  maxKeyBytes: 65_535,
  maxTensorNameBytes: 63,
  maxArrayLength: 16 * 1024 * 1024,
  maxArrayNesting: 8,
  maxKeyCount: 65_536,
  maxTensorCount: 1_048_576,
  maxDims: 4,
  maxTensorElements: Number.MAX_SAFE_INTEGER,
  maxHeaderBytes: 512 * 1024 * 1024,
});

/**
 * Bounds on a vision projector's hyperparameters (an `mmproj` file): a header may not make us plan
 * absurd tensors. Each names its reason; the error prints the key, the value and the bound.
 */
export interface ClipLimits {
  /** `clip.vision.image_size`: llama.cpp caps it at 8192 so (image_size / patch_size)^2 stays in int32. */
  maxImageSize: number;
  /** `clip.vision.patch_size`: llama.cpp requires it below 65536. */
  maxPatchSize: number;
  /** `clip.vision.spatial_merge_size`: llama.cpp requires it below 65536. */
  maxSpatialMerge: number;
  /** `clip.vision.block_count`: released ViTs have 24 to 48 blocks; 1024 is ample. */
  maxBlockCount: number;
  /** Widths (`embedding_length`, `feed_forward_length`, `projection_dim`): released models are below 32k; 1 Mi bounds a row. */
  maxWidth: number;
  /** `clip.vision.attention.head_count`: at most one head per element of the width, and far fewer in practice. */
  maxHeadCount: number;
}

export const CLIP_LIMITS: Readonly<ClipLimits> = Object.freeze({
  maxImageSize: 8192,
  maxPatchSize: 65_535,
  maxSpatialMerge: 65_535,
  maxBlockCount: 1024,
  maxWidth: 1 << 20,
  maxHeadCount: 4096,
});
