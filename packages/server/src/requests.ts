/**
 * Request bodies of /v1/chat/completions and /v1/completions: every field checked once here, with
 * a 400 naming the field. No field is ignored silently: each one the server accepts is honoured,
 * refused when it asks for what the server cannot do, or in DOCUMENTED_IGNORED (no effect on the
 * output: `model`, `user`, `metadata`, ...); any other field is a 400 `unknown_parameter` naming it,
 * as OpenAI's API answers an unrecognized argument.
 */
import type { ChatToolCall } from "@keepquant/engine";
import { checkSchemaParam, parseResponseFormat, type ResponseFormat } from "./constraint.js";
import { invalidRequest } from "./errors.js";
import { type ImageRef, partsContent, type RequestMessage, urlImage } from "./images.js";
import { parseTemplateKwargs } from "./template-kwargs.js";

/** OpenAI's `stop` limit is 4; llama.cpp and vLLM take more. */
export const MAX_STOP_STRINGS = 16;
export const MAX_STOP_LENGTH = 256;
/** OpenAI's top_logprobs limit (chat) and the legacy `logprobs` limit (completions). */
export const MAX_CHAT_TOP_LOGPROBS = 20;
export const MAX_COMPLETION_LOGPROBS = 5;
/**
 * Deepest nesting of a JSON value the chat template renders (tool `parameters`, tool call
 * `arguments`): the template's renderer recurses per level, so a deeper value would exhaust the stack.
 */
export const MAX_JSON_DEPTH = 64;

/** Fields accepted by both endpoints that have no effect on the output, and why (docs/usage/server.md lists them). */
export const DOCUMENTED_IGNORED: Readonly<Record<string, string>> = {
  model: "one model is served: any name is accepted and responses carry the served model's id (as llama.cpp's server)",
  user: "an end-user id for the caller's abuse monitoring; nothing is logged or stored",
};
/** Chat-only fields with no effect on the output. */
const CHAT_DOCUMENTED_IGNORED: Readonly<Record<string, string>> = {
  metadata: "tags for stored completions; nothing is stored",
};

/** Sampling and length fields parsed by parseSampling, honoured by both endpoints. */
const SAMPLING_FIELDS = [
  "n",
  "max_tokens",
  "max_completion_tokens",
  "stream",
  "stream_options",
  "temperature",
  "top_p",
  "top_k",
  "min_p",
  "repetition_penalty",
  "presence_penalty",
  "frequency_penalty",
  "seed",
  "stop",
  "ignore_eos",
  "logit_bias",
] as const;
/** Every field /v1/chat/completions accepts (honoured, refused by value, or documented as ignored). */
export const CHAT_FIELDS: ReadonlySet<string> = new Set([
  ...SAMPLING_FIELDS,
  ...Object.keys(DOCUMENTED_IGNORED),
  ...Object.keys(CHAT_DOCUMENTED_IGNORED),
  "messages",
  "logprobs",
  "top_logprobs",
  "tools",
  "tool_choice",
  "parallel_tool_calls",
  "response_format",
  "chat_template_kwargs",
  "store",
  "thinking_budget",
  "thinking_token_budget",
]);
/** Every field /v1/completions accepts. */
export const COMPLETION_FIELDS: ReadonlySet<string> = new Set([
  ...SAMPLING_FIELDS,
  ...Object.keys(DOCUMENTED_IGNORED),
  "prompt",
  "logprobs",
  "suffix",
  "best_of",
  "echo",
  "parse_special",
]);

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

/**
 * A request of the agent APIs (Messages, Responses) as a ChatRequest: what they set, and chat completions'
 * defaults for what they have no parameter for (min-p, penalties, seed, usage in the stream, logprobs,
 * ignore_eos, chat_template_kwargs).
 */
