/**
 * The whole path (PNG bytes -> decode -> target size -> bicubic + padding -> f32) against llama.cpp's own
 * output (goldens/vision/qwen3vl-preprocess.json, made as its README says), then properties of the parts.
 */
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { EngineOptionError, ImageError } from "../../errors.js";
import { resizeBicubicRgb } from "./bicubic.js";
import { type PreprocessConfig, pixelLimitsForTokens } from "./config.js";
import { decodeImage } from "./decode.js";
import { preprocessImage } from "./image.js";
import { normalizeRgb, preprocessRgb, resizeWithPadding } from "./preprocess.js";
import { patternPixels, patternPng } from "./test-images.js";

interface GoldenCase {
  name: string;
  /** A committed input under goldens/vision/inputs/, or else the pattern at width x height. */
  file?: string;
  width?: number;
  height?: number;
  fileChannels?: 1 | 2 | 3 | 4;
  config: PreprocessConfig;
  source: { width: number; height: number };
  target: { width: number; height: number };
  f32Sha256: string;
  samples: { index: number; value: number }[];
}

interface GoldenDecode {
  name: string;
  file: string;
  width: number;
  height: number;
  stbRgbBase64: string;
}

const GOLDENS = new URL("../../../../../goldens/vision/", import.meta.url);
const golden = JSON.parse(readFileSync(fileURLToPath(new URL("qwen3vl-preprocess.json", GOLDENS)), "utf8")) as {
  cases: GoldenCase[];
  decodes: GoldenDecode[];
};
const input = (file: string) => readFileSync(fileURLToPath(new URL(`inputs/${file}`, GOLDENS)));

async function caseBytes(c: GoldenCase): Promise<Uint8Array> {
  if (c.file !== undefined) return input(c.file);
  return patternPng(c.width as number, c.height as number, c.fileChannels as 1 | 2 | 3 | 4);
}

const QWEN: PreprocessConfig = {
  patchSize: 16,
  spatialMerge: 2,
  imageMean: [0.5, 0.5, 0.5],
  imageStd: [0.5, 0.5, 0.5],
  ...pixelLimitsForTokens(16, 2),
};

describe("preprocessImage against llama.cpp (QWEN3VL, stb_image + mtmd_image_preprocessor_dyn_size)", () => {
  it("the golden has its cases", () => {
    expect(golden.cases.length).toBe(9);
    expect(golden.decodes.length).toBe(1);
  });

  it.each(golden.cases.map((c) => [c.name, c] as const))("%s is bit-identical", async (_name, c) => {
    const result = await preprocessImage(await caseBytes(c), c.config);
    expect({ width: result.sourceWidth, height: result.sourceHeight }).toEqual(c.source);
    expect({ width: result.width, height: result.height }).toEqual(c.target);
    expect(result.pixels.length).toBe(c.target.width * c.target.height * 3);
    for (const sample of c.samples) expect(result.pixels[sample.index]).toBe(sample.value);
    const digest = createHash("sha256")
      .update(new Uint8Array(result.pixels.buffer, result.pixels.byteOffset, result.pixels.byteLength))
      .digest("hex");
    expect(digest).toBe(c.f32Sha256);
  });
});

describe("JPEG against stb_image (different decoders: bounded, not identical)", () => {
  it.each(golden.decodes.map((d) => [d.name, d] as const))("%s is within 2 levels in under 10%% of samples", async (_name, d) => {
    const decoded = await decodeImage(input(d.file));
    const stb = Buffer.from(d.stbRgbBase64, "base64");
    expect({ width: decoded.width, height: decoded.height }).toEqual({ width: d.width, height: d.height });
    expect(decoded.data.length).toBe(stb.length);
    let differing = 0;
    for (let i = 0; i < stb.length; i++) {
      const difference = Math.abs((decoded.data[i] as number) - (stb[i] as number));
      expect(difference).toBeLessThanOrEqual(2);
      if (difference > 0) differing++;
    }
    expect(differing / stb.length).toBeLessThan(0.1);
  });
});

