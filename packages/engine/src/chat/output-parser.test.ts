import { describe, expect, it } from "vitest";
import { OutputParser, type OutputParserOptions, type ParsedOutput, parseOutput, type ToolCallWarning } from "./output-parser.js";
import type { ToolSchema } from "./tool-arguments.js";

/** What a stream of parts adds up to, as a client assembling OpenAI deltas would see it. */
interface Assembled {
  reasoning: string;
  content: string;
  /** per call: name, the concatenated argument pieces, and the complete call's arguments and warnings */
  calls: { name: string; pieces: string; arguments: string | undefined; warnings: ToolCallWarning[] | undefined }[];
}

const TAGS_OF: Record<"reasoning" | "content" | "tool_call_arguments", string[]> = {
  reasoning: ["</think>"],
  content: ["<tool_call>"],
  tool_call_arguments: ["</parameter>", "<parameter=", "</function>", "</tool_call>"],
};

function endsWithPartialTag(text: string, tag: string): boolean {
  for (let n = Math.min(tag.length - 1, text.length); n > 0; n--) if (text.endsWith(tag.slice(0, n))) return true;
  return false;
}

/** Feeds `chunks` one by one; checks every part pushed before the end for half tags. */
function feed(chunks: readonly string[], options: OutputParserOptions): Assembled {
  const parser = new OutputParser(options);
  const result: Assembled = { reasoning: "", content: "", calls: [] };
  const take = (parts: ParsedOutput[], final: boolean): void => {
    for (const part of parts) {
      if (part.kind === "tool_call_start") {
        expect(part.index).toBe(result.calls.length);
        result.calls.push({ name: part.name, pieces: "", arguments: undefined, warnings: undefined });
        continue;
      }
      if (part.kind === "tool_call") {
        const call = result.calls[part.index]!;
        expect(call.name).toBe(part.name);
        call.arguments = part.arguments;
        call.warnings = part.warnings;
        continue;
      }
      if (!final && (part.kind !== "content" || options.tools !== false)) {
        for (const tag of TAGS_OF[part.kind]) {
          if (endsWithPartialTag(part.text, tag))
            throw new Error(`a ${part.kind} part ends with half of ${tag}: ${JSON.stringify(part.text)}`);
        }
      }
      if (part.kind === "tool_call_arguments") {
        const call = result.calls[part.index]!;
        expect(call.arguments).toBeUndefined();
        call.pieces += part.text;
      } else {
        result[part.kind] += part.text;
      }
    }
  };
  for (const chunk of chunks) take(parser.push(chunk), false);
  take(parser.flush(), true);
  for (const call of result.calls) expect(call.pieces).toBe(call.arguments);
  return result;
}

/** Every way to cut `text` into two and three pieces (three only for short texts), every fixed chunk size, and seeded random cuts. */
function* chunkings(text: string): Generator<string[]> {
  yield [text];
  for (let i = 1; i < text.length; i++) yield [text.slice(0, i), text.slice(i)];
  if (text.length <= 120) {
    for (let i = 1; i < text.length; i++)
      for (let j = i + 1; j < text.length; j++) yield [text.slice(0, i), text.slice(i, j), text.slice(j)];
  }
  for (let size = 1; size < text.length; size++) {
    const pieces: string[] = [];
    for (let i = 0; i < text.length; i += size) pieces.push(text.slice(i, i + size));
    yield pieces;
  }
  let seed = 12345;
  const random = (): number => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return seed / 2 ** 31;
  };
  for (let run = 0; run < 200; run++) {
    const pieces: string[] = [];
    for (let i = 0; i < text.length; ) {
      const size = 1 + Math.floor(random() * 12);
      pieces.push(text.slice(i, i + size));
      i += size;
    }
    yield pieces;
  }
}

/** Asserts every chunking of `text` assembles to `expected`. */
function expectEveryChunking(text: string, options: OutputParserOptions, expected: Assembled): void {
  let runs = 0;
  for (const chunks of chunkings(text)) {
    const got = feed(chunks, options);
    if (JSON.stringify(got) !== JSON.stringify(expected)) {
      throw new Error(`chunking ${JSON.stringify(chunks)} gave ${JSON.stringify(got, null, 1)}`);
    }
    runs++;
  }
  expect(runs).toBeGreaterThan(text.length);
}

