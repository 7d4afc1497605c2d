/**
 * Speculative decoding in the Engine: greedy output with speculation equals greedy output without
 * it, token for token (MTP drafter on every fixture with an MTP block, k = 1, 2, 4, alone and
 * batched; a caller-supplied drafter whose drafts are partly wrong exercises the rollback of the
 * KV blocks and the GDN state); the stats count what happened; bad options are refused by name.
 */
import { describe, expect, it } from "vitest";
import * as native from "@keepquant/tt-native";
import { Engine } from "./engine.js";
import type { EngineOptions } from "./engine-types.js";
import { EngineError } from "./errors.js";
import { Sampler } from "./sampling/sampler.js";
import { PARITY_FIXTURES, PARITY_MODELS } from "@keepquant/fixtures";
import { parityFixtureFile, parityFixturesUnavailableReason } from "@keepquant/fixtures/oracle";
import { seededRandom } from "./testing/synthetic-model.js";

const MTP_FIXTURES = PARITY_FIXTURES.filter((f) => PARITY_MODELS[f.model]?.mtp === true);
const PLAIN_FIXTURE = PARITY_FIXTURES.find((f) => f.name === "tied-4l-q8_0")!;

function skipReason(): string | undefined {
  if (!native.nativeAddon()) return `the native addon did not load: ${native.nativeStatus().cpu.reasons.join("; ")}`;
  return parityFixturesUnavailableReason();
}
const reason = skipReason();

const GENERATE = { maxTokens: 20, stopAtEog: false } as const;

function prompts(vocab: number): number[][] {
  const random = seededRandom(99);
  return [7, 12, 3].map((length) => Array.from({ length }, () => Math.floor(random() * vocab)));
}

/** Greedy outputs of `prompts`, each alone (one engine per run) or all at once. */
async function greedyOutputs(
  file: string,
  options: EngineOptions,
  batched: boolean,
  inputs: number[][],
): Promise<{ tokens: number[][]; engine: Engine }> {
  const engine = await Engine.load(file, { maxSequences: 3, kvCacheTokens: 1024, ...options });
  const tokens = batched
    ? (await Promise.all(inputs.map((p) => engine.generateToEnd(p, GENERATE)))).map((r) => r.tokens)
    : await inputs.reduce(
        async (done, p) => [...(await done), (await engine.generateToEnd(p, GENERATE)).tokens],
        Promise.resolve([] as number[][]),
      );
  return { tokens, engine };
}

/** The known greedy continuation of whichever prompt `tokens` starts with (a drafter at acceptance 1.0). */
function trueContinuation(inputs: readonly number[][], outputs: readonly number[][]): (tokens: readonly number[]) => number[] {
  return (tokens) => {
    const i = inputs.findIndex((p) => tokens.length >= p.length && p.every((t, j) => tokens[j] === t));
    return [...inputs[i]!, ...outputs[i]!].slice(tokens.length);
  };
}

/** The test prompts of `file`'s vocabulary, their plain greedy outputs, and the drafter that proposes them. */
async function plainBaseline(file: string) {
  const probe = await Engine.load(file, {});
  const inputs = prompts(probe.weights.vocab);
  probe.dispose();
  const run = await greedyOutputs(file, {}, false, inputs);
  run.engine.dispose();
  return { inputs, plain: { tokens: run.tokens }, continuation: trueContinuation(inputs, run.tokens) };
}

function expectPoolsFree(engine: Engine): void {
  const stats = engine.stats();
  expect(stats.kv.blocksFree).toBe(stats.kv.blocksTotal);
  expect(stats.states.slotsFree).toBe(stats.states.slotsTotal);
}