describe("resizeBicubicRgb", () => {
  it("copies when the size does not change", () => {
    const rgb = patternPixels(7, 5, 3);
    const out = resizeBicubicRgb(rgb, 7, 5, 7, 5);
    expect(out).toEqual(rgb);
    expect(out).not.toBe(rgb);
  });

  it("keeps a constant image constant, up and down", () => {
    for (const value of [0, 1, 128, 254, 255]) {
      const rgb = new Uint8Array(13 * 9 * 3).fill(value);
      for (const [w, h] of [
        [40, 31],
        [5, 3],
        [13, 2],
        [1, 1],
      ] as const) {
        expect(resizeBicubicRgb(rgb, 13, 9, w, h).every((v) => v === value)).toBe(true);
      }
    }
  });

  it("resizes only the dimension that changes: a vertical resize of one column is a 1-D resize", () => {
    const rgb = patternPixels(1, 9, 3);
    const tall = resizeBicubicRgb(rgb, 1, 9, 1, 20);
    // the same column laid out as a row and resized horizontally gives the same samples
    const row = resizeBicubicRgb(rgb, 9, 1, 20, 1);
    expect(tall).toEqual(row);
  });

  it("clamps the bicubic overshoot to [0, 255] at a hard edge", () => {
    const rgb = new Uint8Array(8 * 1 * 3);
    rgb.fill(255, 12); // left half black, right half white
    const out = resizeBicubicRgb(rgb, 8, 1, 29, 1);
    expect(Math.min(...out)).toBe(0);
    expect(Math.max(...out)).toBe(255);
  });

  it("refuses sizes out of range", () => {
    expect(() => resizeBicubicRgb(new Uint8Array(3), 1, 1, 0, 1)).toThrow(/outWidth 0 is out of range/);
    expect(() => resizeBicubicRgb(new Uint8Array(3), 1, 1, 65537, 1)).toThrow(/out of range/);
    expect(() => resizeBicubicRgb(new Uint8Array(4), 1, 1, 2, 2)).toThrow(/expected 1x1x3/);
  });
});

describe("resizeWithPadding (PAD_CEIL) and normalization", () => {
  it("pads a 200x150 image to 192x160 with 8 black rows above and below", () => {
    const image = { width: 200, height: 150, data: new Uint8Array(200 * 150 * 3).fill(200) };
    const out = resizeWithPadding(image, { width: 192, height: 160 });
    expect(out.width).toBe(192);
    const row = (y: number) => out.data.subarray(y * 192 * 3, (y + 1) * 192 * 3);
    for (const y of [0, 7, 152, 159]) expect(row(y).every((v) => v === 0)).toBe(true);
    for (const y of [8, 80, 151]) expect(row(y).every((v) => v === 200)).toBe(true);
  });

  it("normalizes as (v / 255 - mean) / std in f32, interleaved RGB", () => {
    const out = normalizeRgb({ width: 2, height: 1, data: Uint8Array.from([0, 255, 51, 255, 0, 102]) }, [0.5, 0.5, 0.5], [0.5, 0.5, 0.5]);
    expect([...out]).toEqual([-1, 1, Math.fround(Math.fround(Math.fround(51 / 255) - 0.5) / 0.5), 1, -1, out[5]]);
    expect(out[5]).toBe(Math.fround(Math.fround(Math.fround(102 / 255) - 0.5) / 0.5));
  });

  it("does not resize an image that already has its target size", () => {
    const data = patternPixels(96, 128, 3);
    const out = preprocessRgb({ width: 96, height: 128, data }, QWEN);
    expect(out.width).toBe(96);
    expect(out.height).toBe(128);
    expect(out.pixels).toEqual(normalizeRgb({ width: 96, height: 128, data }, QWEN.imageMean, QWEN.imageStd));
  });

  it("lays out (height, width, 3): pixel (x, y) channel c at (y * width + x) * 3 + c", () => {
    const data = patternPixels(96, 128, 3);
    const out = preprocessRgb({ width: 96, height: 128, data }, { ...QWEN, imageMean: [0, 0, 0], imageStd: [1, 1, 1] });
    for (const [x, y, c] of [
      [0, 0, 0],
      [95, 0, 2],
      [5, 77, 1],
      [95, 127, 2],
    ] as const) {
      expect(out.pixels[(y * 96 + x) * 3 + c]).toBe(Math.fround(data[(y * 96 + x) * 3 + c]! / 255));
    }
  });

  it("refuses a bad config or image with typed errors", () => {
    const image = { width: 4, height: 4, data: new Uint8Array(48) };
    expect(() => preprocessRgb(image, { ...QWEN, patchSize: 0 })).toThrow(EngineOptionError);
    expect(() => preprocessRgb(image, { ...QWEN, maxPixels: 10 })).toThrow(/maxPixels \(10\) is less than minPixels \(8192\)/);
    expect(() => preprocessRgb(image, { ...QWEN, imageStd: [0.5, 0, 0.5] })).toThrow(/imageStd must not contain 0/);
    expect(() => preprocessRgb({ ...image, data: new Uint8Array(47) }, QWEN)).toThrow(/expected 4x4x3 = 48/);
    expect(() => preprocessRgb({ width: 0, height: 4, data: new Uint8Array(0) }, QWEN)).toThrow(ImageError);
  });
});