const weather: ToolSchema = {
  type: "function",
  function: {
    name: "get_weather",
    parameters: {
      type: "object",
      properties: {
        city: { type: "string" },
        days: { type: "integer" },
        units: { type: "string", enum: ["C", "F"] },
        detailed: { type: "boolean" },
        hours: { type: "array", items: { type: "integer" } },
        where: { type: "object" },
        limit: { type: ["number", "null"] },
      },
      required: ["city"],
    },
  },
};
const writeFile: ToolSchema = {
  type: "function",
  function: { name: "write_file", parameters: { type: "object", properties: { path: { type: "string" }, text: { type: "string" } } } },
};
const TOOLS = [weather, writeFile];
const XML: OutputParserOptions = { reasoning: true, tools: TOOLS, format: "xml" };

const call = (name: string, args: string, warnings: ToolCallWarning[] = []) => ({ name, pieces: args, arguments: args, warnings });

describe("OutputParser, XML calls (Qwen3.5)", () => {
  it("reasoning, content and two calls with typed parameters come out the same for every chunking, never with half a tag", () => {
    const text =
      "The user wants Oslo's weather 😀 and a file.\n</think>\n\nChecking Oslo.\n\n" +
      "<tool_call>\n<function=get_weather>\n<parameter=city>\n001\n</parameter>\n<parameter=days>\n3\n</parameter>\n" +
      '<parameter=detailed>\ntrue\n</parameter>\n<parameter=hours>\n[6, 12]\n</parameter>\n<parameter=where>\n{"lat": 59.9}\n</parameter>\n' +
      "<parameter=limit>\nnull\n</parameter>\n</function>\n</tool_call>\n" +
      '<tool_call>\n<function=write_file>\n<parameter=path>\nnotes/é😀.txt\n</parameter>\n<parameter=text>\nline one\n  "two"\n\n</parameter>\n</function>\n</tool_call>';
    expectEveryChunking(text, XML, {
      reasoning: "The user wants Oslo's weather 😀 and a file.\n",
      content: "Checking Oslo.",
      calls: [
        call("get_weather", '{"city":"001","days":3,"detailed":true,"hours":[6,12],"where":{"lat":59.9},"limit":null}'),
        call("write_file", '{"path":"notes/é😀.txt","text":"line one\\n  \\"two\\"\\n"}'),
      ],
    });
  });

  it("a call-like block inside the reasoning is reasoning; the call after it is a call (every chunking)", () => {
    const text =
      "Maybe <tool_call>\n<function=get_weather>\n</function>\n</tool_call> no.\n</think>\n" +
      "<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n</function>\n</tool_call>";
    expectEveryChunking(text, XML, {
      reasoning: "Maybe <tool_call>\n<function=get_weather>\n</function>\n</tool_call> no.\n",
      content: "",
      calls: [call("get_weather", '{"city":"Rome"}')],
    });
  });

  it("an output that opens its own <think> block has reasoning; a call without parameters has {} (every chunking)", () => {
    const text = "<think>\nhm\n</think>\n\nSure.\n<tool_call>\n<function=get_weather>\n</function>\n</tool_call>";
    expectEveryChunking(
      text,
      { reasoning: false, tools: TOOLS, format: "xml" },
      {
        reasoning: "\nhm\n",
        content: "Sure.",
        calls: [call("get_weather", "{}")],
      },
    );
  });

  it("a short call, cut into every two and three pieces, with a string and an untyped value", () => {
    const text =
      "ok\n<tool_call>\n<function=f>\n<parameter=a>\nx\ny\n</parameter>\n<parameter=n>\n-2\n</parameter>\n</function>\n</tool_call>";
    expect(text.length).toBeLessThanOrEqual(120);
    const tool: ToolSchema = { function: { name: "f", parameters: { properties: { a: { type: "string" }, n: {} } } } };
    expectEveryChunking(
      text,
      { reasoning: false, tools: [tool], format: "xml" },
      { reasoning: "", content: "ok", calls: [call("f", '{"a":"x\\ny","n":-2}')] },
    );
  });

  it("streams a string parameter's text as it comes, other parameters when they close", () => {
    const parser = new OutputParser(XML);
    const parts = [
      ...parser.push("</think><tool_call>\n<function=write_file>\n<parameter=text>\nhello "),
      ...parser.push("world\n"),
      ...parser.push("</param"),
    ];
    expect(parts).toEqual([
      { kind: "tool_call_start", index: 0, name: "write_file" },
      { kind: "tool_call_arguments", index: 0, text: '{"text":"hello ' },
      { kind: "tool_call_arguments", index: 0, text: "world" },
    ]);
    const days = new OutputParser(XML);
    const pieces = [
      ...days.push("</think><tool_call>\n<function=get_weather>\n<parameter=days>\n1"),
      ...days.push("4\n</parameter>"),
    ].filter((p) => p.kind === "tool_call_arguments");
    expect(pieces.map((p) => p.text)).toEqual(['{"days":', "14"]);
  });

  it("types parameters by the schema; a value that does not parse stays a string and is reported", () => {
    const body = (params: string): string => `<tool_call>\n<function=get_weather>\n${params}</function>\n</tool_call>`;
    const param = (name: string, value: string): string => `<parameter=${name}>\n${value}\n</parameter>\n`;
    const parse = (params: string) => parseOutput(body(params), { reasoning: false, tools: TOOLS, format: "xml" }).toolCalls[0]!;
    expect(JSON.parse(parse(param("city", "true") + param("units", "null")).arguments)).toEqual({ city: "true", units: "null" });
    expect(JSON.parse(parse(param("detailed", "False") + param("limit", "2.5") + param("days", "7.0")).arguments)).toEqual({
      detailed: false,
      limit: 2.5,
      days: 7,
    });
    const bad = parse(param("days", "three") + param("hours", "6, 12") + param("limit", "many"));
    expect(JSON.parse(bad.arguments)).toEqual({ days: "three", hours: "6, 12", limit: "many" });
    expect(bad.warnings.map((w) => [w.code, w.parameter])).toEqual([
      ["argument_type", "days"],
      ["argument_type", "hours"],
      ["argument_type", "limit"],
    ]);
    expect(bad.warnings[0]!.message).toBe('parameter days of get_weather should be integer, got "three": passed on as a string');
    expect(bad.warnings[2]!.message).toContain("number | null");
    // parameters the schema does not list, and tools not in the request: JSON when it is JSON, reported
    const unknown = parse(param("country", '{"code": "NO"}') + param("note", "01"));
    expect(JSON.parse(unknown.arguments)).toEqual({ country: { code: "NO" }, note: "01" });
    expect(unknown.warnings.map((w) => w.code)).toEqual(["unknown_parameter", "unknown_parameter"]);
    const other = parseOutput("<tool_call>\n<function=search>\n<parameter=q>\n42\n</parameter>\n</function>\n</tool_call>", XML);
    expect(other.toolCalls).toEqual([]);
    const untyped = parseOutput("</think><tool_call>\n<function=search>\n<parameter=q>\n42\n</parameter>\n</function>\n</tool_call>", XML);
    expect(untyped.toolCalls[0]!.arguments).toBe('{"q":42}');
    expect(untyped.toolCalls[0]!.warnings.map((w) => w.code)).toEqual(["unknown_tool"]);
    // with tools: true (no schemas), nothing is reported and every value is JSON when it is JSON
    const noSchemas = parseOutput(body(param("city", "Oslo") + param("days", "3")), { reasoning: false, tools: true, format: "xml" });
    expect(noSchemas.toolCalls[0]).toEqual({ name: "get_weather", arguments: '{"city":"Oslo","days":3}', warnings: [] });
  });

  it("anyOf, oneOf and enums give the types; a duplicate parameter is reported", () => {
    const tool: ToolSchema = {
      function: {
        name: "f",
        parameters: {
          properties: {
            a: { anyOf: [{ type: "integer" }, { type: "string" }] },
            b: { oneOf: [{ type: "boolean" }, { type: "null" }] },
            c: { enum: [1, 2, "x"] },
          },
        },
      },
    };
    const out = parseOutput(
      "<tool_call>\n<function=f>\n<parameter=a>\n5\n</parameter>\n<parameter=b>\nnull\n</parameter>\n<parameter=c>\nx\n</parameter>\n<parameter=a>\nfive\n</parameter>\n</function>\n</tool_call>",
      { reasoning: false, tools: [tool], format: "xml" },
    );
    expect(out.toolCalls[0]!.arguments).toBe('{"a":5,"b":null,"c":"x","a":"five"}');
    expect(out.toolCalls[0]!.warnings.map((w) => w.code)).toEqual(["duplicate_parameter"]);
  });

  it("an enum's value written as its JSON (as the call grammar writes it) or as the template renders it is the value", () => {
    const tool: ToolSchema = {
      function: {
        name: "f",
        parameters: { properties: { city: { enum: ["Oslo", "Paris"] }, code: { type: "string", const: "x1" }, n: { enum: [1, "1"] } } },
      },
    };
    const out = parseOutput(
      '<tool_call>\n<function=f>\n<parameter=city>\n"Oslo"\n</parameter>\n<parameter=code>\nx1\n</parameter>\n<parameter=n>\n"1"\n</parameter>\n</function>\n</tool_call>',
      { reasoning: false, tools: [tool], format: "xml" },
    );
    expect(JSON.parse(out.toolCalls[0]!.arguments)).toEqual({ city: "Oslo", code: "x1", n: "1" });
    expect(out.toolCalls[0]!.warnings).toEqual([]);
  });

  it("recovers from left-out close tags and reports a call cut off by the end of the output", () => {
    const opts: OutputParserOptions = { reasoning: false, tools: TOOLS, format: "xml" };
    const missing = parseOutput(
      "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n<parameter=days>\n2\n</tool_call>\nDone.",
      opts,
    );
    expect(missing).toEqual({
      reasoning: "",
      content: "Done.",
      toolCalls: [{ name: "get_weather", arguments: '{"city":"Oslo","days":2}', warnings: [] }],
    });
    const cut = parseOutput("Calling.\n<tool_call>\n<function=write_file>\n<parameter=text>\nhalf a li", opts);
    expect(cut.content).toBe("Calling.");
    expect(cut.toolCalls).toHaveLength(1);
    expect(cut.toolCalls[0]!.arguments).toBe('{"text":"half a li"}');
    expect(cut.toolCalls[0]!.warnings.map((w) => w.code)).toEqual(["unterminated"]);
    const stray = parseOutput(
      "<tool_call>\n<function=get_weather>\noops\n<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call>",
      opts,
    );
    expect(stray.toolCalls[0]!.arguments).toBe('{"city":"Oslo"}');
    expect(stray.toolCalls[0]!.warnings.map((w) => w.code)).toEqual(["unexpected_text"]);
    // two functions in one block are two calls
    const two = parseOutput("<tool_call>\n<function=get_weather>\n</function>\n<function=write_file>\n</function>\n</tool_call>", opts);
    expect(two.toolCalls.map((c) => c.name)).toEqual(["get_weather", "write_file"]);
  });

  it("a block that is not an XML call stays content, as written (a JSON body too)", () => {
    const opts: OutputParserOptions = { reasoning: false, tools: TOOLS, format: "xml" };
    for (const text of [
      'x <tool_call>\n{"name": "get_weather", "arguments": {}}\n</tool_call> y',
      "a <tool_call> b <function=\nno> c",
      "<tool_call>\n<function=",
      "just <tool_call>",
    ]) {
      for (const chunks of [[text], [...text]]) expect(feed(chunks, opts)).toEqual({ reasoning: "", content: text, calls: [] });
    }
  });
});

