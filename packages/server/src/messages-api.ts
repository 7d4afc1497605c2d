/**
 * The Anthropic Messages API (`POST /v1/messages`, `POST /v1/messages/count_tokens`): what Claude Code and the
 * Anthropic SDKs send. The request becomes the server's ChatRequest (requests.ts) and the answer is written by
 * `messagesSink` as a message object or Anthropic's event stream (`message_start`, `content_block_*`,
 * `message_delta`, `message_stop`, `ping`, `error`). Every field is honoured, mapped or ignored as
 * docs/usage/server.md lists; a field the API does not have is a 400, as Anthropic's API answers.
 */
import type { ChatToolCall } from "@keepquant/engine";
import { newId } from "./chat-api.js";
import { checkSchemaParam, type ResponseFormat } from "./constraint.js";
import { type ApiError, invalidRequest } from "./errors.js";
import { base64Image, type ImageRef, partsContent, type RequestMessage, urlImage } from "./images.js";
import { type AnswerSink, type ErrorFormat, type SinkContext, sseEvent } from "./generation.js";
import {
  agentChatRequest,
  checkForcedToolSchemas,
  type Body,
  type ChatRequest,
  isObject,
  optionalBoolean,
  optionalNumber,
  optionalString,
  parseStop,
  refuseDeep,
  refuseUnknown,
  type ToolChoice,
  type ToolDefinition,
  typeName,
} from "./requests.js";

/** Anthropic's error type for each status the server answers. */
function anthropicErrorType(status: number): string {
  switch (status) {
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    case 503:
    case 529:
      return "overloaded_error";
    default:
      return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

/** `{"type": "error", "error": {"type", "message"}}`; a stream ends with it as an `error` event. */
export const ANTHROPIC_ERRORS: ErrorFormat = {
  body: (error: ApiError) => ({ type: "error", error: { type: anthropicErrorType(error.status), message: error.message } }),
  streamEnd: (error: ApiError) => sseEvent("error", ANTHROPIC_ERRORS.body(error)),
};

/**
 * Thinking budgets of `output_config.effort` when the request sets none (`thinking.budget_tokens`): low and
 * medium bound the reasoning, high and max let the model think until it closes `</think>`.
 */
export const EFFORT_THINKING_BUDGET: Readonly<Record<string, number | undefined>> = {
  low: 1024,
  medium: 4096,
  high: undefined,
  xhigh: undefined,
  max: undefined,
};

/** Fields of a Messages request that have no effect here, and why (docs/usage/server.md lists them). */
export const MESSAGES_IGNORED: Readonly<Record<string, string>> = {
  model: "one model is served: any name is accepted and responses carry the served model's id",
  metadata: "metadata.user_id is for the caller's abuse tracking; nothing is logged or stored",
  service_tier: "one tier",
  context_management: "the server never edits the conversation: the whole context is rendered (or a 400 when it does not fit)",
  container: "no code execution container",
  mcp_servers: "the server connects to no MCP server: tools run on the client",
  inference_geo: "the model runs here",
  cache_control: "the prefix cache needs no breakpoints: every prompt's reusable prefix is cached",
  speed: "one speed",
  diagnostics: "no prompt-cache diagnostics are reported",
};

const MESSAGES_FIELDS: ReadonlySet<string> = new Set([
  ...Object.keys(MESSAGES_IGNORED),
  "max_tokens",
  "messages",
  "system",
  "stop_sequences",
  "stream",
  "temperature",
  "top_p",
  "top_k",
  "tools",
  "tool_choice",
  "thinking",
  "output_config",
  "output_format",
]);
/** count_tokens takes the prompt's fields only. */
const COUNT_TOKENS_FIELDS: ReadonlySet<string> = new Set([
  "model",
  "messages",
  "system",
  "tools",
  "tool_choice",
  "thinking",
  "output_config",
  "output_format",
  "context_management",
  "mcp_servers",
  "cache_control",
  "speed",
]);

/** The parts of a Messages request the answer needs beyond the ChatRequest. */
export interface MessagesRequest {
  chat: ChatRequest;
  /** tool_choice.disable_parallel_tool_use: only the first tool call is returned */
  singleToolCall: boolean;
}

const isInt = (n: number): boolean => Number.isSafeInteger(n);

function text(value: unknown, param: string): string {
  if (typeof value !== "string")
    throw invalidRequest(param, `${param}: Input should be a valid string, got ${typeName(value)}`, "invalid_type");
  return value;
}

/** `system`: a string or text blocks (cache_control and citations accepted and ignored). */
function systemText(value: unknown): string | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value === "string") return value;
  if (!Array.isArray(value))
    throw invalidRequest("system", `system must be a string or an array of text blocks, got ${typeName(value)}`, "invalid_type");
  return value
    .map((block, i) => {
      const at = `system[${i}]`;
      if (!isObject(block) || block["type"] !== "text")
        throw invalidRequest(at, `${at} must be a text block {type: "text", text}`, "invalid_type");
      refuseUnknown(block, TEXT_BLOCK_FIELDS, at);
      return text(block["text"], `${at}.text`);
    })
    .join("\n\n");
}

