/**
 * Image bytes -> the vision encoder's f32 input: `decodeImage` then `preprocessRgb`.
 */
import type { PreprocessConfig } from "./config.js";
import { type ImageDecodeLimits, decodeImage } from "./decode.js";
import { type PreprocessedImage, preprocessRgb } from "./preprocess.js";

export async function preprocessImage(
  bytes: Uint8Array,
  config: PreprocessConfig,
  limits: Partial<ImageDecodeLimits> = {},
): Promise<PreprocessedImage> {
  return preprocessRgb(await decodeImage(bytes, limits), config);
}
