import { describe, expect, it } from "vitest";
import { pixelLimitsForTokens } from "./config.js";
import { targetSize } from "./target-size.js";

// [align, minPixels, maxPixels, width, height, target width, target height], printed by llama.cpp's own
// img_tool::calc_size_preserved_ratio (the oracle's tools/mtmd/mtmd-image.cpp compiled into a small
// program outside the repo, see goldens/vision/README.md). 32 / 8192 / 4194304 is Qwen3.5 (patch 16,
// merge 2, 8..4096 tokens); 28 / 6272 / 3211264 is patch 14, merge 2.
const FROM_LLAMA_CPP: [number, number, number, number, number, number, number][] = [
  [32, 8192, 4194304, 1, 1, 96, 96],
  [32, 8192, 4194304, 31, 31, 96, 96],
  [32, 8192, 4194304, 48, 48, 96, 96],
  [32, 8192, 4194304, 640, 480, 640, 480],
  [32, 8192, 4194304, 1920, 1080, 1920, 1088],
  [32, 8192, 4194304, 4000, 3000, 2336, 1760],
  [32, 8192, 4194304, 10000, 10, 10016, 32],
  [32, 8192, 4194304, 100000, 10, 100000, 32],
  [32, 8192, 4194304, 200000, 10, 289600, 32],
  [32, 8192, 4194304, 96, 128, 96, 128],
  [32, 8192, 4194304, 2048, 2048, 2048, 2048],
  [32, 8192, 4194304, 2049, 2049, 2048, 2048],
  [32, 8192, 4194304, 2064, 2064, 2048, 2048],
  [32, 8192, 4194304, 16384, 16384, 2048, 2048],
  [32, 8192, 4194304, 16383, 1, 16384, 32],
  [32, 8192, 4194304, 1, 16383, 32, 16384],
  [32, 8192, 4194304, 33, 33, 96, 96],
  [32, 8192, 4194304, 47, 17, 160, 64],
  [32, 8192, 4194304, 3024, 4032, 1760, 2336],
  [32, 8192, 4194304, 1280, 720, 1280, 736],
  [32, 8192, 4194304, 800, 600, 800, 608],
  [32, 8192, 4194304, 7, 5000, 32, 4992],
  [32, 8192, 4194304, 5000, 7, 4992, 32],
  [32, 8192, 4194304, 90, 91, 96, 96],
  [32, 8192, 4194304, 513, 257, 512, 256],
  [32, 8192, 4194304, 12345, 6789, 2752, 1504],
  [32, 8192, 4194304, 64, 64, 96, 96],
  [32, 8192, 4194304, 95, 95, 96, 96],
  [32, 8192, 4194304, 100, 100, 96, 96],
  [32, 8192, 4194304, 2, 3, 96, 128],
  [28, 6272, 3211264, 1, 1, 84, 84],
  [28, 6272, 3211264, 640, 480, 644, 476],
  [28, 6272, 3211264, 1920, 1080, 1932, 1092],
  [28, 6272, 3211264, 4000, 3000, 2044, 1540],
  [28, 6272, 3211264, 13, 411, 28, 420],
  [28, 6272, 3211264, 1000, 20, 1008, 28],
  [28, 6272, 3211264, 2000, 2000, 1792, 1792],
  [32, 16384, 16384, 300, 97, 224, 64],
  [32, 16384, 16384, 97, 300, 64, 224],
  [16, 256, 1024, 100, 100, 32, 32],
  [16, 256, 1024, 1000, 10, 320, 16],
];

describe("targetSize (llama.cpp calc_size_preserved_ratio)", () => {
  it.each(FROM_LLAMA_CPP)("align %i, pixels %i..%i: %ix%i -> %ix%i", (alignSize, minPixels, maxPixels, w, h, tw, th) => {
    expect(targetSize(w, h, { alignSize, minPixels, maxPixels })).toEqual({ width: tw, height: th });
  });

  const qwen = { alignSize: 32, ...pixelLimitsForTokens(16, 2) };

  it("Qwen3.5's budget is 8..4096 tokens of 32x32 pixels", () => {
    expect(pixelLimitsForTokens(16, 2)).toEqual({ minPixels: 8192, maxPixels: 4194304 });
    expect(pixelLimitsForTokens(14, 2, 4, 16)).toEqual({ minPixels: 3136, maxPixels: 12544 });
  });

  it("rounds each side to the nearest multiple, halves away from zero (worked by hand)", () => {
    // 1920 / 32 = 60; 1080 / 32 = 33.75 -> 34 -> 1088; 2088960 pixels is inside the budget
    expect(targetSize(1920, 1080, qwen)).toEqual({ width: 1920, height: 1088 });
    // 10000 / 32 = 312.5 -> 313 -> 10016; 10 / 32 rounds to 0, raised to 32; 320512 pixels is inside
    expect(targetSize(10000, 10, qwen)).toEqual({ width: 10016, height: 32 });
  });

  it("scales up from the original sides under minPixels (worked by hand)", () => {
    // 2x3 rounds to 32x32 = 1024 < 8192; beta = sqrt(8192 / 6) = 36.95; 3 * 36.95 = 110.85 -> ceil(3.46) * 32
    // = 128; 2 * 36.95 = 73.9 -> ceil(2.31) * 32 = 96
    expect(targetSize(2, 3, qwen)).toEqual({ width: 96, height: 128 });
  });

  it("scales down with floor over maxPixels, and can still miss the budget as llama.cpp does (worked by hand)", () => {
    // 4000x3008 > 4194304; beta = sqrt(12000000 / 4194304) = 1.6915; 3000 / 1.6915 = 1773.6 -> 55 * 32 = 1760;
    // 4000 / 1.6915 = 2364.8 -> 73 * 32 = 2336
    expect(targetSize(4000, 3000, qwen)).toEqual({ width: 2336, height: 1760 });
    // a 200000x10 strip: beta = 0.6905, the short side floors to 0 and is raised to 32, the long side
    // becomes 289600: 9267200 pixels, over the budget (llama.cpp does not iterate)
    const strip = targetSize(200000, 10, qwen);
    expect(strip).toEqual({ width: 289600, height: 32 });
    expect(strip.width * strip.height).toBeGreaterThan(qwen.maxPixels);
  });

  it("keeps an already aligned size inside the budget", () => {
    for (const [w, h] of [
      [96, 128],
      [640, 480],
      [2048, 2048],
      [32, 4096],
    ] as const) {
      expect(targetSize(w, h, qwen)).toEqual({ width: w, height: h });
    }
  });

  it("gives multiples of the alignment for every shape", () => {
    for (let w = 1; w <= 300; w += 7) {
      for (let h = 1; h <= 300; h += 11) {
        const t = targetSize(w, h, qwen);
        expect(t.width % 32).toBe(0);
        expect(t.height % 32).toBe(0);
        expect(t.width * t.height).toBeGreaterThanOrEqual(qwen.minPixels);
      }
    }
  });

  it("returns 0x0 for an empty size and refuses a bad alignment", () => {
    expect(targetSize(0, 5, qwen)).toEqual({ width: 0, height: 0 });
    expect(() => targetSize(5, 5, { ...qwen, alignSize: 0 })).toThrow(/alignSize must be a positive integer/);
  });
});
