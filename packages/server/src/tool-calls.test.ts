import { describe, expect, it } from "vitest";
import { ChatOutput } from "./tool-calls.js";

describe("ChatOutput", () => {
  it("a call the end of the output cut off is left out of the message; its warning stays", () => {
    let n = 0;
    const output = new ChatOutput(() => `call_${n++}`);
    output.apply([
      { kind: "tool_call_start", index: 0, name: "a" },
      { kind: "tool_call_arguments", index: 0, text: '{"x": 1}' },
      { kind: "tool_call", index: 0, name: "a", arguments: '{"x": 1}', warnings: [] },
      { kind: "tool_call_start", index: 1, name: "b" },
      { kind: "tool_call_arguments", index: 1, text: '{"y": "cut' },
      {
        kind: "tool_call",
        index: 1,
        name: "b",
        arguments: '{"y": "cut"}',
        warnings: [{ index: 1, name: "b", code: "unterminated", message: "the output ended inside the call to b" }],
        cutOff: true,
      },
    ]);
    const message = output.message() as { tool_calls: { function: { name: string } }[] };
    expect(message.tool_calls.map((c) => c.function.name)).toEqual(["a"]);
    expect(output.warningsField().warnings).toEqual([expect.objectContaining({ code: "unterminated", index: 1 })]);
    const only = new ChatOutput(() => "call");
    only.apply([
      { kind: "tool_call_start", index: 0, name: "b" },
      {
        kind: "tool_call",
        index: 0,
        name: "b",
        arguments: "{}",
        warnings: [{ index: 0, name: "b", code: "unterminated", message: "cut" }],
        cutOff: true,
      },
    ]);
    expect(only.message()).toEqual({ role: "assistant", content: "" });
  });
});
