import { describe, expect, it } from "vitest";
import { TokenizerError } from "../tokenizer/errors.js";
import {
  applyPenalties,
  applyTemperature,
  candidatesFromLogits,
  greedy,
  minP,
  sampleCandidates,
  sortCandidates,
  softmax,
  topK,
  topP,
} from "./candidates.js";
import { DEFAULT_SAMPLING, resolveSamplingParams } from "./params.js";
import { createRng } from "./rng.js";
import { Sampler, stopReasonFor } from "./sampler.js";
import { StopStringMatcher } from "./stop-strings.js";

const f32 = (values: number[]): Float32Array => Float32Array.from(values);
const logitsOf = (probabilities: number[]): Float32Array => f32(probabilities.map(Math.log));

describe("greedy", () => {
  it("takes the largest logit, ties to the lowest id", () => {
    expect(greedy(f32([1, 3, 3, 2]))).toBe(1);
    expect(greedy(f32([-5, -1, -1]))).toBe(1);
    expect(greedy(f32([Number.NaN, 0.5, Number.NaN, 0.7]))).toBe(3);
    expect(greedy(f32([-Infinity, -Infinity]))).toBe(0);
  });
});

describe("penalties", () => {
  it("applies repeat (divide positive, multiply negative), frequency and presence over the window", () => {
    const logits = f32([2, -2, 1, 0.5]);
    const out = applyPenalties(logits, [0, 1, 0], { repeat: 2, frequency: 0.5, presence: 0.25, lastN: -1 });
    // id 0 seen twice: 2/2 - (2*0.5 + 0.25) = -0.25; id 1 once: -2*2 - (0.5 + 0.25) = -4.75
    expect(Array.from(out)).toEqual([-0.25, -4.75, 1, 0.5]);
    expect(Array.from(logits)).toEqual([2, -2, 1, 0.5]); // input untouched
    const lastOne = applyPenalties(logits, [0, 1, 0], { repeat: 2, frequency: 0.5, presence: 0.25, lastN: 1 });
    expect(Array.from(lastOne)).toEqual([0.25, -2, 1, 0.5]); // only the last token (id 0) counts
    const off = applyPenalties(logits, [0, 1], { repeat: 2, frequency: 1, presence: 1, lastN: 0 });
    expect(Array.from(off)).toEqual([2, -2, 1, 0.5]);
  });
});

describe("filters", () => {
  it("top-k keeps the k best, ties to the lowest id", () => {
    const c = topK(candidatesFromLogits(f32([1, 5, 3, 5, 2])), 2);
    expect(Array.from(c.ids)).toEqual([1, 3]);
    expect(Array.from(topK(candidatesFromLogits(f32([1, 5, 3, 5, 2])), 0).ids)).toEqual([0, 1, 2, 3, 4]); // off
    expect(Array.from(sortCandidates(candidatesFromLogits(f32([1, 5, 3, 5, Number.NaN, 2]))).ids)).toEqual([1, 3, 2, 5, 0]);
    // the heap selection agrees with a full sort on many ties
    const tied = f32(Array.from({ length: 1000 }, (_, i) => (i * 37) % 11));
    const full = Array.from(sortCandidates(candidatesFromLogits(tied)).ids);
    expect(Array.from(topK(candidatesFromLogits(tied), 150).ids)).toEqual(full.slice(0, 150));
    // far-apart logits exercise the widening threshold search
    const spread = f32([0, -100, 50, -1000, 10]);
    expect(Array.from(topK(candidatesFromLogits(spread), 4).ids)).toEqual([2, 4, 0, 1]);
  });

  it("softmax", () => {
    const p = softmax(candidatesFromLogits(f32([0, Math.log(3)])));
    expect(p[0]).toBeCloseTo(0.25, 6);
    expect(p[1]).toBeCloseTo(0.75, 6);
  });

  it("top-p keeps the smallest prefix reaching p", () => {
    const logits = logitsOf([0.05, 0.5, 0.15, 0.3]);
    const ids = (p: number): number[] => Array.from(topP(candidatesFromLogits(logits), p).ids);
    expect(ids(0.45)).toEqual([1]);
    expect(ids(0.79)).toEqual([1, 3]);
    expect(ids(0.9)).toEqual([1, 3, 2]);
    expect(ids(0.99)).toEqual([1, 3, 2, 0]);
    expect(ids(1)).toEqual([0, 1, 2, 3]); // off: unchanged order
    // the tail far below the top still counts toward the total
    // Z = 1 + 1000 e^-3 = 50.787: top p = 0.019690, each other 0.00098031; 0.5 needs 490 of them
    const wide = f32([0, ...new Array<number>(1000).fill(-3)]);
    expect(topP(candidatesFromLogits(wide), 0.5).ids.length).toBe(491);
    // a flat, large distribution takes the histogram pass: the same set as a full sort's prefix
    const rng = createRng(11);
    const flat = Float32Array.from({ length: 20_000 }, () => rng.next() * 4);
    const sorted = sortCandidates(candidatesFromLogits(flat));
    const probabilities = softmax(sorted);
    let cumulative = 0;
    let expected = 0;
    while (cumulative < 0.9) cumulative += probabilities[expected++]!;
    const kept = topP(candidatesFromLogits(flat), 0.9);
    expect(kept.ids.length).toBe(expected);
    expect(Array.from(kept.ids).sort((a, b) => a - b)).toEqual(Array.from(sorted.ids.slice(0, expected)).sort((a, b) => a - b));
  });

  it("min-p keeps tokens with p >= minP x p_max", () => {
    const logits = logitsOf([0.05, 0.5, 0.15, 0.3]);
    expect(Array.from(minP(candidatesFromLogits(logits), 0.25).ids)).toEqual([1, 2, 3]); // 0.15 >= 0.125; order kept
    expect(Array.from(minP(candidatesFromLogits(logits), 0.7).ids)).toEqual([1]);
    expect(minP(candidatesFromLogits(logits), 0).ids.length).toBe(4);
  });

  it("temperature scales logits; 0 keeps the top token", () => {
    expect(Array.from(applyTemperature(candidatesFromLogits(f32([2, 4])), 2).logits)).toEqual([1, 2]);
    expect(Array.from(applyTemperature(candidatesFromLogits(f32([2, 4, 4])), 0).ids)).toEqual([1]);
  });

  it("draws by cumulative probability", () => {
    const c = candidatesFromLogits(f32([0, Math.log(3)])); // p = [0.25, 0.75]
    expect(sampleCandidates(c, 0.2)).toBe(0);
    expect(sampleCandidates(c, 0.3)).toBe(1);
    expect(sampleCandidates(c, 0.999999)).toBe(1);
  });
});

