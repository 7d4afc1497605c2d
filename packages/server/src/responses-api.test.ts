/**
 * The OpenAI Responses API (`POST /v1/responses`, `GET`/`DELETE /v1/responses/{id}`, `POST /v1/responses/{id}/cancel`,
 * `GET /v1/responses/{id}/input_items`) against real clients on loopback: the official `openai` client on the embedded
 * model (answers, usage, the event stream, text.format, the store and its bounds, cancel, errors) and on the scripted
 * tool-calling model (reasoning and function_call items, previous_response_id and store: false round trips), the
 * OpenAI Agents SDK running a tool, and a raw request shaped as Codex CLI sends it.
 */
import { type ChatMessage, encodeChat, type Engine } from "@keepquant/engine";
import { Agent, OpenAIProvider, Runner, setTracingDisabled, tool } from "@openai/agents";
import OpenAI, { type APIError } from "openai";
import { zodTextFormat } from "openai/helpers/zod";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import {
  SCRIPT,
  type ServedDefaultModel,
  serveDefaultModel,
  scriptedToolEngine,
  startTestServer,
  type TestServer,
  TEST_ENGINE_OPTIONS,
} from "./test-support.js";

type Response = OpenAI.Responses.Response;
type StreamEvent = OpenAI.Responses.ResponseStreamEvent;
type FunctionCall = OpenAI.Responses.ResponseFunctionToolCall;
type ReasoningItem = OpenAI.Responses.ResponseReasoningItem;

const API_KEY = "test-key-responses";
const MODEL = "tied-4l-f32";
const CONTEXT = 2048;
/** The template's thinking off: the embedded model's output is the message (its reasoning would be random text). */
const NO_THINKING = { reasoning: { effort: "none" as const } };
let served: ServedDefaultModel;
let engine: Engine;
let reference: Engine;
let serving: TestServer;
let client: OpenAI;

beforeAll(async () => {
  served = await serveDefaultModel("kq-responses-", { apiKey: API_KEY, modelName: MODEL, synthetic: true, contextTokens: CONTEXT });
  ({ engine, reference, serving } = served);
  client = new OpenAI({ baseURL: `${serving.url}/v1`, apiKey: API_KEY, maxRetries: 0 });
  setTracingDisabled(true);
});

afterAll(() => served?.close());

/** What a promise rejected with (undefined when it resolved). */
function rejection(promise: PromiseLike<unknown>): Promise<unknown> {
  return Promise.resolve(promise).then(
    () => undefined,
    (error: unknown) => error,
  );
}

function messages(response: Response): OpenAI.Responses.ResponseOutputMessage[] {
  return response.output.filter((item): item is OpenAI.Responses.ResponseOutputMessage => item.type === "message");
}

function functionCalls(response: Response): FunctionCall[] {
  return response.output.filter((item): item is FunctionCall => item.type === "function_call");
}

function reasoningItems(response: Response): ReasoningItem[] {
  return response.output.filter((item): item is ReasoningItem => item.type === "reasoning");
}

/** The greedy answer of the reference engine to one user message with the template's thinking off. */
async function greedy(input: string, maxTokens: number): Promise<{ ids: number[]; text: string; tokens: number; stop: string }> {
  const { ids } = encodeChat(reference.tokenizer!, [{ role: "user", content: input }], { enableThinking: false });
  const result = await reference.generateToEnd(ids, { maxTokens });
  return { ids, text: result.text, tokens: result.tokens.length, stop: result.stopReason };
}

/** The response's `store` (in OpenAI's response object; the client's Response type does not list it). */
function storeOf(response: Response): unknown {
  return (response as Response & { store?: boolean }).store;
}

/** The message text is the generated text, less white space that came alone before it (it opens no message item). */
function expectAnswer(text: string, generated: string): void {
  expect(text.trimStart()).toBe(generated.trimStart());
  expect(generated.endsWith(text)).toBe(true);
}

/** Usage without the prefix cache's share (a repeated prompt is read from the cache). */
function uncached(usage: OpenAI.Responses.ResponseUsage | undefined | null): unknown {
  if (!usage) return usage;
  const { input_tokens_details: _cached, ...rest } = usage;
  return rest;
}

/** Event types with each run of one delta type written once. */
function collapsed(types: string[]): string[] {
  return types.filter((type, i) => !(type.endsWith(".delta") && types[i - 1] === type));
}

/** Server-sent events of a fetch response: each `event:` name with its parsed `data:`. */
async function readEvents(response: globalThis.Response): Promise<{ event: string; data: Record<string, unknown> }[]> {
  const text = await response.text();
  return text
    .split("\n\n")
    .filter((chunk) => chunk.trim() !== "")
    .map((chunk) => {
      const lines = chunk.split("\n");
      const event = lines.find((l) => l.startsWith("event: "))?.slice("event: ".length) ?? "";
      const data = lines.find((l) => l.startsWith("data: "))?.slice("data: ".length) ?? "null";
      return { event, data: JSON.parse(data) as Record<string, unknown> };
    });
}

