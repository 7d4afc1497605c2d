/**
 * What the preprocessing needs from the vision projector, in plain numbers, so a GGUF reader (or a test)
 * can fill it: llama.cpp reads these from `clip.vision.*` keys of the mmproj file.
 */
export interface PreprocessConfig {
  /** Side of one ViT patch in pixels (`clip.vision.patch_size`; 16 for Qwen3.5). */
  patchSize: number;
  /** Patches merged per side into one LLM token (`clip.vision.spatial_merge_size`; 2 for Qwen3.5). */
  spatialMerge: number;
  /** Per-channel mean (R, G, B) subtracted after scaling u8 to [0, 1] (`clip.vision.image_mean`). */
  imageMean: readonly [number, number, number];
  /** Per-channel standard deviation (R, G, B) divided by after the mean (`clip.vision.image_std`). */
  imageStd: readonly [number, number, number];
  /** Smallest pixel budget of the resized image (`clip.vision.image_min_pixels`, or 8 tokens' pixels). */
  minPixels: number;
  /** Largest pixel budget of the resized image (`clip.vision.image_max_pixels`, or 4096 tokens' pixels). */
  maxPixels: number;
}

/** llama.cpp's token limits for the QWEN2VL / QWEN25VL / QWEN3VL projectors (`set_limit_image_tokens(8, 4096)`). */
export const QWEN3VL_MIN_IMAGE_TOKENS = 8;
export const QWEN3VL_MAX_IMAGE_TOKENS = 4096;

/**
 * The pixel budget for a token budget, as llama.cpp's `set_limit_image_tokens` computes it: one LLM token
 * covers `(patchSize * spatialMerge)^2` pixels.
 */
export function pixelLimitsForTokens(
  patchSize: number,
  spatialMerge: number,
  minTokens: number = QWEN3VL_MIN_IMAGE_TOKENS,
  maxTokens: number = QWEN3VL_MAX_IMAGE_TOKENS,
): { minPixels: number; maxPixels: number } {
  const tokenArea = (patchSize * spatialMerge) ** 2;
  return { minPixels: minTokens * tokenArea, maxPixels: maxTokens * tokenArea };
}
