import { InvalidArgumentError, InvalidPromptError, UnsupportedFunctionalityError } from "@ai-sdk/provider";
import { describe, expect, it } from "vitest";
import { convertPrompt, convertPromptWithImages, toolOutputText } from "./convert-prompt.js";
import { parseCallOptions } from "./settings.js";

describe("convertPrompt", () => {
  it("maps system, user, assistant (text, reasoning, tool calls) and tool results to chat messages", () => {
    const messages = convertPrompt([
      { role: "system", content: "Be brief." },
      {
        role: "user",
        content: [
          { type: "text", text: "Weather in " },
          { type: "text", text: "Oslo?" },
        ],
      },
      {
        role: "assistant",
        content: [
          { type: "reasoning", text: "I need the tool." },
          { type: "text", text: "Let me check." },
          { type: "tool-call", toolCallId: "call_1", toolName: "get_weather", input: { city: "Oslo" } },
        ],
      },
      {
        role: "tool",
        content: [
          { type: "tool-result", toolCallId: "call_1", toolName: "get_weather", output: { type: "json", value: { celsius: -3 } } },
          { type: "tool-approval-response", approvalId: "a1", approved: true },
        ],
      },
    ]);
    expect(messages).toEqual([
      { role: "system", content: "Be brief." },
      { role: "user", content: "Weather in Oslo?" },
      {
        role: "assistant",
        content: "Let me check.",
        reasoning_content: "I need the tool.",
        tool_calls: [{ type: "function", id: "call_1", function: { name: "get_weather", arguments: { city: "Oslo" } } }],
      },
      { role: "tool", tool_call_id: "call_1", name: "get_weather", content: '{"celsius":-3}' },
    ]);
  });

  it("tool outputs of every kind become the text the model reads", () => {
    expect(toolOutputText({ type: "text", value: "sunny" })).toBe("sunny");
    expect(toolOutputText({ type: "error-text", value: "no such city" })).toBe("no such city");
    expect(toolOutputText({ type: "error-json", value: { error: 1 } })).toBe('{"error":1}');
    expect(toolOutputText({ type: "execution-denied", reason: "user said no" })).toBe("The tool call was denied: user said no");
    expect(
      toolOutputText({
        type: "content",
        value: [
          { type: "text", text: "a" },
          { type: "text", text: "b" },
        ],
      }),
    ).toBe("a\nb");
    expect(() => toolOutputText({ type: "content", value: [{ type: "file-data", data: "AAAA", mediaType: "image/png" }] })).toThrow(
      UnsupportedFunctionalityError,
    );
  });

  it("user image parts become images among the text: bytes, base64 and data URLs; the images listed with where they are", () => {
    const png = new Uint8Array([137, 80, 78, 71, 13, 10, 26, 10]);
    const base64 = Buffer.from(png).toString("base64");
    const url = new URL("https://example.com/cat.png");
    const { messages, images } = convertPromptWithImages([
      { role: "system", content: "Be brief." },
      {
        role: "user",
        content: [
          { type: "text", text: "Compare " },
          { type: "file", data: png, mediaType: "image/png" },
          { type: "text", text: "with " },
          { type: "text", text: "this: " },
          { type: "file", data: base64, mediaType: "image/jpeg" },
          { type: "file", data: `data:image/webp;base64,${base64}`, mediaType: "image/webp" },
          { type: "file", data: url, mediaType: "image/*" },
        ],
      },
      { role: "user", content: [{ type: "text", text: "plain" }] },
    ]);
    expect(messages[2]).toEqual({ role: "user", content: "plain" });
    const parts = messages[1]!.content as { type: string; text?: string; image?: Uint8Array }[];
    expect(parts.map((p) => p.type)).toEqual(["text", "image", "text", "image", "image", "image"]);
    expect(parts[2]!.text).toBe("with this: ");
    expect(parts[1]!.image).toBe(png);
    expect(Array.from(parts[3]!.image!)).toEqual(Array.from(png));
    expect(Array.from(parts[4]!.image!)).toEqual(Array.from(png));
    expect(parts[5]!.image!.byteLength).toBe(0); // fetched later, when the settings allow
    expect(images.map((i) => [i.where, i.mediaType, i.url?.href])).toEqual([
      ["prompt[1] (user) content[1]", "image/png", undefined],
      ["prompt[1] (user) content[4]", "image/jpeg", undefined],
      ["prompt[1] (user) content[5]", "image/webp", undefined],
      ["prompt[1] (user) content[6]", "image/*", url.href],
    ]);
    expect(images[0]!.part).toBe(parts[1]);
  });

  it("refuses other file types, files outside user messages, bad base64 and an empty prompt, naming where", () => {
    for (const mediaType of ["application/pdf", "audio/wav", "image/bmp"]) {
      const withFile = () =>
        convertPrompt([
          {
            role: "user",
            content: [
              { type: "text", text: "see" },
              { type: "file", data: new Uint8Array([1, 2]), mediaType },
            ],
          },
        ]);
      expect(withFile).toThrow(UnsupportedFunctionalityError);
      expect(withFile).toThrow(
        new RegExp(`prompt\\[0\\] \\(user\\) content\\[1\\] is a file part of type ${mediaType.replace("/", "\\/")}`),
      );
    }
    expect(() =>
      convertPrompt([{ role: "assistant", content: [{ type: "file", data: new Uint8Array([1]), mediaType: "image/png" }] }]),
    ).toThrow(/prompt\[0\] \(assistant\) is a file part of type image\/png/);
    const badBase64 = () => convertPrompt([{ role: "user", content: [{ type: "file", data: "not base64!", mediaType: "image/png" }] }]);
    expect(badBase64).toThrow(InvalidPromptError);
    expect(badBase64).toThrow(/prompt\[0\] \(user\) content\[0\]: the image data is neither base64 nor a data URL/);
    expect(() => convertPrompt([])).toThrow(InvalidPromptError);
  });
});

