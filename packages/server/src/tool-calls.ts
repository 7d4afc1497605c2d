/**
 * A chat completion's message built from the engine's output parser: the parts become OpenAI's
 * stream deltas (`reasoning_content`, `content`, `tool_calls` with `index`, `id`, `type`,
 * `function.name` and `function.arguments` pieces) and, at the end, the whole message.
 *
 * Warnings about tool calls (an argument that did not parse as its schema's type, a call cut off
 * by the end of the output, ...) are collected and returned as the response's `warnings` (the
 * non-streamed body, or the last chunk of a stream), each `{index, name, parameter?, code, message}`.
 * A call cut off by the end of the output (`cutOff`: max_tokens or the context ran out inside it) is
 * never returned as a call: it is left out of the non-streamed message (its warning says what was cut); a
 * stream has sent its deltas already and ends with `finish_reason: "length"`.
 */
import type { ParsedOutput, ToolCallWarning } from "@keepquant/engine";

export interface ToolCallEntry {
  id: string;
  type: "function";
  function: { name: string; arguments: string };
}

export class ChatOutput {
  content = "";
  reasoning = "";
  readonly toolCalls: ToolCallEntry[] = [];
  readonly warnings: ToolCallWarning[] = [];
  /** indexes of the calls the end of the output cut off */
  private readonly cut = new Set<number>();

  constructor(private readonly newCallId: () => string) {}

  /** Takes parsed parts; returns the stream deltas they make, in order. */
  apply(parts: readonly ParsedOutput[]): Record<string, unknown>[] {
    const deltas: Record<string, unknown>[] = [];
    for (const part of parts) {
      switch (part.kind) {
        case "reasoning":
          this.reasoning += part.text;
          deltas.push({ reasoning_content: part.text });
          break;
        case "content":
          this.content += part.text;
          deltas.push({ content: part.text });
          break;
        case "tool_call_start": {
          const entry: ToolCallEntry = { id: this.newCallId(), type: "function", function: { name: part.name, arguments: "" } };
          this.toolCalls[part.index] = entry;
          deltas.push({
            tool_calls: [{ index: part.index, id: entry.id, type: "function", function: { name: part.name, arguments: "" } }],
          });
          break;
        }
        case "tool_call_arguments":
          this.toolCalls[part.index]!.function.arguments += part.text;
          deltas.push({ tool_calls: [{ index: part.index, function: { arguments: part.text } }] });
          break;
        case "tool_call":
          this.warnings.push(...part.warnings);
          if (part.cutOff) this.cut.add(part.index);
          break;
      }
    }
    return deltas;
  }

  /** The calls the output finished (a call cut off by the end of the output is not one). */
  finishedCalls(): ToolCallEntry[] {
    return this.toolCalls.filter((call, index) => call !== undefined && !this.cut.has(index));
  }

  /** The assistant message of a non-streamed response. */
  message(): Record<string, unknown> {
    const toolCalls = this.finishedCalls();
    const calls = toolCalls.length > 0;
    const message: Record<string, unknown> = { role: "assistant", content: this.content === "" && calls ? null : this.content };
    if (this.reasoning !== "") message["reasoning_content"] = this.reasoning;
    if (calls) message["tool_calls"] = toolCalls;
    return message;
  }

  /** `{warnings}` when there are any, for the response body or the last chunk. */
  warningsField(): { warnings?: ToolCallWarning[] } {
    return this.warnings.length > 0 ? { warnings: this.warnings } : {};
  }
}
