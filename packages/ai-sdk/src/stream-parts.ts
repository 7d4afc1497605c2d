/**
 * The output parser's parts as the AI SDK's stream parts: text and reasoning as start / delta / end runs,
 * a tool call as `tool-input-start` (when its name is known), `tool-input-delta` pieces of its JSON input
 * (an XML call's parameters as they are generated; a JSON call's input in one piece), `tool-input-end` and the
 * `tool-call` itself, with its parse warnings as provider metadata.
 */
import { randomUUID } from "node:crypto";
import type { LanguageModelV3StreamPart, SharedV3ProviderMetadata } from "@ai-sdk/provider";
import type { ParsedOutput, ToolCallWarning } from "@keepquant/engine";
import { PROVIDER_NAME } from "./settings.js";

export const newId = (prefix: string): string => `${prefix}${randomUUID().replaceAll("-", "")}`;

/** A tool call's parse warnings (an argument that did not parse as its type, an unknown tool, ...) as its provider metadata. */
export function warningsMetadata(warnings: readonly ToolCallWarning[]): { providerMetadata?: SharedV3ProviderMetadata } {
  if (warnings.length === 0) return {};
  return {
    providerMetadata: {
      [PROVIDER_NAME]: {
        warnings: warnings.map((w) => ({
          code: w.code,
          message: w.message,
          ...(w.parameter === undefined ? {} : { parameter: w.parameter }),
        })),
      },
    },
  };
}

export class StreamPartWriter {
  private open: { type: "text" | "reasoning"; id: string } | undefined;
  private runs = 0;
  /** the stream id of each call that has started (by the parser's call index) */
  private readonly callIds = new Map<number, string>();

  constructor(private readonly enqueue: (part: LanguageModelV3StreamPart) => void) {}

  /** Writes the stream parts of `parts`; returns how many parsed parts there were. */
  write(parts: readonly ParsedOutput[]): number {
    for (const part of parts) {
      switch (part.kind) {
        case "tool_call_start": {
          this.closeRun();
          const id = newId("call_");
          this.callIds.set(part.index, id);
          this.enqueue({ type: "tool-input-start", id, toolName: part.name });
          break;
        }
        case "tool_call_arguments": {
          const id = this.callIds.get(part.index);
          if (id !== undefined) this.enqueue({ type: "tool-input-delta", id, delta: part.text });
          break;
        }
        case "tool_call": {
          this.closeRun();
          let id = this.callIds.get(part.index);
          if (id === undefined) {
            // a call read in one go (the JSON format): its input in one piece
            id = newId("call_");
            this.enqueue({ type: "tool-input-start", id, toolName: part.name });
            this.enqueue({ type: "tool-input-delta", id, delta: part.arguments });
          }
          this.enqueue({ type: "tool-input-end", id });
          // a call the token limit cut off is never answered as a call (its arguments are not whole)
          if (part.cutOff) break;
          this.enqueue({
            type: "tool-call",
            toolCallId: id,
            toolName: part.name,
            input: part.arguments,
            ...warningsMetadata(part.warnings),
          });
          break;
        }
        default: {
          const type = part.kind === "reasoning" ? "reasoning" : "text";
          if (this.open?.type !== type) {
            this.closeRun();
            this.open = { type, id: String(this.runs++) };
            this.enqueue({ type: `${type}-start`, id: this.open.id });
          }
          this.enqueue({ type: `${type}-delta`, id: this.open.id, delta: part.text });
        }
      }
    }
    return parts.length;
  }

  /** Ends the open text or reasoning run (at a tool call and at the end of the output). */
  closeRun(): void {
    if (this.open) this.enqueue({ type: `${this.open.type}-end`, id: this.open.id });
    this.open = undefined;
  }
}