export function agentChatRequest(
  fields: Pick<SamplingFields, "maxTokens" | "temperature" | "topP" | "topK" | "stop" | "stream"> &
    Omit<ChatRequest, keyof SamplingFields | "templateKwargs">,
): ChatRequest {
  return {
    ...fields,
    minP: 0,
    repeatPenalty: 1,
    presencePenalty: 0,
    frequencyPenalty: 0,
    seed: undefined,
    includeUsage: false,
    logprobs: undefined,
    ignoreEos: false,
    templateKwargs: {},
  };
}

export interface ToolDefinition {
  type: "function";
  /** `strict: true`: under tool_choice "auto", calls of this tool are constrained to its parameters schema */
  function: { name: string; description?: string; parameters?: unknown; strict?: boolean };
}

/** tool_choice: "auto" (tools rendered, calls parsed), "none" (neither), "required" (one or more calls), or one named tool. */
export type ToolChoice = "auto" | "none" | "required" | { name: string };

export interface ChatRequest extends SamplingFields {
  model: string | undefined;
  /** the messages; a message's content holds parts only when it has images (images.ts) */
  messages: RequestMessage[];
  tools: ToolDefinition[] | undefined;
  toolChoice: ToolChoice;
  /** response_format: free text, one JSON object, or JSON for a schema (constrained decoding) */
  responseFormat: ResponseFormat;
  enableThinking: boolean | undefined;
  /** most reasoning tokens before the server closes the reasoning with </think> (thinking_budget) */
  thinkingBudget: number | undefined;
  /** chat_template_kwargs: every key reaches the template as a variable (template-kwargs.ts) */
  templateKwargs: Record<string, unknown>;
}

export interface CompletionRequest extends SamplingFields {
  model: string | undefined;
  prompt: string | number[];
  /** completions extension: recognize special-token texts in a string prompt (default false) */
  parseSpecial: boolean;
  echo: boolean;
}

export type Body = Record<string, unknown>;

export function isObject(value: unknown): value is Body {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

export function typeName(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  return typeof value;
}

/** `rule` names a finite range ("in [0, 2]"): JSON's 1e309 parses to Infinity and gets the same message. */
export function optionalNumber(body: Body, field: string, check: (n: number) => boolean, rule: string, param = field): number | undefined {
  const value = body[field];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "number") throw invalidRequest(param, `${param} must be a number, got ${typeName(value)}`, "invalid_type");
  if (!Number.isFinite(value) || !check(value)) throw invalidRequest(param, `${param} must be ${rule}, got ${value}`);
  return value;
}

/** Refuses a field of `body` outside `known`, naming it (`where` is the path of `body`, "" at the top). */
export function refuseUnknown(body: Body, known: ReadonlySet<string>, where: string): void {
  for (const key of Object.keys(body)) {
    if (known.has(key)) continue;
    const param = where === "" ? key : `${where}.${key}`;
    throw invalidRequest(
      param,
      `unrecognized request field ${JSON.stringify(param)} (not one this server honours, refuses by value or documents as ignored)`,
      "unknown_parameter",
    );
  }
}

/**
 * Refuses a JSON value nested deeper than MAX_JSON_DEPTH (objects and arrays), checked without
 * recursion so that the check itself cannot exhaust the stack.
 */
export function refuseDeep(value: unknown, param: string): void {
  const stack: [unknown, number][] = [[value, 1]];
  while (stack.length > 0) {
    const [item, depth] = stack.pop()!;
    if (typeof item !== "object" || item === null) continue;
    if (depth > MAX_JSON_DEPTH) {
      throw invalidRequest(param, `${param} is nested more than ${MAX_JSON_DEPTH} levels deep (at most ${MAX_JSON_DEPTH})`, "too_deep");
    }
    for (const child of Object.values(item)) if (typeof child === "object" && child !== null) stack.push([child, depth + 1]);
  }
}

/** A field that is accepted only with the value that means "what the server does anyway". */
function onlyDefault(body: Body, field: string, accepted: unknown, why: string): void {
  const value = body[field];
  if (value === undefined || value === null || value === accepted) return;
  throw invalidRequest(field, `${field} ${JSON.stringify(value)} is not supported: ${why}`, "unsupported_value");
}

