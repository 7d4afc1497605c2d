import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { QWEN35_TEST_SHAPE, readGguf, readGgufModel, readTensorBytes, shardPath, splitGgufBytes, synthesizeQwen35 } from "@keepquant/gguf";
import { afterAll, describe, expect, it } from "vitest";
import { Engine } from "./engine.js";
import { loadTtNative } from "./model/native-module.js";
import { openWeightSource } from "./model/weight-source.js";
import { checkCpuLoad } from "./planner/index.js";

const WHOLE = synthesizeQwen35({ ...QWEN35_TEST_SHAPE, seed: 23 });
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "keepquant-engine-split-"));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

const wholePath = path.join(dir, "whole.gguf");
fs.writeFileSync(wholePath, WHOLE);
const shards = (await splitGgufBytes(WHOLE, 3)).map((bytes, i) => {
  const file = shardPath(path.join(dir, "model"), i, 3);
  fs.writeFileSync(file, bytes);
  return file;
});

async function logits(model: string, options: Parameters<typeof Engine.load>[1] = {}): Promise<{ rows: Float32Array[]; memory: string }> {
  const engine = await Engine.load(model, options);
  try {
    return { rows: await engine.evaluate([1, 2, 3, 4]), memory: engine.stats().weightMemory };
  } finally {
    engine.dispose();
  }
}

describe("a split GGUF model", () => {
  it("loads from its first shard and computes what the whole file computes, bit for bit", async () => {
    const whole = await logits(wholePath);
    const split = await logits(shards[0]!);
    expect(split.rows.length).toBe(whole.rows.length);
    split.rows.forEach((row, i) => expect(Buffer.from(row.buffer).equals(Buffer.from(whole.rows[i]!.buffer))).toBe(true));
    expect(split.memory).toBe(whole.memory);
  });

  it("loads from any shard, and with the TypeScript provider", async () => {
    const whole = await logits(wholePath, { provider: "ts" });
    const split = await logits(shards[1]!, { provider: "ts" });
    split.rows.forEach((row, i) => expect(Buffer.from(row.buffer).equals(Buffer.from(whole.rows[i]!.buffer))).toBe(true));
  });

  it("reads every tensor from its own shard, mapped or read", async () => {
    const model = await readGgufModel(shards[0]!);
    const whole = await readGguf(WHOLE);
    const { native } = await loadTtNative();
    for (const placement of native ? [undefined, native] : [undefined]) {
      const source = openWeightSource(model, shards[0]!, placement, "mapped", []);
      expect(source.weightMemory).toBe(placement ? "mapped" : "read");
      for (const [i, tensor] of model.tensors.entries()) {
        const bytes = await source.bytes(tensor);
        expect(Buffer.from(bytes).equals(Buffer.from(await readTensorBytes(WHOLE, whole.tensors[i]!))), tensor.name).toBe(true);
      }
    }
  });

  it("plans every shard's tensors", async () => {
    const memory = { memory: { bytes: 64 * 2 ** 30, source: "test" } };
    const whole = await checkCpuLoad(wholePath, {}, memory);
    const split = await checkCpuLoad(shards[2]!, {}, memory);
    expect(split.plan.totalBytes).toBe(whole.plan.totalBytes);
    expect(split.plan.model).toEqual(whole.plan.model);
  });

  it("names a missing shard", async () => {
    const missing = path.join(dir, "gone");
    const files = (await splitGgufBytes(WHOLE, 2)).map((bytes, i) => {
      const file = shardPath(missing, i, 2);
      fs.writeFileSync(file, bytes);
      return file;
    });
    fs.rmSync(files[1]!);
    const error = await Engine.load(files[0]!).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: "GGUF_BAD_SPLIT" });
    expect((error as Error).message).toContain(files[1]!);
  });
});
