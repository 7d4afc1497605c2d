/**
 * The Anthropic Messages API (`POST /v1/messages`, `/v1/messages/count_tokens`) against the official
 * `@anthropic-ai/sdk` client: the embedded model for answers, streams, usage, stop sequences and errors; the
 * scripted tool-calling model for thinking and tool_use blocks, tool results and tool_choice; and a raw request
 * shaped as Claude Code sends it.
 */
import Anthropic, { type APIError } from "@anthropic-ai/sdk";
import { type ChatMessage, encodeChat, type Engine } from "@keepquant/engine";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  SCRIPT,
  scriptedRoundTrip,
  scriptedToolEngine,
  type ServedDefaultModel,
  serveDefaultModel,
  startTestServer,
  type TestServer,
  TEST_ENGINE_OPTIONS,
} from "./test-support.js";

const API_KEY = "test-key-anthropic";
const MODEL = "tied-4l-f32";
const CONTEXT = 2048;
/**
 * Greedy sampling. The server honours `temperature` (as API versions before 2026-10-21 had it); the SDK's request
 * types (API version 2026-10-21) no longer list it, so it is spread in untyped.
 */
const GREEDY: object = { temperature: 0 };
let served: ServedDefaultModel;
let engine: Engine;
let reference: Engine;
let serving: TestServer;
let client: Anthropic;

beforeAll(async () => {
  served = await serveDefaultModel("kq-messages-", { apiKey: API_KEY, modelName: MODEL, synthetic: true, contextTokens: CONTEXT });
  ({ engine, reference, serving } = served);
  // the SDK appends /v1/messages to the base URL: the server's root
  client = new Anthropic({ baseURL: serving.url, apiKey: API_KEY, maxRetries: 0 });
});

afterAll(() => served?.close());

/** Every prompt token is counted once: fresh, read from the cache or written to it. */
function promptTokens(usage: Pick<Anthropic.Usage, "input_tokens" | "cache_read_input_tokens" | "cache_creation_input_tokens">): number {
  return usage.input_tokens + (usage.cache_read_input_tokens ?? 0) + (usage.cache_creation_input_tokens ?? 0);
}

function textOf(message: Anthropic.Message): string {
  return message.content.map((block) => (block.type === "text" ? block.text : "")).join("");
}

function toolUses(message: Anthropic.Message): Anthropic.ToolUseBlock[] {
  return message.content.filter((block): block is Anthropic.ToolUseBlock => block.type === "tool_use");
}

/** A message's content without the (random) tool_use ids, to compare two answers. */
function withoutIds(content: readonly Anthropic.ContentBlock[]): unknown[] {
  return content.map((block) => (block.type === "tool_use" ? { type: block.type, name: block.name, input: block.input } : { ...block }));
}

/** A raw event stream's events, `{event, data}` in order. */
function parseSse(text: string): { event: string; data: { type: string } & Record<string, unknown> }[] {
  return text
    .split("\n\n")
    .filter((chunk) => chunk.trim() !== "")
    .map((chunk) => {
      const lines = chunk.split("\n");
      const event = lines.find((l) => l.startsWith("event: "))?.slice("event: ".length) ?? "";
      const data = lines
        .filter((l) => l.startsWith("data: "))
        .map((l) => l.slice("data: ".length))
        .join("\n");
      return { event, data: JSON.parse(data) as { type: string } & Record<string, unknown> };
    });
}

/**
 * The Messages stream's grammar: message_start, then per block (indices 0, 1, ... in order) content_block_start,
 * its deltas and content_block_stop, then one message_delta and message_stop; `ping` may come anywhere.
 * Returns the block types in order.
 */
function expectEventOrder(events: readonly { type: string; index?: unknown; content_block?: unknown }[]): string[] {
  const types = events.map((e) => e.type).filter((t) => t !== "ping");
  expect(types[0]).toBe("message_start");
  expect(types.slice(-2)).toEqual(["message_delta", "message_stop"]);
  const blocks: string[] = [];
  let open: number | undefined;
  for (const event of events.filter((e) => e.type !== "ping").slice(1, -2)) {
    if (event.type === "content_block_start") {
      expect(open, "a block starts while another is open").toBeUndefined();
      expect(event.index).toBe(blocks.length);
      open = blocks.length;
      blocks.push((event.content_block as { type: string }).type);
    } else if (event.type === "content_block_delta") {
      expect(event.index).toBe(open);
    } else if (event.type === "content_block_stop") {
      expect(event.index).toBe(open);
      open = undefined;
    } else {
      throw new Error(`unexpected ${event.type} between message_start and message_delta`);
    }
  }
  expect(open, "a block left open").toBeUndefined();
  return blocks;
}

async function rejection(promise: Promise<unknown>): Promise<APIError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(Anthropic.APIError);
  return error as APIError;
}

async function post(url: string, body: unknown, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(url, {
    method: "POST",
    headers: { "Content-Type": "application/json", ...headers },
    body: JSON.stringify(body),
  });
}

