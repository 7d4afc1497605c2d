/**
 * Deterministic test images, built by code (never committed). The same formula made the PNGs behind
 * goldens/vision/qwen3vl-preprocess.json (see its README), so a test can rebuild them byte for byte.
 */
import sharp from "sharp";

/** Sample `channel` of pixel (x, y): busy enough to make the bicubic overshoot and clamp. */
export function patternSample(x: number, y: number, channel: number): number {
  return (x * 37 + y * 101 + channel * 53 + ((x * y) % 17) * 11) & 255;
}

/** Interleaved `(height, width, channels)` u8 of the pattern; channel 3 (alpha) is `(x * 7 + y * 13) & 255`. */
export function patternPixels(width: number, height: number, channels: 1 | 2 | 3 | 4): Uint8Array {
  const out = new Uint8Array(width * height * channels);
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      for (let c = 0; c < channels; c++) {
        const isAlpha = (channels === 4 && c === 3) || (channels === 2 && c === 1);
        out[(y * width + x) * channels + c] = isAlpha ? (x * 7 + y * 13) & 255 : patternSample(x, y, c);
      }
    }
  }
  return out;
}

/** The pattern as a PNG with 1 (gray), 2 (gray + alpha), 3 (RGB) or 4 (RGBA) channels in the file. */
export async function patternPng(width: number, height: number, channels: 1 | 2 | 3 | 4): Promise<Buffer> {
  const raw = { width, height, channels };
  const image = sharp(Buffer.from(patternPixels(width, height, channels)), { raw });
  return channels <= 2 ? image.toColourspace("b-w").png().toBuffer() : image.png().toBuffer();
}
