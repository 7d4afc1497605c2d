/**
 * The OpenAI Responses API (`POST /v1/responses`, `GET`/`DELETE /v1/responses/{id}`, `POST /v1/responses/{id}/cancel`,
 * `GET /v1/responses/{id}/input_items`): what the OpenAI Agents SDK, Codex CLI and `client.responses.create` send.
 * The request becomes the server's ChatRequest (requests.ts); `responsesSink` writes the response object or its
 * semantic event stream (`response.created`, `response.output_item.added`, `response.output_text.delta`, ...,
 * `response.completed`), each event with its `sequence_number`. `ResponseStore` keeps stored responses for
 * `previous_response_id`, bounded in count and bytes (least recently used first out).
 */
import type { ChatMessage, ChatToolCall } from "@keepquant/engine";
import { newId } from "./chat-api.js";
import { checkSchemaParam, parseResponseFormat, type ResponseFormat } from "./constraint.js";
import { ApiError, invalidRequest } from "./errors.js";
import { type ImageRef, partsContent, type RequestMessage, urlImage } from "./images.js";
import { type AnswerSink, type ChatOutcome, type ErrorFormat, type SinkContext, schemaCheckField, sseEvent } from "./generation.js";
import {
  agentChatRequest,
  checkForcedToolSchemas,
  type Body,
  type ChatRequest,
  isObject,
  optionalBoolean,
  optionalNumber,
  optionalString,
  refuseDeep,
  refuseUnknown,
  type ToolChoice,
  type ToolDefinition,
  typeName,
} from "./requests.js";

/**
 * Thinking budgets of `reasoning.effort`: `none` turns thinking off (the template's enable_thinking false),
 * minimal to medium bound the reasoning, high, xhigh and max let the model think until it closes `</think>`.
 */
export const REASONING_EFFORT_BUDGET: Readonly<Record<string, number | undefined>> = {
  minimal: 256,
  low: 1024,
  medium: 4096,
  high: undefined,
  xhigh: undefined,
  max: undefined,
};

/** Fields of a Responses request that have no effect here, and why (docs/usage/server.md lists them). */
export const RESPONSES_IGNORED: Readonly<Record<string, string>> = {
  model: "one model is served: any name is accepted and responses carry the served model's id",
  include:
    "every output is included; `reasoning.encrypted_content` adds the reasoning as an opaque string a client sends back with store: false",
  prompt_cache_key: "the prefix cache matches prompts by their tokens, with no key",
  prompt_cache_retention: "the prefix cache keeps what its memory allows",
  safety_identifier: "nothing is logged",
  user: "nothing is logged",
  client_metadata: "Codex CLI's client details; nothing is logged",
  service_tier: "one tier",
  stream_options: "no obfuscation padding is added to stream events",
  truncation: "the whole input is rendered; an input over the context is a 400 (as `disabled`)",
};

const RESPONSES_FIELDS: ReadonlySet<string> = new Set([
  ...Object.keys(RESPONSES_IGNORED),
  "input",
  "instructions",
  "tools",
  "tool_choice",
  "parallel_tool_calls",
  "max_output_tokens",
  "max_tool_calls",
  "temperature",
  "top_p",
  "top_logprobs",
  "stream",
  "store",
  "previous_response_id",
  "metadata",
  "text",
  "reasoning",
  "background",
  "conversation",
  "prompt",
]);

/** The parts of a Responses request the answer and the store need beyond the ChatRequest. */
export interface ResponsesRequest {
  chat: ChatRequest;
  store: boolean;
  previousResponseId: string | null;
  /** the conversation before this request's input (from previous_response_id), without instructions */
  history: RequestMessage[];
  /** this request's input as messages (without instructions) */
  inputMessages: RequestMessage[];
  /** this request's input items as the client sent them (ids added), for input_items */
  inputItems: Record<string, unknown>[];
  /** the request's fields echoed in the response object */
  echo: Record<string, unknown>;
  /** tools the server does not run (web_search, ...): left out of the prompt, listed in the response */
  toolsNotRun: Record<string, unknown>[];
  /** where each function tool of `chat.tools` came from in the request (`tools[2]`, `tools[3].tools[0]`) */
  toolPaths: string[];
  /**
   * Function tools listed in a `namespace` tool, by the name the model sees: the name and namespace their calls
   * carry. A name two namespaces (or a namespace and a plain tool) share is shown to the model as
   * `namespace.name`, so that a call says which.
   */
  toolNamespaces: Map<string, { name: string; namespace: string }>;
  /** most tool calls returned (parallel_tool_calls false: 1; max_tool_calls) */
  maxToolCalls: number;
  /** reasoning.summary asked for: the reasoning is also returned as its summary */
  summary: boolean;
  /** include has reasoning.encrypted_content */
  encryptedReasoning: boolean;
}

const isInt = (n: number): boolean => Number.isSafeInteger(n);

function text(value: unknown, param: string): string {
  if (typeof value !== "string") throw invalidRequest(param, `${param} must be a string, got ${typeName(value)}`, "invalid_type");
  return value;
}

/** The prefix of reasoning carried in `encrypted_content`: not encrypted, only opaque (the text in base64). */
const REASONING_PREFIX = "keepquant-reasoning:";

export function encodeReasoning(reasoning: string): string {
  return REASONING_PREFIX + Buffer.from(reasoning, "utf8").toString("base64");
}

function decodeReasoning(value: unknown): string | undefined {
  if (typeof value !== "string" || !value.startsWith(REASONING_PREFIX)) return undefined;
  return Buffer.from(value.slice(REASONING_PREFIX.length), "base64").toString("utf8");
}

function refuseMedia(at: string, type: unknown): never {
  throw invalidRequest(
    at,
    type === "input_image"
      ? `${at}: input_image parts are only allowed in user messages`
      : `${at}: ${String(type)} content is not supported (this server reads text and images)`,
    "unsupported_value",
  );
}

const INPUT_IMAGE_FIELDS: ReadonlySet<string> = new Set(["type", "image_url", "file_id", "detail"]);

