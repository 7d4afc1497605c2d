import { describe, expect, it } from "vitest";
import { TokenizerError } from "../tokenizer/errors.js";
import { fixtureTokenizer } from "../tokenizer/test-support.js";
import { type ChatMessage, renderChat, renderChatFor } from "./render.js";
import { CHATML_TEMPLATE, QWEN_STYLE_TEMPLATE } from "./templates.js";

const conversation: ChatMessage[] = [
  { role: "system", content: "You are terse." },
  { role: "user", content: "Hi!" },
  { role: "assistant", content: "Hello." },
  { role: "user", content: "2+2?" },
];

describe("ChatML fallback", () => {
  it("renders <|im_start|>role\\ncontent<|im_end|>\\n and the assistant prompt", () => {
    const expected =
      "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n" +
      "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n";
    expect(renderChat(undefined, conversation)).toBe(expected);
    expect(renderChat("", conversation)).toBe(expected);
    expect(renderChat(CHATML_TEMPLATE, conversation, { addGenerationPrompt: false })).toBe(
      expected.slice(0, -"<|im_start|>assistant\n".length),
    );
  });
});

describe("Qwen-style template", () => {
  it("opens a thinking block by default and an empty one when thinking is off", () => {
    const body =
      "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n" +
      "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n";
    expect(renderChat(QWEN_STYLE_TEMPLATE, conversation)).toBe(`${body}<think>\n`);
    expect(renderChat(QWEN_STYLE_TEMPLATE, conversation, { enableThinking: true })).toBe(`${body}<think>\n`);
    expect(renderChat(QWEN_STYLE_TEMPLATE, conversation, { enableThinking: false })).toBe(`${body}<think>\n\n</think>\n\n`);
  });

  it("renders tools, tool calls and grouped tool results", () => {
    const messages: ChatMessage[] = [
      { role: "user", content: "Weather in Oslo and Rome?" },
      {
        role: "assistant",
        content: "",
        tool_calls: [
          { function: { name: "weather", arguments: { city: "Oslo" } } },
          { function: { name: "weather", arguments: { city: "Rome" } } },
        ],
      },
      { role: "tool", content: "-3C" },
      { role: "tool", content: "14C" },
    ];
    const tools = [{ type: "function", function: { name: "weather", parameters: { type: "object" } } }];
    const text = renderChat(QWEN_STYLE_TEMPLATE, messages, { tools, enableThinking: false });
    expect(text).toBe(
      "<|im_start|>system\n# Tools\n\nYou may call one or more functions. Their signatures:\n<tools>\n" +
        JSON.stringify(tools[0], null, 0).replace(/,/g, ", ").replace(/:/g, ": ") +
        '\n</tools>\n\nReply with a <tool_call></tool_call> block holding {"name": ..., "arguments": ...} for each call.<|im_end|>\n' +
        "<|im_start|>user\nWeather in Oslo and Rome?<|im_end|>\n" +
        '<|im_start|>assistant\n<tool_call>\n{"name": "weather", "arguments": {"city": "Oslo"}}\n</tool_call>\n' +
        '<tool_call>\n{"name": "weather", "arguments": {"city": "Rome"}}\n</tool_call><|im_end|>\n' +
        "<|im_start|>user\n<tool_response>\n-3C\n</tool_response>\n<tool_response>\n14C\n</tool_response><|im_end|>\n" +
        "<|im_start|>assistant\n<think>\n\n</think>\n\n",
    );
  });

  it("tokenizes into the fixture vocabulary's special tokens", () => {
    const tok = fixtureTokenizer();
    const prompt = renderChatFor(tok, [{ role: "user", content: "Hi!" }], { enableThinking: false });
    const ids = tok.encode(prompt, { parseSpecial: true });
    const imStart = tok.tokenId("<|im_start|>")!;
    const imEnd = tok.tokenId("<|im_end|>")!;
    expect(ids[0]).toBe(imStart);
    expect(ids.filter((id) => id === imStart)).toHaveLength(2);
    expect(ids.filter((id) => id === imEnd)).toHaveLength(1);
    const tail = [tok.tokenId("<think>")!, ...tok.encode("\n\n"), tok.tokenId("</think>")!, ...tok.encode("\n\n")];
    expect(ids.slice(-tail.length)).toEqual(tail);
    expect(tok.decode(ids, { special: true })).toBe(prompt);
  });
});

describe("template features used by real Qwen templates", () => {
  it("supports namespace, reversed loops, string methods and bos/eos variables", () => {
    const template =
      "{%- set ns = namespace(last_user=-1) -%}" +
      "{%- for message in messages[::-1] -%}{%- set index = (messages|length - 1) - loop.index0 -%}" +
      "{%- if ns.last_user == -1 and message.role == 'user' -%}{%- set ns.last_user = index -%}{%- endif -%}{%- endfor -%}" +
      "{{- bos_token -}}{%- for message in messages -%}" +
      "{%- if message.role == 'assistant' and '</think>' in message.content -%}" +
      "{{- message.content.split('</think>')[-1].lstrip('\\n') -}}" +
      "{%- else -%}{{- message.content | upper -}}{%- endif -%}|{%- endfor -%}{{- ns.last_user -}}{{- eos_token -}}";
    const messages: ChatMessage[] = [
      { role: "user", content: "a" },
      { role: "assistant", content: "<think>hmm</think>\n\nb" },
      { role: "user", content: "c" },
      { role: "assistant", content: "d" },
    ];
    expect(renderChat(template, messages, { bosToken: "<s>", eosToken: "</s>" })).toBe("<s>A|b|C|D|2</s>");
  });

  it("reports template errors as CHAT_TEMPLATE_ERROR", () => {
    const codeOf = (render: () => unknown): string | undefined => {
      try {
        render();
      } catch (error) {
        return TokenizerError.isInstance(error) ? error.code : "other";
      }
      return undefined;
    };
    expect(codeOf(() => renderChat("{% if %}", conversation))).toBe("CHAT_TEMPLATE_ERROR");
    expect(codeOf(() => renderChat("{{ raise_exception('roles must alternate') }}", conversation))).toBe("CHAT_TEMPLATE_ERROR");
  });
});
