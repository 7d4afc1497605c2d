import { describe, expect, it } from "vitest";
import { TokenizerError } from "../tokenizer/errors.js";
import { fixtureTokenizer } from "../tokenizer/test-support.js";
import { parseOutput } from "./output-parser.js";
import { type ChatMessage, renderChat, renderChatFor } from "./render.js";
import { CHATML_TEMPLATE, QWEN35_TEMPLATE, QWEN_STYLE_TEMPLATE } from "./templates.js";
import { toolCallFormatOf } from "./tool-format.js";

const conversation: ChatMessage[] = [
  { role: "system", content: "You are terse." },
  { role: "user", content: "Hi!" },
  { role: "assistant", content: "Hello." },
  { role: "user", content: "2+2?" },
];

describe("ChatML template", () => {
  it("renders <|im_start|>role\\ncontent<|im_end|>\\n and the assistant prompt", () => {
    const expected =
      "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n" +
      "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n";
    expect(renderChat(CHATML_TEMPLATE, conversation)).toBe(expected);
    expect(renderChat(CHATML_TEMPLATE, conversation, { addGenerationPrompt: false })).toBe(
      expected.slice(0, -"<|im_start|>assistant\n".length),
    );
  });
});

const weatherTool = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Weather of a city",
    parameters: {
      type: "object",
      properties: {
        city: { type: "string" },
        code: { type: "string" },
        days: { type: "integer" },
        detailed: { type: "boolean" },
        hours: { type: "array" },
        where: { type: "object" },
      },
    },
  },
};

