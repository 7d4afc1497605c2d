/**
 * Request bodies of /v1/chat/completions and /v1/completions: every field checked once here, with
 * a 400 naming the field. Unknown fields are ignored (clients send `user`, `store`, `metadata` ...).
 */
import type { ChatMessage, ChatToolCall } from "@keepquant/engine";
import { invalidRequest } from "./errors.js";

/** OpenAI's `stop` limit is 4; llama.cpp and vLLM take more. */
export const MAX_STOP_STRINGS = 16;
export const MAX_STOP_LENGTH = 256;
/** OpenAI's top_logprobs limit (chat) and the legacy `logprobs` limit (completions). */
export const MAX_CHAT_TOP_LOGPROBS = 20;
export const MAX_COMPLETION_LOGPROBS = 5;

/** Sampling and length fields shared by both endpoints (OpenAI names, plus llama.cpp/vLLM extensions). */
export interface SamplingFields {
  maxTokens: number | undefined;
  temperature: number;
  topP: number;
  topK: number;
  minP: number;
  repeatPenalty: number;
  presencePenalty: number;
  frequencyPenalty: number;
  seed: number | undefined;
  stop: string[];
  stream: boolean;
  includeUsage: boolean;
  /** top alternatives per token; undefined = no logprobs */
  logprobs: number | undefined;
  /** llama.cpp/vLLM extension: generate past end-of-generation tokens (benchmarks) */
  ignoreEos: boolean;
}

export interface ToolDefinition {
  type: "function";
  function: { name: string; description?: string; parameters?: unknown };
}

export interface ChatRequest extends SamplingFields {
  model: string | undefined;
  messages: ChatMessage[];
  tools: ToolDefinition[] | undefined;
  /** "auto" (tools rendered, calls parsed) or "none" (neither) */
  toolChoice: "auto" | "none";
  enableThinking: boolean | undefined;
}

export interface CompletionRequest extends SamplingFields {
  model: string | undefined;
  prompt: string | number[];
  /** completions extension: recognize special-token texts in a string prompt (default false) */
  parseSpecial: boolean;
  echo: boolean;
}

type Body = Record<string, unknown>;

function isObject(value: unknown): value is Body {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function typeName(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  return typeof value;
}

function optionalNumber(body: Body, field: string, check: (n: number) => boolean, rule: string): number | undefined {
  const value = body[field];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "number" || !Number.isFinite(value)) {
    throw invalidRequest(field, `${field} must be a number, got ${typeName(value)}`, "invalid_type");
  }
  if (!check(value)) throw invalidRequest(field, `${field} must be ${rule}, got ${value}`);
  return value;
}

function optionalBoolean(body: Body, field: string): boolean | undefined {
  const value = body[field];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "boolean") throw invalidRequest(field, `${field} must be a boolean, got ${typeName(value)}`, "invalid_type");
  return value;
}

function optionalString(body: Body, field: string): string | undefined {
  const value = body[field];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "string") throw invalidRequest(field, `${field} must be a string, got ${typeName(value)}`, "invalid_type");
  return value;
}

const isInt = (n: number): boolean => Number.isSafeInteger(n);

function parseStop(body: Body): string[] {
  const value = body["stop"];
  if (value === undefined || value === null) return [];
  const list = typeof value === "string" ? [value] : value;
  if (!Array.isArray(list) || list.some((s) => typeof s !== "string")) {
    throw invalidRequest("stop", `stop must be a string or an array of strings, got ${typeName(value)}`, "invalid_type");
  }
  if (list.length > MAX_STOP_STRINGS) throw invalidRequest("stop", `stop has ${list.length} strings; at most ${MAX_STOP_STRINGS}`);
  for (const s of list as string[]) {
    if (s.length === 0) throw invalidRequest("stop", "stop strings must not be empty");
    if (s.length > MAX_STOP_LENGTH) throw invalidRequest("stop", `a stop string has ${s.length} characters; at most ${MAX_STOP_LENGTH}`);
  }
  return list as string[];
}

