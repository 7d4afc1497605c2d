import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { customDevice, planEngineResidency } from "@keepquant/engine";
import {
  type GgufFile,
  QWEN35_0_8B_SHAPE,
  QWEN35_27B_SHAPE,
  QWEN35_TEST_SHAPE,
  qwen35Q4KMClassMix,
  readGguf,
  synthesizeQwen35,
  writeQwen35HeaderOnly,
} from "@keepquant/gguf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MAX_PLANNED_SEQUENCES, parseByteSize, planCapacity } from "./capacity.js";
import { ServerMetrics } from "./metrics.js";

const GiB = 1024 ** 3;
const dir = mkdtempSync(path.join(tmpdir(), "kq-capacity-"));
const shapes: Record<string, GgufFile> = {};
const ENGINE = { numerics: "llama" as const, prefixCacheSnapshots: 8 };

beforeAll(async () => {
  // header-only files with the real shapes (no tensor bytes), and a small synthetic model
  const big = path.join(dir, "27b.gguf");
  const small = path.join(dir, "0.8b.gguf");
  const test = path.join(dir, "test.gguf");
  await writeQwen35HeaderOnly(big, QWEN35_27B_SHAPE, { types: qwen35Q4KMClassMix(64, false) });
  await writeQwen35HeaderOnly(small, QWEN35_0_8B_SHAPE, { types: qwen35Q4KMClassMix(24, true) });
  writeFileSync(test, synthesizeQwen35(QWEN35_TEST_SHAPE));
  shapes["27B"] = await readGguf(big);
  shapes["0.8B"] = await readGguf(small);
  shapes["test"] = await readGguf(test);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** The planner's total for s sequences with a whole context of KV each (the independent check). */
function planned(file: GgufFile, sequences: number, context: number, budget: number) {
  return planEngineResidency(file, { ...ENGINE, maxSequences: sequences, kvCacheTokens: context * sequences }, customDevice(budget));
}

describe("planCapacity", () => {
  it("runs the most sequences whose plan fits the budget: one more would not fit; more memory never gives fewer", () => {
    const context = 4096;
    for (const [name, file] of Object.entries(shapes)) {
      const one = planned(file, 1, context, 1).totalBytes;
      const perSequence = planned(file, 2, context, 1).totalBytes - one;
      expect(perSequence, name).toBeGreaterThan(0);
      let previous = 0;
      for (const extra of [0, 1, 2, 5, 11, 20]) {
        const budget = one + extra * perSequence + Math.floor(perSequence / 2);
        const capacity = planCapacity({ file, contextTokens: context, memoryBudgetBytes: budget, engine: ENGINE });
        expect(capacity.fits, name).toBe(true);
        expect(capacity.kvCacheTokens, name).toBe(capacity.maxSequences * context);
        expect(capacity.plannedBytes, name).toBe(planned(file, capacity.maxSequences, context, budget).totalBytes);
        expect(capacity.plannedBytes, name).toBeLessThanOrEqual(budget);
        if (capacity.limitedBy === "budget") expect(planned(file, capacity.maxSequences + 1, context, budget).fits, name).toBe(false);
        expect(capacity.maxSequences, name).toBeGreaterThanOrEqual(previous);
        // the cost grows by one sequence's state and KV: the budget above holds extra + 1 of them
        expect(capacity.maxSequences, `${name} +${extra}`).toBe(Math.min(MAX_PLANNED_SEQUENCES, extra + 1));
        previous = capacity.maxSequences;
      }
    }
  });

  it("stops at the documented cap however much memory there is", () => {
    for (const [name, file] of Object.entries(shapes)) {
      const capacity = planCapacity({ file, contextTokens: 2048, memoryBudgetBytes: 4096 * GiB, engine: ENGINE });
      expect(capacity, name).toMatchObject({ maxSequences: MAX_PLANNED_SEQUENCES, limitedBy: "cap", fits: true });
    }
  });

  it("says when not even one sequence fits, and keeps explicit sizes as given", () => {
    const file = shapes["27B"]!;
    const tight = planCapacity({ file, contextTokens: 4096, memoryBudgetBytes: GiB, engine: ENGINE });
    expect(tight).toMatchObject({ maxSequences: 1, fits: false, limitedBy: "budget" });
    const explicit = planCapacity({
      file: shapes["0.8B"]!,
      contextTokens: 4096,
      memoryBudgetBytes: 64 * GiB,
      engine: ENGINE,
      maxSequences: 3,
      kvCacheTokens: 10_000,
    });
    expect(explicit).toMatchObject({ maxSequences: 3, kvCacheTokens: 10_000, limitedBy: "explicit", fits: true });
    // an explicit KV size alone: the sequences are still planned around it
    const kvOnly = planCapacity({
      file: shapes["0.8B"]!,
      contextTokens: 4096,
      memoryBudgetBytes: 64 * GiB,
      engine: ENGINE,
      kvCacheTokens: 8192,
    });
    expect(kvOnly.kvCacheTokens).toBe(8192);
    expect(() => planCapacity({ file, contextTokens: 0, memoryBudgetBytes: GiB })).toThrow(
      /contextTokens must be a positive integer, got 0/,
    );
    expect(() => planCapacity({ file, contextTokens: 16, memoryBudgetBytes: -1 })).toThrow(/memoryBudgetBytes must be a positive integer/);
  });
});

describe("parseByteSize", () => {
  it("reads bytes and binary or decimal units, and nothing else", () => {
    expect(parseByteSize("4GiB")).toBe(4 * GiB);
    expect(parseByteSize("512 MiB")).toBe(512 * 1024 ** 2);
    expect(parseByteSize("1.5gb")).toBe(1.5e9);
    expect(parseByteSize("1073741824")).toBe(GiB);
    for (const bad of ["", "GiB", "-1GiB", "4 GiBs", "0", "1e9", "4 G i B"]) expect(parseByteSize(bad), bad).toBeUndefined();
  });
});

describe("capacity gauges", () => {
  it("show the sizes serve chose", async () => {
    const capacity = planCapacity({ file: shapes["test"]!, contextTokens: 1024, memoryBudgetBytes: GiB, engine: ENGINE });
    const text = await new ServerMetrics(() => undefined, capacity).text();
    const value = (name: string): number => Number(new RegExp(`^${name} (\\S+)$`, "m").exec(text)?.[1]);
    expect(value("keepquant_capacity_max_sequences")).toBe(capacity.maxSequences);
    expect(value("keepquant_capacity_kv_cache_tokens")).toBe(capacity.kvCacheTokens);
    expect(value("keepquant_capacity_memory_budget_bytes")).toBe(GiB);
    expect(value("keepquant_capacity_planned_bytes")).toBe(capacity.plannedBytes);
  });
});