describe("client.responses.create on the embedded model", () => {
  it("a string input: a message item with output_text equal to the engine's greedy answer; status and usage", async () => {
    const input = "Say something short.";
    const response = await client.responses.create({ model: "any", input, max_output_tokens: 12, temperature: 0, ...NO_THINKING });
    const expected = await greedy(input, 12);
    expect(response.object).toBe("response");
    expect(response.id).toMatch(/^resp_/);
    expect(response.model).toBe(MODEL);
    const items = messages(response);
    expect(items).toHaveLength(1);
    expect(items[0]!.role).toBe("assistant");
    expect(items[0]!.id).toMatch(/^msg_/);
    expect(items[0]!.content.map((part) => part.type)).toEqual(["output_text"]);
    expect(response.output_text).not.toBe("");
    expectAnswer(response.output_text, expected.text);
    if (expected.stop === "eog") {
      expect(response.status).toBe("completed");
      expect(response.incomplete_details).toBeNull();
      expect(items[0]!.status).toBe("completed");
    } else {
      expect(response.status).toBe("incomplete");
      expect(response.incomplete_details?.reason).toBe("max_output_tokens");
      expect(items[0]!.status).toBe("incomplete");
    }
    expect(response.usage?.input_tokens).toBe(expected.ids.length);
    expect(response.usage?.output_tokens).toBe(expected.tokens);
    expect(response.usage?.total_tokens).toBe(expected.ids.length + expected.tokens);
    expect(response.usage?.output_tokens_details.reasoning_tokens).toBe(0);
    // the request's settings are echoed
    expect(response.max_output_tokens).toBe(12);
    expect(response.temperature).toBe(0);
    expect(storeOf(response)).toBe(true);
    expect(response.previous_response_id).toBeNull();
  });

  it("a small max_output_tokens: status incomplete with incomplete_details.reason max_output_tokens", async () => {
    const input = "Tell me a long story about the sea.";
    const expected = await greedy(input, 2);
    // the reference writes two tokens without ending its turn: the limit cut it
    expect(expected.stop).not.toBe("eog");
    const response = await client.responses.create({ model: "any", input, max_output_tokens: 2, temperature: 0, ...NO_THINKING });
    expect(response.status).toBe("incomplete");
    expect(response.incomplete_details).toEqual({ reason: "max_output_tokens" });
    expect(response.usage?.output_tokens).toBe(2);
    expectAnswer(response.output_text, expected.text);
    // the message was cut off too
    expect(messages(response).map((m) => m.status)).toEqual(["incomplete"]);
  });

  it("with the template's thinking on (the default): the output starts as a reasoning item, counted as reasoning tokens", async () => {
    const input = "Think about it.";
    const response = await client.responses.create({ model: "any", input, max_output_tokens: 6, temperature: 0 });
    const { ids } = encodeChat(reference.tokenizer!, [{ role: "user", content: input }]);
    const expected = await reference.generateToEnd(ids, { maxTokens: 6 });
    expect(response.usage?.input_tokens).toBe(ids.length);
    const cut = expected.text.indexOf("</think>");
    const reasoning = cut < 0 ? expected.text : expected.text.slice(0, cut);
    const items = reasoningItems(response);
    expect(response.output[0]?.type).toBe("reasoning");
    expect(items).toHaveLength(1);
    expect(items[0]!.id).toMatch(/^rs_/);
    expect(items[0]!.content).toEqual([{ type: "reasoning_text", text: reasoning }]);
    // no summary was asked for
    expect(items[0]!.summary).toEqual([]);
    expect(items[0]!.encrypted_content ?? undefined).toBeUndefined();
    expect(response.usage!.output_tokens_details.reasoning_tokens).toBeGreaterThan(0);
    expect(response.usage!.output_tokens_details.reasoning_tokens).toBeLessThanOrEqual(response.usage!.output_tokens);
  });
});

describe("the event stream on the embedded model", () => {
  const input = "Stream me a sentence.";
  const params = { model: "any", input, max_output_tokens: 12, temperature: 0, ...NO_THINKING };

  /** The message item's events in order, then the terminal one, for a response of one message. */
  function expectMessageEventOrder(types: string[], terminal: string): void {
    const deltas = types.filter((t) => t === "response.output_text.delta").length;
    expect(deltas).toBeGreaterThan(0);
    expect(types).toEqual([
      "response.created",
      "response.in_progress",
      "response.output_item.added",
      "response.content_part.added",
      ...Array.from({ length: deltas }, () => "response.output_text.delta"),
      "response.output_text.done",
      "response.content_part.done",
      "response.output_item.done",
      terminal,
    ]);
  }

  it("client.responses.stream: created, in_progress, item and part added, deltas, the .done events, then the end; sequence numbers from 0", async () => {
    const whole = await client.responses.create(params);
    const terminal = whole.status === "completed" ? "response.completed" : "response.incomplete";
    const stream = client.responses.stream(params);
    const events: StreamEvent[] = [];
    for await (const event of stream) events.push(event);
    const final = await stream.finalResponse();
    expectMessageEventOrder(
      events.map((e) => e.type),
      terminal,
    );
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
    const deltas = events.flatMap((e) => (e.type === "response.output_text.delta" ? [e.delta] : []));
    expect(final.output_text).toBe(deltas.join(""));
    // streamed at temperature 0 it is the non-streamed answer
    expect(final.output_text).toBe(whole.output_text);
    expect(final.status).toBe(whole.status);
    expect(uncached(final.usage)).toEqual(uncached(whole.usage));
    const done = events.find((e) => e.type === "response.output_text.done");
    expect(done?.type === "response.output_text.done" ? done.text : undefined).toBe(whole.output_text);
    // one response id and one item id throughout
    const created = events[0]!;
    expect(created.type === "response.created" ? created.response.status : undefined).toBe("in_progress");
    expect(final.id).toBe(created.type === "response.created" ? created.response.id : undefined);
    const itemIds = new Set(events.flatMap((e) => ("item_id" in e ? [e.item_id] : [])));
    expect([...itemIds]).toEqual([final.output[0]!.id]);
  });

  it("create({stream: true}): the same events as the stream helper sees, and the last one carries the whole response", async () => {
    const whole = await client.responses.create(params);
    const stream = await client.responses.create({ ...params, stream: true });
    const events: StreamEvent[] = [];
    for await (const event of stream) events.push(event);
    const last = events.at(-1)!;
    expectMessageEventOrder(
      events.map((e) => e.type),
      whole.status === "completed" ? "response.completed" : "response.incomplete",
    );
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
    const text = events.flatMap((e) => (e.type === "response.output_text.delta" ? [e.delta] : [])).join("");
    expect(text).toBe(whole.output_text);
    const response = (last as OpenAI.Responses.ResponseCompletedEvent).response;
    expect(response.status).toBe(whole.status);
    expect(response.output.map((item) => ({ ...item, id: "" }))).toEqual(whole.output.map((item) => ({ ...item, id: "" })));
    expect(uncached(response.usage)).toEqual(uncached(whole.usage));
  });
});