const TEXT_BLOCK_FIELDS: ReadonlySet<string> = new Set(["type", "text", "cache_control", "citations"]);
const TOOL_USE_FIELDS: ReadonlySet<string> = new Set(["type", "id", "name", "input", "cache_control", "caller", "toolset_name"]);
const TOOL_RESULT_FIELDS: ReadonlySet<string> = new Set(["type", "tool_use_id", "content", "is_error", "cache_control", "toolset_name"]);
const THINKING_FIELDS: ReadonlySet<string> = new Set(["type", "thinking", "signature", "cache_control"]);

const IMAGE_BLOCK_FIELDS: ReadonlySet<string> = new Set(["type", "source", "cache_control"]);

/** An `image` block: `source` base64 (`media_type`, `data`) or `url` (fetched when the server allows image URLs). */
function imageBlock(block: Body, at: string): ImageRef {
  refuseUnknown(block, IMAGE_BLOCK_FIELDS, at);
  const source = block["source"];
  if (!isObject(source)) throw invalidRequest(`${at}.source`, `${at}.source must be an object`, "invalid_type");
  if (source["type"] === "base64") {
    refuseUnknown(source, new Set(["type", "media_type", "data"]), `${at}.source`);
    return base64Image(source["media_type"], source["data"], at);
  }
  if (source["type"] === "url") {
    refuseUnknown(source, new Set(["type", "url"]), `${at}.source`);
    const image = urlImage(source["url"], at);
    if (image.source.kind !== "url")
      throw invalidRequest(`${at}.source.url`, `${at}.source.url must be an http(s) URL (send base64 data as source.type "base64")`);
    return image;
  }
  throw invalidRequest(
    `${at}.source.type`,
    `${at}.source.type ${JSON.stringify(source["type"])} is not supported ("base64" or "url"; files are not served here)`,
    "unsupported_value",
  );
}

/** A tool_result's content: a string, or text and image blocks. */
function toolResultContent(block: Body, at: string): RequestMessage["content"] {
  const content = block["content"];
  let parts: (string | ImageRef)[];
  if (content === undefined || content === null) parts = [""];
  else if (typeof content === "string") parts = [content];
  else if (Array.isArray(content)) {
    parts = content.map((part, j) => {
      const p = `${at}.content[${j}]`;
      if (!isObject(part)) throw invalidRequest(p, `${p} must be a content block`, "invalid_type");
      if (part["type"] === "image") return imageBlock(part, p);
      if (part["type"] !== "text")
        throw invalidRequest(
          `${p}.type`,
          `${p}.type ${JSON.stringify(part["type"])} is not supported in a tool_result (text and image only)`,
          "unsupported_value",
        );
      refuseUnknown(part, TEXT_BLOCK_FIELDS, p);
      return text(part["text"], `${p}.text`);
    });
  } else throw invalidRequest(`${at}.content`, `${at}.content must be a string or an array of blocks`, "invalid_type");
  const isError = optionalBoolean(block, "is_error");
  // the template has no error flag for a tool result: the model reads it in the text
  if (isError === true) parts = typeof parts[0] === "string" ? [`Error: ${parts[0]}`, ...parts.slice(1)] : ["Error: ", ...parts];
  return partsContent(parts, "\n");
}

/**
 * Anthropic's messages as the template's: `system` turns (inside `messages`, as Claude Code sends) join the one
 * system message at the start (Qwen's templates take one, first); `tool_use` blocks become the assistant's tool
 * calls, `tool_result` blocks tool messages (in their order, before the user's text), `thinking` blocks the turn's
 * reasoning; `redacted_thinking` is dropped (its text is not ours to read).
 */
