/**
 * decodeImage: what it accepts (and how it reduces channels, as stb_image does for llama.cpp) and every
 * refusal. All images are built in memory with sharp; nothing is written to disk.
 */
import { crc32 } from "node:zlib";
import sharp, { type Sharp } from "sharp";
import { describe, expect, it } from "vitest";
import { EngineError, type ImageErrorReason } from "../../errors.js";
import { DEFAULT_IMAGE_DECODE_LIMITS, decodeImage, isAnimatedPng, sniffImageFormat } from "./decode.js";
import { patternPixels, patternPng } from "./test-images.js";

async function refusal(promise: Promise<unknown>): Promise<{ reason: ImageErrorReason; message: string; code: string }> {
  try {
    await promise;
  } catch (error) {
    expect(EngineError.isInstance(error)).toBe(true);
    const { reason, message, code } = error as { reason: ImageErrorReason; message: string; code: string };
    return { reason, message, code };
  }
  throw new Error("expected a refusal");
}

function rgbImage(width: number, height: number, channels: 3 | 4 = 3): Sharp {
  return sharp(Buffer.from(patternPixels(width, height, channels)), { raw: { width, height, channels } });
}

/** A copy of a PNG whose IHDR declares another size (CRC fixed), image data untouched. */
function withDeclaredSize(png: Buffer, width: number, height: number): Buffer {
  const out = Buffer.from(png);
  out.writeUInt32BE(width, 16);
  out.writeUInt32BE(height, 20);
  out.writeUInt32BE(crc32(out.subarray(12, 29)), 29);
  return out;
}

/** A copy of a PNG with an APNG `acTL` chunk (2 frames) inserted after IHDR. */
function withActl(png: Buffer): Buffer {
  const chunk = Buffer.alloc(20);
  chunk.writeUInt32BE(8, 0);
  chunk.write("acTL", 4, "latin1");
  chunk.writeUInt32BE(2, 8);
  chunk.writeUInt32BE(0, 12);
  chunk.writeUInt32BE(crc32(chunk.subarray(4, 16)), 16);
  return Buffer.concat([png.subarray(0, 33), chunk, png.subarray(33)]);
}

describe("decodeImage accepts", () => {
  it("RGB PNG, pixel for pixel", async () => {
    const decoded = await decodeImage(await patternPng(17, 9, 3));
    expect(decoded).toMatchObject({ format: "png", width: 17, height: 9 });
    expect(decoded.data).toEqual(patternPixels(17, 9, 3));
  });

  it("a plain Uint8Array (a view into a larger buffer) as well as a Buffer", async () => {
    const png = await patternPng(5, 3, 3);
    const backing = new Uint8Array(png.length + 10);
    backing.set(png, 7);
    const decoded = await decodeImage(backing.subarray(7, 7 + png.length));
    expect(decoded.data).toEqual(patternPixels(5, 3, 3));
  });

  it("RGBA PNG by dropping alpha, with no compositing (a transparent pixel keeps its colour)", async () => {
    const rgba = Uint8Array.from([10, 20, 30, 0, 200, 100, 50, 128, 1, 2, 3, 255, 4, 5, 6, 7]);
    const png = await sharp(Buffer.from(rgba), { raw: { width: 2, height: 2, channels: 4 } })
      .png()
      .toBuffer();
    const decoded = await decodeImage(png);
    expect([...decoded.data]).toEqual([10, 20, 30, 200, 100, 50, 1, 2, 3, 4, 5, 6]);
  });

  it("gray and gray + alpha PNG by replicating gray to R, G, B", async () => {
    for (const channels of [1, 2] as const) {
      const png = await patternPng(6, 4, channels);
      expect((await sharp(png).metadata()).channels).toBe(channels);
      const decoded = await decodeImage(png);
      const gray = patternPixels(6, 4, channels);
      const expected = new Uint8Array(6 * 4 * 3);
      for (let i = 0; i < 24; i++) expected.fill(gray[i * channels] as number, i * 3, i * 3 + 3);
      expect(decoded.data).toEqual(expected);
    }
  });

  it("JPEG, lossless WebP, and the first frame of an animated GIF", async () => {
    const jpeg = await decodeImage(
      await sharp({ create: { width: 16, height: 8, channels: 3, background: "#808080" } })
        .jpeg()
        .toBuffer(),
    );
    expect(jpeg).toMatchObject({ format: "jpeg", width: 16, height: 8 });
    expect(jpeg.data.every((v) => Math.abs(v - 128) <= 1)).toBe(true);

    const webp = await decodeImage(await rgbImage(9, 7).webp({ lossless: true }).toBuffer());
    expect(webp).toMatchObject({ format: "webp", width: 9, height: 7 });
    expect(webp.data).toEqual(patternPixels(9, 7, 3));

    const frames = Buffer.alloc(4 * 8 * 3, 40);
    frames.fill(220, 4 * 4 * 3); // frame 0 is 40, frame 1 is 220
    const gif = await sharp(frames, { raw: { width: 4, height: 8, channels: 3, pageHeight: 4 } })
      .gif()
      .toBuffer();
    expect((await sharp(gif).metadata()).pages).toBe(2);
    const first = await decodeImage(gif);
    expect(first).toMatchObject({ format: "gif", width: 4, height: 4 });
    expect(first.data.every((v) => v === 40)).toBe(true);
  });

  it("sniffs only the four formats", async () => {
    expect(sniffImageFormat(await patternPng(2, 2, 3))).toBe("png");
    expect(sniffImageFormat(await rgbImage(2, 2).tiff().toBuffer())).toBeUndefined();
    expect(sniffImageFormat(new TextEncoder().encode("<svg xmlns='http://www.w3.org/2000/svg'/>"))).toBeUndefined();
  });
});