export function optionalBoolean(body: Body, field: string): boolean | undefined {
  const value = body[field];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "boolean") throw invalidRequest(field, `${field} must be a boolean, got ${typeName(value)}`, "invalid_type");
  return value;
}

export function optionalString(body: Body, field: string): string | undefined {
  const value = body[field];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "string") throw invalidRequest(field, `${field} must be a string, got ${typeName(value)}`, "invalid_type");
  return value;
}

const isInt = (n: number): boolean => Number.isSafeInteger(n);
const INT_RANGE = "an integer in [-(2^53 - 1), 2^53 - 1]";
const MAX_TOKENS_RULE = "an integer in [1, 2^53 - 1]";

export function parseStop(body: Body, field = "stop"): string[] {
  const value = body[field];
  if (value === undefined || value === null) return [];
  const list = typeof value === "string" ? [value] : value;
  if (!Array.isArray(list) || list.some((s) => typeof s !== "string")) {
    throw invalidRequest(field, `${field} must be a string or an array of strings, got ${typeName(value)}`, "invalid_type");
  }
  if (list.length > MAX_STOP_STRINGS) throw invalidRequest(field, `${field} has ${list.length} strings; at most ${MAX_STOP_STRINGS}`);
  for (const s of list as string[]) {
    if (s.length === 0) throw invalidRequest(field, `${field} strings must not be empty`);
    if (s.length > MAX_STOP_LENGTH) throw invalidRequest(field, `a ${field} string has ${s.length} characters; at most ${MAX_STOP_LENGTH}`);
  }
  return list as string[];
}

function parseLogitBias(body: Body): void {
  const value = body["logit_bias"];
  if (value === undefined || value === null) return;
  if (!isObject(value)) throw invalidRequest("logit_bias", `logit_bias must be an object, got ${typeName(value)}`, "invalid_type");
  // an empty map biases nothing: what the server does; any bias would be ignored, so it is refused
  if (Object.keys(value).length > 0)
    throw invalidRequest("logit_bias", "logit_bias is not supported (the sampler has no per-token bias); remove it", "unsupported_value");
}

function parseSampling(body: Body, logprobs: number | undefined): SamplingFields {
  const n = optionalNumber(body, "n", isInt, INT_RANGE);
  if (n !== undefined && n !== 1) throw invalidRequest("n", `n must be 1 (one choice per request), got ${n}`);
  const maxCompletion = optionalNumber(body, "max_completion_tokens", (v) => isInt(v) && v >= 1, MAX_TOKENS_RULE);
  const maxTokens = maxCompletion ?? optionalNumber(body, "max_tokens", (v) => isInt(v) && v >= 1, MAX_TOKENS_RULE);
  parseLogitBias(body);
  optionalString(body, "user"); // documented as ignored (DOCUMENTED_IGNORED), but it must be a string
  const streamOptions = body["stream_options"];
  let includeUsage = false;
  if (streamOptions !== undefined && streamOptions !== null) {
    if (!isObject(streamOptions))
      throw invalidRequest("stream_options", `stream_options must be an object, got ${typeName(streamOptions)}`, "invalid_type");
    refuseUnknown(streamOptions, new Set(["include_usage"]), "stream_options");
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
    topK: optionalNumber(body, "top_k", (v) => isInt(v) && v >= 0, "an integer in [0, 2^53 - 1] (0 = off)") ?? 0,
    minP: optionalNumber(body, "min_p", (v) => v >= 0 && v <= 1, "in [0, 1]") ?? 0,
    repeatPenalty: optionalNumber(body, "repetition_penalty", (v) => v > 0, "a finite number > 0") ?? 1,
    presencePenalty: optionalNumber(body, "presence_penalty", (v) => v >= -2 && v <= 2, "in [-2, 2]") ?? 0,
    frequencyPenalty: optionalNumber(body, "frequency_penalty", (v) => v >= -2 && v <= 2, "in [-2, 2]") ?? 0,
    seed: optionalNumber(body, "seed", (v) => isInt(v), INT_RANGE),
    stop: parseStop(body),
    stream,
    includeUsage,
    logprobs,
    ignoreEos: optionalBoolean(body, "ignore_eos") ?? false,
  };
}