function parseAnthropicMessages(value: unknown, system: string | undefined, maxMessages: number): RequestMessage[] {
  if (!Array.isArray(value)) throw invalidRequest("messages", `messages must be an array, got ${typeName(value)}`, "invalid_type");
  if (value.length > maxMessages)
    throw invalidRequest(
      "messages",
      `messages has ${value.length} messages; this server takes at most ${maxMessages}`,
      "too_many_messages",
    );
  const systems: string[] = system === undefined || system === "" ? [] : [system];
  const out: RequestMessage[] = [];
  const callNames = new Map<string, string>();
  value.forEach((message, i) => {
    const param = `messages[${i}]`;
    if (!isObject(message)) throw invalidRequest(param, `${param} must be an object, got ${typeName(message)}`, "invalid_type");
    refuseUnknown(message, new Set(["role", "content"]), param);
    const role = message["role"];
    if (role !== "user" && role !== "assistant" && role !== "system")
      throw invalidRequest(
        `${param}.role`,
        `${param}.role must be "user" or "assistant" (or "system", joined to the system prompt), got ${JSON.stringify(role)}`,
      );
    const content = message["content"];
    if (typeof content === "string") {
      if (role === "system") systems.push(content);
      else out.push({ role, content });
      return;
    }
    if (!Array.isArray(content))
      throw invalidRequest(
        `${param}.content`,
        `${param}.content must be a string or an array of content blocks, got ${typeName(content)}`,
        "invalid_type",
      );
    if (content.length === 0) throw invalidRequest(`${param}.content`, `${param}.content must not be empty`);
    const texts: string[] = [];
    /** the user's text and image blocks in order (texts joined by new lines, as before images) */
    let userParts: (string | ImageRef)[] = [];
    let reasoning: string | undefined;
    const calls: ChatToolCall[] = [];
    const flushUser = (): void => {
      if (userParts.length > 0) out.push({ role: "user", content: partsContent(userParts, "\n") });
      userParts = [];
    };
    content.forEach((block, j) => {
      const at = `${param}.content[${j}]`;
      if (!isObject(block)) throw invalidRequest(at, `${at} must be a content block, got ${typeName(block)}`, "invalid_type");
      const type = block["type"];
      if (type === "text") {
        refuseUnknown(block, TEXT_BLOCK_FIELDS, at);
        const value = text(block["text"], `${at}.text`);
        if (role === "user") userParts.push(value);
        else texts.push(value);
      } else if (type === "image" && role === "user") {
        userParts.push(imageBlock(block, at));
      } else if (type === "image" || type === "document") {
        throw invalidRequest(
          at,
          type === "image"
            ? `${at}: image blocks are only allowed in user messages, not ${role}`
            : `${at}: document blocks are not supported (send the document's text, or its pages as images)`,
          "unsupported_value",
        );
      } else if (type === "tool_use" && role === "assistant") {
        refuseUnknown(block, TOOL_USE_FIELDS, at);
        const id = text(block["id"], `${at}.id`);
        const name = text(block["name"], `${at}.name`);
        const input = block["input"] ?? {};
        if (!isObject(input)) throw invalidRequest(`${at}.input`, `${at}.input must be an object`, "invalid_type");
        refuseDeep(input, `${at}.input`);
        callNames.set(id, name);
        calls.push({ type: "function", id, function: { name, arguments: input } });
      } else if (type === "tool_result" && role === "user") {
        refuseUnknown(block, TOOL_RESULT_FIELDS, at);
        const id = text(block["tool_use_id"], `${at}.tool_use_id`);
        flushUser();
        const name = callNames.get(id);
        out.push({ role: "tool", content: toolResultContent(block, at), tool_call_id: id, ...(name ? { name } : {}) });
      } else if (type === "thinking" && role === "assistant") {
        refuseUnknown(block, THINKING_FIELDS, at);
        reasoning = (reasoning === undefined ? "" : `${reasoning}\n`) + text(block["thinking"], `${at}.thinking`);
      } else if (type === "redacted_thinking" && role === "assistant") {
        // encrypted reasoning of another model: nothing to render
      } else {
        throw invalidRequest(`${at}.type`, `${at}.type ${JSON.stringify(type)} is not supported in a ${role} message`, "unsupported_value");
      }
    });
    if (role === "system") {
      systems.push(texts.join("\n"));
    } else if (role === "user") {
      flushUser();
    } else {
      const turn: RequestMessage = { role: "assistant", content: texts.join("") };
      if (reasoning !== undefined) turn.reasoning_content = reasoning;
      if (calls.length > 0) turn.tool_calls = calls;
      out.push(turn);
    }
  });
  if (out.length === 0) throw invalidRequest("messages", "messages must have at least one user or assistant message");
  return systems.length > 0 ? [{ role: "system", content: systems.join("\n\n") }, ...out] : out;
}