describe("OutputParser, JSON calls (Qwen3)", () => {
  const JSON_OPTS: OutputParserOptions = { reasoning: true, tools: true };

  it("splits reasoning, content and tool calls the same way for every chunking", () => {
    const text =
      'Let me look that up.\n</think>\n\nChecking both cities.\n<tool_call>\n{"name": "weather", "arguments": {"city": "Oslo"}}\n</tool_call>\n' +
      '<tool_call>\n{"name": "weather", "arguments": "{\\"city\\": \\"Rome\\"}"}\n</tool_call>\n';
    expectEveryChunking(text, JSON_OPTS, {
      reasoning: "Let me look that up.\n",
      content: "Checking both cities.",
      calls: [call("weather", '{"city":"Oslo"}'), call("weather", '{"city": "Rome"}')],
    });
  });

  it("keeps everything as content without tools or reasoning, and never shows half a tag", () => {
    const text = "a <tool_call> b </think> c <tool_ca";
    for (const chunks of chunkings(text))
      expect(feed(chunks, { reasoning: false, tools: false })).toEqual({ reasoning: "", content: text, calls: [] });
    const parser = new OutputParser({ reasoning: false, tools: true });
    const shown = [...parser.push("Hello <tool_"), ...parser.push("ca")].map((p) => ("text" in p ? p.text : "")).join("");
    expect(shown).toBe("Hello");
  });

  it("returns a malformed or unterminated block as content, a complete unterminated call as a call, an XML body as content", () => {
    const opts: OutputParserOptions = { reasoning: false, tools: true };
    expect(parseOutput("x <tool_call>not json</tool_call> y", opts)).toEqual({
      reasoning: "",
      content: "x <tool_call>not json</tool_call> y",
      toolCalls: [],
    });
    expect(parseOutput('<tool_call>\n{"name": "f", "arguments": {}}', opts).toolCalls).toEqual([
      { name: "f", arguments: "{}", warnings: [] },
    ]);
    expect(parseOutput('<tool_call>\n{"name": ', opts)).toEqual({ reasoning: "", content: '<tool_call>\n{"name": ', toolCalls: [] });
    const xml = "<tool_call>\n<function=f>\n</function>\n</tool_call>";
    expect(parseOutput(xml, opts)).toEqual({ reasoning: "", content: xml, toolCalls: [] });
  });

  it("an answer that never closes its thinking is all reasoning", () => {
    expect(parseOutput("still thinking </thi", { reasoning: true, tools: true })).toEqual({
      reasoning: "still thinking </thi",
      content: "",
      toolCalls: [],
    });
  });
});
