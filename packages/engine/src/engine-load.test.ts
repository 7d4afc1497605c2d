import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { GgmlType, QWEN35_TEST_SHAPE, readGguf, readTensorBytes, synthesizeQwen35, writeGguf } from "@keepquant/gguf";
import { afterAll, describe, expect, it } from "vitest";
import { Engine } from "./engine.js";
import { syntheticWeights, TINY_SPEC } from "./testing/synthetic-model.js";
import type { PackedMatrix } from "./model/weights.js";

const folder = mkdtempSync(path.join(tmpdir(), "keepquant-engine-load-"));
afterAll(() => rmSync(folder, { recursive: true, force: true }));

describe("load refusals", () => {
  it("a file the load plan refuses fails with ENGINE_LOAD_REFUSED before reading weights", async () => {
    const bytes = synthesizeQwen35(QWEN35_TEST_SHAPE);
    const file = await readGguf(bytes);
    const tensors = [];
    for (const t of file.tensors) {
      if (t.name === "blk.0.ssm_a") continue; // a required GDN tensor goes missing
      tensors.push({ name: t.name, type: t.type, ne: t.ne, data: await readTensorBytes(bytes, t) });
    }
    const broken = path.join(folder, "missing-ssm-a.gguf");
    writeFileSync(broken, writeGguf({ metadata: [...file.metadata.values()], tensors }));
    const error = await Engine.load(broken).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: "ENGINE_LOAD_REFUSED", field: "blk.0.ssm_a" });
    expect(String((error as Error).message)).toContain("blk.0.ssm_a");
  });

  it("a weight type no provider computes is refused by name at load", async () => {
    const weights = await syntheticWeights(TINY_SPEC, { seed: 5 });
    const layer = weights.layers[0]!;
    const ffnUp = layer.ffnUp;
    // pretend ffn_up is IQ2_XXS (66-byte blocks of 256): no llama-numerics kernel in the TS tier
    const fake: PackedMatrix = {
      ...ffnUp,
      type: GgmlType.IQ2_XXS,
      typeName: "IQ2_XXS",
      cols: 256,
      rowBytes: 66,
      data: new Uint8Array(ffnUp.rows * 66),
    };
    (layer as { ffnUp: PackedMatrix }).ffnUp = fake;
    const error = await Engine.fromWeights(weights, { provider: "ts" }).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: "ENGINE_UNSUPPORTED_TYPE", field: "blk.0.ffn_up.weight" });
    expect(String((error as Error).message)).toMatch(/IQ2_XXS/);
  });

  it('numerics "exact" (diagnostic reference) runs every matmul on the TypeScript exact provider, even with provider auto', async () => {
    const weights = await syntheticWeights(TINY_SPEC, { seed: 7 });
    const engine = await Engine.fromWeights(weights, { numerics: "exact" });
    try {
      const stats = engine.stats();
      expect(stats.numerics).toBe("exact");
      const matmuls = Object.entries(stats.providers).filter(([op]) => op.startsWith("matmul:"));
      expect(matmuls.length).toBeGreaterThan(0);
      for (const [, name] of matmuls) expect(name).toBe("ts-reference-exact");
      expect(stats.providers.embedding).toBe("ts-exact-row-decode");
      const logits = await engine.evaluate([1, 2, 3]);
      expect(logits).toHaveLength(3);
      expect(logits.every((l) => l.every(Number.isFinite))).toBe(true);
    } finally {
      engine.dispose();
    }
    const error = await Engine.fromWeights(weights, { numerics: "f64" as never }).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: "ENGINE_BAD_OPTION", field: "numerics" });
  });
});