/** Anthropic's built-in tool types (`web_search_20250305`, `bash_20250124`, ...): run by Anthropic's servers, not here. */
function isServerTool(tool: Body): boolean {
  const type = tool["type"];
  return typeof type === "string" && type !== "custom";
}

const TOOL_FIELDS: ReadonlySet<string> = new Set([
  "type",
  "name",
  "description",
  "input_schema",
  "cache_control",
  "defer_loading",
  "strict",
  "input_examples",
  "allowed_callers",
  "eager_input_streaming",
]);

/** Client tools as function tools (`input_schema` is the parameters schema); Anthropic's server tools left out. */
function parseAnthropicTools(body: Body): ToolDefinition[] | undefined {
  const value = body["tools"];
  if (value === undefined || value === null) return undefined;
  if (!Array.isArray(value)) throw invalidRequest("tools", `tools must be an array, got ${typeName(value)}`, "invalid_type");
  const tools: ToolDefinition[] = [];
  value.forEach((tool, i) => {
    const at = `tools[${i}]`;
    if (!isObject(tool)) throw invalidRequest(at, `${at} must be an object`, "invalid_type");
    if (isServerTool(tool)) return;
    refuseUnknown(tool, TOOL_FIELDS, at);
    const name = tool["name"];
    if (typeof name !== "string" || !/^[A-Za-z0-9_.-]{1,128}$/.test(name))
      throw invalidRequest(`${at}.name`, `${at}.name must be 1-128 characters of a-z, A-Z, 0-9, _ . -`);
    const description = tool["description"];
    if (description !== undefined && typeof description !== "string")
      throw invalidRequest(`${at}.description`, `${at}.description must be a string`, "invalid_type");
    const schema = tool["input_schema"];
    if (!isObject(schema)) throw invalidRequest(`${at}.input_schema`, `${at}.input_schema must be a JSON Schema object`, "invalid_type");
    refuseDeep(schema, `${at}.input_schema`);
    const strict = optionalBoolean(tool, "strict") === true;
    if (strict) checkSchemaParam(schema, `${at}.input_schema`);
    tools.push({
      type: "function",
      function: { name, ...(typeof description === "string" ? { description } : {}), parameters: schema, ...(strict ? { strict } : {}) },
    });
  });
  return tools;
}

function parseAnthropicToolChoice(body: Body, tools: ToolDefinition[] | undefined): { choice: ToolChoice; single: boolean } {
  const value = body["tool_choice"];
  if (value === undefined || value === null) return { choice: "auto", single: false };
  if (!isObject(value)) throw invalidRequest("tool_choice", `tool_choice must be an object such as {"type": "auto"}`, "invalid_type");
  refuseUnknown(value, new Set(["type", "name", "disable_parallel_tool_use"]), "tool_choice");
  const single = optionalBoolean(value, "disable_parallel_tool_use") === true;
  const type = value["type"];
  if (type === "auto") return { choice: "auto", single };
  if (type === "none") return { choice: "none", single };
  const listed = tools ?? [];
  if (listed.length === 0) throw invalidRequest("tool_choice", `tool_choice ${JSON.stringify(type)} needs tools`);
  let choice: ToolChoice;
  if (type === "any") choice = "required";
  else if (type === "tool") {
    const name = text(value["name"], "tool_choice.name");
    if (!listed.some((t) => t.function.name === name))
      throw invalidRequest(
        "tool_choice.name",
        `tool_choice names the tool ${JSON.stringify(name)}, which is not among the tools`,
        "unknown_tool",
      );
    choice = { name };
  } else throw invalidRequest("tool_choice.type", `tool_choice.type must be "auto", "any", "tool" or "none", got ${JSON.stringify(type)}`);
  // a forced call is constrained to the tool's schema: a keyword that cannot be enforced is refused
  checkForcedToolSchemas(listed, choice, (i) => `tools[${i}].input_schema`);
  return { choice, single };
}

