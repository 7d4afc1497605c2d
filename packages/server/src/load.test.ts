import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { encodeChat, Engine } from "@keepquant/engine";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { metricValue, runLoad } from "./load.js";
import { defaultModelFile, startTestServer, type TestServer, TEST_ENGINE_OPTIONS } from "./test-support.js";

const cacheDir = mkdtempSync(path.join(tmpdir(), "kq-load-"));
let engine: Engine;
let serving: TestServer;

beforeAll(async () => {
  // a small KV pool (4 sequences x 512 tokens) so that blocks run short under load
  engine = await Engine.load(await defaultModelFile(cacheDir), {
    ...TEST_ENGINE_OPTIONS,
    maxSequences: 4,
    kvCacheTokens: 2048,
    prefixCacheSnapshots: 8,
  });
  serving = await startTestServer(engine, { contextTokens: 1024 });
});

afterAll(async () => {
  await serving?.close();
  engine?.dispose();
  rmSync(cacheDir, { recursive: true, force: true });
});

/** Sum of a metric's samples whose labels contain `labels` (e.g. `finish_reason="abort"`). */
async function metric(name: string, labels: string[] = []): Promise<number> {
  return metricValue(await (await fetch(`${serving.url}/metrics`)).text(), name, labels);
}

describe("load: 32 concurrent streams, a quarter disconnecting, some sharing prefixes", () => {
  it("frees every block and slot, gives each finished request one full answer, and /metrics agrees", async () => {
    const before = {
      prompt: await metric("keepquant_prompt_tokens_total"),
      generated: await metric("keepquant_generation_tokens_total"),
      aborts: await metric("keepquant_requests_total", ['endpoint="chat"', 'finish_reason="abort"']),
      finished: await metric("keepquant_requests_total", ['endpoint="chat"']),
      ok: await metric("keepquant_http_responses_total", ['route="chat"', 'status="200"']),
      hits: await metric("keepquant_prefix_cache_hit_tokens_total"),
    };
    const { records } = await runLoad({
      url: serving.url,
      requests: 32,
      disconnectShare: 0.25,
      sharedPrefixShare: 0.5,
      seed: 2026,
      maxTokens: [4, 48],
      promptWords: [2, 40],
    });
    // the server saw every request leave (disconnects are noticed on the socket's close)
    while (serving.server.inFlight > 0) await new Promise((resolve) => setTimeout(resolve, 5));

    const disconnected = records.filter((r) => r.disconnected);
    const completed = records.filter((r) => !r.disconnected);
    expect(disconnected).toHaveLength(8);
    expect(records.every((r) => r.status === 200)).toBe(true);
    for (const r of completed) {
      expect(r.finishes).toBe(1);
      expect(r.done).toBe(1);
      expect(r.usage?.completion_tokens).toBe(r.tokens);
      expect(r.finishReason).toBe("length");
      expect(r.tokens).toBe(r.maxTokens);
      expect(r.usage?.prompt_tokens).toBe(encodeChat(engine.tokenizer!, r.messages).ids.length);
    }
    for (const r of disconnected) expect(r.done).toBe(0);

    // every block and state slot is back (prefix-cache entries hold blocks on purpose until dropped)
    const stats = engine.stats();
    expect(stats.requests).toEqual({ running: 0, waiting: 0 });
    expect(stats.states.slotsFree).toBe(stats.states.slotsTotal);
    engine.clearPrefixCache();
    expect(engine.stats().kv.blocksFree).toBe(engine.stats().kv.blocksTotal);

    // the metrics agree with what was sent
    const promptSum = records.reduce((s, r) => s + encodeChat(engine.tokenizer!, r.messages).ids.length, 0);
    expect((await metric("keepquant_prompt_tokens_total")) - before.prompt).toBe(promptSum);
    const completedTokens = completed.reduce((s, r) => s + r.tokens, 0);
    const receivedByDisconnected = disconnected.reduce((s, r) => s + r.tokens, 0);
    expect((await metric("keepquant_generation_tokens_total")) - before.generated).toBeGreaterThanOrEqual(
      completedTokens + receivedByDisconnected,
    );
    expect((await metric("keepquant_requests_total", ['endpoint="chat"', 'finish_reason="abort"'])) - before.aborts).toBe(8);
    expect((await metric("keepquant_requests_total", ['endpoint="chat"'])) - before.finished).toBe(32);
    expect((await metric("keepquant_http_responses_total", ['route="chat"', 'status="200"'])) - before.ok).toBe(32);
    // shared prefixes were served from the cache
    expect((await metric("keepquant_prefix_cache_hit_tokens_total")) - before.hits).toBeGreaterThan(0);

    // and the server still answers
    const after = await fetch(`${serving.url}/v1/completions`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ prompt: "still there?", max_tokens: 3, temperature: 0 }),
    });
    expect(after.status).toBe(200);
    expect(((await after.json()) as { usage: { completion_tokens: number } }).usage.completion_tokens).toBe(3);
  });
});
