/**
 * Constrained decoding through the Engine on the embedded default model (a small model trained on
 * English fortunes: unconstrained, it never writes JSON or tool calls, so whatever structure comes
 * out is the constraint's doing). Sampled at temperature 1 across seeds; batched; with speculative
 * decoding (the MTP drafter and a caller's drafts) and the prefix cache; with a reasoning block and
 * the thinking budget.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Engine } from "../engine.js";
import type { ConstraintSpec, GenerateParams, GenerationResult } from "../engine-types.js";
import { ConstraintError } from "./errors.js";

/** Checks `value` against the subset of JSON Schema the tests' schemas use; returns the first violation. */
function violation(value: unknown, schema: Record<string, unknown>, at = "$"): string | undefined {
  const type = schema["type"];
  const types = Array.isArray(type) ? type : type === undefined ? [] : [type];
  const typeOf = (v: unknown): string =>
    v === null ? "null" : Array.isArray(v) ? "array" : Number.isInteger(v) ? "integer" : typeof v === "number" ? "number" : typeof v;
  if (types.length > 0 && !types.some((t) => t === typeOf(value) || (t === "number" && typeOf(value) === "integer"))) {
    return `${at}: ${typeOf(value)} is not ${types.join("|")}`;
  }
  const enumValues = schema["enum"] as unknown[] | undefined;
  if (enumValues && !enumValues.includes(value)) return `${at}: ${JSON.stringify(value)} not in enum`;
  if (typeof value === "string" && typeof schema["maxLength"] === "number" && [...value].length > schema["maxLength"]) {
    return `${at}: longer than ${schema["maxLength"]}`;
  }
  if (typeof value === "number") {
    if (typeof schema["minimum"] === "number" && value < schema["minimum"]) return `${at}: below minimum`;
    if (typeof schema["maximum"] === "number" && value > schema["maximum"]) return `${at}: above maximum`;
  }
  if (Array.isArray(value)) {
    if (typeof schema["maxItems"] === "number" && value.length > schema["maxItems"]) return `${at}: more than maxItems`;
    const items = schema["items"] as Record<string, unknown> | undefined;
    for (let i = 0; items && i < value.length; i++) {
      const v = violation(value[i], items, `${at}[${i}]`);
      if (v) return v;
    }
  }
  if (typeof value === "object" && value !== null && !Array.isArray(value)) {
    const properties = (schema["properties"] ?? {}) as Record<string, Record<string, unknown>>;
    for (const name of (schema["required"] ?? []) as string[]) if (!(name in value)) return `${at}: missing ${name}`;
    for (const [name, v] of Object.entries(value)) {
      if (properties[name]) {
        const bad = violation(v, properties[name]!, `${at}.${name}`);
        if (bad) return bad;
      } else if (schema["additionalProperties"] === false) return `${at}: extra property ${name}`;
    }
  }
  return undefined;
}

const PERSON = {
  type: "object",
  properties: {
    name: { type: "string", maxLength: 12 },
    age: { type: "integer", minimum: 0, maximum: 120 },
    mood: { enum: ["happy", "sad", "calm"] },
    tags: { type: "array", items: { type: "string", maxLength: 6 }, maxItems: 2 },
  },
  required: ["name", "age", "mood", "tags"],
  additionalProperties: false,
} as const;
const POINT = {
  type: "object",
  properties: { x: { type: "integer", minimum: -9, maximum: 9 }, y: { type: "integer", minimum: -9, maximum: 9 }, ok: { type: "boolean" } },
  required: ["x", "y", "ok"],
} as const;
const WEATHER = {
  type: "object",
  properties: { city: { type: "string", maxLength: 10 }, days: { type: "integer", minimum: 1, maximum: 7 } },
  required: ["city", "days"],
} as const;
const TIME = { type: "object", properties: { zone: { enum: ["utc", "cet"] } }, required: ["zone"] } as const;
const TOOLS = [
  { name: "get_weather", parameters: WEATHER as unknown as Record<string, unknown> },
  { name: "get_time", parameters: TIME as unknown as Record<string, unknown> },
];
const SCHEMAS: Record<string, Record<string, unknown>> = { get_weather: WEATHER, get_time: TIME };

