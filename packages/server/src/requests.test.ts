/**
 * Request validation without a server: every accepted field is honoured, refused, or documented
 * as ignored; an unknown one is a 400 naming it. Each case names the field (`param`).
 */
import { describe, expect, it } from "vitest";
import { ApiError } from "./errors.js";
import {
  CHAT_FIELDS,
  COMPLETION_FIELDS,
  DOCUMENTED_IGNORED,
  MAX_JSON_DEPTH,
  parseChatRequest,
  parseCompletionRequest,
} from "./requests.js";

const user = [{ role: "user", content: "hi" }];

function refusal(parse: () => unknown): ApiError {
  try {
    parse();
  } catch (error) {
    if (ApiError.isInstance(error)) return error;
    throw error;
  }
  throw new Error("expected a 400");
}

function chatRefusal(body: Record<string, unknown>): ApiError {
  return refusal(() => parseChatRequest({ messages: user, ...body }));
}

function nested(depth: number): Record<string, unknown> {
  const root: Record<string, unknown> = {};
  let at = root;
  for (let i = 1; i < depth; i++) {
    const next: Record<string, unknown> = {};
    at["p"] = next;
    at = next;
  }
  return root;
}

describe("numbers: a non-finite number gets the field's finite range", () => {
  // JSON.parse("1e309") is Infinity
  for (const [field, range] of [
    ["temperature", "in [0, 2]"],
    ["top_p", "in (0, 1]"],
    ["min_p", "in [0, 1]"],
    ["presence_penalty", "in [-2, 2]"],
    ["frequency_penalty", "in [-2, 2]"],
    ["repetition_penalty", "a finite number > 0"],
    ["max_tokens", "an integer in [1, 2^53 - 1]"],
    ["seed", "an integer in [-(2^53 - 1), 2^53 - 1]"],
    ["top_k", "an integer in [0, 2^53 - 1] (0 = off)"],
  ] as const) {
    it(`${field}: 1e309`, () => {
      const body = JSON.parse(`{"messages": [{"role": "user", "content": "hi"}], "${field}": 1e309}`) as Record<string, unknown>;
      const error = refusal(() => parseChatRequest(body));
      expect(error).toMatchObject({ status: 400, param: field, code: "invalid_value" });
      expect(error.message).toBe(`${field} must be ${range}, got Infinity`);
    });
  }
  it("a string is still a type error", () => {
    expect(chatRefusal({ temperature: "hot" }).message).toBe("temperature must be a number, got string");
  });
});

describe("chat_template_kwargs", () => {
  it("passes every key to the template (unknown keys too), with enable_thinking read out", () => {
    const request = parseChatRequest({
      messages: user,
      chat_template_kwargs: {
        enable_thinking: false,
        preserve_thinking: true,
        reasoning_effort: "low",
        custom_flag: { a: [1, "x"] },
        unset: null,
      },
    });
    expect(request.enableThinking).toBe(false);
    expect(request.templateKwargs).toEqual({
      enable_thinking: false,
      preserve_thinking: true,
      reasoning_effort: "low",
      custom_flag: { a: [1, "x"] },
    });
    expect(parseChatRequest({ messages: user }).templateKwargs).toEqual({});
  });

  it("refuses what is not a template variable, the server's own variables, wrong switch types and unbounded values", () => {
    expect(chatRefusal({ chat_template_kwargs: [true] })).toMatchObject({ param: "chat_template_kwargs", code: "invalid_type" });
    expect(chatRefusal({ chat_template_kwargs: { "not a name": 1 } })).toMatchObject({ param: "chat_template_kwargs.not a name" });
    expect(chatRefusal({ chat_template_kwargs: { messages: [] } })).toMatchObject({
      param: "chat_template_kwargs.messages",
      code: "unsupported_value",
    });
    expect(chatRefusal({ chat_template_kwargs: { add_generation_prompt: false } })).toMatchObject({ code: "unsupported_value" });
    expect(chatRefusal({ chat_template_kwargs: { enable_thinking: "no" } })).toMatchObject({
      param: "chat_template_kwargs.enable_thinking",
      code: "invalid_type",
      message: "chat_template_kwargs.enable_thinking must be a boolean, got string",
    });
    expect(chatRefusal({ chat_template_kwargs: { reasoning_effort: 3 } })).toMatchObject({
      param: "chat_template_kwargs.reasoning_effort",
    });
    let deep: unknown = 1;
    for (let i = 0; i < 20; i++) deep = [deep];
    expect(chatRefusal({ chat_template_kwargs: { deep } })).toMatchObject({ param: "chat_template_kwargs.deep", code: "too_deep" });
    const many = Object.fromEntries(Array.from({ length: 33 }, (_, i) => [`k${i}`, i]));
    expect(chatRefusal({ chat_template_kwargs: many })).toMatchObject({ param: "chat_template_kwargs", code: "too_many" });
    expect(chatRefusal({ chat_template_kwargs: { big: "x".repeat(70_000) } })).toMatchObject({ code: "too_large" });
  });
});

