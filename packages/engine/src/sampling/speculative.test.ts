import { describe, expect, it } from "vitest";
import { createRng } from "./rng.js";
import { drawFrom, speculativeAccept, type TokenDistribution } from "./speculative.js";
import { Sampler } from "./sampler.js";

const dist = (probabilities: number[]): TokenDistribution => ({
  ids: Int32Array.from(probabilities.map((_, i) => i)),
  probabilities: Float32Array.from(probabilities),
});

/** Pearson's chi-square of observed counts against expected probabilities. */
function chiSquare(counts: number[], expected: number[], draws: number): number {
  return counts.reduce((sum, c, i) => sum + (c - expected[i]! * draws) ** 2 / (expected[i]! * draws), 0);
}

// chi-square critical value for 4 degrees of freedom (p's support has 5 tokens) at p = 0.001
const CHI2_4_AT_0_001 = 18.467;
const DRAWS = 20_000;

describe("speculative-sampling acceptance rule", () => {
  // target p and drafter q over a 6-token vocabulary: q over-proposes some tokens, under-proposes
  // others, and proposes token 5, which p never emits
  const p = [0.35, 0.25, 0.2, 0.1, 0.1, 0];
  const q = [0.1, 0.4, 0.05, 0.25, 0.1, 0.1];

  function run(rule: (drafted: number, u1: number, u2: number) => number): number[] {
    const rng = createRng(1234);
    const counts = new Array(6).fill(0) as number[];
    for (let i = 0; i < DRAWS; i++) {
      const drafted = drawFrom(dist(q), rng.next());
      counts[rule(drafted, rng.next(), rng.next())]!++;
    }
    return counts;
  }

  it("keeps the target distribution: 20,000 seeded draws pass a chi-square test at p = 0.001", () => {
    const counts = run((drafted, u1, u2) => speculativeAccept(dist(p), dist(q), drafted, u1, u2).token);
    expect(counts[5]).toBe(0);
    const support = [0, 1, 2, 3, 4];
    const chi2 = chiSquare(
      support.map((i) => counts[i]!),
      support.map((i) => p[i]!),
      DRAWS,
    );
    expect(chi2).toBeLessThan(CHI2_4_AT_0_001);
  });

  it("the same test rejects the naive rule that keeps every draft (it samples q, not p)", () => {
    const counts = run((drafted) => drafted);
    const chi2 = chiSquare(counts.slice(0, 5), p.slice(0, 5), DRAWS);
    expect(chi2).toBeGreaterThan(1000);
  });

  it("accepts with probability min(1, p/q) and redraws from the residual", () => {
    // q(0) = 0.1 < p(0): always kept; q(3) = 0.25 > p(3) = 0.1: kept when u < 0.4
    expect(speculativeAccept(dist(p), dist(q), 0, 0.999, 0)).toEqual({ accepted: true, token: 0 });
    expect(speculativeAccept(dist(p), dist(q), 3, 0.39, 0).accepted).toBe(true);
    const rejected = speculativeAccept(dist(p), dist(q), 3, 0.41, 0);
    expect(rejected.accepted).toBe(false);
    // residual max(0, p - q) = [0.25, 0, 0.15, 0, 0, 0] / 0.4: u = 0 gives token 0, u = 0.7 token 2
    expect(rejected.token).toBe(0);
    expect(speculativeAccept(dist(p), dist(q), 3, 0.41, 0.7).token).toBe(2);
    // p never emits 5: always rejected
    expect(speculativeAccept(dist(p), dist(q), 5, 0, 0.5).accepted).toBe(false);
  });

  it("Sampler.distribution is what Sampler.sample draws from", () => {
    const logits = Float32Array.from([2, 1, 0.5, -1, 3, 0]);
    const sampler = new Sampler({ temperature: 0.8, topK: 4, seed: 7 });
    const d = sampler.distribution(logits);
    expect([...d.ids].sort()).toEqual([0, 1, 2, 4]);
    expect(d.probabilities.reduce((a, b) => a + b, 0)).toBeCloseTo(1, 6);
    const greedy = new Sampler({ temperature: 0 }).distribution(logits);
    expect([...greedy.ids]).toEqual([4]);
  });
});
