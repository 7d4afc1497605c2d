import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { QWEN35_TEST_SHAPE, synthesizeQwen35 } from "@keepquant/gguf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Engine } from "./engine.js";
import type { GenerationResult, StopReason } from "./engine-types.js";

let engine: Engine;
const folder = mkdtempSync(path.join(tmpdir(), "keepquant-engine-text-"));
afterAll(() => {
  engine?.dispose();
  rmSync(folder, { recursive: true, force: true });
});

beforeAll(async () => {
  const file = path.join(folder, "model.gguf");
  writeFileSync(file, synthesizeQwen35(QWEN35_TEST_SHAPE));
  engine = await Engine.load(file, {});
});

describe("generate with the file's tokenizer", () => {
  it("streams text deltas that add up to the decoded tokens", async () => {
    const stream = engine.generate("The quick brown fox", { maxTokens: 24, ignoreEog: true });
    let streamed = "";
    let tokens = 0;
    let result: GenerationResult | undefined;
    for await (const event of stream) {
      if (event.type === "token") {
        streamed += event.text;
        if (event.token >= 0) tokens++;
      } else result = event.result;
    }
    expect(result).toBeDefined();
    expect(result!.tokens.length).toBe(24);
    expect(tokens).toBe(24);
    expect(result!.stopReason).toBe("max_tokens");
    expect(streamed).toBe(result!.text);
    expect(result!.text).toBe(engine.tokenizer!.decode(result!.tokens));
    expect(result!.stats.promptTokens).toBe(engine.tokenize("The quick brown fox").length);
  });

  it("a string prompt is plain text unless parseSpecial is asked for", async () => {
    const tokenizer = engine.tokenizer!;
    const text = "<|im_start|>user\nhi<|im_end|>";
    const plain = await engine.generateToEnd(text, { maxTokens: 1 });
    expect(plain.stats.promptTokens).toBe(tokenizer.encode(text).length);
    expect(engine.tokenize(text).some((id) => tokenizer.isControl(id))).toBe(false);
    const special = await engine.generateToEnd(text, { maxTokens: 1, parseSpecial: true });
    expect(special.stats.promptTokens).toBe(tokenizer.encode(text, { parseSpecial: true }).length);
    expect(special.stats.promptTokens).toBeLessThan(plain.stats.promptTokens);
  });

  it("stops at a stop string without emitting it", async () => {
    const full = await engine.generateToEnd("The quick brown fox", { maxTokens: 24, ignoreEog: true });
    // a stop string taken from the middle of the greedy continuation
    const from = Math.floor(full.text.length / 2);
    const stop = full.text.slice(from, from + 2);
    expect(stop.length).toBe(2);
    const stopped = await engine.generateToEnd("The quick brown fox", { maxTokens: 24, ignoreEog: true, stop: [stop] });
    expect(stopped.stopReason).toBe("stop_string");
    expect(stopped.text).toBe(full.text.slice(0, full.text.indexOf(stop)));
    // the result names which stop string ended it (a stop string that never occurs is not it)
    const never = "\u0000never\u0000";
    const named = await engine.generateToEnd("The quick brown fox", { maxTokens: 24, ignoreEog: true, stop: [never, stop] });
    expect(named.stopString).toBe(stop);
    expect(full.stopString).toBeUndefined();
    expect(engine.stats().kv.blocksFree).toBe(engine.stats().kv.blocksTotal);
  });

  it("seeded sampling is reproducible and differs across seeds", async () => {
    const params = { maxTokens: 16, temperature: 1.5, topK: 0, topP: 1, minP: 0, ignoreEog: true };
    const a = await engine.generateToEnd([1, 2, 3], { ...params, seed: 1 });
    const b = await engine.generateToEnd([1, 2, 3], { ...params, seed: 1 });
    const c = await engine.generateToEnd([1, 2, 3], { ...params, seed: 2 });
    expect(a.tokens).toEqual(b.tokens);
    expect(a.tokens).not.toEqual(c.tokens);
  });

  it("an AbortSignal ends the stream with stopReason abort and frees the sequence", async () => {
    const controller = new AbortController();
    const stream = engine.generate([5, 6, 7], { maxTokens: 200, ignoreEog: true, signal: controller.signal });
    let count = 0;
    let reason: StopReason | undefined;
    for await (const event of stream) {
      if (event.type === "token" && ++count === 3) controller.abort();
      if (event.type === "done") reason = event.result.stopReason;
    }
    expect(reason).toBe("abort");
    expect(count).toBeLessThan(200);
    const stats = engine.stats();
    expect(stats.kv.blocksFree).toBe(stats.kv.blocksTotal);
    expect(stats.states.slotsFree).toBe(stats.states.slotsTotal);
  });
});
