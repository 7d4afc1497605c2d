import { describe, expect, it } from "vitest";
import { Engine } from "./engine.js";
import { seededRandom, syntheticWeights, TINY_SPEC } from "./testing/synthetic-model.js";

const weights = await syntheticWeights(TINY_SPEC, { seed: 3 });

/** The TypeScript forward with F32 K/V and flash attention off, in blocks of 4: the runs these tests compare. */
const TS_F32_KV = { provider: "ts" as const, kvType: "f32" as const, flashAttention: false, blockSize: 4 };

/** Two engines on the tiny weights with TS_F32_KV: one without a prefix cache, one with `prefixCacheSnapshots`. */
async function plainAndCached(prefixCacheSnapshots: number): Promise<{ plain: Engine; cached: Engine }> {
  return {
    plain: await Engine.fromWeights(weights, TS_F32_KV),
    cached: await Engine.fromWeights(weights, { ...TS_F32_KV, prefixCacheSnapshots }),
  };
}

function randomPrompt(random: () => number, length: number): number[] {
  return Array.from({ length }, () => Math.floor(random() * TINY_SPEC.vocab));
}

describe("Engine scheduling", () => {
  it("returns every KV block and state slot after many random sequences, some aborted", async () => {
    // a small pool forces waiting, chunked prefill and preemption by recompute
    const engine = await Engine.fromWeights(weights, {
      provider: "ts",
      kvType: "f32",
      flashAttention: false,
      blockSize: 4,
      kvCacheTokens: 96,
      maxSequences: 3,
      maxBatchTokens: 24,
    });
    const random = seededRandom(2024);
    const runs: Promise<unknown>[] = [];
    let aborts = 0;
    for (let i = 0; i < 24; i++) {
      const prompt = randomPrompt(random, 1 + Math.floor(random() * 40));
      const maxTokens = 1 + Math.floor(random() * 12);
      const controller = new AbortController();
      const abortAfter = random() < 0.3 ? Math.floor(random() * maxTokens) : -1;
      if (abortAfter >= 0) aborts++;
      const stream = engine.generate(prompt, { maxTokens, signal: controller.signal });
      runs.push(
        (async () => {
          let seen = 0;
          for await (const event of stream) {
            if (event.type === "token" && ++seen > abortAfter && abortAfter >= 0) controller.abort();
            if (event.type === "done") return event.result;
          }
          return undefined;
        })(),
      );
      if (i % 5 === 4 && abortAfter < 0) controller.abort(); // abort while still waiting
    }
    const results = (await Promise.all(runs)) as { stopReason: string; tokens: number[] }[];
    expect(results.every((r) => r !== undefined)).toBe(true);
    expect(results.some((r) => r.stopReason === "abort")).toBe(aborts > 0);
    expect(results.some((r) => r.stopReason === "max_tokens")).toBe(true);
    const stats = engine.stats();
    expect(stats.kv.blocksFree).toBe(stats.kv.blocksTotal);
    expect(stats.states.slotsFree).toBe(stats.states.slotsTotal);
    expect(stats.requests).toEqual({ running: 0, waiting: 0 });
    expect(stats.counters.preemptions).toBeGreaterThan(0);
    engine.dispose();
  });

  it("concurrent greedy generations equal one-at-a-time generations (with preemption)", async () => {
    const options = TS_F32_KV;
    const single = await Engine.fromWeights(weights, { ...options, maxSequences: 1 });
    const batched = await Engine.fromWeights(weights, { ...options, kvCacheTokens: 40, maxSequences: 3, maxBatchTokens: 16 });
    const random = seededRandom(77);
    const prompts = Array.from({ length: 6 }, () => randomPrompt(random, 3 + Math.floor(random() * 20)));
    const expected: number[][] = [];
    for (const prompt of prompts) expected.push((await single.generateToEnd(prompt, { maxTokens: 10 })).tokens);
    const got = await Promise.all(prompts.map((p) => batched.generateToEnd(p, { maxTokens: 10 })));
    expect(got.map((r) => r.tokens)).toEqual(expected);
    expect(batched.stats().counters.preemptions).toBeGreaterThan(0);
    expect(batched.stats().kv.blocksFree).toBe(batched.stats().kv.blocksTotal);
  });

  it("prefix cache: a shared prompt prefix is served from the cache with the same tokens", async () => {
    const { plain, cached } = await plainAndCached(2);
    const random = seededRandom(314);
    const prefix = randomPrompt(random, 21);
    const prompts = [[...prefix, 1, 2, 3], [...prefix, 7, 8], [...prefix, 9], randomPrompt(random, 9)];
    for (const [i, prompt] of prompts.entries()) {
      const expected = await plain.generateToEnd(prompt, { maxTokens: 8 });
      const got = await cached.generateToEnd(prompt, { maxTokens: 8 });
      expect(got.tokens).toEqual(expected.tokens);
      // the first and the unrelated prompt compute everything; the others reuse 20 tokens
      expect(got.stats.cachedPromptTokens).toBe(i === 1 || i === 2 ? 20 : 0);
    }
    const stats = cached.stats();
    expect(stats.prefixCache).toMatchObject({ lookups: 4, hits: 2, hitTokens: 40 });
    expect(stats.kv.blocksFree).toBeLessThan(stats.kv.blocksTotal); // the cache holds blocks
    cached.clearPrefixCache();
    expect(cached.stats().kv.blocksFree).toBe(stats.kv.blocksTotal);
    expect(cached.stats().states.slotsFree).toBe(stats.states.slotsTotal);
  });

  it("prefix cache points: a shared head (a system prompt) is cached for prompts that differ after it", async () => {
    const { plain, cached } = await plainAndCached(4);
    const random = seededRandom(4242);
    const head = randomPrompt(random, 22);
    const prompts = [
      [...head, ...randomPrompt(random, 9)],
      [...head, ...randomPrompt(random, 5)],
      [...head, ...randomPrompt(random, 13)],
    ];
    for (const [i, prompt] of prompts.entries()) {
      const expected = await plain.generateToEnd(prompt, { maxTokens: 6 });
      const before = cached.stats().counters.prefillTokens;
      const got = await cached.generateToEnd(prompt, { maxTokens: 6, prefixCachePoints: [head.length] });
      expect(got.tokens).toEqual(expected.tokens);
      // the head's full blocks (20 of its 22 tokens) come from the cache after the first request
      expect(got.stats.cachedPromptTokens).toBe(i === 0 ? 0 : 20);
      expect(cached.stats().counters.prefillTokens - before).toBe(prompt.length - got.stats.cachedPromptTokens);
    }
    expect(() => cached.generate([1, 2, 3], { prefixCachePoints: [-1] })).toThrow(/prefixCachePoints/);
    cached.clearPrefixCache();
    expect(cached.stats().kv.blocksFree).toBe(cached.stats().kv.blocksTotal);
  });

  it("prefix cache under pressure: evictions and preemptions still return every block", async () => {
    const engine = await Engine.fromWeights(weights, {
      provider: "ts",
      blockSize: 4,
      kvCacheTokens: 96,
      maxSequences: 3,
      maxBatchTokens: 24,
      prefixCacheSnapshots: 3,
    });
    const random = seededRandom(99);
    const prefixes = [randomPrompt(random, 12), randomPrompt(random, 17)];
    const runs = Array.from({ length: 16 }, () => {
      const prompt = [...prefixes[Math.floor(random() * 2)]!, ...randomPrompt(random, 1 + Math.floor(random() * 10))];
      return engine.generateToEnd(prompt, { maxTokens: 1 + Math.floor(random() * 10) });
    });
    const results = await Promise.all(runs);
    expect(results.some((r) => r.stats.cachedPromptTokens > 0)).toBe(true);
    engine.clearPrefixCache();
    const stats = engine.stats();
    expect(stats.kv.blocksFree).toBe(stats.kv.blocksTotal);
    expect(stats.states.slotsFree).toBe(stats.states.slotsTotal);
  });

  it("evaluate returns teacher-forced logits whose argmax is the greedy token", async () => {
    const engine = await Engine.fromWeights(weights, { provider: "ts" });
    const prompt = [5, 9, 13, 2];
    const result = await engine.generateToEnd(prompt, { maxTokens: 4 });
    const logits = await engine.evaluate([...prompt, ...result.tokens.slice(0, 3)], { positions: [3, 4, 5, 6] });
    const argmaxes = logits.map((row) => row.indexOf(Math.max(...row)));
    expect(argmaxes).toEqual(result.tokens);
    expect(engine.stats().kv.blocksFree).toBe(engine.stats().kv.blocksTotal);
  });

  it("refuses bad requests with typed errors", async () => {
    const engine = await Engine.fromWeights(weights, { provider: "ts" });
    expect(() => engine.generate([TINY_SPEC.vocab], {})).toThrow(/not a token id/);
    expect(() => engine.generate([], {})).toThrow(/empty/);
    expect(() => engine.generate("text", {})).toThrow(expect.objectContaining({ code: "ENGINE_NO_TOKENIZER" }));
    await expect(Engine.fromWeights(weights, { blockSize: 0 })).rejects.toMatchObject({ code: "ENGINE_BAD_OPTION" });
    engine.dispose();
    expect(() => engine.generate([1], {})).toThrow(expect.objectContaining({ code: "ENGINE_DISPOSED" }));
  });

  it("reports providers, resident bytes and the native fallback once", async () => {
    const engine = await Engine.fromWeights(weights, {});
    const stats = engine.stats();
    expect(stats.providers["matmul:F32"]).toBeDefined();
    // the native step when the addon loads (it computes every op), else the TypeScript forward
    if (stats.providers.step!.startsWith("native-step-")) {
      expect(stats.providers.embedding).toBe(`${stats.providers.step}-exact-row-decode`);
      expect(stats.providers.greedy).toBe(`${stats.providers.step}-argmax`);
    } else expect(stats.providers.embedding).toBe("ts-exact-row-decode");
    expect(stats.residentBytes.twin).toBe(0);
    expect(stats.residentBytes.packed).toBeGreaterThan(0);
    expect(stats.residentBytes.f32).toBeGreaterThan(0);
    if (stats.providers["matmul:F32"]!.startsWith("ts-")) {
      expect(stats.diagnostics.filter((d) => d.includes("native CPU provider unavailable")).length).toBe(1);
    }
    const ts = await Engine.fromWeights(weights, { provider: "ts" });
    expect(ts.stats().providers.step).toBe("ts-forward");
    expect(ts.stats().providers.greedy).toBe("ts-scan");
    expect(ts.stats().providers.embedding).toBe("ts-exact-row-decode");
    ts.dispose();
    engine.dispose();
  });
});
