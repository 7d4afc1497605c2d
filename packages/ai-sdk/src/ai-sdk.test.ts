/**
 * The provider through the real `ai` package (generateText, streamText) on the embedded default model: what
 * the SDK returns is held to what the engine itself generates for the same encoded prompt (greedy).
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {
  InvalidArgumentError,
  InvalidPromptError,
  LoadSettingError,
  NoSuchModelError,
  UnsupportedFunctionalityError,
} from "@ai-sdk/provider";
import { defaultModelPath } from "@keepquant/default-model";
import { type Engine, encodeChat, QWEN_STYLE_TEMPLATE } from "@keepquant/engine";
import { generateText, streamText } from "ai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createKeepquant } from "./index.js";

/** One native thread: package test suites run in parallel on small CI machines. */
const SETTINGS = { threads: 1 } as const;
const keepquant = createKeepquant({ defaults: SETTINGS });
const model = keepquant("default");
afterAll(() => keepquant.dispose());

/** What the engine itself generates for a one-user-message chat (the reference the SDK's results are held to). */
async function engineReference(engine: Engine, prompt: string, maxTokens: number, template?: string) {
  const tokenizer = template === undefined ? engine.tokenizer! : Object.create(engine.tokenizer!, { chatTemplate: { value: template } });
  const encoded = encodeChat(tokenizer, [{ role: "user", content: prompt }]);
  const result = await engine.generate(encoded.ids, { maxTokens }).result;
  return { ids: encoded.ids, result };
}

/** Waits (without a clock) until the engine has decoded more than `tokens` tokens since `from`. */
async function afterDecodedTokens(engine: Engine, from: number, tokens: number): Promise<void> {
  while (engine.stats().counters.decodeTokens < from + tokens) await new Promise((resolve) => setImmediate(resolve));
}

function expectAllFree(engine: Engine): void {
  const stats = engine.stats();
  expect(stats.requests).toEqual({ running: 0, waiting: 0 });
  expect(stats.kv.blocksFree).toBe(stats.kv.blocksTotal);
  expect(stats.states.slotsFree).toBe(stats.states.slotsTotal);
}