describe("rng", () => {
  it("is reproducible from a seed and from a saved state", () => {
    const a = createRng(42);
    const b = createRng(42);
    const first = Array.from({ length: 20 }, () => a.next());
    expect(Array.from({ length: 20 }, () => b.next())).toEqual(first);
    expect(new Set(first).size).toBe(20);
    const c = createRng(43);
    expect(c.next()).not.toBe(first[0]);
    const saved = a.state();
    const continued = Array.from({ length: 5 }, () => a.next());
    const resumed = createRng(saved);
    expect(Array.from({ length: 5 }, () => resumed.next())).toEqual(continued);
  });

  it("is uniform on [0, 1)", () => {
    const rng = createRng(7);
    const buckets = new Array<number>(10).fill(0);
    for (let i = 0; i < 20_000; i++) {
      const x = rng.next();
      expect(x >= 0 && x < 1).toBe(true);
      buckets[Math.floor(x * 10)]!++;
    }
    for (const count of buckets) expect(Math.abs(count - 2000)).toBeLessThan(200);
  });
});

describe("Sampler", () => {
  it("temperature 0 is greedy over the penalized logits", () => {
    expect(new Sampler({ temperature: 0, seed: 1 }).sample(f32([3, 2.9]), [])).toBe(0);
    // 3 / 1.1 = 2.727 < 2.9: the penalty flips the choice
    expect(new Sampler({ temperature: 0, repeatPenalty: 1.1 }).sample(f32([3, 2.9]), [0])).toBe(1);
  });

  it("an argmax kernel replaces the scan for greedy picks, over the penalized logits, and only for them", () => {
    const seen: number[][] = [];
    const argmax = (x: Float32Array) => {
      seen.push([...x]);
      return 7;
    };
    expect(new Sampler({ temperature: 0 }, { argmax }).sample(f32([3, 2.9]), [])).toBe(7);
    expect([...new Sampler({ temperature: 0 }, { argmax }).distribution(f32([3, 2.9])).ids]).toEqual([7]);
    expect(new Sampler({ temperature: 0 }, { argmax }).argmax(f32([1, 5]))).toBe(7);
    // the kernel sees the penalized row: 3 / 1.1 for the repeated token 0
    new Sampler({ temperature: 0, repeatPenalty: 1.1 }, { argmax }).sample(f32([3, 2.9]), [0]);
    expect(seen.at(-1)![0]).toBeCloseTo(3 / 1.1, 5);
    const calls = seen.length;
    expect(new Sampler({ temperature: 1, seed: 3 }, { argmax }).sample(f32([0, 100]), [])).toBe(1);
    expect(seen.length).toBe(calls);
    // without a kernel: the scan
    expect(new Sampler({ temperature: 0 }).argmax(f32([1, 5, 5]))).toBe(1);
  });

  it("samples the softmax distribution, reproducibly per seed", () => {
    const logits = logitsOf([0.1, 0.2, 0.7]);
    const params = { temperature: 1, topK: 0, topP: 1, minP: 0 };
    const draw = (seed: number, n: number): number[] => {
      const sampler = new Sampler({ ...params, seed });
      return Array.from({ length: n }, () => sampler.sample(logits));
    };
    const run = draw(5, 4000);
    expect(draw(5, 4000)).toEqual(run);
    expect(draw(6, 50)).not.toEqual(run.slice(0, 50));
    const share = (id: number): number => run.filter((t) => t === id).length / run.length;
    expect(share(0)).toBeCloseTo(0.1, 1);
    expect(share(1)).toBeCloseTo(0.2, 1);
    expect(share(2)).toBeCloseTo(0.7, 1);
  });

  it("never draws a token the filters removed", () => {
    const logits = logitsOf([0.4, 0.3, 0.2, 0.1]);
    const sampler = new Sampler({ temperature: 1.5, topK: 2, topP: 1, minP: 0, seed: 3 });
    const seen = new Set(Array.from({ length: 500 }, () => sampler.sample(logits)));
    expect([...seen].sort()).toEqual([0, 1]);
  });
});