describe("decodeImage refuses", () => {
  it("empty data", async () => {
    expect(await refusal(decodeImage(new Uint8Array(0)))).toMatchObject({ reason: "empty", code: "ENGINE_BAD_IMAGE" });
  });

  it("more bytes than the limit, naming both", async () => {
    const png = await patternPng(8, 8, 3);
    const { reason, message } = await refusal(decodeImage(png, { maxBytes: 50 }));
    expect(reason).toBe("too-large");
    expect(message).toContain(`${png.length} bytes exceeds maximum allowed (50)`);
  });

  it("formats other than PNG, JPEG, WebP, GIF (TIFF, SVG, text)", async () => {
    for (const bytes of [
      await rgbImage(4, 4).tiff().toBuffer(),
      new TextEncoder().encode("<svg xmlns='http://www.w3.org/2000/svg' width='10' height='10'/>"),
      new TextEncoder().encode("hello, not an image"),
    ]) {
      expect((await refusal(decodeImage(bytes))).reason).toBe("unsupported-format");
    }
  });

  it("truncated or corrupt data", async () => {
    const png = await patternPng(64, 64, 3);
    const jpeg = await rgbImage(64, 64).jpeg().toBuffer();
    const webp = await rgbImage(64, 64).webp().toBuffer();
    const gif = await rgbImage(64, 64).gif().toBuffer();
    for (const bytes of [
      png.subarray(0, png.length - 20), // cut inside IDAT / before IEND
      png.subarray(0, 40), // cut inside the header chunks
      jpeg.subarray(0, jpeg.length >> 1),
      webp.subarray(0, webp.length >> 1),
      gif.subarray(0, gif.length >> 1),
    ]) {
      const { reason, message } = await refusal(decodeImage(bytes));
      expect(reason).toBe("corrupt");
      expect(message).toMatch(/truncated or corrupt|header cannot be read/);
    }
  });

  it("a zero-size image", async () => {
    const png = withDeclaredSize(await patternPng(4, 4, 3), 0, 4);
    expect(await refusal(decodeImage(png))).toMatchObject({ reason: "zero-size", message: "png declares a 0x4 image" });
  });

  it("a side above the limit, from the header", async () => {
    const png = withDeclaredSize(await patternPng(4, 4, 3), 100000, 2);
    const { reason, message } = await refusal(decodeImage(png));
    expect(reason).toBe("too-large");
    expect(message).toContain(`declares 100000x2: a side exceeds maximum allowed (${DEFAULT_IMAGE_DECODE_LIMITS.maxSide})`);
  });

  it("a decompression bomb: the declared pixel count, before any decoding", async () => {
    // 10000x10000 declared over 4x4 worth of data: decoding would fail as corrupt, so "decompression-bomb"
    // shows the refusal came from the header alone
    const png = withDeclaredSize(await patternPng(4, 4, 3), 10000, 10000);
    const { reason, message } = await refusal(decodeImage(png));
    expect(reason).toBe("decompression-bomb");
    expect(message).toBe("png declares 10000x10000 = 100000000 pixels, exceeds maximum allowed (33554432)");
    const small = await refusal(decodeImage(await patternPng(20, 20, 3), { maxPixels: 399 }));
    expect(small).toMatchObject({ reason: "decompression-bomb" });
    expect(small.message).toContain("20x20 = 400 pixels, exceeds maximum allowed (399)");
  });

  it("animated PNG and animated WebP", async () => {
    const apng = withActl(await patternPng(4, 4, 3));
    expect(isAnimatedPng(apng)).toBe(true);
    expect(isAnimatedPng(await patternPng(4, 4, 3))).toBe(false);
    expect((await refusal(decodeImage(apng))).reason).toBe("animated");

    const frames = Buffer.alloc(4 * 8 * 3, 40);
    frames.fill(220, 4 * 4 * 3); // two different frames (identical ones may be merged by the encoder)
    const webp = await sharp(frames, { raw: { width: 4, height: 8, channels: 3, pageHeight: 4 } })
      .webp({ lossless: true })
      .toBuffer();
    const { reason, message } = await refusal(decodeImage(webp));
    expect(reason).toBe("animated");
    expect(message).toContain("(2 frames)");
  });

  it("CMYK", async () => {
    const cmyk = await rgbImage(8, 8).toColourspace("cmyk").jpeg().toBuffer();
    expect((await refusal(decodeImage(cmyk))).reason).toBe("cmyk");
  });

  it("16-bit samples", async () => {
    const png16 = await rgbImage(4, 4, 4).toColourspace("rgb16").png().toBuffer();
    expect((await sharp(png16).metadata()).depth).toBe("ushort");
    const { reason, message } = await refusal(decodeImage(png16));
    expect(reason).toBe("bit-depth");
    expect(message).toContain("ushort samples; only 8 bits a sample are accepted");
  });
});