/** An `input_image` part: `image_url` a data: URL or an http(s) URL (fetched when the server allows image URLs). */
function inputImage(part: Body, at: string): ImageRef {
  refuseUnknown(part, INPUT_IMAGE_FIELDS, at);
  if (part["file_id"] !== undefined && part["file_id"] !== null)
    throw invalidRequest(
      `${at}.file_id`,
      `${at}.file_id: the Files API is not served here; send image_url (a data: URL)`,
      "unsupported_value",
    );
  const detail = part["detail"];
  if (detail !== undefined && detail !== null && !["auto", "low", "high"].includes(detail as string))
    throw invalidRequest(`${at}.detail`, `${at}.detail must be "auto", "low" or "high"`, "invalid_value");
  if (part["image_url"] === undefined || part["image_url"] === null)
    throw invalidRequest(`${at}.image_url`, `${at}.image_url is required`, "missing_required_parameter");
  return urlImage(part["image_url"], at);
}

/** A message's content: a string or text parts (input_text, output_text, refusal). */
function contentText(value: unknown, at: string): string {
  const content = contentParts(value, at, false);
  return typeof content === "string" ? content : "";
}

/** A message's content: a string or text parts, and in a user message (`images`) input_image parts too. */
function contentParts(value: unknown, at: string, images: boolean): RequestMessage["content"] {
  if (typeof value === "string") return value;
  if (!Array.isArray(value))
    throw invalidRequest(at, `${at} must be a string or an array of content parts, got ${typeName(value)}`, "invalid_type");
  const parts = value.map((part, j): string | ImageRef => {
    const p = `${at}[${j}]`;
    if (!isObject(part)) throw invalidRequest(p, `${p} must be a content part`, "invalid_type");
    const type = part["type"];
    if (type === "input_text" || type === "output_text" || type === "text") return text(part["text"], `${p}.text`);
    if (type === "refusal") return text(part["refusal"], `${p}.refusal`);
    if (type === "input_image" && images) return inputImage(part, p);
    if (type === "input_image" || type === "input_file" || type === "input_audio") refuseMedia(p, type);
    throw invalidRequest(`${p}.type`, `${p}.type ${JSON.stringify(type)} is not a content part this server reads`, "unsupported_value");
  });
  return partsContent(parts, "");
}

/** Item types of tools the server does not run: left out of the prompt (their results mean nothing to the model here). */
const NOT_RUN_ITEMS = new Set([
  "web_search_call",
  "file_search_call",
  "computer_call",
  "computer_call_output",
  "image_generation_call",
  "code_interpreter_call",
  "local_shell_call",
  "local_shell_call_output",
  "shell_call",
  "shell_call_output",
  "apply_patch_call",
  "apply_patch_call_output",
  "mcp_list_tools",
  "mcp_approval_request",
  "mcp_approval_response",
  "mcp_call",
  "custom_tool_call",
  "custom_tool_call_output",
  "tool_search_call",
  "tool_search_output",
  "compaction",
]);

/**
 * Input items as the template's messages: system and developer messages (and `instructions`) join the one system
 * message at the start (Qwen's templates take one, first); function_call items join the assistant turn they
 * follow (its tool calls); function_call_output items become tool messages; a reasoning item becomes the next
 * assistant turn's reasoning. Items of tools the server does not run are left out.
 */
function parseInput(
  value: unknown,
  maxMessages: number,
  callNames: Map<string, string>,
  modelName: (name: string, namespace: unknown) => string,
): { systems: string[]; messages: RequestMessage[]; items: Record<string, unknown>[] } {
  if (typeof value === "string") {
    return {
      systems: [],
      messages: [{ role: "user", content: value }],
      items: [{ type: "message", id: newId("msg_"), role: "user", content: [{ type: "input_text", text: value }] }],
    };
  }
  if (!Array.isArray(value))
    throw invalidRequest("input", `input must be a string or an array of items, got ${typeName(value)}`, "invalid_type");
  if (value.length > maxMessages)
    throw invalidRequest("input", `input has ${value.length} items; this server takes at most ${maxMessages}`, "too_many_messages");
  const systems: string[] = [];
  const messages: RequestMessage[] = [];
  const items: Record<string, unknown>[] = [];
  let reasoning: string | undefined;
  /** the assistant turn being built (tool calls join it) */
  let assistant: ChatMessage | undefined;
  const assistantTurn = (): ChatMessage => {
    if (!assistant) {
      assistant = { role: "assistant", content: "" };
      messages.push(assistant);
    }
    if (reasoning !== undefined) {
      assistant.reasoning_content = (assistant.reasoning_content ? `${assistant.reasoning_content}\n` : "") + reasoning;
      reasoning = undefined;
    }
    return assistant;
  };
  value.forEach((item, i) => {
    const at = `input[${i}]`;
    if (!isObject(item)) throw invalidRequest(at, `${at} must be an object, got ${typeName(item)}`, "invalid_type");
    const type = item["type"] ?? (item["role"] !== undefined ? "message" : undefined);
    if (typeof type === "string" && NOT_RUN_ITEMS.has(type)) return;
    items.push({ ...item, id: typeof item["id"] === "string" ? item["id"] : newId(type === "message" ? "msg_" : "item_") });
    if (type === "message") {
      refuseUnknown(item, new Set(["type", "role", "content", "id", "status", "phase"]), at);
      const role = item["role"];
      const content = role === "user" ? "" : contentText(item["content"], `${at}.content`);
      if (role === "system" || role === "developer") {
        systems.push(content);
      } else if (role === "user") {
        messages.push({ role: "user", content: contentParts(item["content"], `${at}.content`, true) });
        assistant = undefined;
      } else if (role === "assistant") {
        const turn = assistantTurn();
        turn.content += content;
      } else {
        throw invalidRequest(`${at}.role`, `${at}.role must be "user", "assistant", "system" or "developer", got ${JSON.stringify(role)}`);
      }
    } else if (type === "function_call") {
      refuseUnknown(item, new Set(["type", "id", "call_id", "name", "arguments", "status", "namespace"]), at);
      const callId = text(item["call_id"], `${at}.call_id`);
      // a call of a namespaced tool is rendered under the name the model sees for it
      const name = modelName(text(item["name"], `${at}.name`), item["namespace"]);
      const raw = item["arguments"] ?? "{}";
      let args: unknown;
      try {
        args = typeof raw === "string" ? (raw.trim() === "" ? {} : JSON.parse(raw)) : raw;
      } catch {
        throw invalidRequest(`${at}.arguments`, `${at}.arguments is not valid JSON`);
      }
      refuseDeep(args, `${at}.arguments`);
      const turn = assistantTurn();
      const call: ChatToolCall = { type: "function", id: callId, function: { name, arguments: args } };
      turn.tool_calls = [...(turn.tool_calls ?? []), call];
      callNames.set(callId, name);
    } else if (type === "function_call_output") {
      refuseUnknown(item, new Set(["type", "id", "call_id", "output", "status"]), at);
      const callId = text(item["call_id"], `${at}.call_id`);
      const name = callNames.get(callId);
      messages.push({
        role: "tool",
        content: contentText(item["output"], `${at}.output`),
        tool_call_id: callId,
        ...(name ? { name } : {}),
      });
      assistant = undefined;
    } else if (type === "reasoning") {
      refuseUnknown(item, new Set(["type", "id", "summary", "content", "encrypted_content", "status"]), at);
      const parts = Array.isArray(item["content"]) ? item["content"] : [];
      const fromContent = parts.map((p) => (isObject(p) && typeof p["text"] === "string" ? p["text"] : "")).join("");
      const summary = Array.isArray(item["summary"]) ? item["summary"] : [];
      const fromSummary = summary.map((p) => (isObject(p) && typeof p["text"] === "string" ? p["text"] : "")).join("\n");
      const found = fromContent || decodeReasoning(item["encrypted_content"]) || fromSummary;
      if (found) reasoning = (reasoning ? `${reasoning}\n` : "") + found;
    } else if (type === "item_reference") {
      throw invalidRequest(
        `${at}.type`,
        `${at}: item_reference is not supported; send the item itself or use previous_response_id`,
        "unsupported_value",
      );
    } else {
      throw invalidRequest(`${at}.type`, `${at}.type ${JSON.stringify(type)} is not an input item this server reads`, "unsupported_value");
    }
  });
  return { systems, messages, items };
}

