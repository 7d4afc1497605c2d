/**
 * Image bytes -> interleaved RGB u8, refusing what we will not decode before decoding it.
 *
 * llama.cpp decodes with stb_image asking for 3 channels: gray is replicated to R, G, B and an alpha channel
 * is dropped (no compositing on a background: a transparent pixel keeps its stored colour), no ICC profile
 * and no EXIF orientation is applied, a GIF gives its first frame. We decode with sharp (libvips) and do the
 * same: the embedded ICC profile is ignored, the image is not rotated, and the channel reduction is ours.
 * PNG and GIF decode losslessly, so their pixels equal stb's; a JPEG may differ from stb's by small amounts
 * (libjpeg's IDCT and chroma upsampling are not stb's); WebP is not read by stb at all (llama.cpp needs its
 * ffmpeg build for it).
 */
import type { Metadata, OutputInfo } from "sharp";
import { ImageError } from "../../errors.js";
import type { RgbImage } from "./preprocess.js";

export type ImageFormat = "png" | "jpeg" | "webp" | "gif";

export interface ImageDecodeLimits {
  /** Largest encoded input in bytes. */
  maxBytes: number;
  /** Largest declared width or height. */
  maxSide: number;
  /** Largest declared width * height: a larger header is refused as a decompression bomb, before decoding. */
  maxPixels: number;
  /** libvips gives up after this many seconds of decoding. */
  timeoutSeconds: number;
}

/**
 * The defaults: 64 MiB of input; 16384 pixels a side; 33554432 (2^25) pixels, 128 MiB as decoded RGBA, which
 * is 8192x4096 and far above what the encoder takes (4096 tokens are 4194304 pixels at patch 16, merge 2).
 */
export const DEFAULT_IMAGE_DECODE_LIMITS: Readonly<ImageDecodeLimits> = Object.freeze({
  maxBytes: 64 * 1024 * 1024,
  maxSide: 16384,
  maxPixels: 2 ** 25,
  timeoutSeconds: 60,
});

export interface DecodedImage extends RgbImage {
  format: ImageFormat;
}

const PNG_SIGNATURE = [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a];

function startsWith(bytes: Uint8Array, prefix: readonly number[], at = 0): boolean {
  if (bytes.length < at + prefix.length) return false;
  return prefix.every((value, i) => bytes[at + i] === value);
}

function ascii(text: string): number[] {
  return [...text].map((c) => c.charCodeAt(0));
}

/** The format by its magic bytes; anything else (SVG, TIFF, PDF, HEIF...) never reaches libvips. */
export function sniffImageFormat(bytes: Uint8Array): ImageFormat | undefined {
  if (startsWith(bytes, PNG_SIGNATURE)) return "png";
  if (startsWith(bytes, [0xff, 0xd8, 0xff])) return "jpeg";
  if (startsWith(bytes, ascii("GIF87a")) || startsWith(bytes, ascii("GIF89a"))) return "gif";
  if (startsWith(bytes, ascii("RIFF")) && startsWith(bytes, ascii("WEBP"), 8)) return "webp";
  return undefined;
}

/** Whether a PNG carries an `acTL` chunk (APNG) before its first `IDAT`. Reads chunk headers only. */
export function isAnimatedPng(bytes: Uint8Array): boolean {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let offset = PNG_SIGNATURE.length;
  while (offset + 8 <= bytes.length) {
    const length = view.getUint32(offset);
    const type = String.fromCharCode(...bytes.subarray(offset + 4, offset + 8));
    if (type === "acTL") return true;
    if (type === "IDAT" || type === "IEND") return false;
    offset += 12 + length; // length, type, data, crc
  }
  return false;
}

type SharpFactory = typeof import("sharp").default;
let sharpLoading: Promise<SharpFactory> | undefined;

/**
 * sharp is loaded on the first decode, not when the engine is imported: its libvips binary costs time and
 * memory that text-only use never needs, and a platform without a prebuilt binary only loses images.
 */
async function loadSharp(): Promise<SharpFactory> {
  sharpLoading ??= import("sharp").then((module) => module.default);
  try {
    return await sharpLoading;
  } catch (error) {
    sharpLoading = undefined;
    throw new ImageError("decoder-unavailable", `the image decoder (sharp) cannot be loaded: ${describe(error)}`, {
      cause: error,
    });
  }
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message.split("\n")[0] || error.message : String(error);
}

/**
 * Decodes PNG, JPEG, WebP or GIF (its first frame) to RGB u8. Refuses with an `ImageError` naming the
 * reason and the limit: `empty`, `too-large` (bytes or a side above the limit), `unsupported-format`,
 * `corrupt` (truncated or damaged data, also a header sharp cannot read), `zero-size`,
 * `decompression-bomb` (declared pixels above the limit), `animated` (APNG or animated WebP), `cmyk`,
 * `bit-depth` (anything but 8 bits a sample), `decoder-unavailable` (sharp's binary cannot be loaded). Every
 * check up to the pixel count reads the header only.
 */