describe.skipIf(reason !== undefined)("speculative decoding with the MTP drafter: greedy identity", () => {
  const models: { name: string; file: () => Promise<string> }[] = [
    ...MTP_FIXTURES.map((fixture) => ({ name: fixture.name, file: () => parityFixtureFile(fixture) })),
    // the trained default model: its drafter agrees about half the time (partial acceptance, rollbacks)
    {
      name: "default model (trained MTP head)",
      file: async () => (await import("@keepquant/default-model")).defaultModelInfo().file,
    },
  ];
  for (const model of models) {
    it(`${model.name}: k = 1, 2, 4, alone and batched, equals plain greedy token for token`, async () => {
      const file = await model.file();
      const probe = await Engine.load(file, {});
      const inputs = prompts(probe.weights.vocab);
      probe.dispose();
      const plain = await greedyOutputs(file, {}, false, inputs);
      plain.engine.dispose();
      expect(plain.tokens.every((t) => t.length === GENERATE.maxTokens)).toBe(true);
      for (const draftTokens of [1, 2, 4]) {
        for (const batched of [false, true]) {
          const run = await greedyOutputs(file, { speculative: { method: "mtp", draftTokens } }, batched, inputs);
          expect(run.tokens, `k ${draftTokens} ${batched ? "batched" : "alone"}`).toEqual(plain.tokens);
          const stats = run.engine.stats().speculative!;
          expect(stats.method).toBe("mtp");
          expect(stats.drafted).toBeGreaterThan(0);
          expect(stats.verifications).toBeGreaterThan(0);
          expect(stats.draftedByPosition.length).toBe(draftTokens);
          expect(stats.draftedByPosition.reduce((a, b) => a + b, 0)).toBe(stats.drafted);
          expect(stats.acceptedByPosition.reduce((a, b) => a + b, 0)).toBe(stats.accepted);
          expect(stats.verifiedTokens).toBe(stats.accepted + stats.verifications);
          expect(stats.drafterSteps).toBeGreaterThan(0);
          expectPoolsFree(run.engine);
          run.engine.dispose();
        }
      }
    });
  }

  it("a reduced drafter head (draftVocab): same greedy tokens, alone and batched; the stats say which ids it scores", async () => {
    const file = (await import("@keepquant/default-model")).defaultModelInfo().file;
    const probe = await Engine.load(file, {});
    const vocab = probe.weights.vocab;
    const inputs = prompts(vocab);
    probe.dispose();
    const plain = await greedyOutputs(file, {}, false, inputs);
    plain.engine.dispose();
    // the trained model's ids are byte-level BPE merges in training order: frequent pieces come first
    const draftVocab = vocab / 4;
    for (const batched of [false, true]) {
      const run = await greedyOutputs(file, { speculative: { method: "mtp", draftTokens: 2, draftVocab } }, batched, inputs);
      expect(run.tokens, batched ? "batched" : "alone").toEqual(plain.tokens);
      const stats = run.engine.stats().speculative!;
      expect(stats.draftVocab).toBe(draftVocab);
      expect(stats.drafted).toBeGreaterThan(0);
      expect(stats.accepted, "the reduced drafter still agrees with its target at times").toBeGreaterThan(0);
      expectPoolsFree(run.engine);
      run.engine.dispose();
    }
    const exact = await Engine.load(file, { speculative: { method: "mtp" } });
    expect(exact.stats().speculative!.draftVocab).toBe(vocab);
    exact.dispose();
  });

  it("mtp with propose (benchmarks): the drafter runs for every draft, its picks replaced by the true continuation: acceptance 1.0", async () => {
    const file = (await import("@keepquant/default-model")).defaultModelInfo().file;
    const { inputs, plain, continuation } = await plainBaseline(file);
    const run = await greedyOutputs(
      file,
      { speculative: { method: "mtp", draftTokens: 3, propose: (tokens, count) => continuation(tokens).slice(0, count) } },
      false,
      inputs,
    );
    expect(run.tokens).toEqual(plain.tokens);
    const stats = run.engine.stats().speculative!;
    expect(stats.method).toBe("mtp");
    expect(stats.drafted).toBeGreaterThan(0);
    expect(stats.acceptanceRate).toBe(1);
    expect(stats.rollbacks).toBe(0);
    // one sequence at a time: every draft came out of its own drafter step (the first with the catch-up rows)
    expect(stats.drafterSteps).toBeGreaterThanOrEqual(stats.drafted);
    expectPoolsFree(run.engine);
    run.engine.dispose();
    const bad = await Engine.load(file, { speculative: { method: "mtp", propose: 3 } as never }).catch((e: unknown) => e);
    expect(EngineError.isInstance(bad) && bad.field).toBe("speculative.propose");
  });

  it("the TypeScript specification path (provider ts) gives the same tokens", async () => {
    const file = await parityFixtureFile(MTP_FIXTURES.find((f) => f.weightType === "Q8_0")!);
    const plain = await greedyOutputs(file, {}, false, prompts(1000).slice(0, 1));
    plain.engine.dispose();
    const ts = await greedyOutputs(
      file,
      { provider: "ts", speculative: { method: "mtp", draftTokens: 2 } },
      false,
      prompts(1000).slice(0, 1),
    );
    expect(ts.tokens).toEqual(plain.tokens);
    expect(ts.engine.stats().providers.step).toBe("ts-forward");
    ts.engine.dispose();
  });
});