/** `output_schema` and `async` change nothing here (the model sees neither); `allowed_callers` is checked for "direct" */
const FUNCTION_TOOL_FIELDS: ReadonlySet<string> = new Set([
  "type",
  "name",
  "description",
  "parameters",
  "strict",
  "defer_loading",
  "output_schema",
  "allowed_callers",
  "async",
]);

/** Function tools (namespaces flattened); tools the server does not run are left out and listed. */
function parseResponsesTools(body: Body): {
  tools: ToolDefinition[] | undefined;
  paths: string[];
  notRun: Record<string, unknown>[];
  namespaces: Map<string, { name: string; namespace: string }>;
} {
  const value = body["tools"];
  const namespaces = new Map<string, { name: string; namespace: string }>();
  if (value === undefined || value === null) return { tools: undefined, paths: [], notRun: [], namespaces };
  if (!Array.isArray(value)) throw invalidRequest("tools", `tools must be an array, got ${typeName(value)}`, "invalid_type");
  const tools: ToolDefinition[] = [];
  const paths: string[] = [];
  const notRun: Record<string, unknown>[] = [];
  const functionTool = (tool: Body, at: string, namespace?: string): void => {
    refuseUnknown(tool, FUNCTION_TOOL_FIELDS, at);
    const name = tool["name"];
    if (typeof name !== "string" || !/^[A-Za-z0-9_.-]{1,128}$/.test(name))
      throw invalidRequest(`${at}.name`, `${at}.name must be 1-128 characters of a-z, A-Z, 0-9, _ . -`);
    const callers = tool["allowed_callers"];
    // a tool only a program may call (programmatic tool calling) is not one the model calls here
    if (Array.isArray(callers) && !callers.includes("direct")) {
      notRun.push({ ...tool });
      return;
    }
    const description = tool["description"];
    if (description !== undefined && description !== null && typeof description !== "string")
      throw invalidRequest(`${at}.description`, `${at}.description must be a string`, "invalid_type");
    const parameters = tool["parameters"];
    if (parameters !== undefined && parameters !== null && !isObject(parameters))
      throw invalidRequest(`${at}.parameters`, `${at}.parameters must be a JSON Schema object`, "invalid_type");
    if (isObject(parameters)) refuseDeep(parameters, `${at}.parameters`);
    // strict is honoured when sent as true (calls under "auto" constrained to the schema); absent, calls are parsed as written
    const strict = optionalBoolean(tool, "strict") === true;
    if (strict && isObject(parameters)) checkSchemaParam(parameters, `${at}.parameters`);
    tools.push({
      type: "function",
      function: {
        name,
        ...(typeof description === "string" ? { description } : {}),
        ...(isObject(parameters) ? { parameters } : {}),
        ...(strict ? { strict } : {}),
      },
    });
    paths.push(at);
    toolSpaces.push(namespace);
  };
  /** each function tool's namespace (undefined: a plain tool), in `tools` order */
  const toolSpaces: (string | undefined)[] = [];
  value.forEach((tool, i) => {
    const at = `tools[${i}]`;
    if (!isObject(tool)) throw invalidRequest(at, `${at} must be an object`, "invalid_type");
    if (tool["type"] === "function") functionTool(tool, at);
    else if (tool["type"] === "namespace") {
      refuseUnknown(tool, new Set(["type", "name", "description", "tools"]), at);
      const inner = tool["tools"];
      if (!Array.isArray(inner)) throw invalidRequest(`${at}.tools`, `${at}.tools must be an array`, "invalid_type");
      inner.forEach((fn, j) => {
        const p = `${at}.tools[${j}]`;
        if (!isObject(fn)) throw invalidRequest(p, `${p} must be an object`, "invalid_type");
        if (fn["type"] === "function" || fn["type"] === undefined)
          functionTool({ ...fn, type: "function" }, p, typeof tool["name"] === "string" ? tool["name"] : undefined);
        else notRun.push({ ...fn });
      });
    } else if (typeof tool["type"] === "string") notRun.push({ ...tool });
    else throw invalidRequest(`${at}.type`, `${at}.type must be a string such as "function"`, "invalid_type");
  });
  // a name several tools share: the namespaced ones are shown as `namespace.name`
  const count = new Map<string, number>();
  for (const tool of tools) count.set(tool.function.name, (count.get(tool.function.name) ?? 0) + 1);
  const names = new Set<string>();
  for (const [i, tool] of tools.entries()) {
    const namespace = toolSpaces[i];
    const name = tool.function.name;
    if (namespace !== undefined) {
      if (count.get(name)! > 1) tool.function.name = `${namespace}.${name}`;
      namespaces.set(tool.function.name, { name, namespace });
    }
    if (names.has(tool.function.name))
      throw invalidRequest(`${paths[i]}.name`, `two tools are named ${JSON.stringify(tool.function.name)}: a call could not say which`);
    names.add(tool.function.name);
  }
  return { tools, paths, notRun, namespaces };
}