describe("the official Anthropic client against keepquant serve (the embedded model)", () => {
  const system = "You are terse.";
  const user = "Hello there";
  const chat: ChatMessage[] = [
    { role: "system", content: system },
    { role: "user", content: user },
  ];

  it("messages.create: a text block equal to the engine's greedy output, usage, stop_reason max_tokens", async () => {
    const request: Anthropic.MessageCreateParamsNonStreaming = {
      model: MODEL,
      system,
      messages: [{ role: "user", content: user }],
      max_tokens: 12,
      ...GREEDY,
      thinking: { type: "disabled" },
    };
    const message = await client.messages.create(request);
    const { ids } = encodeChat(reference.tokenizer!, chat, { enableThinking: false });
    const expected = await reference.generateToEnd(ids, { maxTokens: 12 });
    expect(expected.stopReason).toBe("max_tokens");
    expect(message.id).toMatch(/^msg_/);
    expect(message.type).toBe("message");
    expect(message.role).toBe("assistant");
    expect(message.model).toBe(MODEL);
    expect(message.content).toEqual([{ type: "text", text: expected.text.trimStart() }]);
    expect(message.stop_reason).toBe("max_tokens");
    expect(message.stop_sequence).toBeNull();
    expect(promptTokens(message.usage)).toBe(ids.length);
    expect(message.usage.output_tokens).toBe(expected.tokens.length);

    // the same request again: the system prompt's head comes from the prefix cache, and every token is still counted once
    const again = await client.messages.create(request);
    expect(again.content).toEqual(message.content);
    expect(again.usage.cache_read_input_tokens).toBeGreaterThan(0);
    expect(promptTokens(again.usage)).toBe(ids.length);
    expect(again.usage.input_tokens).toBe(ids.length - again.usage.cache_read_input_tokens!);
  });

  it("with the template's thinking on (the default), the output is a thinking block with a signature", async () => {
    const message = await client.messages.create({
      model: MODEL,
      system,
      messages: [{ role: "user", content: user }],
      max_tokens: 8,
      ...GREEDY,
    });
    const { ids } = encodeChat(reference.tokenizer!, chat);
    const expected = await reference.generateToEnd(ids, { maxTokens: 8 });
    expect(expected.text).not.toContain("</think>");
    expect(message.content).toEqual([{ type: "thinking", thinking: expected.text, signature: expect.any(String) }]);
    expect(message.stop_reason).toBe("max_tokens");
    expect(promptTokens(message.usage)).toBe(ids.length);
    expect(message.usage.output_tokens).toBe(8);
  });

  it("stop_sequences: stop_reason stop_sequence, stop_sequence names the one matched, the text ends before it", async () => {
    const params = {
      model: MODEL,
      messages: [{ role: "user" as const, content: "Once upon a time" }],
      max_tokens: 16,
      ...GREEDY,
      thinking: { type: "disabled" as const },
    };
    const full = textOf(await client.messages.create(params));
    // a piece of the greedy answer's second half (no white space at either end): the same request must meet it
    const middle = Math.floor(full.length / 2);
    const stop = full.slice(middle, middle + 3).trim();
    expect(stop.length).toBeGreaterThan(0);
    const stopped = await client.messages.create({ ...params, stop_sequences: ["\u0007never written", stop] });
    expect(stopped.stop_reason).toBe("stop_sequence");
    expect(stopped.stop_sequence).toBe(stop);
    expect(textOf(stopped)).toBe(full.slice(0, full.indexOf(stop)));
    expect(stopped.usage.output_tokens).toBeLessThan(16);
  });

  it("messages.stream: text events add up to the final message, which equals the non-streamed answer", async () => {
    for (const thinking of [{ type: "disabled" as const }, undefined]) {
      const params = {
        model: MODEL,
        system,
        messages: [{ role: "user" as const, content: "Stream me something" }],
        max_tokens: 10,
        ...GREEDY,
        ...(thinking ? { thinking } : {}),
      };
      const whole = await client.messages.create(params);
      const stream = client.messages.stream(params);
      const texts: string[] = [];
      const thoughts: string[] = [];
      const events: Anthropic.MessageStreamEvent[] = [];
      stream.on("text", (delta) => texts.push(delta));
      stream.on("thinking", (delta) => thoughts.push(delta));
      stream.on("streamEvent", (event) => events.push(event));
      const final = await stream.finalMessage();
      expect(final.content).toEqual(whole.content);
      expect(final.stop_reason).toBe(whole.stop_reason);
      expect(final.stop_sequence).toBeNull();
      expect(final.usage.output_tokens).toBe(whole.usage.output_tokens);
      expect(promptTokens(final.usage)).toBe(promptTokens(whole.usage));
      expect(final.model).toBe(MODEL);
      expect(final.id).toMatch(/^msg_/);
      expect(texts.join("")).toBe(textOf(whole));
      expect(thoughts.join("")).toBe(whole.content.map((b) => (b.type === "thinking" ? b.thinking : "")).join(""));
      expect(expectEventOrder(events)).toEqual(whole.content.map((b) => b.type));
      if (thinking) expect(texts.length).toBeGreaterThan(1);
      else expect(thoughts.length).toBeGreaterThan(1);
    }
  });

  it("stream: true: the raw events in order (ping included); the deltas and message_delta make the non-streamed message", async () => {
    const params = {
      model: MODEL,
      messages: [{ role: "user" as const, content: "Events, please" }],
      max_tokens: 6,
      ...GREEDY,
      thinking: { type: "disabled" as const },
    };
    const whole = await client.messages.create(params);
    const events: Anthropic.MessageStreamEvent[] = [];
    for await (const event of await client.messages.create({ ...params, stream: true })) events.push(event);
    expect(expectEventOrder(events)).toEqual(["text"]);
    const start = events[0] as Anthropic.RawMessageStartEvent;
    expect(start.message).toMatchObject({ type: "message", role: "assistant", model: MODEL, content: [], stop_reason: null });
    expect(start.message.id).toMatch(/^msg_/);
    expect(events[1]).toEqual({ type: "content_block_start", index: 0, content_block: { type: "text", text: "" } });
    const text = events.map((e) => (e.type === "content_block_delta" && e.delta.type === "text_delta" ? e.delta.text : "")).join("");
    expect(text).toBe(textOf(whole));
    const delta = events.at(-2) as Anthropic.RawMessageDeltaEvent;
    expect(delta.delta).toMatchObject({ stop_reason: "max_tokens", stop_sequence: null });
    expect(delta.usage.output_tokens).toBe(6);
    expect(promptTokens({ ...delta.usage, input_tokens: delta.usage.input_tokens ?? 0 })).toBe(promptTokens(whole.usage));

    // the bytes on the wire: named events, each name its data's type, a ping after message_start
    const response = await client.messages.create({ ...params, stream: true }).asResponse();
    expect(response.headers.get("content-type")).toMatch(/^text\/event-stream/);
    const raw = parseSse(await response.text());
    for (const { event, data } of raw) expect(event).toBe(data.type);
    expect(raw.map((e) => e.event).slice(0, 2)).toEqual(["message_start", "ping"]);
    expect(raw.filter((e) => e.event === "ping")).toHaveLength(1);
    expect(raw.filter((e) => e.event !== "ping").map((e) => e.data)).toEqual(
      events.map((e) => (e.type === "message_start" ? { ...e, message: { ...e.message, id: expect.stringMatching(/^msg_/) } } : e)),
    );
  });

  it("messages.countTokens equals the prompt tokens of a create with the same system and messages", async () => {
    const messages: Anthropic.MessageParam[] = [
      { role: "user", content: [{ type: "text", text: "First question" }] },
      { role: "assistant", content: "First answer." },
      { role: "user", content: "Second question" },
    ];
    for (const thinking of [{ type: "disabled" as const }, undefined]) {
      const counted = await client.messages.countTokens({ model: MODEL, system, messages, ...(thinking ? { thinking } : {}) });
      const message = await client.messages.create({ model: MODEL, system, messages, max_tokens: 1, ...(thinking ? { thinking } : {}) });
      expect(counted).toEqual({ input_tokens: promptTokens(message.usage) });
      const { ids } = encodeChat(
        reference.tokenizer!,
        [
          { role: "system", content: system },
          { role: "user", content: "First question" },
          { role: "assistant", content: "First answer." },
          { role: "user", content: "Second question" },
        ],
        thinking ? { enableThinking: false } : {},
      );
      expect(counted.input_tokens).toBe(ids.length);
    }
  });
});