describe.skipIf(reason !== undefined)("speculative decoding with the prefix cache", () => {
  it("a hit resumes the MTP drafter from the cached prefix: same tokens, and the same drafts accepted, as without the cache", async () => {
    const file = (await import("@keepquant/default-model")).defaultModelInfo().file;
    const probe = await Engine.load(file, {});
    const vocab = probe.weights.vocab;
    probe.dispose();
    const random = seededRandom(5);
    const token = () => Math.floor(random() * 1000);
    const shared = Array.from({ length: 41 }, token); // two full 16-token blocks and more
    const inputs = [
      [...shared, token(), token(), token()],
      [...shared, token(), token()],
      [...shared.slice(0, 37), token()], // hits the first two blocks only
    ];
    inputs.push([...inputs[0]!]); // the same prompt again: a hit at its last full block
    expect(Math.max(...inputs.flat())).toBeLessThan(vocab);
    const options = { maxSequences: 1, kvCacheTokens: 1024, speculative: { method: "mtp" as const, draftTokens: 2 } };
    /**
     * One request after the other, so that every later prompt can hit what an earlier one cached; the
     * drafter's logits of every draft are fingerprinted (bit patterns) through the decoder's pickDraft.
     */
    const run = async (engine: Engine) => {
      const spec = (engine as unknown as { spec: { pickDraft: (request: { tokens: number[] }, logits: Float32Array) => number } }).spec;
      const fingerprints: string[] = [];
      const original = spec.pickDraft.bind(spec);
      spec.pickDraft = (request, logits) => {
        const bits = new Uint32Array(logits.buffer, logits.byteOffset, logits.length);
        let h = 0;
        for (let i = 0; i < bits.length; i++) h = (Math.imul(h, 31) + bits[i]!) >>> 0;
        fingerprints.push(`${request.tokens.length}:${h}`);
        return original(request, logits);
      };
      const out: { tokens: number[]; drafted: number; accepted: number }[] = [];
      for (const prompt of inputs) {
        const result = await engine.generateToEnd(prompt, GENERATE);
        out.push({ tokens: result.tokens, drafted: result.stats.speculative!.drafted, accepted: result.stats.speculative!.accepted });
      }
      return { out, fingerprints };
    };
    const plain = await Engine.load(file, { maxSequences: 1, kvCacheTokens: 1024 });
    const expected = await Promise.all(inputs.map(async (p) => (await plain.generateToEnd(p, GENERATE)).tokens));
    plain.dispose();
    const uncached = await Engine.load(file, options);
    const without = await run(uncached);
    uncached.dispose();
    const cached = await Engine.load(file, { ...options, prefixCacheSnapshots: 4 });
    const withCache = await run(cached);
    const stats = cached.stats();
    expect(stats.prefixCache!.hits, "later prompts hit the cached prefix").toBeGreaterThanOrEqual(3);
    expect(withCache.out.map((r) => r.tokens)).toEqual(expected);
    expect(without.out.map((r) => r.tokens)).toEqual(expected);
    // the drafter after a hit computes exactly what it computes after running over the prefix itself:
    // the same logits, bit for bit, for every draft, so the same drafts and acceptances
    expect(withCache.fingerprints.length).toBeGreaterThan(20);
    expect(withCache.fingerprints).toEqual(without.fingerprints);
    expect(withCache.out).toEqual(without.out);
    expect(stats.speculative!.accepted, "the trained drafter agrees at times").toBeGreaterThan(0);
    expect(stats.states.slotsFree).toBe(stats.states.slotsTotal);
    cached.dispose();
  });
});