function parseResponsesToolChoice(
  body: Body,
  tools: ToolDefinition[] | undefined,
  paths: string[],
): { choice: ToolChoice; tools: ToolDefinition[] | undefined } {
  const value = body["tool_choice"];
  if (value === undefined || value === null || value === "auto") return { choice: "auto", tools };
  if (value === "none") return { choice: "none", tools };
  const listed = tools ?? [];
  let choice: ToolChoice;
  let visible = tools;
  if (value === "required") choice = "required";
  else if (isObject(value) && value["type"] === "function") {
    refuseUnknown(value, new Set(["type", "name"]), "tool_choice");
    const name = text(value["name"], "tool_choice.name");
    if (!listed.some((t) => t.function.name === name))
      throw invalidRequest(
        "tool_choice.name",
        `tool_choice names the function ${JSON.stringify(name)}, which is not among the tools`,
        "unknown_tool",
      );
    choice = { name };
  } else if (isObject(value) && value["type"] === "allowed_tools") {
    refuseUnknown(value, new Set(["type", "mode", "tools"]), "tool_choice");
    const mode = value["mode"] ?? "auto";
    if (mode !== "auto" && mode !== "required") throw invalidRequest("tool_choice.mode", `tool_choice.mode must be "auto" or "required"`);
    const allowed = value["tools"];
    if (!Array.isArray(allowed)) throw invalidRequest("tool_choice.tools", "tool_choice.tools must be an array", "invalid_type");
    const names = new Set(allowed.map((t) => (isObject(t) && typeof t["name"] === "string" ? t["name"] : "")));
    // only the allowed tools are shown to the model
    visible = listed.filter((t) => names.has(t.function.name));
    choice = mode;
    if (choice === "auto") return { choice, tools: visible };
  } else {
    throw invalidRequest(
      "tool_choice",
      `tool_choice must be "auto", "none", "required", {"type": "function", "name"} or {"type": "allowed_tools", ...}; got ${JSON.stringify(value)}`,
    );
  }
  if ((visible ?? []).length === 0) throw invalidRequest("tool_choice", `tool_choice ${JSON.stringify(value)} needs function tools`);
  checkForcedToolSchemas(visible ?? [], choice, (_, tool) => `${paths[listed.indexOf(tool)] ?? "tools"}.parameters`);
  return { choice, tools: visible };
}

/** `text.format` as a response_format (`{type: "json_schema", name, schema, strict}` flat, as the Responses API has it). */
function parseTextFormat(body: Body): { format: ResponseFormat; echo: Record<string, unknown> } {
  const value = body["text"];
  if (value === undefined || value === null) return { format: { type: "text" }, echo: { format: { type: "text" } } };
  if (!isObject(value)) throw invalidRequest("text", 'text must be an object such as {"format": {"type": "text"}}', "invalid_type");
  refuseUnknown(value, new Set(["format", "verbosity"]), "text");
  const format = value["format"];
  if (format === undefined || format === null) return { format: { type: "text" }, echo: { ...value, format: { type: "text" } } };
  if (!isObject(format)) throw invalidRequest("text.format", "text.format must be an object", "invalid_type");
  let parsed: ResponseFormat;
  try {
    if (format["type"] === "json_schema") {
      const { type: _type, ...spec } = format;
      parsed = parseResponseFormat({ type: "json_schema", json_schema: spec });
    } else parsed = parseResponseFormat(format);
  } catch (error) {
    if (ApiError.isInstance(error)) {
      const param =
        error.param?.replace(/^response_format\.json_schema/, "text.format").replace(/^response_format/, "text.format") ?? "text.format";
      throw new ApiError(
        error.status,
        error.type,
        error.message.replaceAll("response_format.json_schema", "text.format").replaceAll("response_format", "text.format"),
        param,
        error.code,
      );
    }
    throw error;
  }
  return { format: parsed, echo: { ...value, format } };
}

function parseReasoning(body: Body): {
  enableThinking: boolean | undefined;
  budget: number | undefined;
  summary: boolean;
  echo: Record<string, unknown>;
} {
  const value = body["reasoning"];
  if (value === undefined || value === null)
    return { enableThinking: undefined, budget: undefined, summary: false, echo: { effort: null, summary: null } };
  if (!isObject(value)) throw invalidRequest("reasoning", 'reasoning must be an object such as {"effort": "low"}', "invalid_type");
  refuseUnknown(value, new Set(["effort", "summary", "generate_summary"]), "reasoning");
  const effort = value["effort"];
  const summaryValue = value["summary"] ?? value["generate_summary"] ?? null;
  if (summaryValue !== null && summaryValue !== "auto" && summaryValue !== "concise" && summaryValue !== "detailed")
    throw invalidRequest(
      "reasoning.summary",
      `reasoning.summary must be "auto", "concise", "detailed" or null, got ${JSON.stringify(summaryValue)}`,
    );
  const echo = { effort: effort ?? null, summary: summaryValue };
  if (effort === undefined || effort === null)
    return { enableThinking: undefined, budget: undefined, summary: summaryValue !== null, echo };
  if (effort === "none") return { enableThinking: false, budget: undefined, summary: false, echo };
  if (typeof effort !== "string" || !(effort in REASONING_EFFORT_BUDGET))
    throw invalidRequest(
      "reasoning.effort",
      `reasoning.effort must be "none", "minimal", "low", "medium", "high", "xhigh" or "max", got ${JSON.stringify(effort)}`,
    );
  return { enableThinking: true, budget: REASONING_EFFORT_BUDGET[effort], summary: summaryValue !== null, echo };
}