export async function decodeImage(bytes: Uint8Array, limits: Partial<ImageDecodeLimits> = {}): Promise<DecodedImage> {
  const { maxBytes, maxSide, maxPixels, timeoutSeconds } = { ...DEFAULT_IMAGE_DECODE_LIMITS, ...limits };
  if (bytes.length === 0) throw new ImageError("empty", "image data is empty");
  if (bytes.length > maxBytes) {
    throw new ImageError("too-large", `image data of ${bytes.length} bytes exceeds maximum allowed (${maxBytes})`);
  }
  const format = sniffImageFormat(bytes);
  if (format === undefined) {
    const head = [...bytes.subarray(0, 8)].map((b) => b.toString(16).padStart(2, "0")).join(" ");
    throw new ImageError("unsupported-format", `unsupported image format (first bytes ${head}); accepted: PNG, JPEG, WebP, GIF`);
  }
  if (format === "png" && bytes.length >= 24) {
    // IHDR is the first chunk: width and height at bytes 16..23; libpng calls a zero side a corrupt header
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const width = view.getUint32(16);
    const height = view.getUint32(20);
    if (width === 0 || height === 0) throw new ImageError("zero-size", `png declares a ${width}x${height} image`);
  }
  if (format === "png" && isAnimatedPng(bytes)) {
    throw new ImageError("animated", "animated PNG (acTL chunk) is not accepted; send one frame");
  }

  const sharp = await loadSharp();
  const input = Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let metadata: Metadata;
  try {
    metadata = await sharp(input, { limitInputPixels: false }).metadata();
  } catch (error) {
    throw new ImageError("corrupt", `${format} header cannot be read: ${describe(error)}`, { cause: error });
  }
  const width = metadata.width ?? 0;
  const height = metadata.height ?? 0;
  if (width <= 0 || height <= 0) throw new ImageError("zero-size", `${format} declares a ${width}x${height} image`);
  if (width > maxSide || height > maxSide) {
    throw new ImageError("too-large", `${format} declares ${width}x${height}: a side exceeds maximum allowed (${maxSide})`);
  }
  if (width * height > maxPixels) {
    throw new ImageError(
      "decompression-bomb",
      `${format} declares ${width}x${height} = ${width * height} pixels, exceeds maximum allowed (${maxPixels})`,
    );
  }
  if (format !== "gif" && (metadata.pages ?? 1) > 1) {
    throw new ImageError("animated", `animated ${format} (${metadata.pages} frames) is not accepted; send one frame`);
  }
  if (metadata.space === "cmyk") throw new ImageError("cmyk", `${format} is CMYK; only RGB and gray images are accepted`);
  if (metadata.depth !== "uchar") {
    throw new ImageError("bit-depth", `${format} has ${metadata.depth ?? "unknown"} samples; only 8 bits a sample are accepted`);
  }

  let raw: { data: Buffer; info: OutputInfo };
  try {
    raw = await sharp(input, { failOn: "error", limitInputPixels: maxPixels, page: 0, pages: 1, ignoreIcc: true })
      .timeout({ seconds: timeoutSeconds })
      .raw()
      .toBuffer({ resolveWithObject: true });
  } catch (error) {
    throw new ImageError("corrupt", `${format} data is truncated or corrupt: ${describe(error)}`, { cause: error });
  }
  const { channels } = raw.info;
  if (raw.info.width !== width || raw.info.height !== height || raw.data.length !== width * height * channels) {
    throw new ImageError(
      "corrupt",
      `${format} decoded to ${raw.info.width}x${raw.info.height}x${channels}, header said ${width}x${height}`,
    );
  }
  return { format, width, height, data: toRgb(raw.data, width * height, channels) };
}

/** stb_image's reduction to 3 channels: gray is replicated, alpha dropped. */
function toRgb(data: Uint8Array, pixelCount: number, channels: number): Uint8Array {
  if (channels === 3) return new Uint8Array(data.buffer.slice(data.byteOffset, data.byteOffset + data.byteLength));
  if (channels < 1 || channels > 4) throw new ImageError("corrupt", `decoded image has ${channels} channels`);
  const out = new Uint8Array(pixelCount * 3);
  const gray = channels <= 2;
  for (let i = 0, s = 0, d = 0; i < pixelCount; i++, s += channels, d += 3) {
    out[d] = data[s] as number;
    out[d + 1] = data[gray ? s : s + 1] as number;
    out[d + 2] = data[gray ? s : s + 2] as number;
  }
  return out;
}
