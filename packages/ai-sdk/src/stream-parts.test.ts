/**
 * The output parser's parts as stream parts, on hand-written model outputs fed in every chunking that matters
 * (one character at a time and whole): the runs open and close around tool calls, an XML call's input
 * pieces add up to its JSON input, and the ids of a call's parts agree.
 */
import type { LanguageModelV3StreamPart } from "@ai-sdk/provider";
import { OutputParser, type OutputParserOptions } from "@keepquant/engine";
import { describe, expect, it } from "vitest";
import { StreamPartWriter } from "./stream-parts.js";

function streamOf(output: string, options: OutputParserOptions, chunk: number): LanguageModelV3StreamPart[] {
  const parts: LanguageModelV3StreamPart[] = [];
  const parser = new OutputParser(options);
  const writer = new StreamPartWriter((part) => parts.push(part));
  for (let i = 0; i < output.length; i += chunk) writer.write(parser.push(output.slice(i, i + chunk)));
  writer.write(parser.flush());
  writer.closeRun();
  return parts;
}

const tools = [
  {
    type: "function",
    function: {
      name: "report",
      parameters: { type: "object", properties: { city: { type: "string" }, days: { type: "integer" }, code: { type: "string" } } },
    },
  },
];

const XML_OUTPUT =
  "I will file it.</think>\n\nFiling now.\n<tool_call>\n<function=report>\n<parameter=city>\nOslo\n</parameter>\n<parameter=days>\n3\n</parameter>\n<parameter=code>\n001\n</parameter>\n</function>\n</tool_call>";

describe("StreamPartWriter", () => {
  for (const chunk of [1, 3, XML_OUTPUT.length]) {
    it(`an XML call after reasoning and text (chunks of ${chunk} characters)`, () => {
      const parts = streamOf(XML_OUTPUT, { reasoning: true, tools, format: "xml" }, chunk);
      const types = parts.map((p) => p.type);
      const dedup = types.filter((type, i) => type !== types[i - 1]);
      expect(dedup).toEqual([
        "reasoning-start",
        "reasoning-delta",
        "reasoning-end",
        "text-start",
        "text-delta",
        "text-end",
        "tool-input-start",
        "tool-input-delta",
        "tool-input-end",
        "tool-call",
      ]);
      const text = (type: string) =>
        parts
          .filter((p) => p.type === type)
          .map((p) => (p as { delta: string }).delta)
          .join("");
      expect(text("reasoning-delta")).toBe("I will file it.");
      expect(text("text-delta")).toBe("Filing now.");
      const call = parts.find((p) => p.type === "tool-call") as Extract<LanguageModelV3StreamPart, { type: "tool-call" }>;
      expect(JSON.parse(call.input)).toEqual({ city: "Oslo", days: 3, code: "001" });
      expect(text("tool-input-delta")).toBe(call.input);
      const start = parts.find((p) => p.type === "tool-input-start") as { id: string; toolName: string };
      expect(start).toMatchObject({ toolName: "report", id: call.toolCallId });
      expect(
        parts.filter((p) => "id" in p && p.type.startsWith("tool-input")).every((p) => (p as { id: string }).id === call.toolCallId),
      ).toBe(true);
      expect(call.providerMetadata).toBeUndefined();
      // a string parameter's text streams as it is generated: more than one piece
      if (chunk === 1) expect(parts.filter((p) => p.type === "tool-input-delta").length).toBeGreaterThan(1);
    });
  }

  it("a JSON call comes in one piece, and two calls get two ids", () => {
    const output =
      '<tool_call>\n{"name": "report", "arguments": {"city": "Lima"}}\n</tool_call>\n<tool_call>\n{"name": "report", "arguments": {"city": "Oslo"}}\n</tool_call>';
    const parts = streamOf(output, { reasoning: false, tools: true, format: "json" }, 2);
    const calls = parts.filter((p) => p.type === "tool-call") as Extract<LanguageModelV3StreamPart, { type: "tool-call" }>[];
    expect(calls.map((c) => JSON.parse(c.input))).toEqual([{ city: "Lima" }, { city: "Oslo" }]);
    expect(new Set(calls.map((c) => c.toolCallId)).size).toBe(2);
    expect(parts.filter((p) => p.type === "tool-input-delta")).toHaveLength(2);
  });

  it("a parse warning (an argument that is not of its type) is the call's provider metadata", () => {
    const output = "<tool_call>\n<function=report>\n<parameter=days>\nthree\n</parameter>\n</function>\n</tool_call>";
    const parts = streamOf(output, { reasoning: false, tools, format: "xml" }, 1);
    const call = parts.find((p) => p.type === "tool-call") as Extract<LanguageModelV3StreamPart, { type: "tool-call" }>;
    expect(JSON.parse(call.input)).toEqual({ days: "three" });
    const warnings = call.providerMetadata?.["keepquant"]?.["warnings"] as { code: string; parameter?: string }[];
    expect(warnings).toEqual([expect.objectContaining({ code: "argument_type", parameter: "days" })]);
  });
});