describe("fields of the SDK's API version (2026-10-21)", () => {
  it("top-level cache_control, speed and diagnostics, effort xhigh and thinking between_tools are accepted (create and countTokens)", async () => {
    const messages: Anthropic.MessageParam[] = [{ role: "user", content: "hi" }];
    const message = await client.messages.create({
      model: MODEL,
      max_tokens: 2,
      messages,
      cache_control: { type: "ephemeral", ttl: "1h" },
      speed: "fast",
      diagnostics: { previous_message_id: null },
      output_config: { effort: "xhigh" },
      thinking: { type: "between_tools" },
      ...GREEDY,
    });
    // between_tools is thinking turned off: the template's prompt without the opened <think>
    const { ids } = encodeChat(reference.tokenizer!, [{ role: "user", content: "hi" }], { enableThinking: false });
    expect(promptTokens(message.usage)).toBe(ids.length);
    expect(message.usage.output_tokens).toBe(2);
    const counted = await client.messages.countTokens({
      model: MODEL,
      messages,
      cache_control: { type: "ephemeral" },
      speed: "standard",
      thinking: { type: "between_tools" },
      output_config: { effort: "xhigh" },
    });
    expect(counted.input_tokens).toBe(ids.length);
    // an effort that names a member of Object.prototype is no effort level
    for (const effort of ["toString", "__proto__"]) {
      const odd = await rejection(client.messages.create({ model: MODEL, max_tokens: 2, messages, output_config: { effort } } as never));
      expect(odd, effort).toBeInstanceOf(Anthropic.BadRequestError);
      expect(odd.apiMessage).toMatch(/output_config\.effort must be/);
    }
  });
});

