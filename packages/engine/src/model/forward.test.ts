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
        entries.push({
          tokens: s.tokens.slice(s.done, s.done + n),
          startPos: s.done,
          blockTable: s.blockTable,
          stateSlot: s.stateSlot,
          logits: "all",
        });
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

describe("debug taps", () => {
  it("observe named scratch after each op under llama.cpp's names, and never change a bit of the result", () => {
    const { forward, newSequence, release } = setup("f32");
    const c = forward.config;
    const tokens = randomTokens(21, 7);
    const plain = newSequence(tokens.length);
    const expected = forward.forward([{ tokens, startPos: 0, ...plain, logits: "last" }]).slice();
    release(plain);

    const seen = new Map<string, { data: Float32Array; rows: number; width: number }>();
    forward.tap = (name, data, rows, width) => {
      expect(data.length, name).toBe(rows * width);
      seen.set(name, { data: data.slice(), rows, width });
    };
    const tapped = newSequence(tokens.length);
    const logits = forward.forward([{ tokens, startPos: 0, ...tapped, logits: "last" }]);
    release(tapped);
    forward.tap = undefined;
    expect(new Uint32Array(logits.slice().buffer)).toEqual(new Uint32Array(expected.buffer));

    const gdnNames = [
      "linear_attn_qkv_mixed",
      "conv_output_raw",
      "conv_output_silu",
      "q_conv_predelta",
      "k_conv_predelta",
      "beta_sigmoid",
      "alpha",
      "a_softplus",
      "gate",
      "attn_output",
      "final_output",
    ];
    const T = tokens.length;
    c.layerKinds.forEach((kind, il) => {
      for (const name of ["attn_norm", "mixer_out", "l_out"]) expect(seen.has(`${name}-${il}`), `${name}-${il}`).toBe(true);
      expect(seen.get(`attn_norm-${il}`)).toMatchObject({ rows: T, width: c.embeddingLength });
      // after the last mixer only the output rows go on
      expect(seen.get(`l_out-${il}`)!.rows).toBe(il === c.nLayer - 1 ? 1 : T);
      for (const name of gdnNames) expect(seen.has(`${name}-${il}`), `${name}-${il}`).toBe(kind === "gdn");
    });
    const il = c.layerKinds.indexOf("gdn");
    const get = (name: string) => seen.get(`${name}-${il}`)!;
    const Hv = c.ssmTimeStepRank;
    expect(get("conv_output_raw")).toMatchObject({ rows: T, width: c.convDim });
    expect(get("q_conv_predelta")).toMatchObject({ rows: T, width: c.keyDim });
    expect(get("gate")).toMatchObject({ rows: T, width: Hv });
    // each view holds its op's result: q/k are the L2-normed leading columns of the conv output,
    // the gate chain is softplus(alpha + dt_bias) * a, beta is a sigmoid, the gated norm changes the delta output
    const silu = get("conv_output_silu").data;
    const q = get("q_conv_predelta").data;
    const k = get("k_conv_predelta").data;
    for (let r = 0; r < T; r++) {
      const norm = (v: Float32Array, at: number) => Math.hypot(...v.subarray(at, at + c.ssmStateSize));
      expect(norm(q, r * c.keyDim)).toBeCloseTo(1, 5);
      expect(norm(k, r * c.keyDim + c.ssmStateSize)).toBeCloseTo(1, 5);
      const rawQ = silu.subarray(r * c.convDim, r * c.convDim + c.ssmStateSize);
      const scale = q[r * c.keyDim]! / rawQ[0]!;
      for (let i = 0; i < c.ssmStateSize; i++) expect(q[r * c.keyDim + i]).toBeCloseTo(rawQ[i]! * scale, 6);
    }
    const layer = forward.weights.layers[il]!;
    if (layer.kind !== "gdn") throw new Error("expected a GDN layer");
    const [alpha, softplus, gate, beta] = ["alpha", "a_softplus", "gate", "beta_sigmoid"].map((name) => get(name).data);
    for (let i = 0; i < T * Hv; i++) {
      // alpha is ssm_alpha's projection (llama.cpp's "alpha"); the softplus input adds dt_bias
      expect(softplus![i]).toBeCloseTo(Math.log1p(Math.exp(alpha![i]! + layer.dtBias[i % Hv]!)), 5);
      expect(gate![i]).toBe(Math.fround(softplus![i]! * layer.a[i % Hv]!));
      expect(beta![i]).toBeGreaterThan(0);
      expect(beta![i]).toBeLessThan(1);
    }
    expect(get("final_output").data).not.toEqual(get("attn_output").data);
  });
});
