/**
 * Objects and tools through the real `ai` package on the embedded default model: generateObject /
 * streamObject with a zod schema and a plain JSON Schema, forced tool calls (required and named) with the
 * SDK's tool definitions, and the errors of schemas the engine refuses. The default model is tiny: the
 * schemas keep every value finite (enums, booleans, short arrays), so greedy decoding completes them.
 */
import { InvalidArgumentError, UnsupportedFunctionalityError } from "@ai-sdk/provider";
import { type ConstraintSpec, type Engine, encodeChat, QWEN_STYLE_TEMPLATE, QWEN35_TEMPLATE } from "@keepquant/engine";
import { generateObject, generateText, jsonSchema, streamObject, streamText, tool } from "ai";
import { afterAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { createKeepquant } from "./index.js";

const keepquant = createKeepquant({ defaults: { threads: 1 } });
const model = keepquant("default");
afterAll(() => keepquant.dispose());

const mood = z.object({
  mood: z.enum(["happy", "sad", "calm"]),
  lucky: z.boolean(),
  stars: z.array(z.enum(["one", "two"])).max(2),
});

const weatherInput = z.object({ city: z.enum(["Oslo", "Paris", "Lima"]), unit: z.enum(["C", "F"]) });
const timeInput = z.object({ city: z.enum(["Oslo", "Paris", "Lima"]) });
const weather = tool({
  description: "The weather in a city",
  inputSchema: weatherInput,
  execute: async ({ city, unit }) => ({ city, unit, temperature: city === "Oslo" ? -3 : 18 }),
});
const time = tool({
  description: "The local time in a city",
  inputSchema: timeInput,
  execute: async ({ city }) => ({ city, time: "12:00" }),
});

/** The engine's own constrained generation for a one-user-message chat. */
async function engineConstrained(engine: Engine, prompt: string, constraint: ConstraintSpec, maxTokens: number): Promise<string> {
  const ids = encodeChat(engine.tokenizer!, [{ role: "user", content: prompt }]).ids;
  return (await engine.generate(ids, { maxTokens, constraint, reasoning: false }).result).text;
}

function expectAllFree(engine: Engine): void {
  const stats = engine.stats();
  expect(stats.requests).toEqual({ running: 0, waiting: 0 });
  expect(stats.kv.blocksFree).toBe(stats.kv.blocksTotal);
}

describe("generateObject and streamObject", () => {
  it("generateObject with a zod schema returns the engine's constrained JSON document, valid for the schema", async () => {
    const result = await generateObject({ model, schema: mood, prompt: "Describe your mood.", maxOutputTokens: 100 });
    expect(mood.parse(result.object)).toEqual(result.object);
    expect(result.finishReason).toBe("stop");
    // the constraint the SDK's schema became, as the call sent it to the engine
    const body = result.request.body as { constraint: ConstraintSpec };
    expect(body.constraint.type).toBe("json_schema");
    const engine = await model.engine();
    const text = await engineConstrained(engine, "Describe your mood.", body.constraint, 100);
    expect(result.object).toEqual(JSON.parse(text));
    expectAllFree(engine);
  });

  it("zod's everyday strings (uuid, regex, date, datetime), a number range and a discriminated union: valid objects", async () => {
    const record = z.object({
      id: z.string().uuid(),
      code: z.string().regex(/^[A-Z]{3}-\d{2}$/),
      day: z.iso.date(),
      at: z.iso.datetime({ precision: 3 }),
      share: z.number().min(0).max(1),
      kind: z.discriminatedUnion("type", [z.object({ type: z.literal("a"), n: z.number().int() }), z.object({ type: z.literal("b") })]),
    });
    for (const seed of [1, 2]) {
      const result = await generateObject({ model, schema: record, prompt: "A record.", maxOutputTokens: 400, seed, temperature: 1 });
      // the SDK validated it with zod; parse again to be sure of what came back
      expect(record.parse(result.object)).toEqual(result.object);
    }
  });

  it("a plain JSON Schema works too, and JSON output without a schema is one JSON object", async () => {
    const schema = jsonSchema<{ answer: "yes" | "no"; sure: boolean }>({
      type: "object",
      properties: { answer: { enum: ["yes", "no"] }, sure: { type: "boolean" } },
      required: ["answer", "sure"],
      additionalProperties: false,
    });
    const result = await generateObject({ model, schema, prompt: "Will it rain?", maxOutputTokens: 60 });
    expect(["yes", "no"]).toContain(result.object.answer);
    expect(typeof result.object.sure).toBe("boolean");
    expect(Object.keys(result.object).sort()).toEqual(["answer", "sure"]);

    // without a schema: one JSON object (the tiny model's strings run long, so only its start is checked)
    const free = await model.doGenerate({
      prompt: [{ role: "user", content: [{ type: "text", text: "Describe a cat." }] }],
      responseFormat: { type: "json" },
      maxOutputTokens: 24,
    });
    expect((free.request!.body as { constraint: ConstraintSpec }).constraint).toEqual({ type: "json_object" });
    const text = free.content.map((part) => (part.type === "text" ? part.text : "")).join("");
    expect(text.startsWith("{")).toBe(true);
    expect(text).toBe(await engineConstrained(await model.engine(), "Describe a cat.", { type: "json_object" }, 24));
  });

  it("streamObject streams growing partial objects ending in the object generateObject returns", async () => {
    const expected = await generateObject({ model, schema: mood, prompt: "Describe your mood.", maxOutputTokens: 100 });
    const result = streamObject({ model, schema: mood, prompt: "Describe your mood.", maxOutputTokens: 100 });
    const partials: unknown[] = [];
    for await (const partial of result.partialObjectStream) partials.push(partial);
    expect(partials.length).toBeGreaterThan(2);
    expect(partials[partials.length - 1]).toEqual(expected.object);
    expect(await result.object).toEqual(expected.object);
    // each partial is a prefix of the next: keys never disappear
    for (let i = 1; i < partials.length; i++) {
      expect(Object.keys(partials[i] as object).length).toBeGreaterThanOrEqual(Object.keys(partials[i - 1] as object).length);
    }
  });
});

describe("tools", () => {
  it('toolChoice "required": the model calls a tool in its own format, the SDK validates the input and runs execute', async () => {
    const result = await generateText({
      model,
      prompt: "What is the weather in Oslo?",
      tools: { weather, time },
      toolChoice: "required",
      maxOutputTokens: 120,
    });
    expect(result.finishReason).toBe("tool-calls");
    expect(result.toolCalls.length).toBeGreaterThan(0);
    const call = result.toolCalls[0]!;
    expect(["weather", "time"]).toContain(call.toolName);
    expect(call.invalid).toBeFalsy();
    const schema: z.ZodType = call.toolName === "weather" ? weatherInput : timeInput;
    expect(schema.parse(call.input)).toEqual(call.input);
    expect(result.toolResults).toHaveLength(result.toolCalls.length);
    expect(result.toolResults[0]!.toolCallId).toBe(call.toolCallId);
    const body = result.request.body as { constraint: ConstraintSpec };
    // the default model's template is ChatML: calls are in the JSON format
    expect(body.constraint).toMatchObject({ type: "tool_call", format: "json", choice: "required" });
    expectAllFree(await model.engine());
  });

  it("a named tool choice makes exactly that call; streamed as tool-input parts, then the call and its result", async () => {
    const result = streamText({
      model,
      prompt: "What is the weather in Oslo?",
      tools: { weather, time },
      toolChoice: { type: "tool", toolName: "time" },
      maxOutputTokens: 120,
    });
    const types: string[] = [];
    let inputText = "";
    for await (const part of result.fullStream) {
      types.push(part.type);
      if (part.type === "tool-input-delta") inputText += part.delta;
    }
    const calls = await result.toolCalls;
    expect(calls.map((c) => c.toolName)).toEqual(["time"]);
    expect(JSON.parse(inputText)).toEqual(calls[0]!.input);
    expect(timeInput.parse(calls[0]!.input)).toEqual(calls[0]!.input);
    expect(types.indexOf("tool-input-start")).toBeLessThan(types.indexOf("tool-input-end"));
    expect(types.indexOf("tool-input-end")).toBeLessThan(types.indexOf("tool-call"));
    expect(types.indexOf("tool-call")).toBeLessThan(types.indexOf("tool-result"));
    expect(await result.finishReason).toBe("tool-calls");
    expect((await result.toolResults)[0]!.output).toEqual({ city: (calls[0]!.input as { city: string }).city, time: "12:00" });
  });

  it("a conversation with a tool call and its result goes on to a text answer", async () => {
    const first = await generateText({
      model,
      prompt: "What is the weather in Oslo?",
      tools: { weather },
      toolChoice: "required",
      maxOutputTokens: 120,
    });
    const answer = await generateText({
      model,
      messages: [{ role: "user", content: "What is the weather in Oslo?" }, ...first.response.messages],
      tools: { weather },
      maxOutputTokens: 16,
    });
    const body = answer.request.body as { prompt: string; constraint?: unknown };
    // the call and its result are in the rendered prompt
    expect(body.prompt).toContain(first.toolCalls[0]!.toolName);
    expect(body.prompt).toContain(JSON.stringify(first.toolResults[0]!.output));
    expect(body.constraint).toBeUndefined();
    expect(answer.text.length).toBeGreaterThan(0);
  });
});

describe("tool calls in Qwen3.5's XML format", () => {
  it("a template that teaches XML calls gets the XML call constraint; the call closes within the token limit", async () => {
    const qwen35 = keepquant("default", { chatTemplate: QWEN35_TEMPLATE });
    const result = await qwen35.doGenerate({
      prompt: [{ role: "user", content: [{ type: "text", text: "File a report for Oslo." }] }],
      tools: [{ type: "function", name: "report", inputSchema: { type: "object", properties: { city: { enum: ["Oslo", "Paris"] } } } }],
      toolChoice: { type: "required" },
      maxOutputTokens: 64,
      providerOptions: { keepquant: { thinking: false } },
    });
    const body = result.request!.body as { prompt: string; constraint: ConstraintSpec };
    expect(body.constraint).toMatchObject({ type: "tool_call", format: "xml", choice: "required" });
    expect(body.prompt).toContain("<function=function_name>");
    // no free whitespace to pad with, and the engine closes the call before the limit
    expect(result.finishReason.unified).toBe("tool-calls");
    const call = result.content.find((part) => part.type === "tool-call") as { toolName: string; input: string };
    expect(call.toolName).toBe("report");
    const input = JSON.parse(call.input) as { city?: string };
    expect(input.city === undefined || ["Oslo", "Paris"].includes(input.city)).toBe(true);
  });

  it("a call the token limit cuts off (its required parameters cannot fit) is left out, with a warning", async () => {
    const qwen35 = keepquant("default", { chatTemplate: QWEN35_TEMPLATE });
    const inputSchema = {
      type: "object",
      properties: { city: { enum: ["Oslo", "Paris"] }, note: { type: "string" } },
      required: ["city", "note"],
    };
    const options = {
      prompt: [{ role: "user" as const, content: [{ type: "text" as const, text: "File a report for Oslo." }] }],
      tools: [{ type: "function" as const, name: "report", inputSchema: inputSchema as never }],
      toolChoice: { type: "required" as const },
      // the parser has read the call's name by then; its parameters do not fit
      maxOutputTokens: 30,
      providerOptions: { keepquant: { thinking: false } },
    };
    const result = await qwen35.doGenerate(options);
    expect(result.finishReason.unified).toBe("length");
    expect(result.content.filter((part) => part.type === "tool-call")).toEqual([]);
    expect(result.warnings).toEqual([
      expect.objectContaining({ type: "other", message: expect.stringContaining("inside the call to report") }),
    ]);
    const streamed = await qwen35.doStream(options);
    const parts: { type: string }[] = [];
    for await (const part of streamed.stream as unknown as AsyncIterable<{ type: string }>) parts.push(part);
    expect(parts.map((p) => p.type)).toContain("tool-input-start");
    expect(parts.map((p) => p.type)).not.toContain("tool-call");
  });
});

describe("thinking and constraints", () => {
  it("thinkingBudget closes the reasoning after that many tokens; the JSON document follows it", async () => {
    const thinker = keepquant("default", { chatTemplate: QWEN_STYLE_TEMPLATE });
    const result = await generateObject({
      model: thinker,
      schema: mood,
      prompt: "Describe your mood.",
      maxOutputTokens: 120,
      providerOptions: { keepquant: { thinkingBudget: 4 } },
    });
    expect(mood.parse(result.object)).toEqual(result.object);
    expect(result.reasoning?.length ?? 0).toBeGreaterThan(0);
    // the budget's tokens and the </think> the engine wrote
    expect(result.usage.outputTokenDetails.reasoningTokens).toBe(5);
    expect(result.usage.outputTokenDetails.textTokens).toBe(result.usage.outputTokens! - 5);
  });

  it("a thinking budget without a reasoning prompt is InvalidArgumentError naming it", async () => {
    const error = await generateText({ model, prompt: "Hi", providerOptions: { keepquant: { thinkingBudget: 4 } } }).catch(
      (e: unknown) => e,
    );
    expect(InvalidArgumentError.isInstance(error)).toBe(true);
    expect((error as InvalidArgumentError).argument).toBe("providerOptions.keepquant.thinkingBudget");
  });
});

describe("schemas the engine refuses", () => {
  it("a schema that is not a JSON Schema is InvalidArgumentError; a keyword it cannot enforce is UnsupportedFunctionalityError", async () => {
    const engine = await model.engine();
    const steps = engine.stats().counters.steps;
    const bad = await generateObject({
      model,
      // "wat" is no JSON Schema type
      schema: jsonSchema(JSON.parse('{ "type": "object", "properties": { "a": { "type": "wat" } } }')),
      prompt: "Hi",
    }).catch((e: unknown) => e);
    expect(InvalidArgumentError.isInstance(bad)).toBe(true);
    expect((bad as InvalidArgumentError).argument).toMatch(/^responseFormat\.schema/);

    const multipleOf = jsonSchema({
      type: "object",
      properties: { n: { type: "integer", minimum: 0, maximum: 99, multipleOf: 3 } },
      required: ["n"],
      additionalProperties: false,
    });
    const unsupported = await generateObject({
      model,
      schema: multipleOf,
      prompt: "Hi",
      providerOptions: { keepquant: { strictJsonSchema: true } },
    }).catch((e: unknown) => e);
    expect(UnsupportedFunctionalityError.isInstance(unsupported)).toBe(true);
    expect((unsupported as Error).message).toContain("multipleOf");
    // refused before anything reached the scheduler
    expect(engine.stats().counters.steps).toBe(steps);
    // best effort (the default): generated without it, and the check of the whole schema in the metadata
    const relaxed = await generateObject({ model, schema: multipleOf, prompt: "Hi", maxOutputTokens: 40 });
    // the bounds beside multipleOf stay enforced: only multipleOf is relaxed
    const n = (relaxed.object as { n: number }).n;
    expect(Number.isInteger(n) && n >= 0 && n <= 99).toBe(true);
    const metadata = relaxed.providerMetadata?.["keepquant"] as
      | { schemaCheck?: { valid: boolean; relaxed: { keyword: string }[] } }
      | undefined;
    const check = metadata?.schemaCheck;
    expect(check?.relaxed.map((r) => r.keyword)).toEqual(["multipleOf"]);
    expect(check?.valid).toBe(n % 3 === 0);

    const stepsAfter = engine.stats().counters.steps;
    const badTool = await generateText({
      model,
      prompt: "Hi",
      tools: { odd: tool({ inputSchema: jsonSchema({ type: "object", properties: { n: { type: "number", multipleOf: 2 } } }) }) },
      toolChoice: "required",
    }).catch((e: unknown) => e);
    expect(UnsupportedFunctionalityError.isInstance(badTool)).toBe(true);
    expect((badTool as Error).message).toMatch(/tools\.odd\.inputSchema/);
    // nothing reached the scheduler
    expect(engine.stats().counters.steps).toBe(stepsAfter);
  });
});