const schemaSpec = (schema: object): ConstraintSpec => ({ type: "json_schema", schema: schema as Record<string, unknown> });
const SAMPLED: GenerateParams = { temperature: 1, topK: 0, topP: 1, minP: 0, maxTokens: 200 };

let engine: Engine;
beforeAll(async () => {
  engine = await Engine.loadDefault({ maxSequences: 4, kvCacheTokens: 4096, contextLength: 1024 });
});
afterAll(() => engine?.dispose());

/** The calls of a JSON-format output (`<tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>`), or a reason it is not one. */
function jsonCalls(text: string): { name: string; arguments: unknown }[] {
  const blocks = [...text.matchAll(/<tool_call>\n([\s\S]*?)\n<\/tool_call>/g)];
  expect(text.replace(/<tool_call>\n[\s\S]*?\n<\/tool_call>/g, "").trim()).toBe("");
  return blocks.map((m) => JSON.parse(m[1]!) as { name: string; arguments: unknown });
}

/** The calls of an XML-format output; parameter values parsed as JSON unless the schema says string. */
function xmlCalls(text: string): { name: string; arguments: Record<string, unknown> }[] {
  const blocks = [...text.matchAll(/<tool_call>\n<function=([^>\n]+)>\n([\s\S]*?)\n<\/function>\n<\/tool_call>/g)];
  expect(text.replace(/<tool_call>\n<function=[^>\n]+>\n[\s\S]*?\n<\/function>\n<\/tool_call>/g, "").trim()).toBe("");
  return blocks.map((m) => {
    const name = m[1]!;
    const properties = (SCHEMAS[name]?.["properties"] ?? {}) as Record<string, { type?: string }>;
    const args: Record<string, unknown> = {};
    for (const p of m[2]!.matchAll(/<parameter=([^>\n]+)>\s*([\s\S]*?)\s*<\/parameter>/g)) {
      const value = p[2]!;
      args[p[1]!] = properties[p[1]!]?.type === "string" ? value : JSON.parse(value);
    }
    return { name, arguments: args };
  });
}