describe("text.format json_schema on the embedded model", () => {
  const schema = {
    type: "object",
    properties: { n: { type: "integer", minimum: 0, maximum: 99 } },
    required: ["n"],
    additionalProperties: false,
  };

  it("the output text is JSON for the schema (or, cut by max_output_tokens, the start of it)", async () => {
    const response = await client.responses.create({
      model: "any",
      input: "Pick a number.",
      max_output_tokens: 48,
      temperature: 0,
      text: { format: { type: "json_schema", name: "number", schema, strict: true } },
      ...NO_THINKING,
    });
    expect(response.text?.format).toMatchObject({ type: "json_schema", name: "number" });
    if (response.status === "completed") {
      const value = JSON.parse(response.output_text) as Record<string, unknown>;
      expect(Object.keys(value)).toEqual(["n"]);
      expect(Number.isInteger(value["n"])).toBe(true);
      expect(value["n"]).toBeGreaterThanOrEqual(0);
      expect(value["n"]).toBeLessThanOrEqual(99);
    } else {
      expect(response.status).toBe("incomplete");
      expect(response.output_text.trimStart().startsWith("{")).toBe(true);
    }
  });

  it("client.responses.parse with zodTextFormat: output_parsed is the schema's value", async () => {
    const Point = z.object({ x: z.number().int().min(-9).max(9), label: z.enum(["a", "b"]) });
    const response = await client.responses.parse({
      model: "any",
      input: "Describe a point.",
      max_output_tokens: 48,
      temperature: 1,
      text: { format: zodTextFormat(Point, "point") },
      ...NO_THINKING,
    });
    expect(response.status).toBe("completed");
    const parsed = response.output_parsed!;
    expect(Point.parse(parsed)).toEqual(parsed);
  });
});

