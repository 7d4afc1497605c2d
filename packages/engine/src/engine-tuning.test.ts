/**
 * The engine's decode tuning plumbing: the native step tunes at load and `stats().tuning` says what it
 * chose and why; `tune: false` keeps the defaults; a bad `tune` option is a typed error naming it.
 * (The tuner itself, its cache and KEEPQUANT_TUNE: tt-native's tuner.test.ts and decode-variants.test.ts.)
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { QWEN35_TEST_SHAPE, synthesizeQwen35 } from "@keepquant/gguf";
import { afterAll, describe, expect, it } from "vitest";
import { Engine } from "./engine.js";

const folder = mkdtempSync(path.join(tmpdir(), "kq-engine-tuning-"));
// the tuner's cache goes to $XDG_CACHE_HOME/keepquant: here, inside the test's folder
const previousCache = process.env.XDG_CACHE_HOME;
process.env.XDG_CACHE_HOME = path.join(folder, "cache");
afterAll(() => {
  if (previousCache === undefined) delete process.env.XDG_CACHE_HOME;
  else process.env.XDG_CACHE_HOME = previousCache;
  rmSync(folder, { recursive: true, force: true });
});
const file = path.join(folder, "tiny.gguf");
writeFileSync(file, synthesizeQwen35({ ...QWEN35_TEST_SHAPE, seed: 5 }));

describe("engine decode tuning", () => {
  it("stats().tuning reports the tuner's decision with the native step, nothing without it", async () => {
    const engine = await Engine.load(file, { kvCacheTokens: 64, maxSequences: 1 });
    try {
      const stats = engine.stats();
      if (stats.providers.step === "ts-forward") {
        expect(stats.tuning).toBeUndefined();
        return;
      }
      const tuning = stats.tuning!;
      const mode = process.env.KEEPQUANT_TUNE ?? "";
      if (mode === "off" || mode.startsWith("pin:")) {
        expect(tuning.source).toBe(mode === "off" ? "off" : "pinned");
        return;
      }
      // the test shape's head is large enough to time: measured within the load budget, then cached
      expect(tuning.source).toMatch(/^(measured|cache)$/);
      expect(tuning.reason.length).toBeGreaterThan(0);
      expect(tuning.key).toMatch(/^[0-9a-f]{64}$/);
      expect(tuning.cacheFile).toBe(path.join(folder, "cache", "keepquant", "decode-tuning.json"));
      expect(tuning.choices.length).toBeGreaterThan(0);
      const result = await engine.generateToEnd([1, 2, 3], { maxTokens: 3, stopAtEog: false });
      expect(result.tokens).toHaveLength(3);
    } finally {
      engine.dispose();
    }
    const again = await Engine.load(file, { kvCacheTokens: 64, maxSequences: 1 });
    try {
      const tuning = again.stats().tuning;
      if (tuning && !(process.env.KEEPQUANT_TUNE ?? "")) expect(tuning.source).toBe("cache");
    } finally {
      again.dispose();
    }
  });

  it("tune: false keeps the defaults and reports nothing; a bad tune option names the field", async () => {
    const engine = await Engine.load(file, { kvCacheTokens: 64, maxSequences: 1, tune: false });
    try {
      expect(engine.stats().tuning).toBeUndefined();
    } finally {
      engine.dispose();
    }
    await expect(Engine.load(file, { tune: { budgetMs: 0 } })).rejects.toMatchObject({ code: "ENGINE_BAD_OPTION", field: "tune.budgetMs" });
    await expect(Engine.load(file, { tune: "fast" as never })).rejects.toMatchObject({ code: "ENGINE_BAD_OPTION", field: "tune" });
  });
});
