/**
 * Image input for the Qwen3.5 vision encoder, as llama.cpp's QWEN3VL projector preprocesses it
 * (docs/usage/engine.md, "Images").
 */
export {
  type PreprocessConfig,
  pixelLimitsForTokens,
  QWEN3VL_MAX_IMAGE_TOKENS,
  QWEN3VL_MIN_IMAGE_TOKENS,
} from "./config.js";
export { type ImageSize, type TargetSizeOptions, targetSize } from "./target-size.js";
export { MAX_RESIZE_SIDE, resizeBicubicRgb } from "./bicubic.js";
export {
  normalizeRgb,
  type PreprocessedImage,
  preprocessRgb,
  preprocessTargetSize,
  resizeWithPadding,
  type RgbImage,
} from "./preprocess.js";
export {
  DEFAULT_IMAGE_DECODE_LIMITS,
  type DecodedImage,
  decodeImage,
  type ImageDecodeLimits,
  type ImageFormat,
  isAnimatedPng,
  sniffImageFormat,
} from "./decode.js";
export { preprocessImage } from "./image.js";