describe("the response store", () => {
  it("retrieve returns the stored response; input_items lists the input; delete, then retrieve is a 404", async () => {
    const input = "Remember this.";
    const created = await client.responses.create({ model: "any", input, max_output_tokens: 4, temperature: 0, ...NO_THINKING });
    const retrieved = await client.responses.retrieve(created.id);
    expect(retrieved).toEqual(created);
    const items = await client.responses.inputItems.list(created.id);
    expect(items.data).toHaveLength(1);
    expect(items.data[0]).toMatchObject({ type: "message", role: "user", content: [{ type: "input_text", text: input }] });
    expect(items.data[0]!.id).toEqual(expect.any(String));
    const deleted = await fetch(`${serving.url}/v1/responses/${created.id}`, {
      method: "DELETE",
      headers: { Authorization: `Bearer ${API_KEY}` },
    });
    expect(deleted.status).toBe(200);
    expect(await deleted.json()).toEqual({ id: created.id, object: "response", deleted: true });
    const gone = await rejection(client.responses.retrieve(created.id));
    expect(gone).toBeInstanceOf(OpenAI.NotFoundError);
    expect(await rejection(client.responses.delete(created.id))).toBeInstanceOf(OpenAI.NotFoundError);
    expect(await rejection(client.responses.inputItems.list(created.id))).toBeInstanceOf(OpenAI.NotFoundError);
  });

  it("client.responses.delete resolves; a later previous_response_id to it is a 404", async () => {
    const created = await client.responses.create({ model: "any", input: "Once.", max_output_tokens: 2, temperature: 0, ...NO_THINKING });
    await client.responses.delete(created.id);
    const error = await rejection(
      client.responses.create({ model: "any", input: "Again.", previous_response_id: created.id, max_output_tokens: 2 }),
    );
    expect(error).toBeInstanceOf(OpenAI.NotFoundError);
  });

  it("previous_response_id: the earlier turns are in the prompt; an unknown id is a 404 naming previous_response_id", async () => {
    const first = await client.responses.create({
      model: "any",
      instructions: "Be brief.",
      input: "Hello.",
      max_output_tokens: 4,
      temperature: 0,
      ...NO_THINKING,
    });
    const second = await client.responses.create({
      model: "any",
      instructions: "Be brief.",
      input: "And again.",
      previous_response_id: first.id,
      max_output_tokens: 4,
      temperature: 0,
      ...NO_THINKING,
    });
    expect(second.previous_response_id).toBe(first.id);
    const conversation: ChatMessage[] = [
      { role: "system", content: "Be brief." },
      { role: "user", content: "Hello." },
      { role: "assistant", content: first.output_text },
      { role: "user", content: "And again." },
    ];
    expect(second.usage?.input_tokens).toBe(encodeChat(reference.tokenizer!, conversation, { enableThinking: false }).ids.length);
    const error = await rejection(
      client.responses.create({ model: "any", input: "Hi.", previous_response_id: "resp_doesnotexist", max_output_tokens: 2 }),
    );
    expect(error).toBeInstanceOf(OpenAI.NotFoundError);
    expect((error as APIError).param).toBe("previous_response_id");
    expect((error as APIError).code).toBe("previous_response_not_found");
  });

  it("store: false responses are not kept", async () => {
    const created = await client.responses.create({
      model: "any",
      input: "Forget this.",
      store: false,
      max_output_tokens: 2,
      temperature: 0,
      ...NO_THINKING,
    });
    expect(storeOf(created)).toBe(false);
    expect(await rejection(client.responses.retrieve(created.id))).toBeInstanceOf(OpenAI.NotFoundError);
    expect(
      await rejection(client.responses.create({ model: "any", input: "Hi.", previous_response_id: created.id, max_output_tokens: 2 })),
    ).toBeInstanceOf(OpenAI.NotFoundError);
  });

  it("bounded in count: with maxResponses 2 the least recently used response goes first", async () => {
    const small = await startTestServer(engine, { modelName: MODEL, contextTokens: CONTEXT, responseStore: { maxResponses: 2 } });
    try {
      const smallClient = new OpenAI({ baseURL: `${small.url}/v1`, apiKey: "none", maxRetries: 0 });
      const create = (input: string) =>
        smallClient.responses.create({ model: "any", input, max_output_tokens: 1, temperature: 0, ...NO_THINKING });
      const a = await create("a");
      const b = await create("b");
      // a is used again (a previous_response_id reads it too): b is now the least recently used
      expect((await smallClient.responses.retrieve(a.id)).id).toBe(a.id);
      const c = await create("c");
      expect(await rejection(smallClient.responses.retrieve(b.id))).toBeInstanceOf(OpenAI.NotFoundError);
      expect((await smallClient.responses.retrieve(a.id)).id).toBe(a.id);
      expect((await smallClient.responses.retrieve(c.id)).id).toBe(c.id);
      expect(small.server.responseStore.size).toBe(2);
      // without the use in between, the oldest goes
      const d = await create("d");
      expect(await rejection(smallClient.responses.retrieve(a.id))).toBeInstanceOf(OpenAI.NotFoundError);
      expect(await rejection(smallClient.responses.retrieve(c.id))).toBeUndefined();
      expect((await smallClient.responses.retrieve(d.id)).id).toBe(d.id);
    } finally {
      await small.close();
    }
  });

  it("bounded in bytes: a response that does not fit with the others pushes them out; one larger than the bound is not kept", async () => {
    const maxBytes = 8000;
    const small = await startTestServer(engine, { modelName: MODEL, contextTokens: CONTEXT, responseStore: { maxBytes } });
    try {
      const smallClient = new OpenAI({ baseURL: `${small.url}/v1`, apiKey: "none", maxRetries: 0 });
      // metadata is echoed in the stored response (and costs no tokens): 16 values of 500 characters at most, as OpenAI bounds it
      const metadata = (keys: number): Record<string, string> =>
        Object.fromEntries(Array.from({ length: keys }, (_, i) => [`k${i}`, "x".repeat(500)]));
      const create = (input: string, keys: number) =>
        smallClient.responses.create({
          model: "any",
          input,
          metadata: metadata(keys),
          max_output_tokens: 1,
          temperature: 0,
          ...NO_THINKING,
        });
      const a = await create("a", 9);
      expect(small.server.responseStore.size).toBe(1);
      expect(small.server.responseStore.bytes).toBeGreaterThan(4500);
      const b = await create("b", 9);
      expect(await rejection(smallClient.responses.retrieve(a.id))).toBeInstanceOf(OpenAI.NotFoundError);
      expect((await smallClient.responses.retrieve(b.id)).metadata).toEqual(metadata(9));
      expect(small.server.responseStore.bytes).toBeLessThanOrEqual(maxBytes);
      // alone over the bound: answered, not kept (and the others stay)
      const big = await create("big", 16);
      expect(big.status).toBe("incomplete");
      expect(await rejection(smallClient.responses.retrieve(big.id))).toBeInstanceOf(OpenAI.NotFoundError);
      expect((await smallClient.responses.retrieve(b.id)).id).toBe(b.id);
      expect(small.server.responseStore.bytes).toBeLessThanOrEqual(maxBytes);
    } finally {
      await small.close();
    }
  });

  it("cancel: a streamed response in progress ends with status cancelled, the text so far kept; cancel of a completed one is a 400", async () => {
    // the answer is held after its first token until the cancel aborts it (order, not timing: however slow the
    // machine, the cancel finds the response in progress)
    const input = "Write a very long essay.";
    const maxTokens = 1800;
    const generate = engine.generate;
    engine.generate = function (this: Engine, prompt, params = {}) {
      const inner = generate.call(this, prompt, params);
      const held = (async function* () {
        let first = true;
        for await (const event of inner) {
          yield event;
          const signal = params.signal;
          if (first && event.type === "token" && signal && !signal.aborted) {
            first = false;
            await new Promise<void>((resolve) => signal.addEventListener("abort", () => resolve(), { once: true }));
          }
        }
      })();
      return Object.assign(held, { result: inner.result });
    };
    let stream: Awaited<ReturnType<typeof client.responses.create>> & AsyncIterable<StreamEvent>;
    try {
      stream = (await client.responses.create({
        model: "any",
        input,
        max_output_tokens: maxTokens,
        temperature: 0,
        stream: true,
      })) as typeof stream;
    } finally {
      // the server called generate when the stream's headers came (with the first token)
      engine.generate = generate;
    }
    const events: StreamEvent[] = [];
    let cancel: Promise<globalThis.Response> | undefined;
    let id = "";
    for await (const event of stream) {
      events.push(event);
      if (event.type === "response.created") id = event.response.id;
      if (cancel === undefined && (event.type === "response.reasoning_text.delta" || event.type === "response.output_text.delta")) {
        // the first delta: the response is being generated
        cancel = fetch(`${serving.url}/v1/responses/${id}/cancel`, { method: "POST", headers: { Authorization: `Bearer ${API_KEY}` } });
      }
    }
    expect(cancel).toBeDefined();
    const answer = await cancel!;
    expect(answer.status).toBe(200);
    const cancelled = (await answer.json()) as Response;
    expect(cancelled.id).toBe(id);
    expect(cancelled.status).toBe("cancelled");
    const last = events.at(-1)!;
    expect(last.type).toBe("response.failed");
    expect((last as OpenAI.Responses.ResponseFailedEvent).response.status).toBe("cancelled");
    // the output up to the cancel: what the deltas said, a prefix of the whole greedy answer
    const said = events
      .flatMap((e) => (e.type === "response.reasoning_text.delta" || e.type === "response.output_text.delta" ? [e.delta] : []))
      .join("");
    const text = cancelled.output
      .map((item) =>
        item.type === "reasoning"
          ? (item.content ?? []).map((c) => c.text).join("")
          : item.type === "message"
            ? item.content.map((c) => (c.type === "output_text" ? c.text : "")).join("")
            : "",
      )
      .join("");
    expect(text).toBe(said);
    expect((cancelled.output.at(-1) as { status?: string } | undefined)?.status).toBe("incomplete");
    expect(cancelled.usage!.output_tokens).toBeLessThan(maxTokens);
    expect((await client.responses.retrieve(id)).status).toBe("cancelled");
    // now complete: a second cancel is a 400
    const again = await rejection(client.responses.cancel(id));
    expect(again).toBeInstanceOf(OpenAI.BadRequestError);
    expect(await rejection(client.responses.cancel("resp_doesnotexist"))).toBeInstanceOf(OpenAI.NotFoundError);
  });

  it("cancel of a completed response is a 400", async () => {
    const created = await client.responses.create({ model: "any", input: "Done.", max_output_tokens: 2, temperature: 0, ...NO_THINKING });
    const error = await rejection(client.responses.cancel(created.id));
    expect(error).toBeInstanceOf(OpenAI.BadRequestError);
    expect((await client.responses.retrieve(created.id)).status).toBe(created.status);
  });
});