/** `thinking` and `output_config.effort` as the template's enable_thinking and the thinking budget. */
function parseThinking(body: Body): { enableThinking: boolean | undefined; thinkingBudget: number | undefined } {
  const config = body["output_config"];
  let effortBudget: number | undefined;
  if (isObject(config) && config["effort"] !== undefined && config["effort"] !== null) {
    const effort = config["effort"];
    // own keys only: "toString" or "__proto__" would otherwise pass, with a function or an object as the budget
    if (typeof effort !== "string" || !Object.hasOwn(EFFORT_THINKING_BUDGET, effort))
      throw invalidRequest(
        "output_config.effort",
        `output_config.effort must be "low", "medium", "high", "xhigh" or "max", got ${JSON.stringify(effort)}`,
      );
    effortBudget = EFFORT_THINKING_BUDGET[effort];
  }
  const value = body["thinking"];
  if (value === undefined || value === null) return { enableThinking: undefined, thinkingBudget: effortBudget };
  if (!isObject(value))
    throw invalidRequest("thinking", 'thinking must be an object such as {"type": "enabled", "budget_tokens": 2048}', "invalid_type");
  const type = value["type"];
  // between_tools is thinking turned off (Claude's short progress notes between tool calls come back as thinking)
  if (type === "disabled" || type === "between_tools") {
    refuseUnknown(value, new Set(["type"]), "thinking");
    return { enableThinking: false, thinkingBudget: undefined };
  }
  if (type === "adaptive") {
    refuseUnknown(value, new Set(["type", "display"]), "thinking");
    return { enableThinking: true, thinkingBudget: effortBudget };
  }
  if (type !== "enabled")
    throw invalidRequest(
      "thinking.type",
      `thinking.type must be "enabled", "disabled", "adaptive" or "between_tools", got ${JSON.stringify(type)}`,
    );
  refuseUnknown(value, new Set(["type", "budget_tokens", "display"]), "thinking");
  const budget = optionalNumber(value, "budget_tokens", (v) => isInt(v) && v >= 0, "an integer >= 0", "thinking.budget_tokens");
  return { enableThinking: true, thinkingBudget: budget ?? effortBudget };
}

/** `output_format` (the structured-outputs beta) or `output_config.format`: `{type: "json_schema", schema}`. */
function parseOutputFormat(body: Body): ResponseFormat {
  const config = body["output_config"];
  if (config !== undefined && config !== null) {
    if (!isObject(config)) throw invalidRequest("output_config", "output_config must be an object", "invalid_type");
    refuseUnknown(config, new Set(["effort", "format"]), "output_config");
  }
  const fromConfig = isObject(config) ? config["format"] : undefined;
  const direct = body["output_format"];
  const [value, param] = direct !== undefined && direct !== null ? [direct, "output_format"] : [fromConfig, "output_config.format"];
  if (value === undefined || value === null) return { type: "text" };
  if (!isObject(value) || value["type"] !== "json_schema")
    throw invalidRequest(param, `${param} must be {"type": "json_schema", "schema": {...}}`, "invalid_type");
  refuseUnknown(value, new Set(["type", "schema"]), param);
  const schema = value["schema"];
  if (!isObject(schema)) throw invalidRequest(`${param}.schema`, `${param}.schema must be a JSON Schema object`, "invalid_type");
  checkSchemaParam(schema, `${param}.schema`);
  return { type: "json_schema", name: "output", schema, strict: true };
}

