/**
 * Structured output through the official `openai` client: response_format json_schema / json_object
 * and forcing tool_choice values are constrained decoding in the engine, on the parity fixture
 * model (random weights: unconstrained it writes gibberish, so the structure is the constraint's);
 * sampled at temperature 1 across seeds, streamed, with the reasoning block and its budget; bad
 * schemas and unknown tools are 400s naming the parameter.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { Engine } from "@keepquant/engine";
import OpenAI, { type BadRequestError } from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { defaultModelFile, SCRIPT, scriptedToolEngine, startTestServer, type TestServer, TEST_ENGINE_OPTIONS } from "./test-support.js";

const cacheDir = mkdtempSync(path.join(tmpdir(), "kq-structured-"));
let engine: Engine;
let serving: TestServer;
let client: OpenAI;

beforeAll(async () => {
  engine = await Engine.load(await defaultModelFile(cacheDir), { ...TEST_ENGINE_OPTIONS, maxSequences: 4 });
  serving = await startTestServer(engine, { modelName: "tied-4l-f32", synthetic: true, contextTokens: 2048 });
  client = new OpenAI({ baseURL: `${serving.url}/v1`, apiKey: "none", maxRetries: 0 });
});

afterAll(async () => {
  await serving?.close();
  engine?.dispose();
  rmSync(cacheDir, { recursive: true, force: true });
});

const NO_THINKING = { chat_template_kwargs: { enable_thinking: false } };
const messages = [{ role: "user" as const, content: "Describe a point." }];
const POINT = {
  type: "object",
  properties: {
    x: { type: "integer", minimum: -50, maximum: 50 },
    y: { type: "integer", minimum: -50, maximum: 50 },
    label: { enum: ["a", "b", "c"] },
    ok: { type: "boolean" },
  },
  required: ["x", "y", "label", "ok"],
  additionalProperties: false,
};
const WEATHER = {
  type: "object",
  properties: { city: { type: "string", maxLength: 12 }, unit: { enum: ["c", "f"] } },
  required: ["city", "unit"],
  additionalProperties: false,
};
const tools = [
  { type: "function" as const, function: { name: "get_weather", parameters: WEATHER } },
  { type: "function" as const, function: { name: "get_time", parameters: { type: "object", properties: {} } } },
];

function expectPoint(value: unknown): void {
  const p = value as Record<string, unknown>;
  expect(Object.keys(p).sort()).toEqual(["label", "ok", "x", "y"]);
  for (const k of ["x", "y"]) {
    expect(Number.isInteger(p[k])).toBe(true);
    expect(Math.abs(p[k] as number)).toBeLessThanOrEqual(50);
  }
  expect(["a", "b", "c"]).toContain(p["label"]);
  expect(typeof p["ok"]).toBe("boolean");
}

describe("response_format", () => {
  it("json_schema: valid JSON for the schema at temperature 1, for several seeds", async () => {
    for (const seed of [1, 2, 3, 4]) {
      const completion = await client.chat.completions.create({
        model: "x",
        messages,
        temperature: 1,
        seed,
        max_tokens: 200,
        response_format: { type: "json_schema", json_schema: { name: "point", schema: POINT, strict: true } },
        ...NO_THINKING,
      } as never);
      const choice = (completion as OpenAI.ChatCompletion).choices[0]!;
      expect(choice.finish_reason).toBe("stop");
      expectPoint(JSON.parse(choice.message.content!));
    }
  });

  it("json_object: one JSON object, streamed", async () => {
    const stream = await client.chat.completions.create({
      model: "x",
      messages,
      temperature: 1,
      seed: 5,
      max_tokens: 300,
      stream: true,
      response_format: { type: "json_object" },
      ...NO_THINKING,
    } as never);
    let content = "";
    let finish: string | null = null;
    for await (const chunk of stream as unknown as AsyncIterable<OpenAI.ChatCompletionChunk>) {
      content += chunk.choices[0]?.delta.content ?? "";
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    if (finish === "stop") {
      const value = JSON.parse(content) as unknown;
      expect(typeof value === "object" && value !== null && !Array.isArray(value)).toBe(true);
    } else {
      expect(finish).toBe("length");
      expect(content.startsWith("{")).toBe(true);
    }
  });

  it("a schema the output cannot finish within max_tokens ends with finish_reason length", async () => {
    const long = { type: "object", properties: { text: { type: "string", minLength: 300 } }, required: ["text"] };
    const completion = await client.chat.completions.create({
      model: "x",
      messages,
      temperature: 1,
      seed: 1,
      max_tokens: 10,
      response_format: { type: "json_schema", json_schema: { name: "long", schema: long } },
      ...NO_THINKING,
    } as never);
    const choice = (completion as OpenAI.ChatCompletion).choices[0]!;
    expect(choice.finish_reason).toBe("length");
    expect(() => JSON.parse(choice.message.content!)).toThrow();
  });

  it("with thinking on: reasoning is free text, closed at thinking_budget, then the JSON", async () => {
    const completion = (await client.chat.completions.create({
      model: "x",
      messages,
      temperature: 1,
      seed: 3,
      max_tokens: 200,
      thinking_budget: 8,
      response_format: { type: "json_schema", json_schema: { name: "point", schema: POINT } },
    } as never)) as OpenAI.ChatCompletion & { choices: { message: { reasoning_content?: string } }[] };
    const message = completion.choices[0]!.message;
    expect(completion.choices[0]!.finish_reason).toBe("stop");
    expect(engine.tokenizer!.encode(message.reasoning_content ?? "").length).toBeLessThanOrEqual(8 + 1);
    expectPoint(JSON.parse(message.content!.trim()));
  });
});

describe("tool_choice", () => {
  it('"required": one or more calls of listed tools, arguments valid for their schemas', async () => {
    for (const seed of [1, 2, 3]) {
      const completion = await client.chat.completions.create({
        model: "x",
        messages,
        temperature: 1,
        seed,
        max_tokens: 300,
        tools,
        tool_choice: "required",
        ...NO_THINKING,
      } as never);
      const choice = (completion as OpenAI.ChatCompletion).choices[0]!;
      expect(choice.finish_reason).toBe("tool_calls");
      expect(choice.message.tool_calls!.length).toBeGreaterThanOrEqual(1);
      for (const call of choice.message.tool_calls!) {
        const fn = (call as { function: { name: string; arguments: string } }).function;
        expect(["get_weather", "get_time"]).toContain(fn.name);
        const args = JSON.parse(fn.arguments) as Record<string, unknown>;
        if (fn.name === "get_weather") {
          expect(Object.keys(args).sort()).toEqual(["city", "unit"]);
          expect(["c", "f"]).toContain(args["unit"]);
        }
      }
    }
  });

  it("a named function: exactly one call of it", async () => {
    const completion = await client.chat.completions.create({
      model: "x",
      messages,
      temperature: 1,
      seed: 9,
      max_tokens: 200,
      tools,
      tool_choice: { type: "function", function: { name: "get_weather" } },
      ...NO_THINKING,
    } as never);
    const calls = (completion as OpenAI.ChatCompletion).choices[0]!.message.tool_calls!;
    expect(calls.map((c) => (c as { function: { name: string } }).function.name)).toEqual(["get_weather"]);
    const args = JSON.parse((calls[0] as { function: { arguments: string } }).function.arguments) as Record<string, unknown>;
    expect(typeof args["city"]).toBe("string");
  });
});

describe("a forced call cut off by max_tokens", () => {
  it("is never answered as a call: finish_reason length, no tool_calls", async () => {
    // 38 tokens cannot hold this call (its shortest form is 41 tokens in this vocabulary): the output ends inside it
    const completion = (await client.chat.completions.create({
      model: "x",
      messages,
      temperature: 1,
      seed: 2,
      max_tokens: 38,
      tools,
      tool_choice: { type: "function", function: { name: "get_weather" } },
      ...NO_THINKING,
    } as never)) as OpenAI.ChatCompletion;
    const choice = completion.choices[0]!;
    expect(choice.finish_reason).toBe("length");
    expect(choice.message.tool_calls).toBeUndefined();
    expect(choice.message.content).toMatch(/^<tool_call>\n\{"name": "get_weather"/);
  });

  it("with a few more tokens the budget-aware close finishes it: a valid call", async () => {
    const completion = (await client.chat.completions.create({
      model: "x",
      messages,
      temperature: 1,
      seed: 2,
      max_tokens: 44,
      tools,
      tool_choice: { type: "function", function: { name: "get_weather" } },
      ...NO_THINKING,
    } as never)) as OpenAI.ChatCompletion;
    const choice = completion.choices[0]!;
    expect(choice.finish_reason).toBe("tool_calls");
    const args = JSON.parse((choice.message.tool_calls![0] as { function: { arguments: string } }).function.arguments) as Record<
      string,
      unknown
    >;
    expect(Object.keys(args).sort()).toEqual(["city", "unit"]);
  });

  // The same request through the two agent APIs: the prompt renders as above, so the same budgets cut or finish.
  async function post(route: string, body: Record<string, unknown>): Promise<Record<string, unknown>> {
    const response = await fetch(`${serving.url}/v1/${route}`, {
      method: "POST",
      headers: { "content-type": "application/json", "anthropic-version": "2023-06-01" },
      body: JSON.stringify(body),
    });
    expect(response.status).toBe(200);
    return (await response.json()) as Record<string, unknown>;
  }
  const messagesRequest = (maxTokens: number) => ({
    model: "x",
    max_tokens: maxTokens,
    temperature: 1,
    messages,
    tools: [
      { name: "get_weather", input_schema: WEATHER },
      { name: "get_time", input_schema: { type: "object", properties: {} } },
    ],
    tool_choice: { type: "tool", name: "get_weather" },
    thinking: { type: "disabled" },
    metadata: { user_id: "cut-off" },
  });
  const responsesRequest = (maxTokens: number) => ({
    model: "x",
    max_output_tokens: maxTokens,
    temperature: 1,
    input: messages,
    tools: [
      { type: "function", name: "get_weather", parameters: WEATHER },
      { type: "function", name: "get_time", parameters: { type: "object", properties: {} } },
    ],
    tool_choice: { type: "function", name: "get_weather" },
    reasoning: { effort: "none" },
    store: false,
  });

  it("Messages API: a cut-off call is left out (stop_reason max_tokens); a budget that allows one gets a valid tool_use", async () => {
    const cut = await post("messages", messagesRequest(38));
    expect(cut["stop_reason"]).toBe("max_tokens");
    expect((cut["content"] as { type: string }[]).filter((block) => block.type === "tool_use")).toEqual([]);
    const finished = await post("messages", messagesRequest(44));
    expect(finished["stop_reason"]).toBe("tool_use");
    const uses = (finished["content"] as { type: string; name?: string; input?: Record<string, unknown> }[]).filter(
      (block) => block.type === "tool_use",
    );
    expect(uses.map((block) => block.name)).toEqual(["get_weather"]);
    expect(Object.keys(uses[0]!.input!).sort()).toEqual(["city", "unit"]);
    expect(["c", "f"]).toContain(uses[0]!.input!["unit"]);
  });

  it("Responses API: a cut-off call is never a function_call item (an incomplete message); a budget that allows one completes it", async () => {
    const cut = await post("responses", responsesRequest(38));
    expect(cut["status"]).toBe("incomplete");
    expect(cut["incomplete_details"]).toEqual({ reason: "max_output_tokens" });
    // the call's text as far as it went, in an incomplete message: no function_call item
    const items = cut["output"] as { type: string; status: string; content?: { text: string }[] }[];
    expect(items.filter((item) => item.type === "function_call")).toEqual([]);
    expect(items.map((item) => [item.type, item.status])).toEqual([["message", "incomplete"]]);
    expect(items[0]!.content![0]!.text).toMatch(/^<tool_call>\n\{"name": "get_weather"/);
    const finished = await post("responses", responsesRequest(44));
    expect(finished["status"]).toBe("completed");
    const calls = (finished["output"] as { type: string; status: string; name: string; arguments: string }[]).filter(
      (item) => item.type === "function_call",
    );
    expect(calls.map((item) => [item.name, item.status])).toEqual([["get_weather", "completed"]]);
    expect(Object.keys(JSON.parse(calls[0]!.arguments) as object).sort()).toEqual(["city", "unit"]);
  });
});

describe("a best-effort schema (strict not true)", () => {
  it("is generated with what cannot be enforced relaxed, and schema_check says whether the output is valid", async () => {
    // three integers from {0, 1} are never unique: uniqueItems is relaxed, and the check must find the duplicate
    const schema = { type: "array", items: { type: "integer", minimum: 0, maximum: 1 }, minItems: 3, maxItems: 3, uniqueItems: true };
    const completion = (await client.chat.completions.create({
      model: "x",
      messages,
      temperature: 1,
      seed: 3,
      max_tokens: 60,
      response_format: { type: "json_schema", json_schema: { name: "n", schema } },
      ...NO_THINKING,
    } as never)) as OpenAI.ChatCompletion & {
      schema_check?: { valid: boolean; errors: string[]; relaxed: { path: string; keyword: string }[] };
    };
    expect(JSON.parse(completion.choices[0]!.message.content!)).toHaveLength(3);
    expect(completion.schema_check).toMatchObject({ valid: false, relaxed: [{ path: "", keyword: "uniqueItems" }] });
    expect(completion.schema_check!.errors.join()).toMatch(/duplicate/);
    // streamed: on the finishing chunk
    const stream = (await client.chat.completions.create({
      model: "x",
      messages,
      stream: true,
      seed: 3,
      max_tokens: 60,
      response_format: { type: "json_schema", json_schema: { name: "n", schema } },
      ...NO_THINKING,
    } as never)) as unknown as AsyncIterable<{ choices: { finish_reason: string | null }[]; schema_check?: { valid: boolean } }>;
    const finishing = [];
    for await (const chunk of stream) if (chunk.choices[0]?.finish_reason) finishing.push(chunk);
    expect(finishing).toHaveLength(1);
    expect(finishing[0]!.schema_check?.valid).toBe(false);
    // nothing relaxed: no check field (the grammar enforces the whole schema)
    const plain = (await client.chat.completions.create({
      model: "x",
      messages,
      seed: 3,
      max_tokens: 60,
      response_format: { type: "json_schema", json_schema: { name: "n", schema: POINT } },
      ...NO_THINKING,
    } as never)) as OpenAI.ChatCompletion & { schema_check?: unknown };
    expect(plain.schema_check).toBeUndefined();
  });
});

describe("bad structured-output requests are 400s naming the parameter", () => {
  const cases: { body: Record<string, unknown>; param: string; code?: string; mentions?: string }[] = [
    {
      body: {
        response_format: { type: "json_schema", json_schema: { name: "n", strict: true, schema: { type: "array", uniqueItems: true } } },
      },
      param: "response_format.json_schema.schema",
      code: "unsupported_schema_keyword",
      mentions: "uniqueItems",
    },
    {
      body: { response_format: { type: "json_schema", json_schema: { name: "n", schema: { type: "banana" } } } },
      param: "response_format.json_schema.schema",
      code: "invalid_schema",
    },
    { body: { response_format: { type: "json_schema", json_schema: { schema: {} } } }, param: "response_format.json_schema.name" },
    { body: { response_format: { type: "yaml" } }, param: "response_format.type" },
    {
      body: { tools, tool_choice: { type: "function", function: { name: "nope" } } },
      param: "tool_choice.function.name",
      code: "unknown_tool",
    },
    {
      body: {
        tools: [{ type: "function", function: { name: "f", parameters: { type: "object", properties: { n: { multipleOf: 2 } } } } }],
        tool_choice: "required",
      },
      param: "tools[0].function.parameters",
      code: "unsupported_schema_keyword",
      mentions: "multipleOf",
    },
    {
      body: { tools: [{ type: "function", function: { name: "f", strict: true, parameters: { not: {} } } }] },
      param: "tools[0].function.parameters",
      code: "unsupported_schema_keyword",
    },
    { body: { tools, response_format: { type: "json_object" } }, param: "response_format" },
    { body: { thinking_budget: -1 }, param: "thinking_budget" },
  ];
  it("each case", async () => {
    for (const { body, param, code, mentions } of cases) {
      const error = await client.chat.completions.create({ model: "x", messages, ...body } as never).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error, JSON.stringify(body)).toBeInstanceOf(OpenAI.BadRequestError);
      expect((error as BadRequestError).param, JSON.stringify(body)).toBe(param);
      if (code) expect((error as BadRequestError).code).toBe(code);
      if (mentions) expect((error as BadRequestError).message).toContain(mentions);
    }
  });

  it("a schema no value satisfies is a 400 before any output, also when streaming", async () => {
    // "a" is required but additionalProperties false leaves no way to write it
    const error = await client.chat.completions
      .create({
        model: "x",
        messages,
        stream: true,
        response_format: {
          type: "json_schema",
          json_schema: { name: "n", schema: { type: "object", required: ["a"], additionalProperties: false } },
        },
      } as never)
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    expect(error).toBeInstanceOf(OpenAI.BadRequestError);
    expect((error as BadRequestError).param).toBe("response_format.json_schema.schema");
  });
});

describe("with a model that reasons, then calls (the scripted tool model)", () => {
  let scripted: TestServer;
  let scriptedClient: OpenAI;
  const weather = {
    type: "function" as const,
    function: {
      name: "get_weather",
      parameters: { type: "object", properties: { city: { enum: ["Oslo", "Bergen"] } }, required: ["city"] },
    },
  };
  beforeAll(async () => {
    scripted = await startTestServer(await scriptedToolEngine(TEST_ENGINE_OPTIONS), { modelName: "scripted" });
    scriptedClient = new OpenAI({ baseURL: `${scripted.url}/v1`, apiKey: "none", maxRetries: 0 });
  });
  afterAll(async () => {
    await scripted?.close();
    scripted?.engine.dispose();
  });

  it("the reasoning the model writes up to its own </think> is free; the call after it is constrained", async () => {
    const completion = (await scriptedClient.chat.completions.create({
      model: "scripted",
      messages: [{ role: "user", content: "What is the weather in Oslo?" }],
      tools: [weather],
      tool_choice: { type: "function", function: { name: "get_weather" } },
      temperature: 0,
      max_tokens: 100,
    })) as OpenAI.ChatCompletion & { choices: { message: { reasoning_content?: string } }[] };
    const choice = completion.choices[0]!;
    expect(choice.message.reasoning_content).toBe(SCRIPT.reasoning);
    expect(choice.finish_reason).toBe("tool_calls");
    const call = choice.message.tool_calls![0] as OpenAI.ChatCompletionMessageFunctionToolCall;
    expect(call.function.name).toBe("get_weather");
    expect(["Oslo", "Bergen"]).toContain((JSON.parse(call.function.arguments) as { city?: unknown }).city);
  });

  it("json_object after the reasoning: the model's tool call is replaced by a JSON object", async () => {
    const completion = await scriptedClient.chat.completions.create({
      model: "scripted",
      messages: [{ role: "user", content: "What is the weather in Oslo?" }],
      response_format: { type: "json_object" },
      temperature: 0,
      max_tokens: 100,
    });
    const choice = completion.choices[0]!;
    expect((choice.message as { reasoning_content?: string }).reasoning_content).toBe(SCRIPT.reasoning);
    if (choice.finish_reason === "stop") {
      const value = JSON.parse(choice.message.content!.trim()) as unknown;
      expect(typeof value === "object" && value !== null && !Array.isArray(value)).toBe(true);
    } else {
      expect(choice.finish_reason).toBe("length");
      expect(choice.message.content!.trim().startsWith("{")).toBe(true);
    }
    expect(choice.message.tool_calls).toBeUndefined();
  });
});