describe("errors in Anthropic's shape, as the SDK's error classes", () => {
  const messages: Anthropic.MessageParam[] = [{ role: "user", content: "hi" }];

  it("400 invalid_request_error: missing max_tokens, an image block (naming vision), an unknown field, a bad value", async () => {
    const missing = await rejection(client.messages.create({ model: MODEL, messages } as never));
    expect(missing).toBeInstanceOf(Anthropic.BadRequestError);
    expect(missing.status).toBe(400);
    expect(missing.error).toEqual({
      type: "error",
      error: { type: "invalid_request_error", message: expect.stringMatching(/max_tokens/) },
    });
    expect(missing.type).toBe("invalid_request_error");

    const image = await rejection(
      client.messages.create({
        model: MODEL,
        max_tokens: 4,
        messages: [
          {
            role: "user",
            content: [
              { type: "image", source: { type: "base64", media_type: "image/png", data: "iVBORw0KGgo=" } },
              { type: "text", text: "What is this?" },
            ],
          },
        ],
      }),
    );
    expect(image).toBeInstanceOf(Anthropic.BadRequestError);
    expect(image.error).toMatchObject({ type: "error", error: { type: "invalid_request_error" } });
    expect(image.apiMessage).toMatch(/vision/);
    expect(image.apiMessage).toMatch(/messages\[0\]\.content\[0\]/);

    const unknown = await rejection(client.messages.create({ model: MODEL, max_tokens: 4, messages, frobnicate: true } as never));
    expect(unknown).toBeInstanceOf(Anthropic.BadRequestError);
    expect(unknown.apiMessage).toMatch(/frobnicate/);

    const hot = await rejection(client.messages.create({ model: MODEL, max_tokens: 4, messages, temperature: 1.5 } as never));
    expect(hot).toBeInstanceOf(Anthropic.BadRequestError);
    expect(hot.apiMessage).toMatch(/temperature/);

    const unknownTool = await rejection(
      client.messages.create({
        model: MODEL,
        max_tokens: 4,
        messages,
        tools: [{ name: "a", input_schema: { type: "object" } }],
        tool_choice: { type: "tool", name: "b" },
      }),
    );
    expect(unknownTool).toBeInstanceOf(Anthropic.BadRequestError);
    expect(unknownTool.apiMessage).toMatch(/"b"/);

    // a prompt over the context: refused after the template ran, still in Anthropic's shape
    const long = await rejection(
      client.messages.create({ model: MODEL, max_tokens: 4, messages: [{ role: "user", content: "hello ".repeat(CONTEXT) }] }),
    );
    expect(long).toBeInstanceOf(Anthropic.BadRequestError);
    expect(long.error).toMatchObject({ type: "error", error: { type: "invalid_request_error" } });
    expect(long.apiMessage).toMatch(/maximum context length is 2048 tokens/);

    // count_tokens has the same shape
    const count = await rejection(client.messages.countTokens({ model: MODEL, messages: "hi" } as never));
    expect(count).toBeInstanceOf(Anthropic.BadRequestError);
    expect(count.error).toMatchObject({ type: "error", error: { type: "invalid_request_error" } });
  });

  it("401 authentication_error for a wrong or missing key; the SDK's key, x-api-key and Authorization: Bearer accepted", async () => {
    // the SDK (1.17.0) sends its key as Authorization: Bearer (earlier versions sent x-api-key)
    const sent: Headers[] = [];
    const recording = new Anthropic({
      baseURL: serving.url,
      apiKey: API_KEY,
      maxRetries: 0,
      fetch: (input, init) => {
        sent.push(new Headers(init?.headers));
        return fetch(input, init);
      },
    });
    expect((await recording.messages.create({ model: MODEL, max_tokens: 1, messages })).type).toBe("message");
    expect(sent).toHaveLength(1);
    expect(sent[0]!.get("authorization")).toBe(`Bearer ${API_KEY}`);
    expect(sent[0]!.get("anthropic-version")).toMatch(/^\d{4}-\d{2}-\d{2}$/);

    const wrong = new Anthropic({ baseURL: serving.url, apiKey: "nope", maxRetries: 0 });
    const error = await rejection(wrong.messages.create({ model: MODEL, max_tokens: 1, messages }));
    expect(error).toBeInstanceOf(Anthropic.AuthenticationError);
    expect(error.error).toEqual({ type: "error", error: { type: "authentication_error", message: expect.any(String) } });
    await expect(wrong.messages.countTokens({ model: MODEL, messages })).rejects.toBeInstanceOf(Anthropic.AuthenticationError);

    const body = { model: MODEL, max_tokens: 1, messages };
    const missing = await post(`${serving.url}/v1/messages`, body);
    expect(missing.status).toBe(401);
    expect(((await missing.json()) as { type: string; error: { type: string } }).error.type).toBe("authentication_error");
    for (const headers of [{ "x-api-key": API_KEY }, { Authorization: `Bearer ${API_KEY}` }] as Record<string, string>[]) {
      const response = await post(`${serving.url}/v1/messages`, body, headers);
      expect(response.status, JSON.stringify(headers)).toBe(200);
      expect(((await response.json()) as Anthropic.Message).type).toBe("message");
    }
  });

  it("anthropic-version and anthropic-beta headers and the ?beta=true query are accepted (fetch and the SDK's beta client)", async () => {
    const body = { model: MODEL, max_tokens: 1, messages };
    const headers = {
      "x-api-key": API_KEY,
      "anthropic-version": "2023-06-01",
      "anthropic-beta": "interleaved-thinking-2025-05-14,fine-grained-tool-streaming-2025-05-14",
    };
    for (const route of ["/v1/messages", "/v1/messages?beta=true"]) {
      const response = await post(`${serving.url}${route}`, body, headers);
      expect(response.status, route).toBe(200);
      expect(((await response.json()) as Anthropic.Message).usage.output_tokens).toBe(1);
    }
    const counted = await post(`${serving.url}/v1/messages/count_tokens?beta=true`, { model: MODEL, messages }, headers);
    expect(counted.status).toBe(200);
    expect(((await counted.json()) as Anthropic.MessageTokensCount).input_tokens).toBeGreaterThan(0);
    // the SDK's beta client sends ?beta=true and anthropic-beta itself
    const beta = await client.beta.messages.create({ ...body, betas: ["interleaved-thinking-2025-05-14"] });
    expect(beta.type).toBe("message");
    expect(beta.usage.output_tokens).toBe(1);
  });
});