describe("no field is ignored silently", () => {
  it("an unknown field is a 400 unknown_parameter naming it, on both endpoints", () => {
    expect(chatRefusal({ frobnicate: 1 })).toMatchObject({ status: 400, param: "frobnicate", code: "unknown_parameter" });
    expect(refusal(() => parseCompletionRequest({ prompt: "hi", functions: [] }, 100))).toMatchObject({
      param: "functions",
      code: "unknown_parameter",
    });
    expect(chatRefusal({ stream: true, stream_options: { include_usage: true, extra: 1 } })).toMatchObject({
      param: "stream_options.extra",
    });
    expect(chatRefusal({ messages: [{ role: "user", content: "hi", cache_control: {} }] })).toMatchObject({
      param: "messages[0].cache_control",
      code: "unknown_parameter",
    });
  });

  it("logit_bias is refused by name unless it biases nothing", () => {
    expect(chatRefusal({ logit_bias: { "42": 100 } })).toMatchObject({ param: "logit_bias", code: "unsupported_value" });
    expect(refusal(() => parseCompletionRequest({ prompt: "hi", logit_bias: { "1": -100 } }, 100))).toMatchObject({ param: "logit_bias" });
    expect(chatRefusal({ logit_bias: [1] })).toMatchObject({ param: "logit_bias", code: "invalid_type" });
    expect(() => parseChatRequest({ messages: user, logit_bias: {} })).not.toThrow();
    expect(() => parseChatRequest({ messages: user, logit_bias: null })).not.toThrow();
  });

  it("fields the server cannot honour are refused with the value that would need it", () => {
    expect(chatRefusal({ store: true })).toMatchObject({ param: "store", code: "unsupported_value" });
    expect(chatRefusal({ parallel_tool_calls: false })).toMatchObject({ param: "parallel_tool_calls", code: "unsupported_value" });
    expect(chatRefusal({ n: 2 })).toMatchObject({ param: "n" });
    expect(chatRefusal({ tools: [{ type: "function", function: { name: "f", strict: true } }] })).toMatchObject({
      param: "tools[0].function.strict",
      code: "unsupported_value",
    });
    expect(chatRefusal({ response_format: { type: "text", json_schema: {} } })).toMatchObject({ param: "response_format.json_schema" });
    expect(() => parseChatRequest({ messages: user, store: false, parallel_tool_calls: true, n: 1 })).not.toThrow();
  });

  it("documented-ignored fields are accepted (and type-checked)", () => {
    expect(Object.keys(DOCUMENTED_IGNORED).sort()).toEqual(["model", "user"]);
    for (const field of [...Object.keys(DOCUMENTED_IGNORED), "metadata"]) expect(CHAT_FIELDS.has(field)).toBe(true);
    for (const field of Object.keys(DOCUMENTED_IGNORED)) expect(COMPLETION_FIELDS.has(field)).toBe(true);
    expect(() => parseChatRequest({ messages: user, model: "any", user: "u-1", metadata: { a: "b" } })).not.toThrow();
    expect(chatRefusal({ user: 7 })).toMatchObject({ param: "user", code: "invalid_type" });
    expect(chatRefusal({ metadata: "x" })).toMatchObject({ param: "metadata", code: "invalid_type" });
  });

  it("an assistant message as OpenAI returns it (refusal: null, annotations: []) can be sent back", () => {
    const messages = [...user, { role: "assistant", content: "hello", refusal: null, annotations: [], audio: null }, ...user];
    expect(parseChatRequest({ messages }).messages).toHaveLength(3);
    expect(chatRefusal({ messages: [...user, { role: "assistant", content: "x", refusal: "I cannot" }] })).toMatchObject({
      param: "messages[1].refusal",
      code: "unsupported_value",
    });
  });
});