/**
 * A message's content: a string or content parts, text (joined by new lines, as before images) and, in a user
 * message, `image_url` parts (a data: URL, or an http(s) URL the server fetches when allowed). `null`/absent only
 * where the caller allows it (an assistant's tool calls).
 */
function parseContent(value: unknown, param: string, role: string): RequestMessage["content"] {
  if (typeof value === "string") return value;
  if (value === null || value === undefined) return "";
  if (!Array.isArray(value))
    throw invalidRequest(param, `${param} must be a string or an array of content parts, got ${typeName(value)}`, "invalid_type");
  const parts: (string | ImageRef)[] = [];
  value.forEach((part, i) => {
    const at = `${param}[${i}]`;
    if (!isObject(part)) throw invalidRequest(at, `${at} must be an object`, "invalid_type");
    if (part["type"] === "image_url" && role === "user") {
      refuseUnknown(part, IMAGE_PART_FIELDS, at);
      const image = part["image_url"];
      // OpenAI's first form was a bare string; the object form has `url` and an optional `detail`
      const url = isObject(image) ? image["url"] : image;
      if (isObject(image)) {
        refuseUnknown(image, IMAGE_URL_FIELDS, `${at}.image_url`);
        const detail = image["detail"];
        if (detail !== undefined && detail !== null && !["auto", "low", "high"].includes(detail as string))
          throw invalidRequest(`${at}.image_url.detail`, `${at}.image_url.detail must be "auto", "low" or "high"`, "invalid_value");
      }
      parts.push(urlImage(url, at));
      return;
    }
    if (part["type"] !== "text") {
      const image = part["type"] === "image_url";
      throw invalidRequest(
        `${at}.type`,
        image
          ? `${at}: image_url parts are only allowed in user messages, not ${role}`
          : `content part type ${JSON.stringify(part["type"])} is not supported (only "text"${role === "user" ? ' and "image_url"' : ""})`,
        "unsupported_value",
      );
    }
    refuseUnknown(part, CONTENT_PART_FIELDS, at);
    if (typeof part["text"] !== "string") throw invalidRequest(`${at}.text`, `${at}.text must be a string`, "invalid_type");
    parts.push(part["text"]);
  });
  return partsContent(parts, "\n");
}

/** `detail` is accepted and has no effect: the image is resized to the projector's own pixel limits. */
const IMAGE_PART_FIELDS: ReadonlySet<string> = new Set(["type", "image_url"]);
const IMAGE_URL_FIELDS: ReadonlySet<string> = new Set(["url", "detail"]);

const ROLES = new Set(["system", "developer", "user", "assistant", "tool"]);
const CONTENT_PART_FIELDS: ReadonlySet<string> = new Set(["type", "text"]);
/** Fields of a message; which role may carry which is checked in parseMessages. */
const MESSAGE_FIELDS: ReadonlySet<string> = new Set(["role", "content", "name", "tool_calls", "tool_call_id", "reasoning_content"]);
/**
 * Fields of an assistant message as OpenAI returns it (a client may send the message back whole):
 * accepted when empty (null, or [] for annotations), which is what they mean for a text answer.
 */
const EMPTY_ONLY_MESSAGE_FIELDS: ReadonlySet<string> = new Set(["refusal", "audio", "function_call", "annotations"]);
const TOOL_CALL_FIELDS: ReadonlySet<string> = new Set(["id", "type", "function"]);
const TOOL_CALL_FUNCTION_FIELDS: ReadonlySet<string> = new Set(["name", "arguments"]);
const TOOL_FIELDS: ReadonlySet<string> = new Set(["type", "function"]);
const TOOL_FUNCTION_FIELDS: ReadonlySet<string> = new Set(["name", "description", "parameters", "strict"]);

