import { buildLoadPlan, PROJECTOR_TINY_SHAPE, QWEN3_TEST_SHAPE, readGguf, synthesizeProjector, synthesizeQwen3 } from "@keepquant/gguf";
import sharp from "sharp";
import { describe, expect, it } from "vitest";
import { Engine } from "../engine.js";
import { loadQwen35Weights, readTensorSource } from "../model/load.js";
import { syntheticWeights, TINY_SPEC } from "../testing/synthetic-model.js";

const weights = await syntheticWeights(TINY_SPEC, { seed: 3 });
const D = weights.config.embeddingLength;
const projector = (projectionDim: number) => synthesizeProjector({ ...PROJECTOR_TINY_SHAPE, projectionDim, seed: 9 }).bytes;

async function png(width: number, height: number, shift = 0): Promise<Uint8Array> {
  const data = Buffer.alloc(width * height * 3);
  for (let i = 0; i < data.length; i++) data[i] = (i * 7 + shift) & 255;
  return new Uint8Array(
    await sharp(data, { raw: { width, height, channels: 3 } })
      .png()
      .toBuffer(),
  );
}

describe("Engine: a vision projector", () => {
  it.each(["ts", "auto"] as const)(
    "provider %s: loads, encodes an image into model-width rows, and the image steers the output",
    async (provider) => {
      const engine = await Engine.fromWeights(weights, { provider, kvType: "f32", flashAttention: false });
      try {
        expect(engine.projector).toBeUndefined();
        await expect(engine.encodeImage(await png(64, 64))).rejects.toThrow(/takes no images: load a vision projector/);
        await engine.loadProjector(projector(D));
        expect(engine.projector?.projectionDim).toBe(D);
        const a = await engine.encodeImage(await png(128, 96));
        // 128x96 at patch 16, merge 2: 4 x 3 merged tokens (no resize: within 8..4096 tokens, aligned to 32)
        expect([a.tokens, a.gridWidth, a.gridHeight, a.embeddings.length]).toEqual([12, 4, 3, 12 * D]);
        expect(a.hash).toMatch(/^[0-9a-f]{64}$/);
        const b = await engine.encodeImage(await png(128, 96, 100));
        const out = async (image: typeof a) =>
          (await engine.generateToEnd({ pieces: [[1, 2], image, [3]] }, { maxTokens: 6, temperature: 0, ignoreEog: true })).tokens;
        expect(await out(a)).toEqual(await out(a));
        expect(await out(b)).not.toEqual(await out(a));
      } finally {
        engine.dispose();
      }
    },
  );

  it("refuses a projector whose output width is not the model's, naming both numbers", async () => {
    const engine = await Engine.fromWeights(weights, { provider: "ts" });
    try {
      await expect(engine.loadProjector(projector(D + 32))).rejects.toThrow(new RegExp(`${D + 32}[\\s\\S]*${D}|${D}[\\s\\S]*${D + 32}`));
      expect(engine.projector).toBeUndefined();
    } finally {
      engine.dispose();
    }
  });

  it("a text-only architecture (qwen3) refuses any projector", async () => {
    const bytes = synthesizeQwen3({ ...QWEN3_TEST_SHAPE, seed: 1 });
    const { weights: qwen3 } = await loadQwen35Weights(buildLoadPlan(await readGguf(bytes)), readTensorSource(bytes), "llama");
    const engine = await Engine.fromWeights(qwen3, { provider: "ts" });
    try {
      await expect(engine.loadProjector(projector(qwen3.config.embeddingLength))).rejects.toThrow(/qwen3 model takes no images/);
    } finally {
      engine.dispose();
    }
  });

  it("a bad image is an ImageError naming the reason; the engine keeps working", async () => {
    const engine = await Engine.fromWeights(weights, { provider: "ts" });
    try {
      await engine.loadProjector(projector(D));
      const good = await png(64, 64);
      await expect(engine.encodeImage(good.subarray(0, good.length - 40))).rejects.toMatchObject({ code: "ENGINE_BAD_IMAGE" });
      await expect(engine.encodeImage(new Uint8Array([1, 2, 3, 4]))).rejects.toMatchObject({ code: "ENGINE_BAD_IMAGE" });
      // 64x64 is under the 8-token floor: upscaled to 96x96, 3 x 3 tokens
      expect((await engine.encodeImage(good)).tokens).toBe(9);
    } finally {
      engine.dispose();
    }
  });
});