/** A Responses request as the server's ChatRequest, with the conversation of `previous_response_id` from the store. */
export function parseResponsesRequest(raw: unknown, options: { maxMessages: number; store: ResponseStore }): ResponsesRequest {
  if (!isObject(raw)) throw invalidRequest(null, `the request body must be a JSON object, got ${typeName(raw)}`, "invalid_type");
  const body = raw;
  refuseUnknown(body, RESPONSES_FIELDS, "");
  if (body["background"] === true)
    throw invalidRequest("background", "background responses are not supported: stream the response, or wait for it", "unsupported_value");
  if (body["conversation"] !== undefined && body["conversation"] !== null)
    throw invalidRequest("conversation", "the Conversations API is not served here: use previous_response_id", "unsupported_value");
  if (body["prompt"] !== undefined && body["prompt"] !== null)
    throw invalidRequest("prompt", "stored prompt templates are not served here: send instructions and input", "unsupported_value");
  const topLogprobs = optionalNumber(body, "top_logprobs", (v) => isInt(v) && v >= 0 && v <= 20, "an integer in [0, 20]");
  if (topLogprobs !== undefined && topLogprobs > 0)
    throw invalidRequest("top_logprobs", "top_logprobs is not supported on /v1/responses (use /v1/chat/completions)", "unsupported_value");
  const metadata = body["metadata"];
  if (metadata !== undefined && metadata !== null && !isObject(metadata))
    throw invalidRequest("metadata", "metadata must be an object", "invalid_type");
  const instructions = optionalString(body, "instructions");
  const previousResponseId = optionalString(body, "previous_response_id") ?? null;
  const store = optionalBoolean(body, "store") ?? true;
  const include = body["include"];
  if (include !== undefined && include !== null && !Array.isArray(include))
    throw invalidRequest("include", "include must be an array of strings", "invalid_type");
  const encryptedReasoning = Array.isArray(include) && include.includes("reasoning.encrypted_content");
  const history = previousResponseId === null ? [] : options.store.conversation(previousResponseId);
  const callNames = new Map<string, string>();
  for (const message of history) for (const call of message.tool_calls ?? []) if (call.id) callNames.set(call.id, call.function.name);
  if (body["input"] === undefined || body["input"] === null)
    throw invalidRequest("input", "input is required", "missing_required_parameter");
  const { tools: allTools, paths, notRun, namespaces } = parseResponsesTools(body);
  const input = parseInput(body["input"], options.maxMessages, callNames, (name, namespace) => {
    if (typeof namespace !== "string") return name;
    for (const [seen, tool] of namespaces) if (tool.name === name && tool.namespace === namespace) return seen;
    return name;
  });
  const systems = [...(instructions ? [instructions] : []), ...input.systems];
  const messages = [...(systems.length > 0 ? [{ role: "system", content: systems.join("\n\n") }] : []), ...history, ...input.messages];
  if (messages.every((m) => m.role === "system")) throw invalidRequest("input", "input has no user, assistant or tool item");
  const { choice: toolChoice, tools } = parseResponsesToolChoice(body, allTools, paths);
  const { format: responseFormat, echo: textEcho } = parseTextFormat(body);
  if (responseFormat.type !== "text" && tools !== undefined && tools.length > 0 && toolChoice !== "none") {
    throw invalidRequest(
      "text.format",
      `text.format ${responseFormat.type} with tools needs tool_choice "none" (the output is either constrained JSON or tool calls)`,
      "unsupported_value",
    );
  }
  const reasoning = parseReasoning(body);
  const parallel = optionalBoolean(body, "parallel_tool_calls") ?? true;
  const maxToolCalls = optionalNumber(body, "max_tool_calls", (v) => isInt(v) && v >= 1, "an integer >= 1");
  const maxOutput = optionalNumber(body, "max_output_tokens", (v) => isInt(v) && v >= 1, "an integer >= 1");
  const temperature = optionalNumber(body, "temperature", (v) => v >= 0 && v <= 2, "in [0, 2]");
  const topP = optionalNumber(body, "top_p", (v) => v > 0 && v <= 1, "in (0, 1]");
  const chat = agentChatRequest({
    maxTokens: maxOutput,
    temperature: temperature ?? 1,
    topP: topP ?? 1,
    topK: 0,
    stop: [],
    stream: optionalBoolean(body, "stream") ?? false,
    model: optionalString(body, "model"),
    messages,
    tools,
    toolChoice,
    responseFormat,
    enableThinking: reasoning.enableThinking,
    thinkingBudget: reasoning.budget,
  });
  return {
    chat,
    store,
    previousResponseId,
    history,
    inputMessages: input.messages,
    inputItems: input.items,
    toolsNotRun: notRun,
    toolPaths: paths,
    toolNamespaces: namespaces,
    maxToolCalls: Math.min(parallel ? Number.POSITIVE_INFINITY : 1, maxToolCalls ?? Number.POSITIVE_INFINITY),
    summary: reasoning.summary,
    encryptedReasoning,
    echo: {
      instructions: instructions ?? null,
      max_output_tokens: maxOutput ?? null,
      max_tool_calls: maxToolCalls ?? null,
      metadata: isObject(metadata) ? metadata : {},
      parallel_tool_calls: parallel,
      previous_response_id: previousResponseId,
      reasoning: reasoning.echo,
      store,
      temperature: temperature ?? 1,
      text: textEcho,
      tool_choice: body["tool_choice"] ?? "auto",
      tools: Array.isArray(body["tools"]) ? body["tools"] : [],
      top_p: topP ?? 1,
      truncation: body["truncation"] ?? "disabled",
      background: false,
      user: body["user"] ?? null,
    },
  };
}

