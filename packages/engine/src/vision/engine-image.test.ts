import { describe, expect, it } from "vitest";
import { Engine } from "../engine.js";
import { seededRandom, syntheticWeights, TINY_SPEC } from "../testing/synthetic-model.js";
import type { EncodedImage } from "./media.js";

const weights = await syntheticWeights(TINY_SPEC, { seed: 3 });
const D = weights.config.embeddingLength;
const OPTIONS = { provider: "ts" as const, kvType: "f32" as const, flashAttention: false, blockSize: 4 };

function image(seed: number, gridWidth: number, gridHeight: number, hash: string): EncodedImage {
  const random = seededRandom(seed);
  const tokens = gridWidth * gridHeight;
  return { embeddings: Float32Array.from({ length: tokens * D }, () => (random() - 0.5) * 0.2), tokens, gridWidth, gridHeight, hash };
}

describe("Engine: prompts with images (embedding rows and M-RoPE)", () => {
  it("an image changes what follows it, and the same image gives the same tokens", async () => {
    const engine = await Engine.fromWeights(weights, OPTIONS);
    try {
      const a = image(1, 3, 2, "a".repeat(64));
      const b = image(2, 3, 2, "b".repeat(64));
      const withA = await engine.generateToEnd({ pieces: [[5, 6, 7], a, [8, 9]] }, { maxTokens: 8 });
      const withB = await engine.generateToEnd({ pieces: [[5, 6, 7], b, [8, 9]] }, { maxTokens: 8 });
      const againA = await engine.generateToEnd({ pieces: [[5, 6, 7], a, [8, 9]] }, { maxTokens: 8 });
      expect(withA.tokens).toHaveLength(8);
      expect(againA.tokens).toEqual(withA.tokens);
      expect(withB.tokens).not.toEqual(withA.tokens);
      expect(withA.stats.promptTokens).toBe(3 + 6 + 2);
    } finally {
      await engine.dispose();
    }
  });

  it("chunked prefill splits an image across steps and gives the tokens of one whole step", async () => {
    const whole = await Engine.fromWeights(weights, OPTIONS);
    const chunked = await Engine.fromWeights(weights, { ...OPTIONS, maxBatchTokens: 4 });
    try {
      const prompt = { pieces: [[5, 6, 7], image(3, 4, 3, "c".repeat(64)), [8, 9, 10]] };
      const expected = await whole.generateToEnd(prompt, { maxTokens: 6 });
      expect((await chunked.generateToEnd(prompt, { maxTokens: 6 })).tokens).toEqual(expected.tokens);
    } finally {
      await whole.dispose();
      await chunked.dispose();
    }
  });

  it("the prefix cache serves an image prefix only for the same image bytes", async () => {
    const engine = await Engine.fromWeights(weights, { ...OPTIONS, prefixCacheSnapshots: 2 });
    const plain = await Engine.fromWeights(weights, OPTIONS);
    try {
      const a = image(4, 4, 4, "d".repeat(64));
      const other = { ...a, hash: "e".repeat(64) };
      const first = await engine.generateToEnd({ pieces: [[5, 6], a, [7, 8]] }, { maxTokens: 4 });
      const second = await engine.generateToEnd({ pieces: [[5, 6], a, [9]] }, { maxTokens: 4 });
      const third = await engine.generateToEnd({ pieces: [[5, 6], other, [9]] }, { maxTokens: 4 });
      expect(first.stats.cachedPromptTokens).toBe(0);
      expect(second.stats.cachedPromptTokens).toBe(16);
      expect(third.stats.cachedPromptTokens).toBe(0);
      expect(second.tokens).toEqual((await plain.generateToEnd({ pieces: [[5, 6], a, [9]] }, { maxTokens: 4 })).tokens);
    } finally {
      await engine.dispose();
      await plain.dispose();
    }
  });

  it("refuses embeddings of the wrong width and token ids out of range, naming the field", async () => {
    const engine = await Engine.fromWeights(weights, OPTIONS);
    try {
      const bad = { ...image(5, 2, 2, "f".repeat(64)), embeddings: new Float32Array(3) };
      expect(() => engine.generate({ pieces: [[1], bad] })).toThrow(/prompt image: image embeddings: expected 4 x/);
      expect(() => engine.generate({ pieces: [[1, -4], image(5, 2, 2, "f".repeat(64))] })).toThrow(/prompt.pieces\[0\]\[1\] = -4/);
    } finally {
      await engine.dispose();
    }
  });
});