describe("errors in OpenAI's shape, as the SDK's error classes", () => {
  const base = { model: "any", input: "hi", max_output_tokens: 2 };

  it("an unknown field, background: true, an input_image part, conversation: 400s naming the field", async () => {
    const cases: { body: Record<string, unknown>; param: string; code?: string }[] = [
      { body: { ...base, frobnicate: 1 }, param: "frobnicate", code: "unknown_parameter" },
      { body: { ...base, background: true }, param: "background" },
      {
        body: {
          ...base,
          input: [
            {
              role: "user",
              content: [
                { type: "input_text", text: "what is this?" },
                { type: "input_image", image_url: "data:image/png;base64,AAAA", detail: "auto" },
              ],
            },
          ],
        },
        param: "input[0].content[1]",
      },
      { body: { ...base, conversation: "conv_1" }, param: "conversation" },
      { body: { ...base, temperature: 3 }, param: "temperature" },
      { body: { ...base, input: [{ type: "item_reference", id: "msg_1" }] }, param: "input[0].type" },
      { body: { ...base, reasoning: { effort: "extreme" } }, param: "reasoning.effort" },
      {
        body: { ...base, text: { format: { type: "json_schema", name: "n", schema: { type: "banana" } } } },
        param: "text.format.schema",
      },
    ];
    for (const { body, param, code } of cases) {
      const error = await rejection(client.responses.create(body as never));
      expect(error, JSON.stringify(body)).toBeInstanceOf(OpenAI.BadRequestError);
      expect((error as APIError).param, JSON.stringify(body)).toBe(param);
      expect((error as APIError).type).toBe("invalid_request_error");
      if (code) expect((error as APIError).code).toBe(code);
    }
  });

  it('every reasoning.effort of the client\'s types is taken ("max" included) and echoed', async () => {
    for (const effort of ["none", "minimal", "low", "medium", "high", "xhigh", "max"] as const) {
      const response = await client.responses.create({ ...base, temperature: 0, max_output_tokens: 1, reasoning: { effort } });
      expect(response.reasoning?.effort).toBe(effort);
    }
  });

  it("a body that is not JSON: 400 with OpenAI's error object", async () => {
    const response = await fetch(`${serving.url}/v1/responses`, {
      method: "POST",
      headers: { Authorization: `Bearer ${API_KEY}`, "Content-Type": "application/json" },
      body: '{"model": "x", "input": ',
    });
    expect(response.status).toBe(400);
    const body = (await response.json()) as { error: { message: string; type: string; param: unknown; code: unknown } };
    expect(body.error.type).toBe("invalid_request_error");
    expect(body.error.message).toEqual(expect.any(String));
    expect(Object.keys(body.error).sort()).toEqual(["code", "message", "param", "type"]);
  });

  it("a wrong API key is a 401 AuthenticationError", async () => {
    const wrong = new OpenAI({ baseURL: `${serving.url}/v1`, apiKey: "wrong", maxRetries: 0 });
    expect(await rejection(wrong.responses.create(base))).toBeInstanceOf(OpenAI.AuthenticationError);
  });
});