describe("what Claude Code sends", () => {
  const headers = {
    "x-api-key": API_KEY,
    "anthropic-version": "2023-06-01",
    "anthropic-beta":
      "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27,fine-grained-tool-streaming-2025-05-14",
    "anthropic-dangerous-direct-browser-access": "true",
    "x-app": "cli",
    "User-Agent": "claude-cli/2.0.0 (external, cli)",
  };
  const SYSTEM = [
    "You are Claude Code, Anthropic's official CLI for Claude.",
    "You are an interactive CLI tool that helps users with software engineering tasks.",
  ];
  const SYSTEM_TURN = "Tools run in the user's working directory.";
  const REMINDER = "<system-reminder>\nAs you answer the user's questions, you can use the following context.\n</system-reminder>";
  const prompt = {
    model: "claude-sonnet-4-5-20250929",
    system: SYSTEM.map((text) => ({ type: "text", text, cache_control: { type: "ephemeral" } })),
    messages: [
      {
        role: "user",
        content: [
          { type: "text", text: REMINDER },
          { type: "text", text: "list the files", cache_control: { type: "ephemeral" } },
        ],
      },
      { role: "system", content: [{ type: "text", text: SYSTEM_TURN }] },
    ],
    tools: [
      {
        name: "Bash",
        description: "Executes a given bash command",
        input_schema: {
          $schema: "http://json-schema.org/draft-07/schema#",
          type: "object",
          properties: { command: { type: "string", description: "The command to execute" }, timeout: { type: "number" } },
          required: ["command"],
          additionalProperties: false,
        },
      },
      {
        name: "WebFetch",
        description: "Fetches a URL",
        input_schema: {
          $schema: "http://json-schema.org/draft-07/schema#",
          type: "object",
          properties: { url: { type: "string", format: "uri" } },
          required: ["url"],
          additionalProperties: false,
        },
        defer_loading: true,
        cache_control: { type: "ephemeral" },
      },
    ],
    thinking: { type: "adaptive" },
    output_config: { effort: "medium" },
    context_management: { edits: [{ type: "clear_thinking_20251015", keep: "all" }] },
  };
  const request = { ...prompt, max_tokens: 32000, metadata: { user_id: "x" } };
  /** the prompt as the template gets it: one system message (the system blocks, then the system turn), the tools, thinking on */
  const promptIds = (): number[] =>
    encodeChat(
      reference.tokenizer!,
      [
        { role: "system", content: [...SYSTEM, SYSTEM_TURN].join("\n\n") },
        { role: "user", content: `${REMINDER}\nlist the files` },
      ],
      {
        enableThinking: true,
        tools: prompt.tools.map((tool) => ({
          type: "function",
          function: { name: tool.name, description: tool.description, parameters: tool.input_schema },
        })),
      },
    ).ids;

  it("count_tokens: the template's render of one system message (system blocks, then the system turn), the tools, thinking on", async () => {
    const counted = await post(`${serving.url}/v1/messages/count_tokens?beta=true`, prompt, headers);
    expect(counted.status).toBe(200);
    expect((await counted.json()) as Anthropic.MessageTokensCount).toEqual({ input_tokens: promptIds().length });
  });

  it("/v1/messages?beta=true with max_tokens 32000: answered (200, streamed and not), the cap said in max_tokens_capped", async () => {
    const ids = promptIds();
    // a server whose context leaves 8 tokens after this prompt (on the same engine): the answer stays short
    const small = await startTestServer(engine, { apiKey: API_KEY, modelName: MODEL, contextTokens: ids.length + 8 });
    try {
      // as sent (sampled at the default temperature): whatever the sample, at most the 8 tokens granted
      const streamed = await post(`${small.url}/v1/messages?beta=true`, { ...request, stream: true }, headers);
      expect(streamed.status).toBe(200);
      expect(streamed.headers.get("content-type")).toMatch(/^text\/event-stream/);
      expect(streamed.headers.get("x-max-tokens-capped")).toBe("8");
      const events = parseSse(await streamed.text());
      expectEventOrder(events.map((e) => e.data));
      const delta = events.at(-2)!.data as unknown as Anthropic.RawMessageDeltaEvent & { max_tokens_capped?: unknown };
      expect(delta.max_tokens_capped).toEqual({ requested: 32000, granted: 8 });
      expect(delta.usage.output_tokens).toBeGreaterThan(0);
      expect(delta.usage.output_tokens).toBeLessThanOrEqual(8);
      expect(promptTokens({ ...delta.usage, input_tokens: delta.usage.input_tokens ?? 0 })).toBe(ids.length);
      expect(["max_tokens", "end_turn", "tool_use"]).toContain(delta.delta.stop_reason);

      // greedy (temperature 0), not streamed: the engine's answer in 8 tokens
      const expected = await reference.generateToEnd(ids, { maxTokens: 8 });
      expect(expected.text).not.toMatch(/<\/think>|<tool_call>/);
      const whole = await post(`${small.url}/v1/messages?beta=true`, { ...request, ...GREEDY }, headers);
      expect(whole.status).toBe(200);
      expect(whole.headers.get("x-max-tokens-capped")).toBe("8");
      const message = (await whole.json()) as Anthropic.Message & { max_tokens_capped?: unknown };
      expect(message.type).toBe("message");
      expect(message.content).toEqual([{ type: "thinking", thinking: expected.text, signature: expect.any(String) }]);
      expect(message.stop_reason).toBe(expected.stopReason === "max_tokens" ? "max_tokens" : "end_turn");
      expect(message.usage.output_tokens).toBe(expected.tokens.length);
      expect(promptTokens(message.usage)).toBe(ids.length);
      expect(message.max_tokens_capped).toEqual({ requested: 32000, granted: 8 });
    } finally {
      await small.close();
    }
    // on the main server the same request is answered too (a short max_tokens: nothing capped)
    const fits = await post(`${serving.url}/v1/messages?beta=true`, { ...request, max_tokens: 4 }, headers);
    expect(fits.status).toBe(200);
    expect(fits.headers.get("x-max-tokens-capped")).toBeNull();
    expect(((await fits.json()) as Record<string, unknown>)["max_tokens_capped"]).toBeUndefined();
  });
});