describe("stop conditions", () => {
  it("stops on EOG (unless ignored) and on max tokens", () => {
    const eog = new Set([7]);
    const params = { maxTokens: 3, ignoreEog: false };
    expect(stopReasonFor(7, 1, params, eog)).toBe("eog");
    expect(stopReasonFor(5, 2, params, eog)).toBeUndefined();
    expect(stopReasonFor(5, 3, params, eog)).toBe("max_tokens");
    expect(stopReasonFor(7, 1, { ...params, ignoreEog: true }, eog)).toBeUndefined();
  });

  it("holds back text that may start a stop string", () => {
    const m = new StopStringMatcher(["</s>", "STOP"]);
    expect(m.push("Hello <")).toEqual({ text: "Hello " });
    expect(m.push("/")).toEqual({ text: "" });
    expect(m.push("s> bye")).toEqual({ text: "", stop: "</s>" });
    expect(m.stopped).toBe(true);
    expect(m.push("more")).toEqual({ text: "" });

    const n = new StopStringMatcher(["STOP"]);
    expect(n.push("Hel")).toEqual({ text: "Hel" });
    expect(n.push("lo ST")).toEqual({ text: "lo " });
    expect(n.push("ART")).toEqual({ text: "START" });
    expect(n.push("x STO")).toEqual({ text: "x " });
    expect(n.flush()).toBe("STO");

    const o = new StopStringMatcher(["STOP", "OP!"]);
    expect(o.push("abcSTOP!def")).toEqual({ text: "abc", stop: "STOP" }); // earliest match wins
    expect(new StopStringMatcher([]).push("anything")).toEqual({ text: "anything" });
  });
});

describe("params", () => {
  it("fills llama.cpp's defaults and names a bad field", () => {
    expect(resolveSamplingParams({})).toEqual(DEFAULT_SAMPLING);
    expect(resolveSamplingParams({ topK: 5, stop: ["x"] }).topK).toBe(5);
    const fieldOf = (params: object): string | undefined => {
      try {
        resolveSamplingParams(params);
      } catch (error) {
        expect(TokenizerError.isInstance(error)).toBe(true);
        expect((error as TokenizerError).code).toBe("SAMPLING_BAD_PARAM");
        return (error as TokenizerError).field;
      }
      return undefined;
    };
    expect(fieldOf({ topP: 0 })).toBe("topP");
    expect(fieldOf({ topK: 1.5 })).toBe("topK");
    expect(fieldOf({ minP: 2 })).toBe("minP");
    expect(fieldOf({ repeatPenalty: 0 })).toBe("repeatPenalty");
    expect(fieldOf({ penaltyLastN: -2 })).toBe("penaltyLastN");
    expect(fieldOf({ maxTokens: -1 })).toBe("maxTokens");
    expect(fieldOf({ stop: [""] })).toBe("stop");
    expect(fieldOf({ temperature: Number.NaN })).toBe("temperature");
  });
});