describe.each(["json", "xml"] as const)("function calls in the %s format (the scripted tool model)", (format) => {
  let served: TestServer;
  let toolClient: OpenAI;
  const question = "What is the weather in Oslo?";
  const result = "-3 C, clear sky";
  const parameters = { type: "object", properties: { city: { type: "string" } }, required: ["city"] };
  const weather: OpenAI.Responses.FunctionTool = {
    type: "function",
    name: SCRIPT.toolName,
    description: "Current weather of a city",
    parameters,
    strict: false,
  };
  /** The prompt of the second turn, as the chat template renders it. */
  const secondPrompt = (callId: string): number[] =>
    encodeChat(
      served.engine.tokenizer!,
      [
        { role: "user", content: question },
        {
          role: "assistant",
          content: "",
          reasoning_content: SCRIPT.reasoning,
          tool_calls: [{ type: "function", id: callId, function: { name: SCRIPT.toolName, arguments: SCRIPT.toolArguments } }],
        },
        { role: "tool", content: result, tool_call_id: callId, name: SCRIPT.toolName },
      ],
      {
        tools: [{ type: "function", function: { name: SCRIPT.toolName, description: "Current weather of a city", parameters } }],
      },
    ).ids;

  beforeAll(async () => {
    // in the json format the model writes the call as Qwen's template shows it ({"name": ..., "arguments": ...} with
    // spaces): the constraint of a strict tool (the Agents SDK's tools are strict) lets that through as one token
    const args = Object.entries(SCRIPT.toolArguments).map(([key, value]) => `${JSON.stringify(key)}: ${JSON.stringify(value)}`);
    const callBody = format === "json" ? `\n{"name": "${SCRIPT.toolName}", "arguments": {${args.join(", ")}}}\n` : undefined;
    served = await startTestServer(await scriptedToolEngine(TEST_ENGINE_OPTIONS, { format, ...(callBody ? { callBody } : {}) }), {
      modelName: "scripted",
    });
    toolClient = new OpenAI({ baseURL: `${served.url}/v1`, apiKey: "none", maxRetries: 0 });
  });
  afterAll(async () => {
    await served?.close();
    served?.engine.dispose();
  });

  function expectCall(response: Response): FunctionCall {
    expect(response.status).toBe("completed");
    expect(response.output.map((item) => item.type)).toEqual(["reasoning", "function_call"]);
    const reasoning = reasoningItems(response)[0]!;
    expect(reasoning.content).toEqual([{ type: "reasoning_text", text: SCRIPT.reasoning }]);
    const call = functionCalls(response)[0]!;
    expect(call.id).toMatch(/^fc_/);
    expect(call.call_id).toMatch(/^call_/);
    expect(call.name).toBe(SCRIPT.toolName);
    expect(call.status).toBe("completed");
    expect(JSON.parse(call.arguments)).toEqual(SCRIPT.toolArguments);
    expect(response.output_text).toBe("");
    return call;
  }

  it("round trip with previous_response_id: reasoning and function_call items, then the output answered", async () => {
    const first = await toolClient.responses.create({ model: "scripted", input: question, tools: [weather], temperature: 0 });
    const call = expectCall(first);
    const second = await toolClient.responses.create({
      model: "scripted",
      previous_response_id: first.id,
      input: [{ type: "function_call_output", call_id: call.call_id, output: result }],
      tools: [weather],
      temperature: 0,
    });
    expect(second.status).toBe("completed");
    expect(second.output_text).toBe(SCRIPT.answer);
    expect(second.output.map((item) => item.type)).toEqual(["reasoning", "message"]);
    expect(functionCalls(second)).toEqual([]);
    // the stored turn (the reasoning and the call) and the output were rendered through the template
    expect(second.usage?.input_tokens).toBe(secondPrompt(call.call_id).length);
    const items = await toolClient.responses.inputItems.list(second.id);
    expect(items.data).toMatchObject([{ type: "function_call_output", call_id: call.call_id, output: result }]);
  });

  it("round trip with store: false: the whole history sent back, the reasoning as encrypted_content", async () => {
    const input: OpenAI.Responses.ResponseInputItem[] = [{ role: "user", content: question }];
    const first = await toolClient.responses.create({
      model: "scripted",
      input,
      tools: [weather],
      temperature: 0,
      store: false,
      include: ["reasoning.encrypted_content"],
    });
    const call = expectCall(first);
    const reasoning = reasoningItems(first)[0]!;
    expect(reasoning.encrypted_content).toEqual(expect.any(String));
    expect(reasoning.encrypted_content).not.toContain(SCRIPT.reasoning);
    expect(await rejection(toolClient.responses.retrieve(first.id))).toBeInstanceOf(OpenAI.NotFoundError);
    // the reasoning goes back only as its opaque encrypted_content (as a client keeping no reasoning text sends it)
    const second = await toolClient.responses.create({
      model: "scripted",
      input: [
        ...input,
        { type: "reasoning", id: reasoning.id, summary: [], encrypted_content: reasoning.encrypted_content! },
        call,
        { type: "function_call_output", call_id: call.call_id, output: result },
      ],
      tools: [weather],
      temperature: 0,
      store: false,
      include: ["reasoning.encrypted_content"],
    });
    expect(second.output_text).toBe(SCRIPT.answer);
    expect(second.usage?.input_tokens).toBe(secondPrompt(call.call_id).length);
    // the output items sent back as they came
    const third = await toolClient.responses.create({
      model: "scripted",
      input: [...input, ...first.output, { type: "function_call_output", call_id: call.call_id, output: result }] as never,
      tools: [weather],
      temperature: 0,
      store: false,
    });
    expect(third.output_text).toBe(SCRIPT.answer);
    expect(third.usage?.input_tokens).toBe(secondPrompt(call.call_id).length);
  });

  it("streamed: reasoning_text deltas, function_call_arguments deltas that join to .done; finalResponse has the call", async () => {
    const stream = toolClient.responses.stream({ model: "scripted", input: question, tools: [weather], temperature: 0 });
    const events: StreamEvent[] = [];
    for await (const event of stream) events.push(event);
    const final = await stream.finalResponse();
    const call = expectCall(final);
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
    const types = events.map((e) => e.type);
    expect(collapsed(types)).toEqual([
      "response.created",
      "response.in_progress",
      "response.output_item.added",
      "response.content_part.added",
      "response.reasoning_text.delta",
      "response.reasoning_text.done",
      "response.content_part.done",
      "response.output_item.done",
      "response.output_item.added",
      "response.function_call_arguments.delta",
      "response.function_call_arguments.done",
      "response.output_item.done",
      "response.completed",
    ]);
    const reasoning = events.flatMap((e) => (e.type === "response.reasoning_text.delta" ? [e.delta] : [])).join("");
    expect(reasoning).toBe(SCRIPT.reasoning);
    const pieces = events.flatMap((e) => (e.type === "response.function_call_arguments.delta" ? [e.delta] : []));
    expect(pieces.length).toBeGreaterThan(0);
    const done = events.filter(
      (e): e is OpenAI.Responses.ResponseFunctionCallArgumentsDoneEvent => e.type === "response.function_call_arguments.done",
    );
    expect(done).toHaveLength(1);
    expect(pieces.join("")).toBe(done[0]!.arguments);
    expect(done[0]!.arguments).toBe(call.arguments);
    // the call item: added (no arguments yet), its deltas, done
    const added = events.find((e) => e.type === "response.output_item.added" && e.item.type === "function_call");
    expect(added?.type === "response.output_item.added" ? added.item : undefined).toMatchObject({
      type: "function_call",
      call_id: call.call_id,
      name: SCRIPT.toolName,
      arguments: "",
    });
  });

  it("streamed with reasoning.summary auto: summary part and text events the stream helper assembles into the summary", async () => {
    const stream = toolClient.responses.stream({
      model: "scripted",
      input: question,
      tools: [weather],
      temperature: 0,
      reasoning: { summary: "auto" },
    });
    const events: StreamEvent[] = [];
    for await (const event of stream) events.push(event);
    const final = await stream.finalResponse();
    expectCall(final);
    expect(reasoningItems(final)[0]!.summary).toEqual([{ type: "summary_text", text: SCRIPT.reasoning }]);
    const summary = events.flatMap((e) => (e.type === "response.reasoning_summary_text.delta" ? [e.delta] : [])).join("");
    expect(summary).toBe(SCRIPT.reasoning);
    const types = events.map((e) => e.type);
    expect(types.indexOf("response.reasoning_summary_part.added")).toBeLessThan(types.indexOf("response.reasoning_summary_text.delta"));
    expect(types.indexOf("response.reasoning_summary_part.done")).toBeLessThan(types.indexOf("response.output_item.done"));
  });

  /** An Agents SDK runner on the served model, recording the request bodies its openai client sends. */
  function agentsRunner(): { runner: Runner; sent: Record<string, unknown>[] } {
    const sent: Record<string, unknown>[] = [];
    const recording = new OpenAI({
      baseURL: `${served.url}/v1`,
      apiKey: "none",
      maxRetries: 0,
      fetch: async (url, init) => {
        if (typeof init?.body === "string") sent.push(JSON.parse(init.body) as Record<string, unknown>);
        return fetch(url, init);
      },
    });
    return {
      runner: new Runner({ modelProvider: new OpenAIProvider({ openAIClient: recording, useResponses: true }), tracingDisabled: true }),
      sent,
    };
  }

  it("the OpenAI Agents SDK (Responses mode) runs the tool and answers, not streamed and streamed", async () => {
    const { runner, sent } = agentsRunner();
    const seen: unknown[] = [];
    const getWeather = tool({
      name: SCRIPT.toolName,
      description: "Current weather of a city",
      parameters: z.object({ city: z.string() }),
      execute: async (args) => {
        seen.push(args);
        return result;
      },
    });
    const agent = new Agent({ name: "weather", instructions: "Answer from the tool's result.", tools: [getWeather], model: "scripted" });
    const run = await runner.run(agent, question);
    expect(seen).toEqual([SCRIPT.toolArguments]);
    expect(run.finalOutput).toBe(SCRIPT.answer);
    // the SDK's function tools are strict by default; the server takes them
    expect(sent.length).toBe(2);
    expect((sent[0]!["tools"] as { strict?: boolean }[])[0]!.strict).toBe(true);
    // the second turn sends the whole history back (no previous_response_id): the reasoning, the call and its output
    expect(sent[1]!["previous_response_id"]).toBeUndefined();
    expect((sent[1]!["input"] as { type?: string }[]).map((item) => item.type)).toEqual([
      undefined,
      "reasoning",
      "function_call",
      "function_call_output",
    ]);

    const streamed = await runner.run(agent, question, { stream: true });
    for await (const _event of streamed) {
      // drained: the run goes on as its events are read
    }
    await streamed.completed;
    expect(streamed.error).toBeNull();
    expect(seen).toEqual([SCRIPT.toolArguments, SCRIPT.toolArguments]);
    expect(streamed.finalOutput).toBe(SCRIPT.answer);
  });

  it("an Agents SDK tool with an output schema (output_schema in the function tool) is accepted", async () => {
    const { runner, sent } = agentsRunner();
    const getWeather = tool({
      name: SCRIPT.toolName,
      description: "Current weather of a city",
      parameters: z.object({ city: z.string() }),
      outputSchema: z.object({ celsius: z.number() }),
      execute: async () => ({ celsius: -3 }),
    });
    const agent = new Agent({ name: "weather", tools: [getWeather], model: "scripted" });
    const run = await runner.run(agent, question);
    expect((sent[0]!["tools"] as Record<string, unknown>[])[0]!["output_schema"]).toMatchObject({ type: "object" });
    expect(run.finalOutput).toBe(SCRIPT.answer);
  });

  it("what Codex CLI sends: store false, encrypted reasoning, a namespace tool and web_search, no max_output_tokens: 200", async () => {
    const namespaced = { type: "function", name: SCRIPT.toolName, description: "Current weather of a city", strict: false, parameters };
    const history: Record<string, unknown>[] = [
      {
        type: "message",
        id: "msg_dev_1",
        role: "developer",
        content: [{ type: "input_text", text: "<permissions instructions>sandbox: read-only</permissions instructions>" }],
      },
      { type: "message", id: "msg_user_1", role: "user", content: [{ type: "input_text", text: question }] },
    ];
    const body = (input: Record<string, unknown>[]) => ({
      model: "gpt-5.1-codex",
      instructions: "You are Codex, a coding agent.",
      input,
      tools: [
        { type: "namespace", name: "weather", description: "Weather tools", tools: [namespaced] },
        { type: "web_search", external_web_access: false },
      ],
      tool_choice: "auto",
      parallel_tool_calls: false,
      reasoning: { effort: "medium", summary: "auto" },
      store: false,
      stream: true,
      include: ["reasoning.encrypted_content"],
      prompt_cache_key: "0199d5b0-5d4e-7c11-9a5e-3f1c2d3e4f50",
      client_metadata: { originator: "codex_cli_rs", version: "0.80.0" },
    });
    const post = (input: Record<string, unknown>[]) =>
      fetch(`${served.url}/v1/responses`, {
        method: "POST",
        headers: { Authorization: "Bearer none", "Content-Type": "application/json", Accept: "text/event-stream" },
        body: JSON.stringify(body(input)),
      });
    const first = await post(history);
    expect(first.status, await first.clone().text()).toBe(200);
    expect(first.headers.get("content-type")).toMatch(/^text\/event-stream/);
    const events = await readEvents(first);
    expect(events.map((e) => e.data["sequence_number"])).toEqual(events.map((_, i) => i));
    expect(events.every((e) => e.event === e.data["type"])).toBe(true);
    const completed = events.at(-1)!;
    expect(completed.event).toBe("response.completed");
    const response = completed.data["response"] as Response & { tools_not_run?: unknown };
    expect(response.tools_not_run).toEqual([{ type: "web_search", external_web_access: false }]);
    expect(storeOf(response)).toBe(false);
    const reasoning = reasoningItems(response)[0]!;
    // reasoning.summary "auto": the reasoning is its summary too
    expect(reasoning.summary).toEqual([{ type: "summary_text", text: SCRIPT.reasoning }]);
    expect(reasoning.encrypted_content).toEqual(expect.any(String));
    const call = functionCalls(response)[0]!;
    expect(call.name).toBe(SCRIPT.toolName);
    expect(JSON.parse(call.arguments)).toEqual(SCRIPT.toolArguments);
    // the call names its namespace, so that the client finds the tool it belongs to
    expect(call.namespace).toBe("weather");
    const added = events.find(
      (e) => e.event === "response.output_item.added" && (e.data["item"] as { type: string }).type === "function_call",
    );
    expect(added?.data["item"]).toMatchObject({ type: "function_call", name: SCRIPT.toolName, namespace: "weather", arguments: "" });
    // summary events came with the reasoning
    expect(events.map((e) => e.event)).toContain("response.reasoning_summary_text.delta");

    // the next turn: Codex sends the items back (ids and all; the reasoning without its text) with the call's output
    const second = await post([
      ...history,
      { type: "reasoning", id: reasoning.id, summary: reasoning.summary, content: null, encrypted_content: reasoning.encrypted_content },
      { type: "function_call", id: call.id, call_id: call.call_id, name: call.name, namespace: "weather", arguments: call.arguments },
      { type: "function_call_output", call_id: call.call_id, output: result },
    ]);
    expect(second.status, await second.clone().text()).toBe(200);
    const answer = (await readEvents(second)).at(-1)!;
    expect(answer.event).toBe("response.completed");
    const answered = answer.data["response"] as Response;
    expect(messages(answered).map((m) => m.content.map((c) => (c.type === "output_text" ? c.text : "")).join(""))).toEqual([SCRIPT.answer]);
    expect((await fetch(`${served.url}/v1/responses/${answered.id}`)).status).toBe(404);
  });
});

