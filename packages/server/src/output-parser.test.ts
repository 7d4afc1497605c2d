import { describe, expect, it } from "vitest";
import { OutputParser, type ParsedOutput } from "./output-parser.js";

/** Feeds `text` in pieces of `size` characters and merges adjacent parts of one kind. */
function parse(text: string, options: { reasoning: boolean; tools: boolean }, size: number): ParsedOutput[] {
  const parser = new OutputParser(options);
  const out: ParsedOutput[] = [];
  for (let i = 0; i < text.length; i += size) out.push(...parser.push(text.slice(i, i + size)));
  out.push(...parser.flush());
  const merged: ParsedOutput[] = [];
  for (const part of out) {
    const last = merged[merged.length - 1];
    if (last && last.kind === part.kind && part.kind !== "tool_call" && last.kind !== "tool_call") last.text += part.text;
    else merged.push({ ...part });
  }
  return merged;
}

const SIZES = [1, 2, 3, 5, 7, 1000];

describe("OutputParser", () => {
  it.each(SIZES)("splits reasoning, content and tool calls the same way whatever the chunking (%i chars)", (size) => {
    const text =
      'Let me look that up.\n</think>\n\nChecking both cities.\n<tool_call>\n{"name": "weather", "arguments": {"city": "Oslo"}}\n</tool_call>\n' +
      '<tool_call>\n{"name": "weather", "arguments": "{\\"city\\": \\"Rome\\"}"}\n</tool_call>\n';
    expect(parse(text, { reasoning: true, tools: true }, size)).toEqual([
      { kind: "reasoning", text: "Let me look that up.\n" },
      { kind: "content", text: "Checking both cities." },
      { kind: "tool_call", name: "weather", arguments: '{"city":"Oslo"}' },
      { kind: "tool_call", name: "weather", arguments: '{"city": "Rome"}' },
    ]);
  });

  it.each(SIZES)("keeps everything as content without tools or reasoning, and never shows half a tag (%i chars)", (size) => {
    const text = "a <tool_call> b </think> c <tool_ca";
    expect(parse(text, { reasoning: false, tools: false }, size)).toEqual([{ kind: "content", text }]);
    const parser = new OutputParser({ reasoning: false, tools: true });
    const shown = [...parser.push("Hello <tool_"), ...parser.push("ca")].map((p) => (p.kind === "tool_call" ? "" : p.text)).join("");
    expect(shown).toBe("Hello");
  });

  it("returns a malformed or unterminated block as content, and a complete unterminated call as a call", () => {
    expect(parse("x <tool_call>not json</tool_call> y", { reasoning: false, tools: true }, 4)).toEqual([
      { kind: "content", text: "x <tool_call>not json</tool_call> y" },
    ]);
    expect(parse('<tool_call>\n{"name": "f", "arguments": {}}', { reasoning: false, tools: true }, 3)).toEqual([
      { kind: "tool_call", name: "f", arguments: "{}" },
    ]);
    expect(parse('<tool_call>\n{"name": ', { reasoning: false, tools: true }, 3)).toEqual([
      { kind: "content", text: '<tool_call>\n{"name": ' },
    ]);
  });

  it("an answer that never closes its thinking is all reasoning", () => {
    expect(parse("still thinking </thi", { reasoning: true, tools: true }, 2)).toEqual([
      { kind: "reasoning", text: "still thinking </thi" },
    ]);
  });
});