describe("generateText and streamText on the embedded default model", () => {
  it("generateText returns the engine's greedy text, its usage and its finish reason", async () => {
    const engine = await model.engine();
    const reference = await engineReference(engine, "Tell me a fortune.", 24);
    const result = await generateText({ model, prompt: "Tell me a fortune.", maxOutputTokens: 24 });
    expect(result.text).toBe(reference.result.text);
    expect(result.text.length).toBeGreaterThan(0);
    expect(result.usage.inputTokens).toBe(reference.ids.length);
    expect(result.usage.outputTokens).toBe(reference.result.stats.generatedTokens);
    expect(result.usage.inputTokenDetails.cacheReadTokens).toBe(0);
    expect(result.usage.outputTokenDetails.reasoningTokens).toBe(0);
    expect(result.finishReason).toBe(reference.result.stopReason === "eog" ? "stop" : "length");
    expect(result.rawFinishReason).toBe(reference.result.stopReason);
    expect(result.providerMetadata?.["keepquant"]?.["stopReason"]).toBe(reference.result.stopReason);
    expect(result.warnings ?? []).toEqual([]);
    expectAllFree(engine);
  });

  it("a length stop is finish reason length; a natural stop (end of generation) is stop", async () => {
    const short = await generateText({
      model,
      prompt: "Say something.",
      maxOutputTokens: 3,
      providerOptions: { keepquant: { ignoreEog: true } },
    });
    expect(short.finishReason).toBe("length");
    expect(short.rawFinishReason).toBe("max_tokens");
    expect(short.usage.outputTokens).toBe(3);
    // the default model ends this answer with <|im_end|> (its end-of-generation token) well before 400 tokens
    const engine = await model.engine();
    const reference = await engineReference(engine, "What is love?", 400);
    expect(reference.result.stopReason).toBe("eog");
    const natural = await generateText({ model, prompt: "What is love?", maxOutputTokens: 400 });
    expect(natural.finishReason).toBe("stop");
    expect(natural.rawFinishReason).toBe("eog");
    expect(natural.text).toBe(reference.result.text);
    expect(natural.usage.outputTokens).toBe(reference.result.stats.generatedTokens);
    expect(natural.usage.outputTokens).toBeLessThan(400);
  });

  it("streamText streams the same text in deltas, then the finish part with usage", async () => {
    const expected = await generateText({ model, prompt: "What does the future hold?", maxOutputTokens: 20 });
    const result = streamText({ model, prompt: "What does the future hold?", maxOutputTokens: 20 });
    const types: string[] = [];
    const deltas: string[] = [];
    for await (const part of result.fullStream) {
      types.push(part.type);
      if (part.type === "text-delta") deltas.push(part.text);
    }
    expect(deltas.length).toBeGreaterThan(1);
    expect(deltas.join("")).toBe(expected.text);
    expect(await result.text).toBe(expected.text);
    expect(types.indexOf("text-start")).toBeLessThan(types.indexOf("text-delta"));
    expect(types.lastIndexOf("text-delta")).toBeLessThan(types.indexOf("text-end"));
    expect(types.slice(-2)).toEqual(["finish-step", "finish"]);
    expect(await result.finishReason).toBe(expected.finishReason);
    expect((await result.usage).outputTokens).toBe(expected.usage.outputTokens);
    expect((await result.usage).inputTokens).toBe(expected.usage.inputTokens);
  });

  it("concurrent calls (more than the engine's 4 sequences: some wait) share one engine and each gets its own greedy answer", async () => {
    const prompts = ["Tell me a fortune.", "What is love?", "Say something wise.", "Why is the sky blue?", "Hello", "Who are you?"];
    const alone = [];
    for (const prompt of prompts) alone.push((await generateText({ model, prompt, maxOutputTokens: 16 })).text);
    const engine = await model.engine();
    const calls = prompts.map((prompt) => generateText({ model, prompt, maxOutputTokens: 16 }));
    // watch the engine until every call settled: all six were in it at once, four running, the rest waiting
    let settled = false;
    const all = Promise.allSettled(calls).then(() => (settled = true));
    let mostQueued = 0;
    let mostRunning = 0;
    while (!settled) {
      const { running, waiting } = engine.stats().requests;
      mostQueued = Math.max(mostQueued, running + waiting);
      mostRunning = Math.max(mostRunning, running);
      await new Promise((resolve) => setImmediate(resolve));
    }
    await all;
    expect(mostQueued).toBe(prompts.length);
    expect(mostRunning).toBe(engine.stats().states.slotsTotal);
    const together = await Promise.all(calls);
    expect(together.map((r) => r.text)).toEqual(alone);
    // another model object of the same file and settings is the same engine
    expect(await keepquant("default").engine()).toBe(await model.engine());
    expectAllFree(await model.engine());
  });

  it("usage counts the prompt tokens the prefix cache served: a shared system prompt is read from the cache", async () => {
    const cached = keepquant("default", { prefixCacheSnapshots: 4 });
    const system = "You are the oracle of fortunes. You answer every question with one fortune, short and wise, never more.";
    const first = await generateText({ model: cached, system, prompt: "Tell me a fortune.", maxOutputTokens: 4 });
    expect(first.usage.inputTokenDetails.cacheReadTokens).toBe(0);
    expect(first.usage.inputTokenDetails.noCacheTokens).toBe(first.usage.inputTokens);
    // another conversation with the same system prompt: its system turn (whole KV blocks of it) comes from the cache
    const second = await generateText({ model: cached, system, prompt: "What is love?", maxOutputTokens: 4 });
    const engine = await cached.engine();
    const blockSize = engine.stats().kv.blockSize;
    const systemTokens = encodeChat(engine.tokenizer!, [{ role: "system", content: system }], { addGenerationPrompt: false }).ids.length;
    expect(systemTokens).toBeGreaterThanOrEqual(blockSize);
    expect(second.usage.inputTokenDetails.cacheReadTokens).toBe(Math.floor(systemTokens / blockSize) * blockSize);
    expect(second.usage.inputTokenDetails.noCacheTokens).toBe(second.usage.inputTokens! - second.usage.inputTokenDetails.cacheReadTokens!);
    expect(engine.stats().prefixCache!.hits).toBeGreaterThan(0);
  });

  it("reasoning parts: a template that opens <think> makes the output reasoning; thinking: false closes it", async () => {
    const thinker = keepquant("default", { chatTemplate: QWEN_STYLE_TEMPLATE });
    const engine = await thinker.engine();
    expect(engine).toBe(await model.engine());
    const reference = await engineReference(engine, "Tell me a fortune.", 12, QWEN_STYLE_TEMPLATE);
    // the default model was never trained on <think>: it does not close the block
    expect(reference.result.text).not.toContain("</think>");
    const result = await generateText({ model: thinker, prompt: "Tell me a fortune.", maxOutputTokens: 12 });
    expect(result.reasoningText).toBe(reference.result.text);
    expect(result.text).toBe("");
    expect(result.usage.outputTokenDetails.reasoningTokens).toBe(reference.result.stats.generatedTokens);
    expect(result.usage.outputTokenDetails.textTokens).toBe(0);

    const streamed = streamText({ model: thinker, prompt: "Tell me a fortune.", maxOutputTokens: 12 });
    const kinds = new Set<string>();
    for await (const part of streamed.fullStream) kinds.add(part.type);
    expect(kinds.has("reasoning-delta")).toBe(true);
    expect(kinds.has("text-delta")).toBe(false);
    expect(await streamed.reasoningText).toBe(reference.result.text);

    const plain = await generateText({
      model: thinker,
      prompt: "Tell me a fortune.",
      maxOutputTokens: 12,
      providerOptions: { keepquant: { thinking: false } },
    });
    expect(plain.reasoningText).toBeUndefined();
    expect(plain.text.length).toBeGreaterThan(0);
    expect(plain.usage.outputTokenDetails.reasoningTokens).toBe(0);
  });
});

