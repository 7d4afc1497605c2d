import { describe, expect, it } from "vitest";
import { logprobsOf } from "./logprobs.js";

describe("logprobsOf", () => {
  it("is the log-softmax at the chosen token with the top tokens in order, ties to the lower id", () => {
    const logits = Float32Array.from([1, 3, 2, 3, -1]);
    const z = Math.log([1, 3, 2, 3, -1].reduce((s, x) => s + Math.exp(x), 0));
    const { logprob, top } = logprobsOf(logits, 2, 3);
    expect(logprob).toBeCloseTo(2 - z, 12);
    expect(top.map((t) => t.token)).toEqual([1, 3, 2]);
    expect(top[0]!.logprob).toBeCloseTo(3 - z, 12);
    const probabilities = [0, 1, 2, 3, 4].map((i) => Math.exp(logprobsOf(logits, i, 0).logprob));
    expect(probabilities.reduce((s, p) => s + p, 0)).toBeCloseTo(1, 12);
    expect(logprobsOf(logits, 0, 0).top).toEqual([]);
    expect(logprobsOf(logits, 0, 50).top).toHaveLength(5);
  });
});