function parseSampling(body: Body, logprobs: number | undefined): SamplingFields {
  const n = optionalNumber(body, "n", isInt, "an integer");
  if (n !== undefined && n !== 1) throw invalidRequest("n", `n must be 1 (one choice per request), got ${n}`);
  const maxCompletion = optionalNumber(body, "max_completion_tokens", (v) => isInt(v) && v >= 1, "an integer >= 1");
  const maxTokens = maxCompletion ?? optionalNumber(body, "max_tokens", (v) => isInt(v) && v >= 1, "an integer >= 1");
  const streamOptions = body["stream_options"];
  let includeUsage = false;
  if (streamOptions !== undefined && streamOptions !== null) {
    if (!isObject(streamOptions))
      throw invalidRequest("stream_options", `stream_options must be an object, got ${typeName(streamOptions)}`, "invalid_type");
    includeUsage = optionalBoolean(streamOptions, "include_usage") ?? false;
  }
  const stream = optionalBoolean(body, "stream") ?? false;
  if (streamOptions !== undefined && streamOptions !== null && !stream) {
    throw invalidRequest("stream_options", "stream_options is only allowed with stream: true");
  }
  return {
    maxTokens,
    temperature: optionalNumber(body, "temperature", (v) => v >= 0 && v <= 2, "in [0, 2]") ?? 1,
    topP: optionalNumber(body, "top_p", (v) => v > 0 && v <= 1, "in (0, 1]") ?? 1,
    topK: optionalNumber(body, "top_k", (v) => isInt(v) && v >= 0, "an integer >= 0 (0 = off)") ?? 0,
    minP: optionalNumber(body, "min_p", (v) => v >= 0 && v <= 1, "in [0, 1]") ?? 0,
    repeatPenalty: optionalNumber(body, "repetition_penalty", (v) => v > 0, "> 0") ?? 1,
    presencePenalty: optionalNumber(body, "presence_penalty", (v) => v >= -2 && v <= 2, "in [-2, 2]") ?? 0,
    frequencyPenalty: optionalNumber(body, "frequency_penalty", (v) => v >= -2 && v <= 2, "in [-2, 2]") ?? 0,
    seed: optionalNumber(body, "seed", (v) => isInt(v), "an integer"),
    stop: parseStop(body),
    stream,
    includeUsage,
    logprobs,
    ignoreEos: optionalBoolean(body, "ignore_eos") ?? false,
  };
}

function parseContent(value: unknown, param: string): string {
  if (typeof value === "string") return value;
  if (value === null || value === undefined) return "";
  if (!Array.isArray(value))
    throw invalidRequest(param, `${param} must be a string or an array of content parts, got ${typeName(value)}`, "invalid_type");
  const texts: string[] = [];
  value.forEach((part, i) => {
    if (!isObject(part)) throw invalidRequest(`${param}[${i}]`, `${param}[${i}] must be an object`, "invalid_type");
    if (part["type"] !== "text") {
      throw invalidRequest(
        `${param}[${i}].type`,
        `content part type ${JSON.stringify(part["type"])} is not supported (only "text")`,
        "unsupported_value",
      );
    }
    if (typeof part["text"] !== "string")
      throw invalidRequest(`${param}[${i}].text`, `${param}[${i}].text must be a string`, "invalid_type");
    texts.push(part["text"]);
  });
  return texts.join("\n");
}

const ROLES = new Set(["system", "developer", "user", "assistant", "tool"]);

function parseToolCalls(value: unknown, param: string): ChatToolCall[] {
  if (!Array.isArray(value)) throw invalidRequest(param, `${param} must be an array`, "invalid_type");
  return value.map((call, j) => {
    const at = `${param}[${j}]`;
    if (!isObject(call) || !isObject(call["function"]))
      throw invalidRequest(at, `${at} must be {type: "function", id, function: {name, arguments}}`, "invalid_type");
    const fn = call["function"];
    if (typeof fn["name"] !== "string" || fn["name"] === "")
      throw invalidRequest(`${at}.function.name`, `${at}.function.name must be a non-empty string`, "invalid_type");
    let args: unknown = fn["arguments"] ?? {};
    if (typeof args === "string") {
      try {
        args = args.trim() === "" ? {} : JSON.parse(args);
      } catch {
        throw invalidRequest(`${at}.function.arguments`, `${at}.function.arguments is not valid JSON`);
      }
    }
    return {
      type: "function" as const,
      ...(typeof call["id"] === "string" ? { id: call["id"] } : {}),
      function: { name: fn["name"], arguments: args },
    };
  });
}

