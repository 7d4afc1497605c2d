import { describe, expect, it } from "vitest";
import { imropeSections } from "./forward.js";

describe("interleaved M-RoPE sections (ggml IMROPE)", () => {
  it("Qwen3.5's [11, 11, 10, 0] over 32 pairs: t, h, w repeating, the last two pairs t and h", () => {
    const s = imropeSections([11, 11, 10, 0], 32);
    expect(Array.from(s.subarray(0, 6))).toEqual([0, 1, 2, 0, 1, 2]);
    // w stops below 3 * 10 = 30: pair 29 is the last w
    expect([s[29], s[30], s[31]]).toEqual([2, 0, 1]);
    expect(s.filter((v) => v === 0).length).toBe(11);
    expect(s.filter((v) => v === 1).length).toBe(11);
    expect(s.filter((v) => v === 2).length).toBe(10);
  });

  it("the fixtures' [3, 3, 2, 0] over 8 pairs", () => {
    expect(Array.from(imropeSections([3, 3, 2, 0], 8))).toEqual([0, 1, 2, 0, 1, 2, 0, 1]);
  });

  it("no sections: every pair turns with t", () => {
    expect(Array.from(imropeSections([0, 0, 0, 0], 4))).toEqual([0, 0, 0, 0]);
  });
});
