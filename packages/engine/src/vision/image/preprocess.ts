/**
 * Decoded RGB -> the f32 image the vision encoder reads, as llama.cpp's QWEN3VL preprocessor
 * (`mtmd_image_preprocessor_dyn_size`) builds it: target size by `targetSize`, an aspect-keeping bicubic
 * resize into it with black padding (PAD_CEIL), then `(u8 / 255 - mean) / std` in f32.
 */
import { EngineOptionError, ImageError } from "../../errors.js";
import { resizeBicubicRgb } from "./bicubic.js";
import type { PreprocessConfig } from "./config.js";
import { type ImageSize, targetSize } from "./target-size.js";

const f32 = Math.fround;

/** Interleaved 8-bit RGB, row-major from the top-left pixel: `data[(y * width + x) * 3 + c]`, c = R, G, B. */
export interface RgbImage {
  width: number;
  height: number;
  data: Uint8Array;
}

/**
 * The encoder's input, laid out as llama.cpp's `clip_image_f32` buffer: `(height, width, 3)` f32,
 * interleaved RGB, row-major from the top-left pixel: `pixels[(y * width + x) * 3 + c]`. Not planar:
 * the encoder (like `clip_image_batch_encode`) splits the channels into planes itself.
 */
export interface PreprocessedImage {
  /** Resized width; a multiple of `patchSize * spatialMerge`. */
  width: number;
  /** Resized height; a multiple of `patchSize * spatialMerge`. */
  height: number;
  /** Size of the decoded image before resizing. */
  sourceWidth: number;
  sourceHeight: number;
  /** `(height, width, 3)` normalized f32, see above. */
  pixels: Float32Array;
}

/** The target size for a source size under a config (see `targetSize` for the rule). */
export function preprocessTargetSize(width: number, height: number, config: PreprocessConfig): ImageSize {
  checkConfig(config);
  return targetSize(width, height, {
    alignSize: config.patchSize * config.spatialMerge,
    minPixels: config.minPixels,
    maxPixels: config.maxPixels,
  });
}

/**
 * llama.cpp's `img_tool::resize` with PAD_CEIL: same size is a copy; otherwise the image is scaled by
 * `min(tw / w, th / h)` (f32) to `min(ceil(w * scale), tw) x min(ceil(h * scale), th)`, bicubic, and pasted
 * on a black `tw x th` canvas at `((tw - nw) / 2, (th - nh) / 2)` (integer division).
 */
export function resizeWithPadding(image: RgbImage, target: ImageSize): RgbImage {
  const { width, height } = image;
  if (target.width === width && target.height === height) {
    return { width, height, data: image.data.slice() };
  }
  const scaleW = f32(f32(target.width) / f32(width));
  const scaleH = f32(f32(target.height) / f32(height));
  const scale = Math.min(scaleW, scaleH);
  const innerWidth = Math.min(Math.ceil(f32(width * scale)), target.width);
  const innerHeight = Math.min(Math.ceil(f32(height * scale)), target.height);
  const inner = resizeBicubicRgb(image.data, width, height, innerWidth, innerHeight);
  if (innerWidth === target.width && innerHeight === target.height) {
    return { width: target.width, height: target.height, data: inner };
  }
  const data = new Uint8Array(target.width * target.height * 3);
  const offsetX = Math.trunc((target.width - innerWidth) / 2);
  const offsetY = Math.trunc((target.height - innerHeight) / 2);
  for (let y = 0; y < innerHeight; y++) {
    const src = y * innerWidth * 3;
    data.set(inner.subarray(src, src + innerWidth * 3), ((y + offsetY) * target.width + offsetX) * 3);
  }
  return { width: target.width, height: target.height, data };
}

/**
 * u8 -> f32 as `clip_image_f32::from_u8` then `normalize`: `(f32(v) / 255 - mean[c]) / std[c]`, each step
 * rounded to f32 (a 256-entry table per channel, so exact).
 */
export function normalizeRgb(image: RgbImage, mean: PreprocessConfig["imageMean"], std: PreprocessConfig["imageStd"]): Float32Array {
  const tables = [0, 1, 2].map((c) => {
    const table = new Float32Array(256);
    const m = f32(mean[c] as number);
    const s = f32(std[c] as number);
    for (let v = 0; v < 256; v++) table[v] = f32(f32(f32(v / 255) - m) / s);
    return table;
  }) as [Float32Array, Float32Array, Float32Array];
  const out = new Float32Array(image.data.length);
  const [r, g, b] = tables;
  for (let i = 0; i < out.length; i += 3) {
    out[i] = r[image.data[i] as number] as number;
    out[i + 1] = g[image.data[i + 1] as number] as number;
    out[i + 2] = b[image.data[i + 2] as number] as number;
  }
  return out;
}

/** Decoded RGB -> the encoder's normalized f32 input (synchronous, pure). */
export function preprocessRgb(image: RgbImage, config: PreprocessConfig): PreprocessedImage {
  if (!Number.isInteger(image.width) || !Number.isInteger(image.height) || image.width <= 0 || image.height <= 0) {
    throw new ImageError("zero-size", `image size ${image.width}x${image.height} must be positive integers`);
  }
  if (image.data.length !== image.width * image.height * 3) {
    throw new EngineOptionError(
      "ENGINE_BAD_OPTION",
      `image data has ${image.data.length} bytes, expected ${image.width}x${image.height}x3 = ${image.width * image.height * 3}`,
      { field: "image.data" },
    );
  }
  const target = preprocessTargetSize(image.width, image.height, config);
  const resized = resizeWithPadding(image, target);
  return {
    width: target.width,
    height: target.height,
    sourceWidth: image.width,
    sourceHeight: image.height,
    pixels: normalizeRgb(resized, config.imageMean, config.imageStd),
  };
}

function badConfig(name: keyof PreprocessConfig, message: string): EngineOptionError {
  return new EngineOptionError("ENGINE_BAD_OPTION", `PreprocessConfig.${name} ${message}`, { field: `PreprocessConfig.${name}` });
}

function checkConfig(config: PreprocessConfig): void {
  const positiveInteger = (name: keyof PreprocessConfig, value: number) => {
    if (!Number.isInteger(value) || value <= 0) throw badConfig(name, `must be a positive integer (got ${value})`);
  };
  positiveInteger("patchSize", config.patchSize);
  positiveInteger("spatialMerge", config.spatialMerge);
  positiveInteger("minPixels", config.minPixels);
  positiveInteger("maxPixels", config.maxPixels);
  if (config.maxPixels < config.minPixels) {
    throw badConfig("maxPixels", `(${config.maxPixels}) is less than minPixels (${config.minPixels})`);
  }
  for (const name of ["imageMean", "imageStd"] as const) {
    const values = config[name];
    if (values.length !== 3 || values.some((v) => !Number.isFinite(v))) throw badConfig(name, "must be 3 finite numbers");
  }
  if (config.imageStd.some((v) => v === 0)) throw badConfig("imageStd", "must not contain 0");
}