describe("parseCallOptions (providerOptions.keepquant)", () => {
  it("reads the known knobs", () => {
    expect(parseCallOptions({ keepquant: { minP: 0.05, repeatPenalty: 1.1, penaltyLastN: 64, thinking: false, ignoreEog: true } })).toEqual(
      {
        minP: 0.05,
        repeatPenalty: 1.1,
        penaltyLastN: 64,
        thinking: false,
        ignoreEog: true,
      },
    );
    expect(parseCallOptions(undefined)).toEqual({});
    expect(parseCallOptions({ openai: { user: "x" } })).toEqual({});
  });

  it("refuses unknown keys, wrong types and load-time settings with InvalidArgumentError naming the key", () => {
    const argumentOf = (options: unknown): string => {
      try {
        parseCallOptions({ keepquant: options } as Record<string, unknown>);
      } catch (error) {
        expect(InvalidArgumentError.isInstance(error)).toBe(true);
        return `${(error as InvalidArgumentError).argument}: ${(error as Error).message}`;
      }
      throw new Error("no error");
    };
    expect(argumentOf({ minp: 0.1 })).toMatch(/^providerOptions\.keepquant\.minp: .*not an option of keepquant \(known: minP/);
    expect(argumentOf({ minP: "0.1" })).toMatch(/^providerOptions\.keepquant\.minP: .*must be a finite number, got "0\.1"/);
    expect(argumentOf({ thinking: 1 })).toMatch(/^providerOptions\.keepquant\.thinking: .*must be a boolean/);
    expect(argumentOf({ numerics: "bf16" })).toMatch(
      /^providerOptions\.keepquant\.numerics: .*load-time setting.*keepquant\(model, \{ numerics \}\)/,
    );
    expect(argumentOf([1])).toMatch(/^providerOptions\.keepquant: .*must be an object/);
  });
});