describe("constrained decoding in the engine", () => {
  it("the model writes no JSON unconstrained (so the constraint is what the other tests see)", async () => {
    const free = await engine.generateToEnd("Once upon a time", { ...SAMPLED, maxTokens: 40, seed: 1 });
    expect(() => JSON.parse(free.text)).toThrow();
  });

  it("json_schema: a valid document at temperature 1 for every seed, ending at the grammar's end", async () => {
    for (const seed of [1, 2, 3, 4, 5]) {
      const result = await engine.generateToEnd("Tell me about a person", { ...SAMPLED, seed, constraint: schemaSpec(PERSON) });
      expect(result.stopReason, result.text).toBe("eog");
      const value = JSON.parse(result.text) as unknown;
      expect(violation(value, PERSON), result.text).toBeUndefined();
    }
  });

  it("json_schema as real schemas are written (vendor keys, draft-04 bounds and tuples, int32, a discriminated oneOf): valid documents", async () => {
    const schema = {
      $schema: "http://json-schema.org/draft-04/schema#",
      self: { vendor: "com.acme", name: "reading", format: "jsonschema", version: "1-0-0" },
      id: "http://example.com/reading",
      type: "object",
      properties: {
        level: { type: "integer", minimum: 0, exclusiveMinimum: true, maximum: 10, exclusiveMaximum: true, "x-unit": "tenths" },
        count: { type: "integer", format: "int32", minimum: -5, maximum: 5 },
        pair: { type: "array", items: [{ type: "boolean" }, { enum: ["a", "b"] }], additionalItems: false },
        shape: {
          oneOf: [
            { type: "object", properties: { kind: { const: "dot" } }, required: ["kind"], additionalProperties: false },
            {
              type: "object",
              properties: { kind: { const: "box" }, side: { type: "integer", minimum: 1, maximum: 9 } },
              required: ["kind", "side"],
              additionalProperties: false,
            },
          ],
        },
      },
      required: ["level", "count", "pair", "shape"],
      additionalProperties: false,
    };
    for (const seed of [1, 2, 3]) {
      const result = await engine.generateToEnd("A reading:", { ...SAMPLED, maxTokens: 300, seed, constraint: schemaSpec(schema) });
      expect(result.stopReason, result.text).toBe("eog");
      const value = JSON.parse(result.text) as { level: number; count: number; pair: unknown[]; shape: { kind: string; side?: number } };
      expect(Number.isInteger(value.level) && value.level > 0 && value.level < 10, result.text).toBe(true);
      expect(Number.isInteger(value.count) && value.count >= -5 && value.count <= 5, result.text).toBe(true);
      expect(value.pair.length, result.text).toBe(2);
      expect(typeof value.pair[0]).toBe("boolean");
      expect(["a", "b"]).toContain(value.pair[1]);
      if (value.shape.kind === "dot") expect(Object.keys(value.shape)).toEqual(["kind"]);
      else
        expect(value.shape.kind === "box" && Number.isInteger(value.shape.side) && value.shape.side! >= 1 && value.shape.side! <= 9).toBe(
          true,
        );
    }
  });

  it("json_object: one JSON object", async () => {
    for (const seed of [7, 8]) {
      const result = await engine.generateToEnd("Hello", { ...SAMPLED, maxTokens: 400, seed, constraint: { type: "json_object" } });
      if (result.stopReason === "max_tokens") continue; // a long object is allowed; the length test covers the prefix case
      const value = JSON.parse(result.text) as unknown;
      expect(typeof value === "object" && value !== null && !Array.isArray(value)).toBe(true);
    }
  });

  it("grammar: an EBNF grammar", async () => {
    for (const seed of [1, 2, 3]) {
      const result = await engine.generateToEnd("Do you", {
        ...SAMPLED,
        seed,
        constraint: { type: "grammar", ebnf: 'root ::= ("yes" | "no") ", " [0-9] [0-9]?' },
      });
      expect(result.text).toMatch(/^(yes|no), [0-9][0-9]?$/);
    }
  });

  it("tool_call required and named, in the JSON format: calls of listed tools with valid arguments", async () => {
    for (const seed of [1, 2, 3]) {
      const required = await engine.generateToEnd("What now?", {
        ...SAMPLED,
        seed,
        maxTokens: 300,
        constraint: { type: "tool_call", format: "json", tools: TOOLS, choice: "required" },
      });
      expect(required.stopReason, required.text).toBe("eog");
      const calls = jsonCalls(required.text);
      expect(calls.length).toBeGreaterThanOrEqual(1);
      for (const call of calls) {
        expect(Object.keys(SCHEMAS)).toContain(call.name);
        expect(violation(call.arguments, SCHEMAS[call.name]!), required.text).toBeUndefined();
      }
      const named = await engine.generateToEnd("What now?", {
        ...SAMPLED,
        seed,
        constraint: { type: "tool_call", format: "json", tools: TOOLS, choice: { name: "get_weather" } },
      });
      const forced = jsonCalls(named.text);
      expect(forced.map((c) => c.name)).toEqual(["get_weather"]);
      expect(violation(forced[0]!.arguments, WEATHER), named.text).toBeUndefined();
    }
  });

  it("tool_call required and named, in the XML format (Qwen3.5's): valid parameters", async () => {
    for (const seed of [1, 2, 3]) {
      const required = await engine.generateToEnd("What now?", {
        ...SAMPLED,
        seed,
        maxTokens: 300,
        constraint: { type: "tool_call", format: "xml", tools: TOOLS, choice: "required" },
      });
      expect(required.stopReason, required.text).toBe("eog");
      const calls = xmlCalls(required.text);
      expect(calls.length).toBeGreaterThanOrEqual(1);
      for (const call of calls) expect(violation(call.arguments, SCHEMAS[call.name]!), required.text).toBeUndefined();
      const named = await engine.generateToEnd("What now?", {
        ...SAMPLED,
        seed,
        constraint: { type: "tool_call", format: "xml", tools: TOOLS, choice: { name: "get_time" } },
      });
      const forced = xmlCalls(named.text);
      expect(forced.map((c) => c.name)).toEqual(["get_time"]);
      expect(violation(forced[0]!.arguments, TIME), named.text).toBeUndefined();
    }
  });

  it("tool_call auto with a strict tool: free text, or calls whose arguments are valid", async () => {
    for (const seed of [1, 2]) {
      const result = await engine.generateToEnd("Say <tool_call>", {
        ...SAMPLED,
        seed,
        maxTokens: 60,
        constraint: { type: "tool_call", format: "json", tools: [{ ...TOOLS[0]!, strict: true }], choice: "auto" },
      });
      const at = result.text.indexOf("<tool_call>");
      if (at >= 0 && result.stopReason === "eog") {
        const call = jsonCalls(result.text.slice(at))[0]!;
        expect(violation(call.arguments, WEATHER)).toBeUndefined();
      }
    }
  });

  it("a grammar that cannot be finished within maxTokens ends with max_tokens, not a finished document", async () => {
    const long = { type: "object", properties: { text: { type: "string", minLength: 200 } }, required: ["text"] };
    const result = await engine.generateToEnd("Write", { ...SAMPLED, seed: 1, maxTokens: 12, constraint: schemaSpec(long) });
    expect(result.stopReason).toBe("max_tokens");
    expect(result.tokens).toHaveLength(12);
    expect(result.text.startsWith("{")).toBe(true);
    expect(() => JSON.parse(result.text)).toThrow();
  });

  it("a budget-aware close: a document that fits max_tokens is closed within it (valid, stop), for every seed", async () => {
    // the model writes its strings on and on: unguided by the budget it is cut off at 40 tokens every time
    const notes = {
      type: "object",
      properties: {
        notes: { type: "array", items: { type: "string" } },
        n: { type: "number" },
        who: { type: "object", properties: { a: { type: "string" }, b: { type: "integer" } }, required: ["a", "b"] },
      },
      required: ["notes", "n", "who"],
    };
    for (const maxTokens of [40, 64]) {
      for (const seed of [1, 2, 3]) {
        const result = await engine.generateToEnd("Hi", { ...SAMPLED, seed, maxTokens, constraint: schemaSpec(notes) });
        expect(result.stopReason, result.text).toBe("eog");
        expect(result.tokens.length).toBeLessThanOrEqual(maxTokens);
        const value = JSON.parse(result.text) as { notes: string[]; who: { b: number } };
        expect(violation(value, notes), result.text).toBeUndefined();
      }
    }
  });

  it("a budget-aware close in a tool call (XML format): the required parameters are written within max_tokens", async () => {
    const notes = { type: "object", properties: { text: { type: "string" }, days: { type: "integer" } }, required: ["text", "days"] };
    const tools = [{ name: "remember", parameters: notes }];
    for (const seed of [1, 2, 3]) {
      const result = await engine.generateToEnd("Hi", {
        ...SAMPLED,
        seed,
        maxTokens: 48,
        constraint: { type: "tool_call", format: "xml", tools, choice: "required" },
      });
      expect(result.stopReason, result.text).toBe("eog");
      // the template's layout: one newline between tags, none elsewhere (no free whitespace to spend the budget on)
      expect(result.text).toMatch(
        /^<tool_call>\n<function=remember>(\n<parameter=(text|days)>\n[^\n]*\n<\/parameter>)+\n<\/function>\n<\/tool_call>$/,
      );
      const blocks = [...result.text.matchAll(/<parameter=([^>\n]+)>/g)].map((m) => m[1]);
      expect(blocks, result.text).toEqual(["text", "days"]);
    }
  });

  it("batched: sequences with different schemas at once each follow their own", async () => {
    const specs: ConstraintSpec[] = [
      schemaSpec(PERSON),
      schemaSpec(POINT),
      { type: "tool_call", format: "xml", tools: TOOLS, choice: { name: "get_weather" } },
      { type: "grammar", ebnf: 'root ::= "n=" [1-9]' },
    ];
    const results = await Promise.all(specs.map((constraint, i) => engine.generateToEnd("Hi", { ...SAMPLED, seed: 10 + i, constraint })));
    expect(violation(JSON.parse(results[0]!.text), PERSON)).toBeUndefined();
    expect(violation(JSON.parse(results[1]!.text), POINT)).toBeUndefined();
    expect(xmlCalls(results[2]!.text).map((c) => c.name)).toEqual(["get_weather"]);
    expect(results[3]!.text).toMatch(/^n=[1-9]$/);
  });

  it("openObjects: other keys are allowed, and the close still writes the required ones within max_tokens", async () => {
    // this model invents other keys on and on; the close walk takes the listed keys before any other
    let others = 0;
    for (const seed of [1, 2, 3]) {
      const result = await engine.generateToEnd("Hi", {
        ...SAMPLED,
        seed,
        constraint: { type: "json_schema", schema: POINT, openObjects: true },
      });
      expect(result.stopReason, result.text).toBe("eog");
      const value = JSON.parse(result.text) as Record<string, unknown>;
      expect(violation(value, POINT), result.text).toBeUndefined();
      others += Object.keys(value).filter((key) => !["x", "y", "ok"].includes(key)).length;
    }
    expect(others).toBeGreaterThan(0);
    await expect(
      engine.generateToEnd("Hi", { ...SAMPLED, constraint: { type: "json_schema", schema: POINT, strict: true, openObjects: true } }),
    ).rejects.toMatchObject({ code: "CONSTRAINT_BAD_SPEC" });
  });

  it("streaming: the deltas add up to the valid document", async () => {
    let streamed = "";
    let result: GenerationResult | undefined;
    for await (const event of engine.generate("Hi", { ...SAMPLED, seed: 3, constraint: schemaSpec(POINT) })) {
      if (event.type === "token") streamed += event.text;
      else result = event.result;
    }
    expect(streamed).toBe(result!.text);
    expect(violation(JSON.parse(streamed), POINT)).toBeUndefined();
  });

  it("reasoning: free text until </think>, closed by the thinking budget, then the constraint", async () => {
    const tokenizer = engine.tokenizer!;
    const thinkEnd = tokenizer.encode("</think>", { parseSpecial: true });
    expect(thinkEnd).toHaveLength(1);
    for (const budget of [0, 5, 17]) {
      const result = await engine.generateToEnd("<think>\n", {
        ...SAMPLED,
        seed: budget,
        reasoning: true,
        thinkingBudget: budget,
        constraint: schemaSpec(POINT),
      });
      const at = result.tokens.indexOf(thinkEnd[0]!);
      expect(at).toBe(budget);
      const answer = tokenizer.decode(result.tokens.slice(at + 1));
      expect(violation(JSON.parse(answer), POINT), answer).toBeUndefined();
    }
    // the budget alone (no constraint): </think> at the budget, then free text
    const free = await engine.generateToEnd("<think>\n", { ...SAMPLED, seed: 4, maxTokens: 20, reasoning: true, thinkingBudget: 6 });
    expect(free.tokens.indexOf(thinkEnd[0]!)).toBe(6);
  });

  it("reasoning without a thinking budget before a schema answer: closed early enough to leave the answer room", async () => {
    const thinkEnd = engine.tokenizer!.encode("</think>", { parseSpecial: true })[0]!;
    for (const seed of [1, 2, 3]) {
      // the model never ends its reasoning by itself: only the reserve for the answer closes it
      const result = await engine.generateToEnd("<think>\n", {
        ...SAMPLED,
        seed,
        maxTokens: 120,
        reasoning: true,
        constraint: schemaSpec(POINT),
      });
      expect(result.stopReason).toBe("eog");
      const at = result.tokens.indexOf(thinkEnd);
      expect(at).toBeGreaterThan(40);
      const answer = engine.tokenizer!.decode(result.tokens.slice(at + 1));
      expect(violation(JSON.parse(answer), POINT), answer).toBeUndefined();
    }
  });

  it("bad input: a schema keyword the engine cannot enforce is refused synchronously with its name and path", () => {
    let error: unknown;
    try {
      engine.generate("x", { constraint: schemaSpec({ type: "object", properties: { a: { type: "array", uniqueItems: true } } }) });
    } catch (e) {
      error = e;
    }
    expect(ConstraintError.isInstance(error)).toBe(true);
    expect((error as ConstraintError).keyword).toBe("uniqueItems");
    expect((error as ConstraintError).path).toBe("/properties/a");
    expect(engine.stats().requests).toEqual({ running: 0, waiting: 0 });
  });

  it("bad input: a grammar the grammar engine refuses fails prepareConstraint and the stream, with its reason", async () => {
    const spec: ConstraintSpec = { type: "grammar", ebnf: "root ::= undefined_rule" };
    const checked = await engine.prepareConstraint(spec).catch((e: unknown) => e);
    expect(ConstraintError.isInstance(checked) && checked.code).toBe("CONSTRAINT_BAD_GRAMMAR");
    expect((checked as Error).message).toContain("undefined_rule");
    const streamed = await engine.generate("x", { constraint: spec }).result.catch((e: unknown) => e);
    expect(ConstraintError.isInstance(streamed) && streamed.code).toBe("CONSTRAINT_BAD_GRAMMAR");
    // the engine still serves
    const ok = await engine.generateToEnd("x", { ...SAMPLED, seed: 1, constraint: { type: "grammar", ebnf: 'root ::= "ok"' } });
    expect(ok.text).toBe("ok");
  });

  it("an aborted constrained request gives its resources back", async () => {
    const controller = new AbortController();
    const stream = engine.generate("Hi", {
      ...SAMPLED,
      seed: 1,
      maxTokens: 500,
      signal: controller.signal,
      constraint: { type: "json_object" },
    });
    controller.abort();
    expect((await stream.result).stopReason).toBe("abort");
    const stats = engine.stats();
    expect(stats.states.slotsFree).toBe(stats.states.slotsTotal);
  });
});