describe.each(["json", "xml"] as const)(
  "tool use in the %s format (a scripted model that calls a tool, then answers from its result)",
  (format) => {
    let tools: TestServer;
    let toolClient: Anthropic;
    const weatherTool: Anthropic.Tool = {
      name: SCRIPT.toolName,
      description: "Current weather of a city",
      input_schema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
    };
    /** the same tool as the template gets it */
    const functionTool = {
      type: "function",
      function: { name: weatherTool.name, description: weatherTool.description, parameters: weatherTool.input_schema },
    };
    const question: Anthropic.MessageParam = { role: "user", content: "What is the weather in Oslo?" };

    beforeAll(async () => {
      // the JSON call in the spelling the forced-call grammar writes (`{"name": ..., "arguments": ...}`, a space after
      // each colon), so that the scripted body token is one the grammar allows when tool_choice forces the call
      const callBody =
        format === "json" ? `\n{"name": "${SCRIPT.toolName}", "arguments": {"city": "${SCRIPT.toolArguments.city}"}}\n` : undefined;
      tools = await startTestServer(await scriptedToolEngine(TEST_ENGINE_OPTIONS, { format, ...(callBody ? { callBody } : {}) }), {
        modelName: "scripted",
      });
      toolClient = new Anthropic({ baseURL: tools.url, apiKey: "none", maxRetries: 0 });
    });
    afterAll(async () => {
      await tools?.close();
      tools?.engine.dispose();
    });

    it("round trip: thinking and tool_use blocks with stop_reason tool_use, then the tool_result, then the answer (end_turn)", async () => {
      const first = await toolClient.messages.create({
        model: "scripted",
        max_tokens: 16,
        messages: [question],
        tools: [weatherTool],
        ...GREEDY,
      });
      expect(first.stop_reason).toBe("tool_use");
      expect(first.stop_sequence).toBeNull();
      expect(first.content).toEqual([
        { type: "thinking", thinking: SCRIPT.reasoning, signature: expect.any(String) },
        { type: "tool_use", id: expect.stringMatching(/^toolu_/), name: SCRIPT.toolName, input: SCRIPT.toolArguments },
      ]);
      expect(promptTokens(first.usage)).toBe(
        encodeChat(tools.engine.tokenizer!, [question as ChatMessage], { tools: [functionTool] }).ids.length,
      );
      const call = toolUses(first)[0]!;

      const messages: Anthropic.MessageParam[] = [
        question,
        { role: "assistant", content: first.content },
        { role: "user", content: [{ type: "tool_result", tool_use_id: call.id, content: "-3 C, clear sky" }] },
      ];
      const second = await toolClient.messages.create({ model: "scripted", max_tokens: 16, messages, tools: [weatherTool], ...GREEDY });
      expect(second.stop_reason).toBe("end_turn");
      expect(second.content).toEqual([
        { type: "thinking", thinking: SCRIPT.reasoning, signature: expect.any(String) },
        { type: "text", text: SCRIPT.answer },
      ]);
      // the server rendered the assistant's call and the tool result through the template
      const expectedPrompt = encodeChat(tools.engine.tokenizer!, scriptedRoundTrip(call.id, "-3 C, clear sky"), { tools: [functionTool] });
      expect(promptTokens(second.usage)).toBe(expectedPrompt.ids.length);
      // count_tokens renders the same prompt
      expect(await toolClient.messages.countTokens({ model: "scripted", messages, tools: [weatherTool] })).toEqual({
        input_tokens: expectedPrompt.ids.length,
      });

      // a tool_result as text blocks with is_error: the model reads it, and answers
      const failed = await toolClient.messages.create({
        model: "scripted",
        max_tokens: 16,
        ...GREEDY,
        tools: [weatherTool],
        messages: [
          question,
          // toolset_name (the SDK's blocks have it) is accepted on tool_use and tool_result blocks
          { role: "assistant", content: first.content.map((b) => (b.type === "tool_use" ? { ...b, toolset_name: null } : b)) },
          {
            role: "user",
            content: [
              {
                type: "tool_result",
                tool_use_id: call.id,
                content: [{ type: "text", text: "no such city" }],
                is_error: true,
                toolset_name: null,
              },
              { type: "text", text: "Try again later." },
            ],
          },
        ],
      });
      expect(failed.stop_reason).toBe("end_turn");
      expect(textOf(failed)).toBe(SCRIPT.answer);
    });

    it("streamed: thinking deltas with a signature, input_json_delta pieces that join to the input, finalMessage's tool_use", async () => {
      const params = { model: "scripted", max_tokens: 16, messages: [question], tools: [weatherTool], ...GREEDY };
      const whole = await toolClient.messages.create(params);
      const stream = toolClient.messages.stream(params);
      const events: Anthropic.MessageStreamEvent[] = [];
      const pieces: string[] = [];
      const snapshots: unknown[] = [];
      const signatures: string[] = [];
      stream.on("streamEvent", (event) => events.push(event));
      stream.on("inputJson", (partial, snapshot) => {
        pieces.push(partial);
        snapshots.push(snapshot);
      });
      stream.on("signature", (signature) => signatures.push(signature));
      const final = await stream.finalMessage();
      expect(expectEventOrder(events)).toEqual(["thinking", "tool_use"]);
      expect(final.stop_reason).toBe("tool_use");
      expect(withoutIds(final.content)).toEqual(withoutIds(whole.content));
      expect(toolUses(final)[0]!.input).toEqual(SCRIPT.toolArguments);
      expect(pieces.length).toBeGreaterThan(0);
      expect(JSON.parse(pieces.join(""))).toEqual(SCRIPT.toolArguments);
      expect(snapshots.at(-1)).toEqual(SCRIPT.toolArguments);
      expect(signatures).toHaveLength(1);
      const toolStart = events.find(
        (e): e is Anthropic.RawContentBlockStartEvent => e.type === "content_block_start" && e.content_block.type === "tool_use",
      )!;
      expect(toolStart.content_block).toEqual({ type: "tool_use", id: expect.stringMatching(/^toolu_/), name: SCRIPT.toolName, input: {} });
      // every delta of the tool_use block is JSON, of the thinking block thinking or its signature (just before its stop)
      for (const event of events) {
        if (event.type !== "content_block_delta") continue;
        expect(event.delta.type).toMatch(event.index === 0 ? /^(thinking_delta|signature_delta)$/ : /^input_json_delta$/);
      }
      const thinkingDeltas = events.filter((e) => e.type === "content_block_delta" && e.index === 0);
      expect(thinkingDeltas.at(-1)!).toMatchObject({ delta: { type: "signature_delta" } });
      expect(
        thinkingDeltas.map((e) => (e.type === "content_block_delta" && e.delta.type === "thinking_delta" ? e.delta.thinking : "")).join(""),
      ).toBe(SCRIPT.reasoning);
      const delta = events.at(-2) as Anthropic.RawMessageDeltaEvent;
      expect(delta.delta.stop_reason).toBe("tool_use");
      expect(delta.usage.output_tokens).toBe(whole.usage.output_tokens);

      // the answer after the tool result, streamed: a text block ending the turn
      const answer = await toolClient.messages
        .stream({
          ...params,
          messages: [
            question,
            { role: "assistant", content: final.content },
            { role: "user", content: [{ type: "tool_result", tool_use_id: toolUses(final)[0]!.id, content: "-3 C" }] },
          ],
        })
        .finalMessage();
      expect(answer.stop_reason).toBe("end_turn");
      expect(textOf(answer)).toBe(SCRIPT.answer);
    });

    it('tool_choice {type: "tool", name} and {type: "any"} force the call; {type: "none"} leaves the tools out', async () => {
      for (const toolChoice of [{ type: "tool", name: SCRIPT.toolName }, { type: "any" }] as Anthropic.ToolChoice[]) {
        const message = await toolClient.messages.create({
          model: "scripted",
          max_tokens: 16,
          messages: [question],
          tools: [weatherTool],
          tool_choice: toolChoice,
          ...GREEDY,
        });
        expect(message.stop_reason, JSON.stringify(toolChoice)).toBe("tool_use");
        expect(toolUses(message).map((b) => [b.name, b.input])).toEqual([[SCRIPT.toolName, SCRIPT.toolArguments]]);
      }
      const none = await toolClient.messages.create({
        model: "scripted",
        max_tokens: 16,
        messages: [question],
        tools: [weatherTool],
        tool_choice: { type: "none" },
        ...GREEDY,
      });
      expect(none.stop_reason).toBe("end_turn");
      expect(toolUses(none)).toEqual([]);
      expect(textOf(none)).toContain("<tool_call>");
      expect(promptTokens(none.usage)).toBe(encodeChat(tools.engine.tokenizer!, [question as ChatMessage]).ids.length);
    });
  },
);

