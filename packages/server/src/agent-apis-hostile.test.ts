/**
 * The agent APIs (/v1/messages, /v1/responses) under hostile input and load: every malformed body is a 4xx in
 * the API's own error shape (never a 500), route-level refusals (401, 404, 405, 413, 415) too, bounds hold
 * before the template runs, and streams cut by their clients free every sequence and are counted per endpoint.
 * Asserted by order and counts only.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { Engine } from "@keepquant/engine";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { metricValue, readDataEvents } from "./load.js";
import { defaultModelFile, MiB, startTestServer, TEST_ENGINE_OPTIONS, type TestServer, watchTokenizer } from "./test-support.js";

const cacheDir = mkdtempSync(path.join(tmpdir(), "kq-agent-apis-"));
let engine: Engine;
let serving: TestServer;

beforeAll(async () => {
  engine = await Engine.load(await defaultModelFile(cacheDir), { ...TEST_ENGINE_OPTIONS, maxSequences: 4, kvCacheTokens: 4096 });
  serving = await startTestServer(engine, { contextTokens: 1024, maxMessages: 64, maxBodyBytes: 2 * MiB, apiKey: "k" });
});

afterAll(async () => {
  await serving?.close();
  engine?.dispose();
  rmSync(cacheDir, { recursive: true, force: true });
});

const HEADERS = { "Content-Type": "application/json", "x-api-key": "k" };

async function post(route: string, body: unknown, headers: Record<string, string> = HEADERS): Promise<{ status: number; json: unknown }> {
  const response = await fetch(`${serving.url}${route}`, {
    method: "POST",
    headers,
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
  const text = await response.text();
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = text;
  }
  return { status: response.status, json };
}

/** Anthropic's error body: `{type: "error", error: {type, message}}` and nothing else. */
function expectAnthropicError(json: unknown, type: string): void {
  expect(json).toEqual({ type: "error", error: { type, message: expect.any(String) } });
}

/** OpenAI's error body: `{error: {message, type, param, code}}`. */
function expectOpenAIError(json: unknown, type: string): void {
  const error = (json as { error: Record<string, unknown> }).error;
  expect(Object.keys(error).sort()).toEqual(["code", "message", "param", "type"]);
  expect(error).toMatchObject({ message: expect.any(String), type });
  for (const key of ["param", "code"]) expect(error[key] === null || typeof error[key] === "string").toBe(true);
}

/** Values of every JSON kind, including ones a parser might trip on. */
const ODD_VALUES: unknown[] = [null, -1, 1.5, "", "x\u0000", true, [null], {}, { type: 7 }, [[[]]]];

/** `base` with the value at `at` (a path of keys) replaced by `value`. */
function mutate(base: Record<string, unknown>, at: (string | number)[], value: unknown): unknown {
  const copy = structuredClone(base);
  let node: Record<string | number, unknown> = copy;
  for (const key of at.slice(0, -1)) node = node[key] as Record<string | number, unknown>;
  node[at.at(-1)!] = value;
  return copy;
}