describe("constrained decoding with speculative decoding and the prefix cache", () => {
  it("MTP drafts: greedy constrained output is the same with speculation as without, and drafts are accepted", async () => {
    const plain = await Engine.loadDefault({ maxSequences: 2 });
    const speculative = await Engine.loadDefault({ maxSequences: 2, speculative: { method: "mtp", draftTokens: 3 } });
    try {
      for (const constraint of [schemaSpec(PERSON), { type: "tool_call", format: "xml", tools: TOOLS, choice: "required" } as const]) {
        const params: GenerateParams = { temperature: 0, maxTokens: 200, constraint };
        const a = await plain.generateToEnd("Tell me", params);
        const b = await speculative.generateToEnd("Tell me", params);
        expect(b.tokens).toEqual(a.tokens);
        expect(b.stats.speculative!.drafted).toBeGreaterThan(0);
      }
      // sampled: still a valid document (the drafter's own logits are masked too)
      const sampled = await speculative.generateToEnd("Tell me", { ...SAMPLED, seed: 5, constraint: schemaSpec(PERSON) });
      expect(violation(JSON.parse(sampled.text), PERSON)).toBeUndefined();
      expect(speculative.stats().speculative!.accepted).toBeGreaterThan(0);
    } finally {
      plain.dispose();
      speculative.dispose();
    }
  });

  it("caller drafts the grammar refuses are cut before verification; the output is unchanged", async () => {
    const plain = await Engine.loadDefault({ maxSequences: 1 });
    const reference = await plain.generateToEnd("Tell me", { temperature: 0, maxTokens: 200, constraint: schemaSpec(POINT) });
    plain.dispose();
    const promptLength = plain.tokenizer!.encode("Tell me").length;
    // drafts: the true continuation with every third token replaced by one the grammar refuses ("<" is never valid JSON here)
    const refused = plain.tokenizer!.encode("<")[0]!;
    const propose = (tokens: readonly number[], count: number): number[] =>
      reference.tokens.slice(tokens.length - promptLength, tokens.length - promptLength + count).map((t, i) => (i === 2 ? refused : t));
    const speculative = await Engine.loadDefault({ maxSequences: 1, speculative: { method: "function", draftTokens: 4, propose } });
    try {
      const result = await speculative.generateToEnd("Tell me", { temperature: 0, maxTokens: 200, constraint: schemaSpec(POINT) });
      expect(result.tokens).toEqual(reference.tokens);
      const stats = speculative.stats().speculative!;
      expect(stats.accepted).toBeGreaterThan(0);
      // no refused token was ever verified: at most 2 drafts per verification got through
      expect(stats.draftedByPosition[2]).toBe(0);
    } finally {
      speculative.dispose();
    }
  });

  it("prefix cache: a cached prompt gives the same constrained output", async () => {
    const cached = await Engine.loadDefault({ maxSequences: 2, prefixCacheSnapshots: 4, blockSize: 16 });
    try {
      const prompt = "Here is a long shared prompt about people and their moods, written out so that it spans a few KV blocks. Now: ";
      const params: GenerateParams = { temperature: 0, maxTokens: 200, constraint: schemaSpec(PERSON) };
      const first = await cached.generateToEnd(prompt, params);
      const second = await cached.generateToEnd(prompt, params);
      expect(second.stats.cachedPromptTokens).toBeGreaterThan(0);
      expect(second.tokens).toEqual(first.tokens);
      expect(violation(JSON.parse(second.text), PERSON)).toBeUndefined();
    } finally {
      cached.dispose();
    }
  });
});