describe.skipIf(reason !== undefined)("speculative verification with a caller's drafter (rollback)", () => {
  it("true continuation: acceptance 1.0, no rollback; partly wrong drafts: rollbacks, same tokens", async () => {
    const file = await parityFixtureFile(PLAIN_FIXTURE);
    const { inputs, plain, continuation } = await plainBaseline(file);
    for (const draftTokens of [1, 2, 4]) {
      for (const batched of [false, true]) {
        const oracle = await greedyOutputs(
          file,
          { speculative: { method: "function", draftTokens, propose: (tokens, count) => continuation(tokens).slice(0, count) } },
          batched,
          inputs,
        );
        expect(oracle.tokens).toEqual(plain.tokens);
        const perfect = oracle.engine.stats().speculative!;
        expect(perfect.acceptanceRate).toBe(1);
        expect(perfect.rollbacks).toBe(0);
        expect(perfect.tokensPerTargetStep).toBeGreaterThan(draftTokens === 1 ? 1.9 : 2.5);
        expectPoolsFree(oracle.engine);
        oracle.engine.dispose();

        // every third call proposes a wrong token somewhere in its drafts: partial acceptance
        let calls = 0;
        const wrong = await greedyOutputs(
          file,
          {
            speculative: {
              method: "function",
              draftTokens,
              propose: (tokens, count) => {
                const drafts = continuation(tokens).slice(0, count);
                if (calls++ % 3 === 1 && drafts.length > 0) {
                  const at = calls % drafts.length;
                  drafts[at] = (drafts[at]! + 1) % 1000;
                }
                return drafts;
              },
            },
          },
          batched,
          inputs,
        );
        expect(wrong.tokens, `k ${draftTokens} ${batched ? "batched" : "alone"}`).toEqual(plain.tokens);
        const partial = wrong.engine.stats().speculative!;
        expect(partial.rollbacks).toBeGreaterThan(0);
        expect(partial.acceptanceRate).toBeLessThan(1);
        expectPoolsFree(wrong.engine);
        wrong.engine.dispose();
      }
    }
  });

  it("k = 8 with 4 sequences batched and rollbacks: verification steps stay under the tiled-attention row count, same tokens", async () => {
    const file = await parityFixtureFile(PLAIN_FIXTURE);
    const random = seededRandom(5);
    const inputs = [9, 4, 11, 6].map((length) => Array.from({ length }, () => Math.floor(random() * 1000)));
    const plain = await greedyOutputs(file, {}, false, inputs);
    plain.engine.dispose();
    const continuation = trueContinuation(inputs, plain.tokens);
    const run = await greedyOutputs(
      file,
      {
        maxSequences: 4,
        speculative: {
          method: "function",
          draftTokens: 8,
          // the last of 8 drafts is wrong: 7 accepted, a rollback, and the next chunk carries 9 known tokens + 8 drafts
          propose: (tokens, count) =>
            continuation(tokens)
              .slice(0, count)
              .map((t, i) => (i === 7 ? (t + 1) % 1000 : t)),
        },
      },
      true,
      inputs,
    );
    expect(run.tokens).toEqual(plain.tokens);
    expect(run.engine.stats().speculative!.rollbacks).toBeGreaterThan(0);
    run.engine.dispose();
  });

  it("preemption by recompute under a small KV pool: same tokens, every block back", async () => {
    const file = await parityFixtureFile(MTP_FIXTURES.find((f) => f.weightType === "Q8_0")!);
    const probe = await Engine.load(file, {});
    const inputs = prompts(probe.weights.vocab);
    probe.dispose();
    const plain = await greedyOutputs(file, {}, false, inputs);
    plain.engine.dispose();
    const run = await greedyOutputs(
      file,
      { blockSize: 4, kvCacheTokens: 64, maxBatchTokens: 32, speculative: { method: "mtp", draftTokens: 4 } },
      true,
      inputs,
    );
    expect(run.tokens).toEqual(plain.tokens);
    expect(run.engine.stats().counters.preemptions).toBeGreaterThan(0);
    expectPoolsFree(run.engine);
    run.engine.dispose();
  });

  it("a drafter that is always wrong: one token per step, no row computed twice", async () => {
    const file = await parityFixtureFile(PLAIN_FIXTURE);
    const prompt = [3, 1, 4, 1, 5];
    const plain = await greedyOutputs(file, {}, false, [prompt]);
    plain.engine.dispose();
    const truth = [...prompt, ...plain.tokens[0]!];
    const draftTokens = 2;
    const wrong = await greedyOutputs(
      file,
      {
        speculative: {
          method: "function",
          draftTokens,
          propose: (tokens, count) => truth.slice(tokens.length, tokens.length + count).map((t) => (t + 1) % 1000),
        },
      },
      false,
      [prompt],
    );
    expect(wrong.tokens).toEqual(plain.tokens);
    const stats = wrong.engine.stats();
    expect(stats.speculative!.accepted).toBe(0);
    expect(stats.speculative!.rollbacks).toBeGreaterThan(0);
    // every step verifies 1 known row + 2 drafts, keeps the known row (the state copied after it) and
    // yields 1 token: no row is computed twice
    expect(stats.counters.decodeTokens).toBeLessThanOrEqual(GENERATE.maxTokens * (draftTokens + 1));
    wrong.engine.dispose();
  });

  it("sampling with speculation is reproducible with a seed and reports per-request stats", async () => {
    const file = await parityFixtureFile(MTP_FIXTURES[0]!);
    const run = async () => {
      const engine = await Engine.load(file, { speculative: { method: "mtp", draftTokens: 3 } });
      const result = await engine.generateToEnd([1, 2, 3, 4], { maxTokens: 16, stopAtEog: false, temperature: 0.9, seed: 5 });
      engine.dispose();
      return result;
    };
    const [a, b] = [await run(), await run()];
    expect(a.tokens).toEqual(b.tokens);
    expect(a.tokens.length).toBe(16);
    expect(a.stats.speculative!.drafted).toBeGreaterThan(0);
  });
});