describe("disable_parallel_tool_use (a scripted model that writes two calls)", () => {
  let served: TestServer;
  let twoCalls: Anthropic;
  const tool: Anthropic.Tool = { name: SCRIPT.toolName, input_schema: { type: "object", properties: { city: { type: "string" } } } };
  const call = (city: string): string => `\n<function=${SCRIPT.toolName}>\n<parameter=city>\n${city}\n</parameter>\n</function>\n`;
  // two calls between the scripted <tool_call> and </tool_call> tokens
  const callBody = `${call("Oslo")}</tool_call>\n<tool_call>${call("Rome")}`;
  const question: Anthropic.MessageParam = { role: "user", content: "Weather in Oslo and Rome?" };

  beforeAll(async () => {
    served = await startTestServer(await scriptedToolEngine(TEST_ENGINE_OPTIONS, { format: "xml", callBody }), { modelName: "scripted" });
    twoCalls = new Anthropic({ baseURL: served.url, apiKey: "none", maxRetries: 0 });
  });
  afterAll(async () => {
    await served?.close();
    served?.engine.dispose();
  });

  it("two tool_use blocks by default; one with disable_parallel_tool_use (streamed and not); both results answered", async () => {
    const params = { model: "scripted", max_tokens: 16, messages: [question], tools: [tool], ...GREEDY };
    const both = await twoCalls.messages.create(params);
    expect(both.stop_reason).toBe("tool_use");
    const calls = toolUses(both);
    expect(calls.map((b) => b.input)).toEqual([{ city: "Oslo" }, { city: "Rome" }]);
    expect(new Set(calls.map((b) => b.id)).size).toBe(2);

    for (const toolChoice of [
      { type: "auto", disable_parallel_tool_use: true },
      { type: "any", disable_parallel_tool_use: true },
    ] as Anthropic.ToolChoice[]) {
      const one = await twoCalls.messages.create({ ...params, tool_choice: toolChoice });
      expect(one.stop_reason, JSON.stringify(toolChoice)).toBe("tool_use");
      expect(toolUses(one).map((b) => b.input)).toEqual([{ city: "Oslo" }]);
    }
    const stream = twoCalls.messages.stream({ ...params, tool_choice: { type: "auto", disable_parallel_tool_use: true } });
    const events: Anthropic.MessageStreamEvent[] = [];
    stream.on("streamEvent", (event) => events.push(event));
    const final = await stream.finalMessage();
    expect(expectEventOrder(events)).toEqual(["thinking", "tool_use"]);
    expect(toolUses(final).map((b) => b.input)).toEqual([{ city: "Oslo" }]);
    expect(final.stop_reason).toBe("tool_use");

    // both results in one user message: two tool turns in the template, in order
    const answer = await twoCalls.messages.create({
      ...params,
      messages: [
        question,
        { role: "assistant", content: both.content },
        {
          role: "user",
          content: [
            { type: "tool_result", tool_use_id: calls[0]!.id, content: "-3 C" },
            { type: "tool_result", tool_use_id: calls[1]!.id, content: "14 C" },
          ],
        },
      ],
    });
    expect(answer.stop_reason).toBe("end_turn");
    expect(textOf(answer)).toBe(SCRIPT.answer);
    const expected = encodeChat(
      served.engine.tokenizer!,
      [
        { role: "user", content: "Weather in Oslo and Rome?" },
        {
          role: "assistant",
          content: "",
          reasoning_content: SCRIPT.reasoning,
          tool_calls: calls.map((c) => ({
            type: "function" as const,
            id: c.id,
            function: { name: c.name, arguments: c.input as Record<string, unknown> },
          })),
        },
        { role: "tool", content: "-3 C", tool_call_id: calls[0]!.id, name: SCRIPT.toolName },
        { role: "tool", content: "14 C", tool_call_id: calls[1]!.id, name: SCRIPT.toolName },
      ],
      { tools: [{ type: "function", function: { name: tool.name, parameters: tool.input_schema } }] },
    );
    expect(promptTokens(answer.usage)).toBe(expected.ids.length);
  });
});