describe("keepquant's own knobs", () => {
  it("numerics and speculative decoding are model settings: their own engine, the same greedy text with MTP drafts", async () => {
    const plain = await generateText({ model, prompt: "Tell me a fortune.", maxOutputTokens: 24 });
    const bf16 = keepquant("default", { numerics: "bf16" });
    const mtp = keepquant("default", { speculative: { method: "mtp", draftTokens: 2 } });
    expect((await bf16.engine()).stats().numerics).toBe("bf16");
    expect(await bf16.engine()).not.toBe(await model.engine());
    const bf16Result = await generateText({ model: bf16, prompt: "Tell me a fortune.", maxOutputTokens: 24 });
    expect(bf16Result.usage.outputTokens).toBe(24);
    const speculative = await generateText({ model: mtp, prompt: "Tell me a fortune.", maxOutputTokens: 24 });
    // greedy output is the same token for token with speculation
    expect(speculative.text).toBe(plain.text);
    const drafted = speculative.providerMetadata?.["keepquant"]?.["speculative"] as { drafted: number; accepted: number };
    expect(drafted.drafted).toBeGreaterThan(0);
    expect((await mtp.engine()).stats().speculative?.drafted).toBe(drafted.drafted);
  });
});

describe("abort", () => {
  it("aborting streamText mid-stream ends the stream with an abort part and frees the engine's KV blocks", async () => {
    const engine = await model.engine();
    const controller = new AbortController();
    let aborted = false;
    const result = streamText({
      model,
      prompt: "Tell me a long story.",
      maxOutputTokens: 2000,
      providerOptions: { keepquant: { ignoreEog: true } },
      abortSignal: controller.signal,
      onAbort: () => {
        aborted = true;
      },
    });
    const types: string[] = [];
    let deltas = 0;
    for await (const part of result.fullStream) {
      types.push(part.type);
      if (part.type === "text-delta" && ++deltas === 3) {
        // the request is running and holds KV blocks
        expect(engine.stats().requests.running).toBe(1);
        expect(engine.stats().kv.blocksFree).toBeLessThan(engine.stats().kv.blocksTotal);
        controller.abort();
      }
    }
    expect(types).toContain("abort");
    expect(types).not.toContain("finish");
    expect(aborted).toBe(true);
    expect(deltas).toBeLessThan(2000);
    expectAllFree(engine);
  });

  it("aborting generateText rejects with an AbortError and frees the blocks; an aborted signal never starts", async () => {
    const engine = await model.engine();
    const controller = new AbortController();
    const from = engine.stats().counters.decodeTokens;
    const call = generateText({
      model,
      prompt: "Tell me a long story.",
      maxOutputTokens: 2000,
      providerOptions: { keepquant: { ignoreEog: true } },
      abortSignal: controller.signal,
    });
    await afterDecodedTokens(engine, from, 4);
    controller.abort();
    await expect(call).rejects.toMatchObject({ name: "AbortError" });
    expect(engine.stats().counters.decodeTokens - from).toBeLessThan(2000);
    expectAllFree(engine);

    const steps = engine.stats().counters.steps;
    await expect(generateText({ model, prompt: "Hello", abortSignal: AbortSignal.abort() })).rejects.toMatchObject({ name: "AbortError" });
    expect(engine.stats().counters.steps).toBe(steps);
  });
});