describe.skipIf(reason !== undefined)("speculative options are checked", () => {
  it("refuses k outside 1..8 and unknown methods, naming the option", async () => {
    const file = await parityFixtureFile(MTP_FIXTURES[0]!);
    for (const draftTokens of [0, 9, 1.5]) {
      const error = await Engine.load(file, { speculative: { method: "mtp", draftTokens } }).catch((e: unknown) => e);
      expect(EngineError.isInstance(error) && error.field).toBe("speculative.draftTokens");
      expect((error as Error).message).toContain(String(draftTokens));
    }
    const bad = await Engine.load(file, { speculative: { method: "medusa" } as never }).catch((e: unknown) => e);
    expect(EngineError.isInstance(bad) && bad.field).toBe("speculative.method");
  });

  it("refuses a bad draftVocab by name: not a positive integer, larger than the vocabulary, or without mtp", async () => {
    const file = await parityFixtureFile(MTP_FIXTURES[0]!);
    const probe = await Engine.load(file, {});
    const vocab = probe.weights.vocab;
    probe.dispose();
    for (const draftVocab of [0, -3, 2.5, vocab + 1]) {
      const error = await Engine.load(file, { speculative: { method: "mtp", draftVocab } }).catch((e: unknown) => e);
      expect(EngineError.isInstance(error) && error.field, String(draftVocab)).toBe("speculative.draftVocab");
      expect((error as Error).message).toContain(String(draftVocab));
    }
    const fn = await Engine.load(file, {
      speculative: { method: "function", propose: () => [], draftVocab: 10 } as never,
    }).catch((e: unknown) => e);
    expect(EngineError.isInstance(fn) && fn.field).toBe("speculative.draftVocab");
  });

  it("refuses mtp on a model without an MTP block, naming the file and the key", async () => {
    const file = await parityFixtureFile(PLAIN_FIXTURE);
    const error = await Engine.load(file, { speculative: { method: "mtp" } }).catch((e: unknown) => e);
    expect(EngineError.isInstance(error) && error.code).toBe("ENGINE_BAD_OPTION");
    expect((error as EngineError).field).toBe("speculative.method");
    expect((error as Error).message).toContain(file);
    expect((error as Error).message).toContain("nextn_predict_layers");
  });
});