describe("namespace tools that share a function name (Codex with two MCP servers)", () => {
  let served: TestServer;
  const parameters = { type: "object", properties: { city: { type: "string" } }, required: ["city"] };
  const tools = [
    { type: "namespace", name: "mcp_a", description: "server a", tools: [{ type: "function", name: SCRIPT.toolName, parameters }] },
    { type: "namespace", name: "mcp_b", description: "server b", tools: [{ type: "function", name: SCRIPT.toolName, parameters }] },
  ];
  const post = async (body: Record<string, unknown>): Promise<Response> => {
    const response = await fetch(`${served.url}/v1/responses`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ model: "scripted", tools, store: false, ...body }),
    });
    const json = (await response.json()) as Response;
    expect(response.status, JSON.stringify(json)).toBe(200);
    return json;
  };
  /** The chat template's prompt with the tools under the names the model sees. */
  const prompt = (messages: ChatMessage[]): number =>
    encodeChat(served.engine.tokenizer!, messages, {
      tools: ["mcp_a", "mcp_b"].map((ns) => ({ type: "function", function: { name: `${ns}.${SCRIPT.toolName}`, parameters } })),
    }).ids.length;

  beforeAll(async () => {
    // the model calls the first namespace's tool under the name it was shown
    const callBody = `\n{"name": "mcp_a.${SCRIPT.toolName}", "arguments": {"city": "Oslo"}}\n`;
    served = await startTestServer(await scriptedToolEngine(TEST_ENGINE_OPTIONS, { callBody }), { modelName: "scripted" });
  });
  afterAll(async () => {
    await served?.close();
    served?.engine.dispose();
  });

  it("are shown as namespace.name; a call comes back with its own name and namespace, and renders again as it was shown", async () => {
    const question = "Weather in Oslo?";
    const first = await post({ input: question });
    expect(first.usage!.input_tokens).toBe(prompt([{ role: "user", content: question }]));
    const call = first.output.find((item) => item.type === "function_call") as FunctionCall & { namespace?: string };
    expect(call).toMatchObject({ name: SCRIPT.toolName, namespace: "mcp_a" });
    expect(JSON.parse(call.arguments)).toEqual({ city: "Oslo" });
    // Codex sends the call back with its namespace: the template renders it under the name the model saw
    const second = await post({
      input: [
        { role: "user", content: question },
        { type: "function_call", call_id: call.call_id, name: call.name, namespace: "mcp_a", arguments: call.arguments },
        { type: "function_call_output", call_id: call.call_id, output: "-3 C" },
      ],
    });
    expect(second.usage!.input_tokens).toBe(
      prompt([
        { role: "user", content: question },
        {
          role: "assistant",
          content: "",
          tool_calls: [{ type: "function", id: call.call_id, function: { name: `mcp_a.${SCRIPT.toolName}`, arguments: { city: "Oslo" } } }],
        },
        { role: "tool", content: "-3 C", tool_call_id: call.call_id, name: `mcp_a.${SCRIPT.toolName}` },
      ]),
    );
    // two plain tools of one name still cannot be told apart
    const twice = await fetch(`${served.url}/v1/responses`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({
        input: "hi",
        tools: [
          { type: "function", name: "f" },
          { type: "function", name: "f" },
        ],
      }),
    });
    expect(twice.status).toBe(400);
  });
});