describe("errors are the AI SDK's error types", () => {
  let folder = "";
  beforeAll(() => {
    folder = fs.mkdtempSync(path.join(os.tmpdir(), "keepquant-ai-sdk-"));
  });
  afterAll(() => fs.rmSync(folder, { recursive: true, force: true }));

  it("a missing file is NoSuchModelError; a file that is not a GGUF is LoadSettingError", async () => {
    const missing = path.join(folder, "absent.gguf");
    const error = await generateText({ model: keepquant(missing), prompt: "Hi" }).catch((e: unknown) => e);
    expect(NoSuchModelError.isInstance(error)).toBe(true);
    expect((error as Error).message).toContain(missing);

    const junk = path.join(folder, "junk.gguf");
    fs.writeFileSync(junk, "not a gguf file at all");
    const bad = await generateText({ model: keepquant(junk), prompt: "Hi" }).catch((e: unknown) => e);
    expect(LoadSettingError.isInstance(bad)).toBe(true);
    expect((bad as Error).message).toMatch(/cannot load the model .*junk\.gguf/);
    expect((bad as Error).cause).toBeInstanceOf(Error);
  });

  it("a model that does not fit the memory is LoadSettingError with the planner's explanation", async () => {
    const file = await defaultModelPath();
    const tiny = keepquant(file, { memory: { bytes: 1024 * 1024, source: "a 1 MiB test budget" } });
    const error = await generateText({ model: tiny, prompt: "Hi" }).catch((e: unknown) => e);
    expect(LoadSettingError.isInstance(error)).toBe(true);
    expect((error as Error).message).toMatch(/does not fit/);
    expect((error as Error).message).toContain("a 1 MiB test budget");
  });

  it("a prompt longer than the context is InvalidPromptError; a bad setting is InvalidArgumentError naming it", async () => {
    const small = keepquant("default", { contextLength: 16 });
    const long = await generateText({ model: small, prompt: "word ".repeat(64) }).catch((e: unknown) => e);
    expect(InvalidPromptError.isInstance(long)).toBe(true);
    expect((long as Error).message).toMatch(/does not fit the context of 16 tokens/);

    const badTopP = await generateText({ model, prompt: "Hi", topP: 1.5 }).catch((e: unknown) => e);
    expect(InvalidArgumentError.isInstance(badTopP)).toBe(true);
    expect((badTopP as InvalidArgumentError).argument).toBe("topP");
    expect((badTopP as Error).message).toMatch(/topP must be in \(0, 1\] \(got 1\.5\)/);

    const badOption = await generateText({ model, prompt: "Hi", providerOptions: { keepquant: { minP: "high" } } }).catch(
      (e: unknown) => e,
    );
    expect(InvalidArgumentError.isInstance(badOption)).toBe(true);
    expect((badOption as InvalidArgumentError).argument).toBe("providerOptions.keepquant.minP");
    expectAllFree(await model.engine());
  });

  it("an image for a model without a projector, or a file part it cannot read, is UnsupportedFunctionalityError naming the part", async () => {
    const error = await generateText({
      model,
      messages: [{ role: "user", content: [{ type: "file", data: new Uint8Array([137, 80, 78, 71]), mediaType: "image/png" }] }],
    }).catch((e: unknown) => e);
    expect(UnsupportedFunctionalityError.isInstance(error)).toBe(true);
    expect((error as Error).message).toMatch(
      /prompt\[0\] \(user\) content\[0\] is an image \(image\/png\), but the model default takes no images/,
    );
    const pdf = await generateText({
      model,
      messages: [{ role: "user", content: [{ type: "file", data: new Uint8Array([37, 80, 68, 70]), mediaType: "application/pdf" }] }],
    }).catch((e: unknown) => e);
    expect(UnsupportedFunctionalityError.isInstance(pdf)).toBe(true);
    expect((pdf as Error).message).toMatch(/is a file part of type application\/pdf/);
  });
});