describe("/v1/messages: malformed bodies get Anthropic's error shape, never a 500", () => {
  const base = {
    model: "m",
    max_tokens: 1,
    system: [{ type: "text", text: "Be terse." }],
    messages: [
      { role: "user", content: [{ type: "text", text: "hi" }] },
      { role: "assistant", content: [{ type: "tool_use", id: "t1", name: "f", input: { a: 1 } }] },
      { role: "user", content: [{ type: "tool_result", tool_use_id: "t1", content: "ok" }] },
    ],
    tools: [{ name: "f", description: "d", input_schema: { type: "object", properties: { a: { type: "integer" } } } }],
    tool_choice: { type: "auto" },
    thinking: { type: "enabled", budget_tokens: 8 },
    stop_sequences: ["zz"],
    temperature: 0,
  };
  const paths: (string | number)[][] = [
    ["model"],
    ["max_tokens"],
    ["system"],
    ["system", 0, "text"],
    ["messages"],
    ["messages", 0],
    ["messages", 0, "role"],
    ["messages", 0, "content"],
    ["messages", 0, "content", 0, "type"],
    ["messages", 1, "content", 0, "input"],
    ["messages", 1, "content", 0, "id"],
    ["messages", 2, "content", 0, "content"],
    ["messages", 2, "content", 0, "is_error"],
    ["tools"],
    ["tools", 0, "input_schema"],
    ["tools", 0, "name"],
    ["tool_choice"],
    ["tool_choice", "type"],
    ["thinking"],
    ["thinking", "budget_tokens"],
    ["stop_sequences"],
    ["temperature"],
    ["top_k"],
    ["metadata"],
    ["output_config"],
    ["output_format"],
  ];

  it("the valid base request is answered", async () => {
    const { status, json } = await post("/v1/messages", base);
    expect(status, JSON.stringify(json)).toBe(200);
    expect(json).toMatchObject({ type: "message", role: "assistant" });
  });

  it(`${paths.length} fields x ${ODD_VALUES.length} odd values: each a 200 message or a 400 invalid_request_error`, async () => {
    const statuses = new Map<number, number>();
    for (const at of paths) {
      for (const value of ODD_VALUES) {
        const { status, json } = await post("/v1/messages", mutate(base, at, value));
        statuses.set(status, (statuses.get(status) ?? 0) + 1);
        const where = `${at.join(".")} = ${JSON.stringify(value)}: ${JSON.stringify(json)}`;
        expect([200, 400], where).toContain(status);
        if (status === 400) expectAnthropicError(json, "invalid_request_error");
        else expect(json, where).toMatchObject({ type: "message", stop_reason: expect.any(String) });
      }
    }
    // most odd values are refused; a few are valid (null for an optional field, 0 for temperature)
    expect(statuses.get(400)! > statuses.get(200)!).toBe(true);
  });

  it("route-level refusals are in Anthropic's shape too: 401, 405, 413, 415, bad JSON, 404 of a sub-route", async () => {
    const noKey = await post("/v1/messages", base, { "Content-Type": "application/json" });
    expect(noKey.status).toBe(401);
    expectAnthropicError(noKey.json, "authentication_error");
    const bearer = await post("/v1/messages", base, { "Content-Type": "application/json", Authorization: "Bearer k" });
    expect(bearer.status).toBe(200);
    const get = await fetch(`${serving.url}/v1/messages`, { headers: HEADERS });
    expect(get.status).toBe(405);
    expectAnthropicError(await get.json(), "invalid_request_error");
    const big = await post("/v1/messages", { ...base, system: "x".repeat(3 * MiB) });
    expect(big.status).toBe(413);
    expectAnthropicError(big.json, "request_too_large");
    const text = await post("/v1/messages", JSON.stringify(base), { "Content-Type": "text/plain", "x-api-key": "k" });
    expect(text.status).toBe(415);
    expectAnthropicError(text.json, "invalid_request_error");
    const broken = await post("/v1/messages", '{"model": ');
    expect(broken.status).toBe(400);
    expectAnthropicError(broken.json, "invalid_request_error");
    const count = await post("/v1/messages/count_tokens", { messages: "nope" });
    expect(count.status).toBe(400);
    expectAnthropicError(count.json, "invalid_request_error");
  });

  it("bounds hold before the template runs: too many messages, text over the context, deep tool input", async () => {
    const watch = watchTokenizer(engine.tokenizer!, 1);
    try {
      const many = await post("/v1/messages", {
        max_tokens: 1,
        messages: Array.from({ length: 65 }, () => ({ role: "user", content: "hi" })),
      });
      expect(many.status).toBe(400);
      expect((many.json as { error: { message: string } }).error.message).toMatch(/65 messages; this server takes at most 64/);
      const long = await post("/v1/messages", { max_tokens: 1, messages: [{ role: "user", content: "w ".repeat(200_000) }] });
      expect(long.status).toBe(400);
      expect((long.json as { error: { message: string } }).error.message).toMatch(/maximum context length is 1024 tokens/);
      let deep: unknown = 1;
      for (let i = 0; i < 100; i++) deep = { a: deep };
      const nested = await post("/v1/messages", {
        max_tokens: 1,
        messages: [
          { role: "user", content: "hi" },
          { role: "assistant", content: [{ type: "tool_use", id: "t", name: "f", input: deep }] },
        ],
      });
      expect(nested.status).toBe(400);
      expect((nested.json as { error: { message: string } }).error.message).toMatch(/nested more than 64 levels/);
      expect(watch.calls()).toBe(0);
    } finally {
      watch.restore();
    }
  });
});