describe("the built-in template (Qwen3.5's behaviour)", () => {
  it("is the fallback for files without a template, and teaches XML calls", () => {
    expect(renderChat(undefined, conversation)).toBe(renderChat(QWEN35_TEMPLATE, conversation));
    expect(renderChat("", conversation)).toBe(renderChat(QWEN35_TEMPLATE, conversation));
    expect(toolCallFormatOf(undefined)).toBe("xml");
    expect(toolCallFormatOf(QWEN35_TEMPLATE)).toBe("xml");
    expect(toolCallFormatOf(QWEN_STYLE_TEMPLATE)).toBe("json");
    expect(toolCallFormatOf(CHATML_TEMPLATE)).toBe("json");
  });

  it("thinks by default; enable_thinking false gives the empty think block", () => {
    const body =
      "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n" +
      "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n";
    expect(renderChat(QWEN35_TEMPLATE, conversation)).toBe(`${body}<think>\n`);
    expect(renderChat(QWEN35_TEMPLATE, conversation, { enableThinking: true })).toBe(`${body}<think>\n`);
    expect(renderChat(QWEN35_TEMPLATE, conversation, { enableThinking: false })).toBe(`${body}<think>\n\n</think>\n\n`);
  });

  it("keeps the reasoning of the turns after the last user query only, unless preserve_thinking", () => {
    const messages: ChatMessage[] = [
      { role: "user", content: "First?" },
      { role: "assistant", content: "One.", reasoning_content: "old thought" },
      { role: "user", content: "Weather?" },
      {
        role: "assistant",
        content: "<think>\nnew thought\n</think>\n\nLooking.",
        tool_calls: [{ function: { name: "get_weather", arguments: { city: "Oslo" } } }],
      },
      { role: "tool", content: "-3C" },
    ];
    const text = renderChat(QWEN35_TEMPLATE, messages, { addGenerationPrompt: false });
    expect(text).toBe(
      "<|im_start|>user\nFirst?<|im_end|>\n<|im_start|>assistant\nOne.<|im_end|>\n<|im_start|>user\nWeather?<|im_end|>\n" +
        "<|im_start|>assistant\n<think>\nnew thought\n</think>\n\nLooking.\n\n" +
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call><|im_end|>\n" +
        "<|im_start|>user\n<tool_response>\n-3C\n</tool_response><|im_end|>\n",
    );
    const preserved = renderChat(QWEN35_TEMPLATE, messages, { addGenerationPrompt: false, variables: { preserve_thinking: true } });
    expect(preserved).toContain("<|im_start|>assistant\n<think>\nold thought\n</think>\n\nOne.<|im_end|>");
    // the template's own variables are not replaced by kwargs of the same name
    const guarded = renderChat(QWEN35_TEMPLATE, messages, { variables: { messages: [], add_generation_prompt: false } });
    expect(guarded).toBe(`${text}<|im_start|>assistant\n<think>\n`);
  });

  it("lists the tools, then the system prompt, in the system turn; several calls in a row; grouped tool results", () => {
    const messages: ChatMessage[] = [
      { role: "system", content: "Be brief." },
      { role: "user", content: "Oslo and Rome?" },
      {
        role: "assistant",
        content: "",
        tool_calls: [
          { function: { name: "get_weather", arguments: { city: "Oslo", days: 2 } } },
          { function: { name: "get_weather", arguments: { city: "Rome" } } },
        ],
      },
      { role: "tool", content: "-3C" },
      { role: "tool", content: "14C" },
    ];
    const text = renderChat(QWEN35_TEMPLATE, messages, { tools: [weatherTool] });
    expect(text.startsWith("<|im_start|>system\n# Tools\n")).toBe(true);
    expect(text).toContain(`<tools>\n${JSON.stringify(weatherTool).replace(/,"/g, ', "').replace(/":/g, '": ')}\n</tools>`);
    expect(text).toContain("\n\nBe brief.<|im_end|>\n<|im_start|>user\nOslo and Rome?<|im_end|>\n");
    expect(text).toContain(
      "<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>\n" +
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n</function>\n</tool_call><|im_end|>\n" +
        "<|im_start|>user\n<tool_response>\n-3C\n</tool_response>\n<tool_response>\n14C\n</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n",
    );
  });

  it("round trip: an assistant turn with reasoning, content and calls renders and parses back to the same turn", () => {
    const args = [
      { city: "001", code: "true", days: 3, detailed: false, hours: [6, 12], where: { lat: 59.9, name: "Oslo\nsentrum" } },
      { city: "Rome", code: "null" },
    ];
    const turn: ChatMessage = {
      role: "assistant",
      content: "Checking both.",
      reasoning_content: "Two cities: two calls.",
      tool_calls: args.map((a) => ({ type: "function" as const, function: { name: "get_weather", arguments: a } })),
    };
    const text = renderChat(QWEN35_TEMPLATE, [{ role: "user", content: "Weather?" }, turn], {
      tools: [weatherTool],
      addGenerationPrompt: false,
    });
    const start = text.lastIndexOf("<|im_start|>assistant\n") + "<|im_start|>assistant\n".length;
    const rendered = text.slice(start, text.indexOf("<|im_end|>", start));
    const parsed = parseOutput(rendered, { reasoning: false, tools: [weatherTool], format: toolCallFormatOf(QWEN35_TEMPLATE) });
    expect(parsed.reasoning.trim()).toBe(turn.reasoning_content);
    expect(parsed.content).toBe(turn.content);
    expect(parsed.toolCalls.map((c) => ({ name: c.name, arguments: JSON.parse(c.arguments), warnings: c.warnings }))).toEqual(
      args.map((a) => ({ name: "get_weather", arguments: a, warnings: [] })),
    );
    // and the Qwen3-style JSON template with the JSON format
    const json = renderChat(QWEN_STYLE_TEMPLATE, [{ role: "user", content: "Weather?" }, turn], {
      tools: [weatherTool],
      addGenerationPrompt: false,
    });
    const jsonTurn = json.slice(
      json.lastIndexOf("<|im_start|>assistant\n") + "<|im_start|>assistant\n".length,
      json.lastIndexOf("<|im_end|>"),
    );
    const back = parseOutput(jsonTurn, { reasoning: false, tools: true, format: toolCallFormatOf(QWEN_STYLE_TEMPLATE) });
    expect(back.toolCalls.map((c) => JSON.parse(c.arguments))).toEqual(args);
  });

  it("tokenizes into the fixture vocabulary's special tokens (every tag it writes is one)", () => {
    const tok = fixtureTokenizer();
    const messages: ChatMessage[] = [
      { role: "user", content: "Hi!" },
      { role: "assistant", content: "", tool_calls: [{ function: { name: "get_weather", arguments: { city: "Oslo" } } }] },
      { role: "tool", content: "-3C" },
    ];
    const prompt = renderChat(QWEN35_TEMPLATE, messages, { tools: [weatherTool] });
    const ids = tok.encode(prompt, { parseSpecial: true });
    for (const special of [
      "<|im_start|>",
      "<|im_end|>",
      "<think>",
      "</think>",
      "<tool_call>",
      "</tool_call>",
      "<tool_response>",
      "</tool_response>",
    ]) {
      const id = tok.tokenId(special);
      expect(id, special).toBeDefined();
      expect(ids.includes(id!), special).toBe(true);
    }
    expect(tok.decode(ids, { special: true })).toBe(prompt);
  });

  it("refuses a system message after the first and an unknown role", () => {
    expect(() =>
      renderChat(QWEN35_TEMPLATE, [
        { role: "user", content: "a" },
        { role: "system", content: "b" },
      ]),
    ).toThrow(/system message must be the first/);
    expect(() => renderChat(QWEN35_TEMPLATE, [{ role: "narrator", content: "a" }])).toThrow(/unknown message role: narrator/);
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