/** OpenAI's error shape; a started stream ends with an `error` event (`{type: "error", code, message, param}`). */
export const RESPONSES_ERRORS: ErrorFormat = {
  body: (error: ApiError) => error.toJSON(),
  streamEnd: (error: ApiError) =>
    sseEvent("error", { type: "error", code: error.code, message: error.message, param: error.param, sequence_number: 0 }),
};

/** A chat-completions parameter name (in a 400 of the shared path) in the Responses API's terms. */
export function responsesParam(request: ResponsesRequest): (name: string | null) => string | null {
  return (name) => {
    if (name === null) return null;
    const tool = /^tools\[(\d+)\]\.function(.*)$/.exec(name);
    if (tool) return `${request.toolPaths[Number(tool[1])] ?? "tools"}${tool[2]}`;
    return name
      .replace(/^response_format\.json_schema\.schema/, "text.format.schema")
      .replace(/^response_format/, "text.format")
      .replace(/^thinking_budget$/, "reasoning.effort")
      .replace(/^messages/, "input");
  };
}

/** One stored response: its object, the conversation it ends (for previous_response_id) and its input items. */
interface StoredResponse {
  response: Record<string, unknown>;
  /** the conversation up to and including the output, without instructions; undefined while in progress */
  conversation: RequestMessage[] | undefined;
  inputItems: Record<string, unknown>[];
  bytes: number;
  /** aborts the generation (POST /cancel) while in progress */
  cancel: (() => void) | undefined;
  /** resolves when the generation ended */
  done: Promise<void>;
  settle: () => void;
}

export interface ResponseStoreOptions {
  /** Most responses kept (default 1000). */
  maxResponses?: number;
  /** Most bytes kept, counted as the JSON of each response, its conversation and input items (default 64 MiB). */
  maxBytes?: number;
}

export const DEFAULT_RESPONSE_STORE_MAX_RESPONSES = 1000;
export const DEFAULT_RESPONSE_STORE_MAX_BYTES = 64 * 1024 * 1024;

function notFound(id: string, param: string | null = null): ApiError {
  return new ApiError(
    404,
    "invalid_request_error",
    `Response with id '${id}' not found.`,
    param,
    param ? "previous_response_not_found" : "not_found",
  );
}

/**
 * Stored responses in memory, least recently used first out: at most `maxResponses`, and at most `maxBytes` of
 * their JSON. A response past the bounds is forgotten (a later previous_response_id to it is a 404). Nothing
 * survives the process.
 */
export class ResponseStore {
  readonly maxResponses: number;
  readonly maxBytes: number;
  private readonly entries = new Map<string, StoredResponse>();
  private totalBytes = 0;

  constructor(options: ResponseStoreOptions = {}) {
    this.maxResponses = options.maxResponses ?? DEFAULT_RESPONSE_STORE_MAX_RESPONSES;
    this.maxBytes = options.maxBytes ?? DEFAULT_RESPONSE_STORE_MAX_BYTES;
    if (!Number.isSafeInteger(this.maxResponses) || this.maxResponses < 0)
      throw new RangeError(`responseStore.maxResponses must be an integer >= 0, got ${this.maxResponses}`);
    if (!Number.isSafeInteger(this.maxBytes) || this.maxBytes < 0)
      throw new RangeError(`responseStore.maxBytes must be an integer >= 0, got ${this.maxBytes}`);
  }

  get size(): number {
    return this.entries.size;
  }

  get bytes(): number {
    return this.totalBytes;
  }

  /** The entry, now the most recently used; a 404 when it is not stored. */
  private use(id: string, param: string | null = null): StoredResponse {
    const entry = this.entries.get(id);
    if (!entry) throw notFound(id, param);
    this.entries.delete(id);
    this.entries.set(id, entry);
    return entry;
  }

  /** The conversation a response ends (for previous_response_id): 404 when unknown, 400 while in progress. */
  conversation(id: string): RequestMessage[] {
    const entry = this.use(id, "previous_response_id");
    if (entry.cancel)
      throw invalidRequest(
        "previous_response_id",
        `Response with id '${id}' is still in progress: wait for it to complete`,
        "response_in_progress",
      );
    if (!entry.conversation)
      throw invalidRequest(
        "previous_response_id",
        `Response with id '${id}' failed: it has no conversation to continue`,
        "response_failed",
      );
    return entry.conversation;
  }

  get(id: string): Record<string, unknown> {
    return this.use(id).response;
  }

  inputItems(id: string): Record<string, unknown>[] {
    return this.use(id).inputItems;
  }

  delete(id: string): void {
    const entry = this.entries.get(id);
    if (!entry) throw notFound(id);
    this.entries.delete(id);
    this.totalBytes -= entry.bytes;
  }

  /** Cancels an in-progress response and waits for its end; a 400 when it is complete. */
  async cancel(id: string): Promise<Record<string, unknown>> {
    const entry = this.use(id);
    if (!entry.cancel)
      throw invalidRequest(
        null,
        `Response with id '${id}' is not in progress: only a response being generated can be cancelled`,
        "not_cancellable",
      );
    entry.cancel();
    await entry.done;
    return entry.response;
  }

  /** Adds an in-progress response (its snapshot object) that `cancel` can stop. */
  begin(id: string, response: Record<string, unknown>, inputItems: Record<string, unknown>[], cancel: () => void): void {
    let settle!: () => void;
    const done = new Promise<void>((resolve) => (settle = resolve));
    this.entries.set(id, { response, conversation: undefined, inputItems, bytes: 0, cancel, done, settle });
    this.evict(id);
  }

  /** The response ended: its final object and conversation are kept (counted in bytes); a failed one is kept without a conversation. */
  finish(id: string, response: Record<string, unknown>, conversation: RequestMessage[] | undefined): void {
    const entry = this.entries.get(id);
    if (!entry) return;
    entry.response = response;
    entry.conversation = conversation;
    entry.cancel = undefined;
    this.totalBytes -= entry.bytes;
    entry.bytes = Buffer.byteLength(JSON.stringify([response, conversation ?? null, entry.inputItems]));
    this.totalBytes += entry.bytes;
    entry.settle();
    this.evict(id);
  }