function parseToolCalls(value: unknown, param: string): ChatToolCall[] {
  if (!Array.isArray(value)) throw invalidRequest(param, `${param} must be an array`, "invalid_type");
  return value.map((call, j) => {
    const at = `${param}[${j}]`;
    if (!isObject(call) || !isObject(call["function"]))
      throw invalidRequest(at, `${at} must be {type: "function", id, function: {name, arguments}}`, "invalid_type");
    refuseUnknown(call, TOOL_CALL_FIELDS, at);
    if (call["type"] !== undefined && call["type"] !== "function")
      throw invalidRequest(`${at}.type`, `${at}.type must be "function", got ${JSON.stringify(call["type"])}`, "unsupported_value");
    if (call["id"] !== undefined && call["id"] !== null && typeof call["id"] !== "string")
      throw invalidRequest(`${at}.id`, `${at}.id must be a string, got ${typeName(call["id"])}`, "invalid_type");
    const fn = call["function"];
    refuseUnknown(fn, TOOL_CALL_FUNCTION_FIELDS, `${at}.function`);
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
    refuseDeep(args, `${at}.function.arguments`);
    return {
      type: "function" as const,
      ...(typeof call["id"] === "string" ? { id: call["id"] } : {}),
      function: { name: fn["name"], arguments: args },
    };
  });
}

function parseMessages(value: unknown, maxMessages: number): RequestMessage[] {
  if (!Array.isArray(value)) throw invalidRequest("messages", `messages must be an array, got ${typeName(value)}`, "invalid_type");
  if (value.length === 0) throw invalidRequest("messages", "messages must not be empty");
  // counted before any message is looked at, and long before the template would render them
  if (value.length > maxMessages)
    throw invalidRequest(
      "messages",
      `messages has ${value.length} messages; this server takes at most ${maxMessages}`,
      "too_many_messages",
    );
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
    for (const key of Object.keys(message)) {
      if (MESSAGE_FIELDS.has(key)) continue;
      const field = message[key];
      const empty = field === null || (Array.isArray(field) && field.length === 0);
      if (EMPTY_ONLY_MESSAGE_FIELDS.has(key) && empty) continue;
      if (EMPTY_ONLY_MESSAGE_FIELDS.has(key))
        throw invalidRequest(`${param}.${key}`, `${param}.${key} is not supported (only null)`, "unsupported_value");
      refuseUnknown({ [key]: field }, MESSAGE_FIELDS, param);
    }
    // role-specific fields on another role would be dropped: refused instead
    const onlyFor = (field: string, allowed: string): void => {
      if (message[field] !== undefined && message[field] !== null && role !== allowed)
        throw invalidRequest(`${param}.${field}`, `${param}.${field} is only allowed on role ${allowed}, not ${role}`, "unsupported_value");
    };
    onlyFor("tool_calls", "assistant");
    onlyFor("reasoning_content", "assistant");
    onlyFor("tool_call_id", "tool");
    const hasCalls = role === "assistant" && Array.isArray(message["tool_calls"]) && message["tool_calls"].length > 0;
    // content may be null or absent only on an assistant message that calls tools (as OpenAI)
    if ((message["content"] === undefined || message["content"] === null) && !hasCalls) {
      throw invalidRequest(
        `${param}.content`,
        `${param}.content is required for role ${role}${role === "assistant" ? " (unless the message has tool_calls)" : ""}, got ${typeName(message["content"])}`,
        role === "assistant" || message["content"] === undefined ? "invalid_value" : "invalid_type",
      );
    }
    const content = parseContent(message["content"], `${param}.content`, role);
    const out: RequestMessage = { role: role === "developer" ? "system" : role, content };
    if (role === "assistant" && message["tool_calls"] !== undefined && message["tool_calls"] !== null) {
      out.tool_calls = parseToolCalls(message["tool_calls"], `${param}.tool_calls`);
      for (const call of out.tool_calls) if (call.id) callNames.set(call.id, call.function.name);
    }
    if (role === "assistant" && message["reasoning_content"] !== undefined && message["reasoning_content"] !== null) {
      if (typeof message["reasoning_content"] !== "string")
        throw invalidRequest(`${param}.reasoning_content`, `${param}.reasoning_content must be a string`, "invalid_type");
      out.reasoning_content = message["reasoning_content"];
    }
    if (role === "tool") {
      const id = message["tool_call_id"];
      if (typeof id !== "string" || id === "") {
        throw invalidRequest(
          `${param}.tool_call_id`,
          `${param}.tool_call_id is required for role tool (the id of the assistant's tool call it answers), got ${typeName(id)}`,
          id === undefined || id === null || id === "" ? "invalid_value" : "invalid_type",
        );
      }
      out.tool_call_id = id;
      const name = callNames.get(id);
      if (name) out.name = name;
    }
    if (message["name"] !== undefined && message["name"] !== null) {
      if (typeof message["name"] !== "string") throw invalidRequest(`${param}.name`, `${param}.name must be a string`, "invalid_type");
      out.name = message["name"];
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
    refuseUnknown(tool, TOOL_FIELDS, param);
    const fn = tool["function"];
    refuseUnknown(fn, TOOL_FUNCTION_FIELDS, `${param}.function`);
    if (typeof fn["name"] !== "string" || !/^[A-Za-z0-9_.-]{1,64}$/.test(fn["name"])) {
      throw invalidRequest(`${param}.function.name`, `${param}.function.name must be 1-64 characters of a-z, A-Z, 0-9, _ . -`);
    }
    if (fn["description"] !== undefined && typeof fn["description"] !== "string") {
      throw invalidRequest(`${param}.function.description`, `${param}.function.description must be a string`, "invalid_type");
    }
    if (fn["parameters"] !== undefined && !isObject(fn["parameters"])) {
      throw invalidRequest(`${param}.function.parameters`, `${param}.function.parameters must be a JSON Schema object`, "invalid_type");
    }
    if (fn["strict"] !== undefined && fn["strict"] !== null && typeof fn["strict"] !== "boolean") {
      throw invalidRequest(`${param}.function.strict`, `${param}.function.strict must be a boolean`, "invalid_type");
    }
    if (fn["parameters"] !== undefined) refuseDeep(fn["parameters"], `${param}.function.parameters`);
    // a strict tool's arguments are constrained to its schema: a keyword that cannot be enforced is refused
    if (fn["strict"] === true && fn["parameters"] !== undefined) checkSchemaParam(fn["parameters"], `${param}.function.parameters`);
    const definition: ToolDefinition = { type: "function", function: { name: fn["name"] } };
    if (typeof fn["description"] === "string") definition.function.description = fn["description"];
    if (fn["parameters"] !== undefined) definition.function.parameters = fn["parameters"];
    if (fn["strict"] === true) definition.function.strict = true;
    return definition;
  });
}

