import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { QWEN35_TEST_SHAPE, shardPath, splitGgufBytes, synthesizeQwen35 } from "@keepquant/gguf";
import { decodeF32, llamaUnavailableReason, runOracle } from "@keepquant/oracle";
import { afterAll, describe, expect, it } from "vitest";
import { Engine } from "./engine.js";

const reason = llamaUnavailableReason();

const scratch = mkdtempSync(path.join(tmpdir(), "keepquant-engine-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

describe.skipIf(reason !== undefined)(`against llama.cpp (F32 synthetic test shape)${reason ? ` (skipped: ${reason})` : ""}`, () => {
  it.each([
    { tied: true, mtp: false, logits: true },
    { tied: false, mtp: true, logits: false },
  ])("16 greedy tokens equal, teacher-forced logits within 1e-4 (tied=$tied mtp=$mtp)", async ({ tied, mtp, logits }) => {
    const file = path.join(scratch, `model-${tied}-${mtp}.gguf`);
    writeFileSync(file, synthesizeQwen35({ ...QWEN35_TEST_SHAPE, tied, mtp }));
    const ids = Array.from({ length: 24 }, (_, i) => (i * 37 + 11) % QWEN35_TEST_SHAPE.vocab);
    const engine = await Engine.load(file, { kvType: "f32", flashAttention: false, provider: "ts" });
    if (mtp) expect(engine.stats().diagnostics.join("\n")).toMatch(/MTP|nextn|blk\.4/i);
    if (logits) {
      const ours = await engine.evaluate(ids);
      const oracle = await runOracle({ kind: "logits", model: file, sequences: [ids], kvType: "f32" });
      const theirs = oracle.logits[0]!.map(decodeF32);
      let worst = 0;
      for (let p = 0; p < ids.length; p++) {
        for (let i = 0; i < theirs[p]!.length; i++) worst = Math.max(worst, Math.abs(ours[p]![i]! - theirs[p]![i]!));
      }
      expect(worst).toBeLessThan(1e-4);
    }
    const prompt = ids.slice(0, 8);
    const greedy = await runOracle({ kind: "greedy", model: file, prompts: [prompt], nTokens: 16, kvType: "f32" });
    const result = await engine.generateToEnd(prompt, { maxTokens: 16, ignoreEog: true });
    expect(result.tokens).toEqual(greedy.tokens[0]);
    engine.dispose();
  });

  it("llama.cpp loads a split model our writer made (gguf-split's layout), and both give the same greedy tokens", async () => {
    const shards = (await splitGgufBytes(synthesizeQwen35({ ...QWEN35_TEST_SHAPE, seed: 29 }), 3)).map((bytes, i) => {
      const file = shardPath(path.join(scratch, "split"), i, 3);
      writeFileSync(file, bytes);
      return file;
    });
    const prompt = [5, 17, 300, 2, 41, 99];
    const greedy = await runOracle({ kind: "greedy", model: shards[0]!, prompts: [prompt], nTokens: 12, kvType: "f32" });
    const engine = await Engine.load(shards[0]!, { kvType: "f32", flashAttention: false, provider: "ts" });
    try {
      expect((await engine.generateToEnd(prompt, { maxTokens: 12, ignoreEog: true })).tokens).toEqual(greedy.tokens[0]);
    } finally {
      engine.dispose();
    }
  });
});