function parseMessages(value: unknown): ChatMessage[] {
  if (!Array.isArray(value)) throw invalidRequest("messages", `messages must be an array, got ${typeName(value)}`, "invalid_type");
  if (value.length === 0) throw invalidRequest("messages", "messages must not be empty");
  const callNames = new Map<string, string>();
  return value.map((message, i) => {
    const param = `messages[${i}]`;
    if (!isObject(message)) throw invalidRequest(param, `${param} must be an object, got ${typeName(message)}`, "invalid_type");
    const role = message["role"];
    if (typeof role !== "string" || !ROLES.has(role)) {
      throw invalidRequest(
        `${param}.role`,
        `${param}.role must be one of system, developer, user, assistant, tool; got ${JSON.stringify(role)}`,
      );
    }
    const content = parseContent(message["content"], `${param}.content`);
    const out: ChatMessage = { role: role === "developer" ? "system" : role, content };
    if (role === "assistant" && message["tool_calls"] !== undefined && message["tool_calls"] !== null) {
      out.tool_calls = parseToolCalls(message["tool_calls"], `${param}.tool_calls`);
      for (const call of out.tool_calls) if (call.id) callNames.set(call.id, call.function.name);
    }
    if (role === "assistant" && typeof message["reasoning_content"] === "string") out.reasoning_content = message["reasoning_content"];
    if (role === "tool") {
      const id = message["tool_call_id"];
      if (id !== undefined && typeof id !== "string")
        throw invalidRequest(`${param}.tool_call_id`, `${param}.tool_call_id must be a string`, "invalid_type");
      if (id !== undefined) {
        out.tool_call_id = id;
        const name = callNames.get(id);
        if (name) out.name = name;
      }
    }
    if (typeof message["name"] === "string") out.name = message["name"];
    if (role !== "assistant" && role !== "tool" && message["content"] === undefined) {
      throw invalidRequest(`${param}.content`, `${param}.content is required for role ${role}`);
    }
    return out;
  });
}

function parseTools(body: Body): ToolDefinition[] | undefined {
  const value = body["tools"];
  if (value === undefined || value === null) return undefined;
  if (!Array.isArray(value)) throw invalidRequest("tools", `tools must be an array, got ${typeName(value)}`, "invalid_type");
  return value.map((tool, i) => {
    const param = `tools[${i}]`;
    if (!isObject(tool) || tool["type"] !== "function" || !isObject(tool["function"])) {
      throw invalidRequest(param, `${param} must be {type: "function", function: {name, description?, parameters?}}`, "invalid_type");
    }
    const fn = tool["function"];
    if (typeof fn["name"] !== "string" || !/^[A-Za-z0-9_.-]{1,64}$/.test(fn["name"])) {
      throw invalidRequest(`${param}.function.name`, `${param}.function.name must be 1-64 characters of a-z, A-Z, 0-9, _ . -`);
    }
    if (fn["description"] !== undefined && typeof fn["description"] !== "string") {
      throw invalidRequest(`${param}.function.description`, `${param}.function.description must be a string`, "invalid_type");
    }
    if (fn["parameters"] !== undefined && !isObject(fn["parameters"])) {
      throw invalidRequest(`${param}.function.parameters`, `${param}.function.parameters must be a JSON Schema object`, "invalid_type");
    }
    const definition: ToolDefinition = { type: "function", function: { name: fn["name"] } };
    if (typeof fn["description"] === "string") definition.function.description = fn["description"];
    if (fn["parameters"] !== undefined) definition.function.parameters = fn["parameters"];
    return definition;
  });
}

function parseToolChoice(body: Body, tools: ToolDefinition[] | undefined): "auto" | "none" {
  const value = body["tool_choice"];
  if (value === undefined || value === null || value === "auto") return "auto";
  if (value === "none") return "none";
  if (value === "required" || isObject(value)) {
    throw invalidRequest(
      "tool_choice",
      `tool_choice ${JSON.stringify(value)} is not supported: forcing a call needs constrained decoding; use "auto" or "none"`,
      "unsupported_value",
    );
  }
  void tools;
  throw invalidRequest("tool_choice", `tool_choice must be "auto" or "none", got ${JSON.stringify(value)}`);
}

