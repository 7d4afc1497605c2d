import { describe, expect, it } from "vitest";
import { PagedKvCache, type KvType } from "../kv/paged-kv.js";
import { GdnStatePool } from "../kv/state-pool.js";
import { seededRandom, syntheticWeights, TINY_SPEC } from "../testing/synthetic-model.js";
import { Qwen35Forward, type StepEntry } from "./forward.js";
import { quantDequantizeRow, selectProviders, typescriptProviders } from "./providers.js";

const tiedWeights = await syntheticWeights(TINY_SPEC, { seed: 7 });
const untiedWeights = await syntheticWeights(TINY_SPEC, { seed: 7, tied: false });

function setup(kvType: KvType, tied = true) {
  const weights = tied ? tiedWeights : untiedWeights;
  const kv = PagedKvCache.forModel(weights.config, 64, 4, kvType);
  const states = GdnStatePool.forModel(weights.config, 4);
  const selection = selectProviders(weights, typescriptProviders("llama", []), "llama");
  const forward = new Qwen35Forward(weights, kv, states, selection.byWeight, "llama", quantDequantizeRow, 64);
  const vocab = weights.vocab;
  const newSequence = (length: number) => {
    const blockTable: number[] = [];
    for (let i = 0; i < kv.blocksFor(length); i++) blockTable.push(kv.pool.allocate());
    return { blockTable, stateSlot: states.allocate() };
  };
  const release = (s: { blockTable: number[]; stateSlot: number }) => {
    for (const b of s.blockTable) kv.pool.release(b);
    states.release(s.stateSlot);
  };
  return { forward, kv, states, vocab, newSequence, release };
}

function randomTokens(seed: number, n: number): number[] {
  const random = seededRandom(seed);
  return Array.from({ length: n }, () => Math.floor(random() * TINY_SPEC.vocab));
}

function maxAbsDiff(a: Float32Array, b: Float32Array): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]! - b[i]!));
  return m;
}

describe.each<KvType>(["f32", "f16"])("batched forward (kv %s)", (kvType) => {
  it("matches one-sequence-at-a-time logits within 1e-4 (mixed prefill chunks and decodes)", () => {
    const { forward, vocab, newSequence, release, kv, states } = setup(kvType);
    const lengths = [7, 12, 5, 9];
    const prompts = lengths.map((n, i) => randomTokens(100 + i, n));
    // one at a time: whole sequence as one prefill, logits at every position
    const single: Float32Array[][] = prompts.map((tokens) => {
      const s = newSequence(tokens.length);
      const logits = forward.forward([{ tokens, startPos: 0, ...s, logits: "all" }]);
      release(s);
      return tokens.map((_, p) => logits.slice(p * vocab, (p + 1) * vocab));
    });
    // batched: every step gives each unfinished sequence a chunk of 1..4 tokens
    const seqs = prompts.map((tokens) => ({ tokens, done: 0, ...newSequence(tokens.length) }));
    const batched: Float32Array[][] = prompts.map(() => []);
    const random = seededRandom(5);
    while (seqs.some((s) => s.done < s.tokens.length)) {
      const entries: StepEntry[] = [];
      const owners: number[] = [];
      seqs.forEach((s, i) => {
        if (s.done >= s.tokens.length) return;
        const n = Math.min(s.tokens.length - s.done, 1 + Math.floor(random() * 4));
        entries.push({ tokens: s.tokens.slice(s.done, s.done + n), startPos: s.done, blockTable: s.blockTable, stateSlot: s.stateSlot, logits: "all" });
        owners.push(i);
      });
      const logits = forward.forward(entries);
      let row = 0;
      entries.forEach((e, k) => {
        const s = seqs[owners[k]!]!;
        for (let i = 0; i < e.tokens.length; i++, row++) batched[owners[k]!]!.push(logits.slice(row * vocab, (row + 1) * vocab));
        s.done += e.tokens.length;
      });
    }
    seqs.forEach(release);
    let worst = 0;
    prompts.forEach((tokens, i) => {
      for (let p = 0; p < tokens.length; p++) worst = Math.max(worst, maxAbsDiff(single[i]![p]!, batched[i]![p]!));
    });
    expect(worst).toBeLessThan(1e-4);
    // logits are not degenerate
    const spread = Math.max(...single[0]![0]!) - Math.min(...single[0]![0]!);
    expect(spread).toBeGreaterThan(1);
    expect(kv.pool.freeCount).toBe(kv.numBlocks);
    expect(states.pool.freeCount).toBe(states.numSlots);
  });

  it("token-by-token decode matches prefill within 1e-4", () => {
    const { forward, vocab, newSequence, release } = setup(kvType, false);
    const tokens = randomTokens(9, 10);
    const a = newSequence(tokens.length);
    const prefill = forward.forward([{ tokens, startPos: 0, ...a, logits: "all" }]).slice();
    release(a);
    const b = newSequence(tokens.length);
    let worst = 0;
    for (let p = 0; p < tokens.length; p++) {
      const logits = forward.forward([{ tokens: [tokens[p]!], startPos: p, ...b, logits: "last" }]);
      worst = Math.max(worst, maxAbsDiff(logits, prefill.subarray(p * vocab, (p + 1) * vocab)));
    }
    release(b);
    expect(worst).toBeLessThan(1e-4);
  });
});

describe("GDN state", () => {
  it("a sequence's state does not leak into another slot", () => {
    const { forward, vocab, newSequence, release } = setup("f32");
    const tokens = randomTokens(11, 6);
    const a = newSequence(6);
    const first = forward.forward([{ tokens, startPos: 0, ...a, logits: "last" }]).slice();
    // another sequence runs meanwhile in a different slot
    const b = newSequence(6);
    forward.forward([{ tokens: randomTokens(12, 6), startPos: 0, ...b, logits: "none" }]);
    release(a);
    const c = newSequence(6);
    const again = forward.forward([{ tokens, startPos: 0, ...c, logits: "last" }]);
    expect(maxAbsDiff(first, again)).toBe(0);
    expect(again.length).toBe(vocab);
    release(b);
    release(c);
  });
});