describe("/v1/responses: malformed bodies get OpenAI's error shape, never a 500", () => {
  const base = {
    model: "m",
    max_output_tokens: 1,
    instructions: "Be terse.",
    input: [
      { type: "message", role: "user", content: [{ type: "input_text", text: "hi" }] },
      { type: "function_call", call_id: "c1", name: "f", arguments: '{"a": 1}' },
      { type: "function_call_output", call_id: "c1", output: "ok" },
    ],
    tools: [
      { type: "function", name: "f", parameters: { type: "object", properties: { a: { type: "integer" } } } },
      { type: "web_search" },
    ],
    tool_choice: "auto",
    reasoning: { effort: "low" },
    text: { format: { type: "text" } },
    temperature: 0,
    store: false,
  };
  const paths: (string | number)[][] = [
    ["model"],
    ["max_output_tokens"],
    ["instructions"],
    ["input"],
    ["input", 0],
    ["input", 0, "role"],
    ["input", 0, "content"],
    ["input", 0, "content", 0, "type"],
    ["input", 1, "arguments"],
    ["input", 1, "call_id"],
    ["input", 2, "output"],
    ["tools"],
    ["tools", 0, "parameters"],
    ["tools", 0, "name"],
    ["tools", 1],
    ["tool_choice"],
    ["reasoning"],
    ["reasoning", "effort"],
    ["text"],
    ["text", "format"],
    ["temperature"],
    ["store"],
    ["previous_response_id"],
    ["metadata"],
    ["include"],
    ["parallel_tool_calls"],
  ];

  it("the valid base request is answered", async () => {
    const { status, json } = await post("/v1/responses", base);
    expect(status, JSON.stringify(json)).toBe(200);
    expect(json).toMatchObject({ object: "response", tools_not_run: [{ type: "web_search" }] });
  });

  it(`${paths.length} fields x ${ODD_VALUES.length} odd values: each a 200 response or a 4xx in OpenAI's shape`, async () => {
    for (const at of paths) {
      for (const value of ODD_VALUES) {
        const { status, json } = await post("/v1/responses", mutate(base, at, value));
        const where = `${at.join(".")} = ${JSON.stringify(value)}: ${JSON.stringify(json)}`;
        // 404: a previous_response_id that names no stored response
        expect([200, 400, 404], where).toContain(status);
        if (status === 200) expect(json, where).toMatchObject({ object: "response", status: expect.any(String) });
        else expectOpenAIError(json, "invalid_request_error");
      }
    }
  });

  it("unknown ids are 404s in OpenAI's shape on every sub-route; the wrong method a 405", async () => {
    for (const [method, route] of [
      ["GET", "/v1/responses/resp_nope"],
      ["DELETE", "/v1/responses/resp_nope"],
      ["POST", "/v1/responses/resp_nope/cancel"],
      ["GET", "/v1/responses/resp_nope/input_items"],
    ] as const) {
      const response = await fetch(`${serving.url}${route}`, { method, headers: HEADERS });
      expect(response.status, `${method} ${route}`).toBe(404);
      expectOpenAIError(await response.json(), "invalid_request_error");
    }
    const put = await fetch(`${serving.url}/v1/responses/resp_nope`, { method: "PUT", headers: HEADERS });
    expect(put.status).toBe(405);
    const odd = await fetch(`${serving.url}/v1/responses/${"%".repeat(8)}`, { headers: HEADERS });
    expect(odd.status).toBe(404);
  });

  it("bounds hold before the template runs: too many items, text over the context", async () => {
    const watch = watchTokenizer(engine.tokenizer!, 1);
    try {
      const many = await post("/v1/responses", { input: Array.from({ length: 65 }, () => ({ role: "user", content: "hi" })) });
      expect(many.status).toBe(400);
      expect((many.json as { error: { code: string } }).error.code).toBe("too_many_messages");
      const long = await post("/v1/responses", { input: "w ".repeat(200_000) });
      expect(long.status).toBe(400);
      expect((long.json as { error: { code: string } }).error.code).toBe("context_length_exceeded");
      expect(watch.calls()).toBe(0);
    } finally {
      watch.restore();
    }
  });
});