  /** Forgets the least recently used responses until the bounds hold (never an in-progress one, nor `keep` unless it alone is too big). */
  private evict(keep: string): void {
    const kept = this.entries.get(keep);
    // one that alone is over the bounds goes before the others (it would push them all out, then itself)
    if (kept && !kept.cancel && (kept.bytes > this.maxBytes || this.maxResponses === 0)) {
      this.entries.delete(keep);
      this.totalBytes -= kept.bytes;
    }
    for (const [id, entry] of this.entries) {
      if (this.entries.size <= this.maxResponses && this.totalBytes <= this.maxBytes) break;
      if (entry.cancel || id === keep) continue;
      this.entries.delete(id);
      this.totalBytes -= entry.bytes;
    }
    if (kept && this.entries.has(keep) && !kept.cancel && (this.totalBytes > this.maxBytes || this.entries.size > this.maxResponses)) {
      this.entries.delete(keep);
      this.totalBytes -= kept.bytes;
    }
  }
}

type OutputItem = Record<string, unknown> & { type: string; id: string };

/** Writes a Responses answer (the response object or its event stream) and keeps it in the store when asked. */
export function responsesSink(ctx: SinkContext, request: ResponsesRequest, store: ResponseStore): AnswerSink {
  const stream = request.chat.stream;
  const id = newId("resp_");
  const createdAt = Math.floor(Date.now() / 1000);
  let sequence = 0;
  const output: OutputItem[] = [];
  /** the item being written (its index in `output`), or -1 */
  let open = -1;
  const callItems = new Map<number, number>();
  let reasoningTokens = 0;
  let cancelled = false;
  const emit = (type: string, data: Record<string, unknown>, force = false): void => {
    if (!stream || (ctx.signal.aborted && !force)) return;
    ctx.res.write(sseEvent(type, { type, ...data, sequence_number: sequence++ }));
  };
  const snapshot = (status: string, extra: Record<string, unknown> = {}): Record<string, unknown> => ({
    id,
    object: "response",
    created_at: createdAt,
    status,
    error: null,
    incomplete_details: null,
    model: ctx.modelName,
    output: output.map(finalItem),
    ...request.echo,
    usage: null,
    ...(request.toolsNotRun.length > 0 ? { tools_not_run: request.toolsNotRun } : {}),
    ...(ctx.cap ? { max_output_tokens_capped: { requested: ctx.cap.requested, granted: ctx.cap.granted } } : {}),
    ...extra,
  });
  const finalItem = (item: OutputItem): Record<string, unknown> => {
    if (item.type === "reasoning") {
      const textOf = item["text"] as string;
      const { text: _t, ...rest } = item;
      return {
        ...rest,
        summary: request.summary ? [{ type: "summary_text", text: textOf }] : [],
        content: [{ type: "reasoning_text", text: textOf }],
        ...(request.encryptedReasoning ? { encrypted_content: encodeReasoning(textOf) } : {}),
      };
    }
    if (item.type === "message") {
      const { text: textOf, ...rest } = item;
      return { ...rest, content: [{ type: "output_text", text: textOf, annotations: [], logprobs: [] }] };
    }
    // the name the model saw stays here (it renders the call again under it)
    const { modelName: _modelName, ...rest } = item;
    return rest;
  };
  /** ends the open item: `incomplete` when the response ends with it unfinished (max_output_tokens, a cancel) */
  const closeItem = (status: "completed" | "incomplete" = "completed"): void => {
    if (open < 0) return;
    const item = output[open]!;
    const index = open;
    open = -1;
    item["status"] = status;
    /** a finished text's event, then its part's (`content_index` or `summary_index` 0) */
    const textDone = (
      textEvent: string,
      partEvent: string,
      slot: "content_index" | "summary_index",
      part: { type: string; text: string; [key: string]: unknown },
      extra: Record<string, unknown> = {},
    ): void => {
      emit(textEvent, { item_id: item.id, output_index: index, [slot]: 0, text: part.text, ...extra });
      emit(partEvent, { item_id: item.id, output_index: index, [slot]: 0, part });
    };
    if (item.type === "reasoning") {
      const textOf = item["text"] as string;
      textDone("response.reasoning_text.done", "response.content_part.done", "content_index", { type: "reasoning_text", text: textOf });
      if (request.summary)
        textDone("response.reasoning_summary_text.done", "response.reasoning_summary_part.done", "summary_index", {
          type: "summary_text",
          text: textOf,
        });
    } else if (item.type === "message") {
      const textOf = item["text"] as string;
      const part = { type: "output_text", text: textOf, annotations: [], logprobs: [] };
      textDone("response.output_text.done", "response.content_part.done", "content_index", part, { logprobs: [] });
    } else if (item.type === "function_call") {
      emit("response.function_call_arguments.done", {
        item_id: item.id,
        output_index: index,
        name: item["name"],
        arguments: item["arguments"],
      });
    }
    emit("response.output_item.done", { output_index: index, item: finalItem(item) });
  };
  const openItem = (item: OutputItem): number => {
    closeItem();
    output.push(item);
    open = output.length - 1;
    const added =
      item.type === "reasoning"
        ? { type: "reasoning", id: item.id, summary: [], content: [] }
        : item.type === "message"
          ? { type: "message", id: item.id, status: "in_progress", role: "assistant", content: [] }
          : {
              type: "function_call",
              id: item.id,
              call_id: item["call_id"],
              name: item["name"],
              ...(item["namespace"] === undefined ? {} : { namespace: item["namespace"] }),
              arguments: "",
              status: "in_progress",
            };
    emit("response.output_item.added", { output_index: open, item: added });
    if (item.type === "message")
      emit("response.content_part.added", {
        item_id: item.id,
        output_index: open,
        content_index: 0,
        part: { type: "output_text", text: "", annotations: [], logprobs: [] },
      });
    if (item.type === "reasoning")
      emit("response.content_part.added", {
        item_id: item.id,
        output_index: open,
        content_index: 0,
        part: { type: "reasoning_text", text: "" },
      });
    if (item.type === "reasoning" && request.summary)
      emit("response.reasoning_summary_part.added", {
        item_id: item.id,
        output_index: open,
        summary_index: 0,
        part: { type: "summary_text", text: "" },
      });
    return open;
  };
  /** the conversation this response ends, for a later previous_response_id */
  const conversation = (): RequestMessage[] => {
    const turn: ChatMessage = { role: "assistant", content: "" };
    for (const item of output) {
      if (item.type === "reasoning") turn.reasoning_content = (turn.reasoning_content ?? "") + (item["text"] as string);
      else if (item.type === "message") turn.content += item["text"] as string;
      else if (item.type === "function_call") {
        let args: unknown = {};
        try {
          args = JSON.parse(item["arguments"] as string);
        } catch {
          // a call cut off by the token limit: its arguments as far as they went are not JSON
        }
        turn.tool_calls = [
          ...(turn.tool_calls ?? []),
          {
            type: "function",
            id: item["call_id"] as string,
            function: { name: (item["modelName"] ?? item["name"]) as string, arguments: args },
          },
        ];
      }
    }
    return [...request.history, ...request.inputMessages, turn];
  };
  const usage = (outcome: ChatOutcome) => {
    const s = outcome.result.stats;
    return {
      input_tokens: s.promptTokens,
      input_tokens_details: { cached_tokens: s.cachedPromptTokens },
      output_tokens: s.generatedTokens,
      output_tokens_details: { reasoning_tokens: reasoningTokens },
      total_tokens: s.promptTokens + s.generatedTokens,
    };
  };
  const finish = (status: string, extra: Record<string, unknown>): Record<string, unknown> => {
    closeItem(status === "completed" ? "completed" : "incomplete");
    const response = snapshot(status, extra);
    if (request.store) store.finish(id, response, status === "failed" ? undefined : conversation());
    return response;
  };
  if (request.store) {
    store.begin(id, snapshot("in_progress"), request.inputItems, () => {
      cancelled = true;
      ctx.abort();
    });
  }
  return {
    start() {
      if (!stream) return;
      ctx.startStream();
      emit("response.created", { response: snapshot("in_progress") });
      emit("response.in_progress", { response: snapshot("in_progress") });
    },
    parts(parts) {
      if (parts.some((p) => p.kind === "reasoning")) reasoningTokens++;
      for (const part of parts) {
        if (part.kind === "reasoning" || part.kind === "content") {
          if (part.text === "") continue;
          const type = part.kind === "reasoning" ? "reasoning" : "message";
          const current = open >= 0 ? output[open] : undefined;
          // white space between items (after </think>, around tool calls) opens no message
          if (current?.type !== type && type === "message" && part.text.trim() === "") continue;
          if (current?.type !== type)
            openItem({
              type,
              id: newId(type === "reasoning" ? "rs_" : "msg_"),
              text: "",
              ...(type === "message" ? { status: "in_progress", role: "assistant" } : {}),
            });
          const item = output[open]!;
          item["text"] = (item["text"] as string) + part.text;
          if (type === "reasoning") {
            emit("response.reasoning_text.delta", { item_id: item.id, output_index: open, content_index: 0, delta: part.text });
            if (request.summary)
              emit("response.reasoning_summary_text.delta", { item_id: item.id, output_index: open, summary_index: 0, delta: part.text });
          } else {
            emit("response.output_text.delta", { item_id: item.id, output_index: open, content_index: 0, delta: part.text, logprobs: [] });
          }
        } else if (part.kind === "tool_call_start") {
          if (callItems.size >= request.maxToolCalls) continue;
          callItems.set(
            part.index,
            openItem({
              type: "function_call",
              id: newId("fc_"),
              call_id: newId("call_"),
              // the name and namespace of the tool (the model saw `namespace.name` for a shared name)
              name: request.toolNamespaces.get(part.name)?.name ?? part.name,
              ...(request.toolNamespaces.has(part.name) ? { namespace: request.toolNamespaces.get(part.name)!.namespace } : {}),
              modelName: part.name,
              arguments: "",
              status: "in_progress",
            }),
          );
        } else if (part.kind === "tool_call_arguments") {
          const at = callItems.get(part.index);
          if (at === undefined) continue;
          const item = output[at]!;
          item["arguments"] = (item["arguments"] as string) + part.text;
          emit("response.function_call_arguments.delta", { item_id: item.id, output_index: at, delta: part.text });
        } else if (part.kind === "tool_call") {
          const at = callItems.get(part.index);
          if (at === undefined) continue;
          output[at]!["arguments"] = part.arguments;
          // cut off by max_output_tokens: an incomplete item, never a completed call
          const cut = part.cutOff === true;
          if (open === at) closeItem(cut ? "incomplete" : "completed");
          else if (cut) output[at]!["status"] = "incomplete";
        }
      }
    },
    end(outcome) {
      const incomplete = outcome.finish === "length";
      const response = finish(incomplete ? "incomplete" : "completed", {
        incomplete_details: incomplete ? { reason: "max_output_tokens" } : null,
        usage: usage(outcome),
        ...schemaCheckField(outcome.result),
      });
      if (!stream) {
        ctx.sendJson(response);
        return;
      }
      emit(incomplete ? "response.incomplete" : "response.completed", { response });
      ctx.res.end();
    },
    aborted(outcome) {
      // cancelled through POST /v1/responses/{id}/cancel: the answer so far, status "cancelled"
      if (!cancelled) {
        if (request.store) store.finish(id, snapshot("failed"), undefined);
        return;
      }
      const response = finish("cancelled", { usage: usage(outcome) });
      if (ctx.res.writableEnded || ctx.res.destroyed) return;
      if (!stream) ctx.sendJson(response);
      else {
        emit("response.failed", { response }, true);
        ctx.res.end();
      }
    },
    failed() {
      if (request.store) store.finish(id, snapshot("failed"), undefined);
    },
    cut(error) {
      const response = finish("failed", { error: { code: error.code ?? "server_error", message: error.message } });
      emit("error", { code: error.code, message: error.message, param: null }, true);
      emit("response.failed", { response }, true);
      ctx.res.end();
    },
  };
}