/** A Messages request (or, with `countOnly`, a count_tokens request) as the server's ChatRequest. */
export function parseMessagesRequest(raw: unknown, options: { maxMessages: number; countOnly?: boolean }): MessagesRequest {
  if (!isObject(raw)) throw invalidRequest(null, `the request body must be a JSON object, got ${typeName(raw)}`, "invalid_type");
  const body = raw;
  refuseUnknown(body, options.countOnly ? COUNT_TOKENS_FIELDS : MESSAGES_FIELDS, "");
  optionalString(body, "model");
  const metadata = body["metadata"];
  if (metadata !== undefined && metadata !== null && !isObject(metadata))
    throw invalidRequest("metadata", "metadata must be an object", "invalid_type");
  let maxTokens: number | undefined;
  if (!options.countOnly) {
    // required, as Anthropic requires it; past what the context leaves it is capped (the server's fitContext)
    if (body["max_tokens"] === undefined || body["max_tokens"] === null)
      throw invalidRequest("max_tokens", "max_tokens: Field required", "missing_required_field");
    maxTokens = optionalNumber(body, "max_tokens", (v) => isInt(v) && v >= 1, "an integer >= 1");
  }
  const messages = parseAnthropicMessages(body["messages"], systemText(body["system"]), options.maxMessages);
  const tools = parseAnthropicTools(body);
  const { choice: toolChoice, single } = parseAnthropicToolChoice(body, tools);
  const responseFormat = parseOutputFormat(body);
  if (responseFormat.type !== "text" && tools !== undefined && tools.length > 0 && toolChoice !== "none") {
    throw invalidRequest(
      "output_format",
      'a JSON output format with tools needs tool_choice {"type": "none"} (the output is either constrained JSON or tool calls)',
      "unsupported_value",
    );
  }
  const { enableThinking, thinkingBudget } = parseThinking(body);
  const chat = agentChatRequest({
    maxTokens,
    temperature: optionalNumber(body, "temperature", (v) => v >= 0 && v <= 1, "in [0, 1]") ?? 1,
    topP: optionalNumber(body, "top_p", (v) => v > 0 && v <= 1, "in (0, 1]") ?? 1,
    topK: optionalNumber(body, "top_k", (v) => isInt(v) && v >= 0, "an integer >= 0 (0 = off)") ?? 0,
    stop: parseStop(body, "stop_sequences"),
    stream: optionalBoolean(body, "stream") ?? false,
    model: optionalString(body, "model"),
    messages,
    tools,
    toolChoice,
    responseFormat,
    enableThinking,
    thinkingBudget,
  });
  return { chat, singleToolCall: single };
}

/** A chat-completions parameter name (in a 400 of the shared path) in the Messages API's terms. */
export function messagesParam(name: string | null): string | null {
  if (name === null) return null;
  return name
    .replace(/^tools\[(\d+)\]\.function\.parameters/, "tools[$1].input_schema")
    .replace(/^response_format\.json_schema\.schema/, "output_format.schema")
    .replace(/^response_format/, "output_format")
    .replace(/^thinking_budget$/, "thinking.budget_tokens");
}

type Block =
  | { type: "text"; text: string }
  | { type: "thinking"; thinking: string; signature: string }
  | { type: "tool_use"; id: string; name: string; input: unknown; json: string };

/** The signature of a thinking block (Anthropic's is a verifiable hash; here an opaque marker, never checked). */
const THINKING_SIGNATURE = "keepquant";