describe.skipIf(reason !== undefined)("sampled output with speculation keeps its distribution", () => {
  it("the trained default model's MTP drafter, top-k 4: the second token's distribution passes a chi-square test", async () => {
    const { defaultModelInfo } = await import("@keepquant/default-model");
    const file = defaultModelInfo().file;
    const prompt = [72, 101, 108, 108, 111];
    const params = { temperature: 1, topK: 4 };
    const engine = await Engine.load(file, { maxSequences: 8, speculative: { method: "mtp", draftTokens: 1 } });
    const DRAWS = 1600;
    const pairs: [number, number][] = [];
    try {
      for (let start = 0; start < DRAWS; start += 8) {
        const batch = Array.from({ length: 8 }, (_, i) =>
          engine.generateToEnd(prompt, { ...params, maxTokens: 3, stopAtEog: false, seed: 1000 + start + i }),
        );
        for (const r of await Promise.all(batch)) pairs.push([r.tokens[0]!, r.tokens[1]!]);
      }
      const stats = engine.stats().speculative!;
      expect(stats.drafted).toBeGreaterThan(DRAWS / 2); // the second token went through verification
      expect(stats.accepted).toBeGreaterThan(0);
      expect(stats.accepted).toBeLessThan(stats.drafted); // and through the residual
      // the most frequent first token, and the target's distribution after it
      const counts = new Map<number, number>();
      for (const [first] of pairs) counts.set(first, (counts.get(first) ?? 0) + 1);
      const first = [...counts].sort((a, b) => b[1] - a[1])[0]![0];
      const logits = (await engine.evaluate([...prompt, first], { positions: [prompt.length] }))[0]!;
      const target = new Sampler(params).distribution(logits, [...prompt, first]);
      const seconds = pairs.filter(([f]) => f === first).map(([, s]) => s);
      const observed = Array.from(target.ids, (id) => seconds.filter((s) => s === id).length);
      expect(observed.reduce((a, b) => a + b, 0)).toBe(seconds.length); // nothing outside p's support
      const chi2 = observed.reduce(
        (sum, o, i) => sum + (o - target.probabilities[i]! * seconds.length) ** 2 / (target.probabilities[i]! * seconds.length),
        0,
      );
      // chi-square, 3 degrees of freedom (top-k 4), p = 0.001
      expect(seconds.length).toBeGreaterThan(200);
      expect(chi2).toBeLessThan(16.266);
    } finally {
      engine.dispose();
    }
  });
});
