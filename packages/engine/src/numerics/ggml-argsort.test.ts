import { describe, expect, it } from "vitest";
import { seededRandom } from "../testing/synthetic-model.js";
import { ggmlArgsortDesc } from "./ggml-argsort.js";

/** Values drawn from `distinct` levels, so most of them tie. */
function tiedValues(n: number, distinct: number, seed: number): Float32Array {
  const random = seededRandom(seed);
  return Float32Array.from({ length: n }, () => Math.floor(random() * distinct) / distinct);
}

describe("ggmlArgsortDesc (std::sort of the indices by values[a] > values[b])", () => {
  it("is a permutation in non-increasing order of the values, for sizes through the insertion-sort and introsort paths", () => {
    for (const n of [1, 2, 15, 16, 17, 32, 33, 100, 256, 300]) {
      for (const distinct of [1, 2, 5, 1000]) {
        const values = tiedValues(n, distinct, n * 31 + distinct);
        const order = new Int32Array(n);
        ggmlArgsortDesc(values, order);
        expect([...order].sort((a, b) => a - b)).toEqual(Array.from({ length: n }, (_, i) => i));
        for (let i = 1; i < n; i++) expect(values[order[i - 1]!]!).toBeGreaterThanOrEqual(values[order[i]!]!);
      }
    }
  });

  it("up to 16 values is an insertion sort: equal values keep the lower index first", () => {
    const values = Float32Array.from([0.5, 1, 0.5, 1, 0.25, 1, 0.5, 0, 1, 0.25, 0.5, 1, 0, 0.5, 1, 0.25]);
    const order = new Int32Array(values.length);
    ggmlArgsortDesc(values, order);
    const expected = Array.from({ length: values.length }, (_, i) => i).sort((a, b) => values[b]! - values[a]! || a - b);
    expect([...order]).toEqual(expected);
  });

  it("above 16 values equal values need not keep the lower index first (the introsort's partition moves them)", () => {
    const values = new Float32Array(32).fill(1);
    const order = new Int32Array(32);
    ggmlArgsortDesc(values, order);
    expect([...order]).not.toEqual(Array.from({ length: 32 }, (_, i) => i));
  });
});