describe("the grammar engine's view of the vocabulary", () => {
  it("a length-bounded JSON string refuses raw control characters (a tab), as JSON does", async () => {
    const { ConstraintCompiler } = await import("./compiler.js");
    const tokenizer = engine.tokenizer!;
    const compiler = new ConstraintCompiler(tokenizer);
    const source = { kind: "json_schema" as const, schema: JSON.stringify({ type: "string", maxLength: 8 }), strictMode: true };
    const { matcher, release } = await compiler.matcher(source, "constraint");
    try {
      const [quote] = tokenizer.encode('"');
      const [tab] = tokenizer.encode("\t");
      const [letter] = tokenizer.encode("a");
      // the matcher's mirror answers from the position's mask (fetched from the grammar worker)
      const accept = async (token: number): Promise<boolean> => {
        await matcher.mask();
        return matcher.acceptToken(token);
      };
      expect(await accept(quote!)).toBe(true);
      expect(await accept(tab!)).toBe(false);
      expect(await accept(letter!)).toBe(true);
      expect(await accept(quote!)).toBe(true);
    } finally {
      release();
      await compiler.dispose();
    }
  });
});

describe("the grammar worker in the engine", () => {
  it("while a new schema compiles (on a worker of its own), a running constrained sequence goes on: an unconstrained stream batched with it keeps streaming", async () => {
    const own = await Engine.loadDefault({ maxSequences: 2 });
    try {
      // both sequences run until they are stopped (no token budget to outlast the compile: order, not time)
      const stop = new AbortController();
      // letters and spaces with no end (the grammar never allows an end-of-generation token)
      const endless: ConstraintSpec = { type: "grammar", ebnf: "root ::= [a-z ] root" };
      let compileDone = false;
      // the constrained sequence's tokens after the compile ended; it is stopped once it has written some
      let constrainedAfterCompile = 0;
      const constrained = (async () => {
        const stream = own.generate("Tell me", { temperature: 1, seed: 2, maxTokens: 1_000_000, constraint: endless, signal: stop.signal });
        let text = "";
        for await (const event of stream) {
          if (event.type === "token") {
            text += event.text;
            if (compileDone && ++constrainedAfterCompile === 20) stop.abort();
          }
          if (event.type === "done") return { text, stopReason: event.result.stopReason };
        }
        return undefined;
      })();
      // the unconstrained stream's events that arrive while the grammar worker has a compile in flight
      const guided = (own as unknown as { guided: { compiler?: import("./compiler.js").ConstraintCompiler } }).guided;
      let during = 0;
      let started!: () => void;
      const first = new Promise<void>((resolve) => (started = resolve));
      const streaming = (async () => {
        for await (const event of own.generate("Once", { temperature: 0, maxTokens: 1_000_000, stopAtEog: false, signal: stop.signal })) {
          if (guided.compiler?.workerForTests?.compiling !== undefined) during++;
          started();
          if (event.type === "done") return event.result;
        }
        return undefined;
      })();
      await first;
      const properties: Record<string, unknown> = {};
      for (let i = 0; i < 400; i++) {
        properties[`field_${i}`] =
          i % 3 === 0
            ? { type: "string", maxLength: 16 }
            : i % 3 === 1
              ? { type: "integer", minimum: 0, maximum: 1000 }
              : { enum: ["a", `b${i}`] };
      }
      await own.prepareConstraint({ type: "json_schema", schema: { type: "object", properties, required: Object.keys(properties) } });
      compileDone = true;
      const result = await constrained;
      // both were still running when the compile ended, and were stopped after it
      expect((await streaming)?.stopReason).toBe("abort");
      expect(result?.stopReason).toBe("abort");
      // the constrained sequence ran all along the compile, and after it
      expect(constrainedAfterCompile).toBeGreaterThanOrEqual(20);
      expect(result?.text).toMatch(/^[a-z ]+$/);
      // counted, never timed: a compile on this thread would let no token through while it runs
      expect(during).toBeGreaterThan(10);
    } finally {
      own.dispose();
    }
  });

  it("a worker that dies fails the constrained request alone (CONSTRAINT_ENGINE_UNAVAILABLE); the next one starts a new worker", async () => {
    const own = await Engine.loadDefault({ maxSequences: 2 });
    try {
      const free = own.generateToEnd("Tell me", { temperature: 0, maxTokens: 40, stopAtEog: false });
      const stream = own.generate("Tell me about a person", { temperature: 0, maxTokens: 200, constraint: schemaSpec(PERSON) });
      const failed = stream.result.catch((e: unknown) => e);
      const events = stream[Symbol.asyncIterator]();
      expect((await events.next()).value).toMatchObject({ type: "token" });
      const { compiler } = (own as unknown as { guided: { compiler: import("./compiler.js").ConstraintCompiler } }).guided;
      const worker = compiler.workerForTests!;
      worker.crashForTests();
      expect(await failed).toMatchObject({ code: "CONSTRAINT_ENGINE_UNAVAILABLE", message: expect.stringMatching(/worker thread died/) });
      expect((await free).tokens).toHaveLength(40);
      const again = await own.generateToEnd("Tell me", { temperature: 0, maxTokens: 200, constraint: schemaSpec(POINT) });
      expect(violation(JSON.parse(again.text), POINT)).toBeUndefined();
      expect(compiler.workerForTests).not.toBe(worker);
    } finally {
      own.dispose();
    }
  });
});
