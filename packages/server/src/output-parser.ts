/**
 * Splits a model's streamed text into reasoning, content and tool calls (Qwen's format):
 *
 *   [reasoning ...</think>] content <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call> ...
 *
 * Reasoning is expected when the prompt opened a `<think>` block (the template's generation
 * prompt). Text that may be the start of a tag is held back until it is decided, so a streamed
 * delta never shows half a tag. A `<tool_call>` block whose body is not `{"name", "arguments"}`
 * JSON comes back as content, unchanged.
 */

export type ParsedOutput =
  | { kind: "reasoning"; text: string }
  | { kind: "content"; text: string }
  | { kind: "tool_call"; name: string; arguments: string };

const THINK_END = "</think>";
const TOOL_START = "<tool_call>";
const TOOL_END = "</tool_call>";

/** Length of the longest suffix of `text` that is a proper prefix of `tag`. */
function partialTagLength(text: string, tag: string): number {
  for (let n = Math.min(tag.length - 1, text.length); n > 0; n--) {
    if (text.endsWith(tag.slice(0, n))) return n;
  }
  return 0;
}

export function parseToolCallBody(body: string): { name: string; arguments: string } | undefined {
  let value: unknown;
  try {
    value = JSON.parse(body.trim());
  } catch {
    return undefined;
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) return undefined;
  const record = value as Record<string, unknown>;
  if (typeof record["name"] !== "string" || record["name"] === "") return undefined;
  const args = record["arguments"] ?? {};
  return { name: record["name"], arguments: typeof args === "string" ? args : JSON.stringify(args) };
}

export class OutputParser {
  private state: "reasoning" | "content" | "tool";
  private pending = "";
  private toolCalls = 0;
  /** at the start of content after </think> or a tool call: leading whitespace there is dropped */
  private atContentStart: boolean;
  private beforeTool = "";

  constructor(private readonly options: { reasoning: boolean; tools: boolean }) {
    this.state = options.reasoning ? "reasoning" : "content";
    this.atContentStart = options.reasoning;
  }

  get toolCallCount(): number {
    return this.toolCalls;
  }

  push(text: string): ParsedOutput[] {
    this.pending += text;
    return this.drain(false);
  }

  /** The end of the output: everything held back comes out. */
  flush(): ParsedOutput[] {
    return this.drain(true);
  }

  private drain(final: boolean): ParsedOutput[] {
    const out: ParsedOutput[] = [];
    for (;;) {
      if (this.state === "reasoning") {
        const at = this.pending.indexOf(THINK_END);
        if (at >= 0) {
          this.emit(out, "reasoning", this.pending.slice(0, at));
          this.pending = this.pending.slice(at + THINK_END.length);
          this.state = "content";
          this.atContentStart = true;
          continue;
        }
        const keep = final ? 0 : partialTagLength(this.pending, THINK_END);
        this.emit(out, "reasoning", this.pending.slice(0, this.pending.length - keep));
        this.pending = this.pending.slice(this.pending.length - keep);
        return out;
      }
      if (this.state === "content") {
        const at = this.options.tools ? this.pending.indexOf(TOOL_START) : -1;
        if (at >= 0) {
          const before = this.pending.slice(0, at);
          // the whitespace before a call is dropped, unless the block turns out not to be a call
          this.beforeTool = before.slice(before.trimEnd().length);
          this.emitContent(out, before, true);
          this.pending = this.pending.slice(at + TOOL_START.length);
          this.state = "tool";
          continue;
        }
        let end = this.pending.length;
        if (!final && this.options.tools) {
          // a possible tag start waits, and so does the whitespace before it: it is dropped when a
          // tool call or the end follows
          end -= partialTagLength(this.pending, TOOL_START);
          while (end > 0 && /\s/.test(this.pending[end - 1]!)) end--;
        }
        this.emitContent(out, this.pending.slice(0, end), final);
        this.pending = this.pending.slice(end);
        return out;
      }
      // inside <tool_call>
      const at = this.pending.indexOf(TOOL_END);
      if (at < 0 && !final) return out;
      const body = at >= 0 ? this.pending.slice(0, at) : this.pending;
      const call = parseToolCallBody(body);
      if (call) {
        this.toolCalls++;
        out.push({ kind: "tool_call", ...call });
        this.atContentStart = true;
      } else {
        this.emit(out, "content", this.beforeTool + TOOL_START + body + (at >= 0 ? TOOL_END : ""));
        this.atContentStart = false;
      }
      this.pending = at >= 0 ? this.pending.slice(at + TOOL_END.length) : "";
      this.state = "content";
      if (final && this.pending === "") return out;
    }
  }

  private emitContent(out: ParsedOutput[], text: string, beforeBoundary: boolean): void {
    let value = text;
    if (this.atContentStart) value = value.trimStart();
    if (beforeBoundary && this.options.tools) value = value.trimEnd();
    if (value === "") return;
    this.atContentStart = false;
    this.emit(out, "content", value);
  }

  private emit(out: ParsedOutput[], kind: "reasoning" | "content", text: string): void {
    if (text === "") return;
    const last = out[out.length - 1];
    if (last && last.kind === kind) last.text += text;
    else out.push({ kind, text });
  }
}