/** Writes a Messages answer: the message object, or the event stream. */
export function messagesSink(ctx: SinkContext, request: MessagesRequest): AnswerSink {
  const stream = request.chat.stream;
  const id = newId("msg_");
  const blocks: Block[] = [];
  /** the block being written (its index in `blocks`), or -1 */
  let open = -1;
  /** output tool call index -> block index; calls past the first are dropped with disable_parallel_tool_use */
  const callBlocks = new Map<number, number>();
  /** blocks of calls the end of the output cut off */
  const cutCalls = new Set<number>();
  const write = (name: string, data: unknown): void => {
    if (stream && !ctx.signal.aborted) ctx.res.write(sseEvent(name, data));
  };
  const usage = (output: number, result?: { cachedPromptTokens: number }) => {
    const cached = result?.cachedPromptTokens ?? 0;
    return {
      input_tokens: ctx.promptTokens - cached,
      cache_creation_input_tokens: 0,
      cache_read_input_tokens: cached,
      output_tokens: output,
    };
  };
  const close = (): void => {
    if (open < 0) return;
    const block = blocks[open]!;
    if (block.type === "thinking")
      write("content_block_delta", {
        type: "content_block_delta",
        index: open,
        delta: { type: "signature_delta", signature: THINKING_SIGNATURE },
      });
    write("content_block_stop", { type: "content_block_stop", index: open });
    open = -1;
  };
  const begin = (block: Block): number => {
    close();
    blocks.push(block);
    open = blocks.length - 1;
    const start =
      block.type === "text"
        ? { type: "text", text: "" }
        : block.type === "thinking"
          ? { type: "thinking", thinking: "", signature: "" }
          : { type: "tool_use", id: block.id, name: block.name, input: {} };
    write("content_block_start", { type: "content_block_start", index: open, content_block: start });
    return open;
  };
  return {
    start() {
      if (!stream) return;
      ctx.startStream();
      write("message_start", {
        type: "message_start",
        message: {
          id,
          type: "message",
          role: "assistant",
          model: ctx.modelName,
          content: [],
          stop_reason: null,
          stop_sequence: null,
          usage: usage(0),
        },
      });
      write("ping", { type: "ping" });
    },
    parts(parts) {
      for (const part of parts) {
        if (part.kind === "reasoning" || part.kind === "content") {
          if (part.text === "") continue;
          const kind = part.kind === "reasoning" ? "thinking" : "text";
          const current = open >= 0 ? blocks[open]! : undefined;
          // text that is only white space between blocks (after </think>, around tool calls) opens no block
          if (current?.type !== kind && kind === "text" && part.text.trim() === "") continue;
          if (current?.type !== kind)
            begin(kind === "text" ? { type: "text", text: "" } : { type: "thinking", thinking: "", signature: THINKING_SIGNATURE });
          const block = blocks[open]!;
          if (block.type === "text") {
            block.text += part.text;
            write("content_block_delta", { type: "content_block_delta", index: open, delta: { type: "text_delta", text: part.text } });
          } else if (block.type === "thinking") {
            block.thinking += part.text;
            write("content_block_delta", {
              type: "content_block_delta",
              index: open,
              delta: { type: "thinking_delta", thinking: part.text },
            });
          }
        } else if (part.kind === "tool_call_start") {
          if (request.singleToolCall && callBlocks.size > 0) continue;
          callBlocks.set(part.index, begin({ type: "tool_use", id: newId("toolu_"), name: part.name, input: {}, json: "" }));
        } else if (part.kind === "tool_call_arguments") {
          const at = callBlocks.get(part.index);
          if (at === undefined) continue;
          (blocks[at] as Extract<Block, { type: "tool_use" }>).json += part.text;
          write("content_block_delta", {
            type: "content_block_delta",
            index: at,
            delta: { type: "input_json_delta", partial_json: part.text },
          });
        } else if (part.kind === "tool_call") {
          const at = callBlocks.get(part.index);
          if (at === undefined) continue;
          const block = blocks[at] as Extract<Block, { type: "tool_use" }>;
          // cut off by max_tokens: never answered as a call (left out of a non-streamed message)
          if (part.cutOff) cutCalls.add(at);
          try {
            block.input = JSON.parse(part.arguments);
          } catch {
            block.input = {};
          }
          if (open === at) close();
        }
      }
    },
    end({ result }) {
      close();
      const calls = callBlocks.size > 0;
      const stopReason =
        result.stopReason === "max_tokens" || result.stopReason === "context"
          ? "max_tokens"
          : result.stopReason === "stop_string"
            ? "stop_sequence"
            : calls
              ? "tool_use"
              : "end_turn";
      const stopSequence = result.stopReason === "stop_string" ? (result.stopString ?? null) : null;
      const cap = ctx.cap ? { max_tokens_capped: ctx.cap } : {};
      if (stream) {
        write("message_delta", {
          type: "message_delta",
          delta: { stop_reason: stopReason, stop_sequence: stopSequence },
          usage: usage(result.stats.generatedTokens, result.stats),
          ...cap,
        });
        write("message_stop", { type: "message_stop" });
        ctx.res.end();
        return;
      }
      ctx.sendJson({
        id,
        type: "message",
        role: "assistant",
        model: ctx.modelName,
        content: blocks
          .filter((_, at) => !cutCalls.has(at))
          .map((block) => (block.type === "tool_use" ? { type: "tool_use", id: block.id, name: block.name, input: block.input } : block)),
        stop_reason: stopReason,
        stop_sequence: stopSequence,
        usage: usage(result.stats.generatedTokens, result.stats),
        ...cap,
      });
    },
    cut(error) {
      ctx.res.end(ANTHROPIC_ERRORS.streamEnd(error));
    },
  };
}