describe("qwen35moe", () => {
  it("loads through the plan (layers carry the MoE FFN, experts stacked) and generates", async () => {
    const bytes = synthesizeQwen35({ ...QWEN35_TEST_SHAPE, moe: { experts: 4, used: 2, ffnExp: 256, ffnShared: 256 }, seed: 3 });
    const file = path.join(folder, "moe.gguf");
    writeFileSync(file, bytes);
    const engine = await Engine.load(file);
    try {
      // the native step computes the MoE FFN; without the addon the TypeScript forward does, and says why
      const stats = engine.stats();
      if (stats.providers.step === "ts-forward") expect(stats.diagnostics.some((d) => /native step unavailable/.test(d))).toBe(true);
      else expect(stats.providers.step).toMatch(/^native-step-/);
      const weights = engine.weights;
      expect(weights.layers.every((l) => l.moe !== undefined)).toBe(true);
      expect(weights.layers[0]!.moe!.downExps).toMatchObject({ groups: 4, rows: 256, cols: 256 });
      const result = await engine.generateToEnd([1, 2, 3], { maxTokens: 4, stopAtEog: false });
      expect(result.tokens).toHaveLength(4);
      for (const t of result.tokens) expect(t).toBeLessThan(weights.vocab);
    } finally {
      engine.dispose();
    }
  });
});

describe("weightMemory (where Engine.load keeps the weights)", () => {
  const bytes = synthesizeQwen35({ ...QWEN35_TEST_SHAPE, seed: 11 });
  const file = path.join(folder, "weight-memory.gguf");
  writeFileSync(file, bytes);

  it("huge-pages (read into private memory) and mapped give the same tokens, and stats say which", async () => {
    const generate = async (weightMemory: "huge-pages" | "mapped") => {
      const engine = await Engine.load(file, { weightMemory });
      try {
        const stats = engine.stats();
        const result = await engine.generateToEnd([5, 9, 2, 7], { maxTokens: 6, stopAtEog: false });
        return { memory: stats.weightMemory, native: stats.providers.step !== "ts-forward", tokens: result.tokens };
      } finally {
        engine.dispose();
      }
    };
    const read = await generate("huge-pages");
    const mapped = await generate("mapped");
    if (read.native) {
      // the kernel may refuse the huge-page advice (transparent huge pages off): the copy is then "anonymous"
      expect(["huge-pages", "anonymous"]).toContain(read.memory);
      expect(mapped.memory).toBe("mapped");
    } else {
      // without the addon the tensors are read by the TypeScript loader whatever the option
      expect(read.memory).toBe("read");
      expect(mapped.memory).toBe("read");
    }
    expect(read.tokens).toHaveLength(6);
    expect(read.tokens).toEqual(mapped.tokens);
  });

  it("an engine over weights already in memory says so", async () => {
    const engine = await Engine.fromWeights(await syntheticWeights(TINY_SPEC, { seed: 5 }));
    try {
      expect(engine.stats().weightMemory).toBe("in-memory");
    } finally {
      engine.dispose();
    }
  });

  it("a bad value is a typed option error naming the field", async () => {
    const error = await Engine.load(file, { weightMemory: "swap" as never }).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: "ENGINE_BAD_OPTION", field: "weightMemory" });
  });

  it("a bad KEEPQUANT_WEIGHT_MEMORY names the variable; an option passed in code wins over it", async () => {
    const saved = process.env.KEEPQUANT_WEIGHT_MEMORY;
    process.env.KEEPQUANT_WEIGHT_MEMORY = "swap";
    try {
      const error = await Engine.load(file).catch((e: unknown) => e);
      expect(error).toMatchObject({ code: "ENGINE_BAD_OPTION", field: "weightMemory" });
      expect((error as Error).message).toMatch(/got swap \(from KEEPQUANT_WEIGHT_MEMORY\)/);
      const engine = await Engine.load(file, { weightMemory: "mapped" });
      try {
        expect(engine.stats().weightMemory).toMatch(/^(mapped|read)$/);
      } finally {
        engine.dispose();
      }
    } finally {
      if (saved === undefined) delete process.env.KEEPQUANT_WEIGHT_MEMORY;
      else process.env.KEEPQUANT_WEIGHT_MEMORY = saved;
    }
  });
});