function parseToolChoice(body: Body, tools: ToolDefinition[] | undefined): ToolChoice {
  const value = body["tool_choice"];
  if (value === undefined || value === null || value === "auto") return "auto";
  if (value === "none") return "none";
  let choice: ToolChoice;
  if (value === "required") choice = "required";
  else if (isObject(value)) {
    const fn = value["function"];
    if (value["type"] !== "function" || !isObject(fn) || typeof fn["name"] !== "string") {
      throw invalidRequest(
        "tool_choice",
        'tool_choice must be "auto", "none", "required" or {"type": "function", "function": {"name": ...}}',
      );
    }
    refuseUnknown(value, new Set(["type", "function"]), "tool_choice");
    refuseUnknown(fn, new Set(["name"]), "tool_choice.function");
    choice = { name: fn["name"] };
  } else {
    throw invalidRequest("tool_choice", `tool_choice must be "auto", "none", "required" or a named function, got ${JSON.stringify(value)}`);
  }
  // a forced call is constrained to a listed tool and its arguments to the tool's schema
  if (!tools || tools.length === 0) throw invalidRequest("tool_choice", `tool_choice ${JSON.stringify(value)} needs tools`);
  if (typeof choice === "object" && !tools.some((t) => t.function.name === (choice as { name: string }).name)) {
    throw invalidRequest(
      "tool_choice.function.name",
      `tool_choice names the function ${JSON.stringify(choice.name)}, which is not among the tools (${tools.map((t) => t.function.name).join(", ")})`,
      "unknown_tool",
    );
  }
  checkForcedToolSchemas(tools, choice, (i) => `tools[${i}].function.parameters`);
  return choice;
}