describe("messages", () => {
  it("content: null is refused for user, system and tool messages", () => {
    for (const role of ["user", "system", "developer"]) {
      expect(chatRefusal({ messages: [{ role, content: null }] }), role).toMatchObject({
        param: "messages[0].content",
        code: "invalid_type",
      });
    }
    expect(chatRefusal({ messages: [{ role: "user" }] })).toMatchObject({ param: "messages[0].content" });
  });

  it("an assistant message may have content null only with tool_calls", () => {
    const call = { id: "call_1", type: "function", function: { name: "f", arguments: "{}" } };
    const ok = parseChatRequest({
      messages: [...user, { role: "assistant", content: null, tool_calls: [call] }, { role: "tool", tool_call_id: "call_1", content: "4" }],
    });
    expect(ok.messages[1]).toMatchObject({ role: "assistant", content: "" });
    expect(ok.messages[2]).toMatchObject({ role: "tool", tool_call_id: "call_1", name: "f" });
    expect(chatRefusal({ messages: [...user, { role: "assistant", content: null }] })).toMatchObject({ param: "messages[1].content" });
  });

  it("a tool message needs its tool_call_id", () => {
    for (const tool_call_id of [undefined, null, ""]) {
      expect(chatRefusal({ messages: [...user, { role: "tool", content: "4", tool_call_id }] })).toMatchObject({
        param: "messages[1].tool_call_id",
        code: "invalid_value",
      });
    }
    expect(chatRefusal({ messages: [...user, { role: "tool", content: "4", tool_call_id: 3 }] })).toMatchObject({
      code: "invalid_type",
    });
  });

  it("role-specific fields on another role are refused, not dropped", () => {
    expect(chatRefusal({ messages: [{ role: "user", content: "hi", tool_call_id: "x" }] })).toMatchObject({
      param: "messages[0].tool_call_id",
      code: "unsupported_value",
    });
    expect(chatRefusal({ messages: [{ role: "user", content: "hi", tool_calls: [] }] })).toMatchObject({ param: "messages[0].tool_calls" });
    expect(chatRefusal({ messages: [{ role: "system", content: "hi", reasoning_content: "r" }] })).toMatchObject({
      param: "messages[0].reasoning_content",
    });
    expect(chatRefusal({ messages: [{ role: "user", content: "hi", name: 5 }] })).toMatchObject({ param: "messages[0].name" });
  });
});

describe("JSON the template renders has a depth limit", () => {
  it(`tools[].function.parameters nested 10,000 deep is a 400 naming the field and the limit (${MAX_JSON_DEPTH})`, () => {
    const error = chatRefusal({ tools: [{ type: "function", function: { name: "f", parameters: nested(10_000) } }] });
    expect(error).toMatchObject({ status: 400, param: "tools[0].function.parameters", code: "too_deep" });
    expect(error.message).toBe(
      `tools[0].function.parameters is nested more than ${MAX_JSON_DEPTH} levels deep (at most ${MAX_JSON_DEPTH})`,
    );
  });

  it("a tool call's arguments too, as an object or a JSON string", () => {
    const deep = nested(MAX_JSON_DEPTH + 1);
    for (const args of [deep, JSON.stringify(deep)]) {
      const call = { id: "c", type: "function", function: { name: "f", arguments: args } };
      expect(chatRefusal({ messages: [...user, { role: "assistant", content: null, tool_calls: [call] }] })).toMatchObject({
        param: "messages[1].tool_calls[0].function.arguments",
        code: "too_deep",
      });
    }
  });

  it(`${MAX_JSON_DEPTH} levels are accepted`, () => {
    expect(() =>
      parseChatRequest({ messages: user, tools: [{ type: "function", function: { name: "f", parameters: nested(MAX_JSON_DEPTH) } }] }),
    ).not.toThrow();
  });
});