function requireObject(body: unknown): Body {
  if (!isObject(body)) throw invalidRequest(null, `the request body must be a JSON object, got ${typeName(body)}`, "invalid_type");
  return body;
}

export function parseChatRequest(raw: unknown): ChatRequest {
  const body = requireObject(raw);
  const messages = parseMessages(body["messages"]);
  const logprobsOn = optionalBoolean(body, "logprobs") ?? false;
  const top = optionalNumber(
    body,
    "top_logprobs",
    (v) => isInt(v) && v >= 0 && v <= MAX_CHAT_TOP_LOGPROBS,
    `an integer in [0, ${MAX_CHAT_TOP_LOGPROBS}]`,
  );
  if (top !== undefined && !logprobsOn) throw invalidRequest("top_logprobs", "top_logprobs needs logprobs: true");
  const tools = parseTools(body);
  const toolChoice = parseToolChoice(body, tools);
  const responseFormat = body["response_format"];
  if (responseFormat !== undefined && responseFormat !== null) {
    if (!isObject(responseFormat) || responseFormat["type"] !== "text") {
      throw invalidRequest(
        "response_format",
        'response_format other than {"type": "text"} is not supported (no constrained decoding)',
        "unsupported_value",
      );
    }
  }
  let enableThinking: boolean | undefined;
  const kwargs = body["chat_template_kwargs"];
  if (kwargs !== undefined && kwargs !== null) {
    if (!isObject(kwargs)) throw invalidRequest("chat_template_kwargs", "chat_template_kwargs must be an object", "invalid_type");
    enableThinking = optionalBoolean(kwargs, "enable_thinking");
  }
  return {
    ...parseSampling(body, logprobsOn ? (top ?? 0) : undefined),
    model: optionalString(body, "model"),
    messages,
    tools,
    toolChoice,
    enableThinking,
  };
}

export function parseCompletionRequest(raw: unknown, vocabSize: number): CompletionRequest {
  const body = requireObject(raw);
  let prompt = body["prompt"];
  if (Array.isArray(prompt) && prompt.length === 1 && (typeof prompt[0] === "string" || Array.isArray(prompt[0]))) prompt = prompt[0];
  if (typeof prompt !== "string") {
    if (!Array.isArray(prompt))
      throw invalidRequest("prompt", `prompt must be a string or an array of token ids, got ${typeName(prompt)}`, "invalid_type");
    if (prompt.some((id) => typeof id === "string" || Array.isArray(id))) {
      throw invalidRequest("prompt", "several prompts in one request are not supported: send one prompt per request", "unsupported_value");
    }
    prompt.forEach((id, i) => {
      if (typeof id !== "number" || !Number.isInteger(id) || id < 0 || id >= vocabSize) {
        throw invalidRequest("prompt", `prompt[${i}] = ${JSON.stringify(id)} is not a token id in [0, ${vocabSize})`);
      }
    });
  }
  if ((typeof prompt === "string" ? prompt.length : prompt.length) === 0) throw invalidRequest("prompt", "prompt must not be empty");
  const logprobs = optionalNumber(
    body,
    "logprobs",
    (v) => isInt(v) && v >= 0 && v <= MAX_COMPLETION_LOGPROBS,
    `an integer in [0, ${MAX_COMPLETION_LOGPROBS}]`,
  );
  if (optionalString(body, "suffix") !== undefined)
    throw invalidRequest("suffix", "suffix (fill-in-the-middle) is not supported", "unsupported_value");
  const bestOf = optionalNumber(body, "best_of", isInt, "an integer");
  if (bestOf !== undefined && bestOf !== 1) throw invalidRequest("best_of", `best_of must be 1, got ${bestOf}`);
  const sampling = parseSampling(body, logprobs);
  return {
    ...sampling,
    // OpenAI's completions default is 16 tokens
    maxTokens: sampling.maxTokens ?? 16,
    model: optionalString(body, "model"),
    prompt: prompt as string | number[],
    parseSpecial: optionalBoolean(body, "parse_special") ?? false,
    echo: optionalBoolean(body, "echo") ?? false,
  };
}
