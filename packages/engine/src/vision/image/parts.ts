/**
 * Every part of the image preprocessing as one object (`visionImage` in the package's exports): the values
 * only, so that bundled declaration files carry no namespace of type aliases (their types are exported by name).
 */
import { pixelLimitsForTokens, QWEN3VL_MAX_IMAGE_TOKENS, QWEN3VL_MIN_IMAGE_TOKENS } from "./config.js";
import { MAX_RESIZE_SIDE, resizeBicubicRgb } from "./bicubic.js";
import { DEFAULT_IMAGE_DECODE_LIMITS, decodeImage, isAnimatedPng, sniffImageFormat } from "./decode.js";
import { preprocessImage } from "./image.js";
import { normalizeRgb, preprocessRgb, preprocessTargetSize, resizeWithPadding } from "./preprocess.js";
import { targetSize } from "./target-size.js";

export const visionImage = Object.freeze({
  pixelLimitsForTokens,
  QWEN3VL_MAX_IMAGE_TOKENS,
  QWEN3VL_MIN_IMAGE_TOKENS,
  targetSize,
  MAX_RESIZE_SIDE,
  resizeBicubicRgb,
  normalizeRgb,
  preprocessRgb,
  preprocessTargetSize,
  resizeWithPadding,
  DEFAULT_IMAGE_DECODE_LIMITS,
  decodeImage,
  isAnimatedPng,
  sniffImageFormat,
  preprocessImage,
});