/**
 * Checks the parameter schema of each tool `choice` forces (every tool for "required", the named one for a
 * name), in order: a forced call is constrained to its tool's schema, so a keyword that cannot be enforced is
 * refused. `param(index, tool)` names the schema in the error.
 */
export function checkForcedToolSchemas(
  tools: readonly ToolDefinition[],
  choice: ToolChoice,
  param: (index: number, tool: ToolDefinition) => string,
): void {
  tools.forEach((tool, i) => {
    const forced = choice === "required" || (typeof choice === "object" && choice.name === tool.function.name);
    if (forced && tool.function.parameters !== undefined) checkSchemaParam(tool.function.parameters, param(i, tool));
  });
}

function requireObject(body: unknown): Body {
  if (!isObject(body)) throw invalidRequest(null, `the request body must be a JSON object, got ${typeName(body)}`, "invalid_type");
  return body;
}

export function parseChatRequest(raw: unknown, { maxMessages = Number.POSITIVE_INFINITY }: { maxMessages?: number } = {}): ChatRequest {
  const body = requireObject(raw);
  refuseUnknown(body, CHAT_FIELDS, "");
  const messages = parseMessages(body["messages"], maxMessages);
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
  // every call the model writes is returned (a named tool_choice constrains the output to one call)
  onlyDefault(body, "parallel_tool_calls", true, "the model may write several tool calls and all are returned");
  onlyDefault(body, "store", false, "keepquant stores no completions");
  const metadata = body["metadata"];
  if (metadata !== undefined && metadata !== null && !isObject(metadata))
    throw invalidRequest("metadata", `metadata must be an object, got ${typeName(metadata)}`, "invalid_type");
  const responseFormat = parseResponseFormat(body["response_format"]);
  const callsPossible = tools !== undefined && tools.length > 0 && toolChoice !== "none";
  if (responseFormat.type !== "text" && callsPossible) {
    // one constraint per output: JSON content and tool calls would be two
    throw invalidRequest(
      "response_format",
      `response_format ${responseFormat.type} with tools needs tool_choice "none" (the output is either constrained JSON content or tool calls)`,
      "unsupported_value",
    );
  }
  const thinkingBudget = parseThinkingBudget(body);
  const { variables: templateKwargs, enableThinking } = parseTemplateKwargs(body["chat_template_kwargs"]);
  return {
    ...parseSampling(body, logprobsOn ? (top ?? 0) : undefined),
    model: optionalString(body, "model"),
    messages,
    tools,
    toolChoice,
    responseFormat,
    enableThinking,
    thinkingBudget,
    templateKwargs,
  };
}

/** `thinking_budget` (vLLM's name `thinking_token_budget` is accepted too): an integer >= 0. */
function parseThinkingBudget(body: Body): number | undefined {
  const rule = "an integer in [0, 2^53 - 1]";
  const budget = optionalNumber(body, "thinking_budget", (v) => isInt(v) && v >= 0, rule);
  const alias = optionalNumber(body, "thinking_token_budget", (v) => isInt(v) && v >= 0, rule);
  if (budget !== undefined && alias !== undefined && budget !== alias) {
    throw invalidRequest("thinking_token_budget", "thinking_budget and thinking_token_budget disagree: send one of them");
  }
  return budget ?? alias;
}

export function parseCompletionRequest(raw: unknown, vocabSize: number): CompletionRequest {
  const body = requireObject(raw);
  refuseUnknown(body, COMPLETION_FIELDS, "");
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
  const bestOf = optionalNumber(body, "best_of", isInt, INT_RANGE);
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
