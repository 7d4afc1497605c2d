/**
 * The qwen35 GDN's L2 norm against llama.cpp's own output (goldens/numerics/l2-norm-qwen35-0.8b.json: four heads
 * of the real 0.8B shape, n = 128, captured from llama.cpp's eval callback): bit for bit.
 */
import fs from "node:fs";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { l2NormInPlace } from "./l2-norm.js";

interface Golden {
  n: number;
  eps: number;
  heads: { row: number; head: number; input: string; output: string }[];
}
const golden = JSON.parse(
  fs.readFileSync(fileURLToPath(new URL("../../../../goldens/numerics/l2-norm-qwen35-0.8b.json", import.meta.url)), "utf8"),
) as Golden;
const floats = (hex: string): Float32Array =>
  new Float32Array(Uint32Array.from(hex.match(/.{8}/g)!, (word) => Number.parseInt(word, 16)).buffer);

describe("l2NormInPlace", () => {
  it("gives llama.cpp's bits on the real 0.8B shape (x / sqrt(sum + eps) did not)", () => {
    const eps = Math.fround(golden.eps);
    expect(golden.heads.length).toBe(4);
    let naiveDiffers = 0;
    for (const head of golden.heads) {
      const y = floats(head.input);
      expect(y.length).toBe(golden.n);
      const naive = Float32Array.from(y);
      l2NormInPlace(y, 0, golden.n, eps);
      expect(Array.from(y), `row ${head.row} head ${head.head}`).toEqual(Array.from(floats(head.output)));
      // the formula used before: the same value mathematically, other bits
      let sum = 0;
      for (const v of naive) sum += Math.fround(v * v);
      const scale = Math.fround(1 / Math.fround(Math.sqrt(Math.fround(Math.fround(sum) + eps))));
      naive.forEach((v, i) => {
        if (Math.fround(v * scale) !== y[i]) naiveDiffers++;
      });
    }
    expect(naiveDiffers).toBeGreaterThan(0);
  });

  it("works in place on a slice and leaves the rest alone", () => {
    const y = new Float32Array([9, 3, 4, 9]);
    l2NormInPlace(y, 1, 2, 0);
    expect(y[0]).toBe(9);
    expect(y[3]).toBe(9);
    expect(y[1]).toBeCloseTo(0.6, 6);
    expect(y[2]).toBeCloseTo(0.8, 6);
  });
});