describe("load: streams of both agent APIs, half cut by their clients", () => {
  it("every sequence and block returns, each finished stream ends once, and /metrics counts per endpoint", async () => {
    const metrics = async (labels: string[]): Promise<number> =>
      metricValue(await (await fetch(`${serving.url}/metrics`, { headers: HEADERS })).text(), "keepquant_requests_total", labels);
    const before = {
      messagesAbort: await metrics(['endpoint="messages"', 'finish_reason="abort"']),
      responsesAbort: await metrics(['endpoint="responses"', 'finish_reason="abort"']),
      messages: await metrics(['endpoint="messages"']),
      responses: await metrics(['endpoint="responses"']),
    };
    const one = async (i: number): Promise<{ cut: boolean; ends: number; route: string }> => {
      const anthropic = i % 2 === 0;
      const cut = i % 4 < 2;
      const controller = new AbortController();
      const route = anthropic ? "/v1/messages" : "/v1/responses";
      const words = `tell me about ${"alpha bravo charlie ".repeat(1 + (i % 5))}`;
      const body = anthropic
        ? { max_tokens: 24, stream: true, temperature: 0, messages: [{ role: "user", content: words }] }
        : { max_output_tokens: 24, stream: true, temperature: 0, input: words, store: false };
      const response = await fetch(`${serving.url}${route}`, {
        method: "POST",
        headers: HEADERS,
        body: JSON.stringify(body),
        signal: controller.signal,
      });
      expect(response.status).toBe(200);
      let ends = 0;
      let events = 0;
      try {
        await readDataEvents(response.body!, (data) => {
          const event = JSON.parse(data) as { type: string };
          events++;
          if (event.type === "message_stop" || event.type === "response.completed" || event.type === "response.incomplete") ends++;
          // cut after the stream's opening events
          return cut && events >= 3 ? "stop" : undefined;
        });
      } finally {
        if (cut) controller.abort();
      }
      return { cut, ends, route };
    };
    const results = await Promise.all(Array.from({ length: 16 }, (_, i) => one(i)));
    while (serving.server.inFlight > 0) await new Promise((resolve) => setImmediate(resolve));
    for (const r of results.filter((x) => !x.cut)) expect(r.ends, r.route).toBe(1);
    const stats = engine.stats();
    expect(stats.requests).toEqual({ running: 0, waiting: 0 });
    expect(stats.states.slotsFree).toBe(stats.states.slotsTotal);
    // prefix-cache entries hold blocks on purpose until dropped
    engine.clearPrefixCache();
    expect(engine.stats().kv.blocksFree).toBe(engine.stats().kv.blocksTotal);
    // 8 streams of each API finished or were cut; the cut ones that the engine had not finished count as aborts
    expect((await metrics(['endpoint="messages"'])) - before.messages).toBe(8);
    expect((await metrics(['endpoint="responses"'])) - before.responses).toBe(8);
    expect((await metrics(['endpoint="messages"', 'finish_reason="abort"'])) - before.messagesAbort).toBeLessThanOrEqual(4);
    expect((await metrics(['endpoint="responses"', 'finish_reason="abort"'])) - before.responsesAbort).toBeLessThanOrEqual(4);
  });
});
