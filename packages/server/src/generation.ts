/**
 * What the chat APIs share. /v1/chat/completions, /v1/messages (Anthropic) and /v1/responses (OpenAI) each parse
 * their wire format into one `ChatRequest` (requests.ts); the server maps it onto the engine once (template,
 * context fit, constraint, thinking budget, admission, abort on disconnect, drain, metrics) and feeds the output
 * to the API's `AnswerSink`, which writes that API's stream events or body. An API is a parser and a sink.
 */
import type http from "node:http";
import type { GenerationResult, ParsedOutput } from "@keepquant/engine";
import type { ApiError } from "./errors.js";

/** The generation endpoints, as the metrics label them. */
export type Endpoint = "chat" | "completions" | "messages" | "responses";

/** How a chat generation ended. */
export interface ChatOutcome {
  result: GenerationResult;
  /** `stop` (end of turn or a stop string), `length` (max tokens or the context) or `tool_calls` */
  finish: "stop" | "length" | "tool_calls";
  /** complete tool calls the model wrote */
  toolCalls: number;
}

/**
 * `schema_check` of an answer whose best-effort schema (`strict` not true) was relaxed: whether the output is valid
 * for the whole schema, why not, and which keywords generation could not enforce (docs/usage/structured-output.md).
 */
export function schemaCheckField(result: GenerationResult): {
  schema_check?: { valid: boolean; errors: string[]; relaxed: { path: string; keyword: string }[] };
} {
  const check = result.schemaCheck;
  if (check === undefined) return {};
  return {
    schema_check: { valid: check.valid, errors: check.errors, relaxed: check.relaxed.map(({ path, keyword }) => ({ path, keyword })) },
  };
}

/** A request's max tokens when the context made it smaller. */
export interface TokenCap {
  requested: number;
  granted: number;
}

/** A generated token's logprob entry (chat completions' `logprobs.content` item). */
export interface LogprobEntry {
  token: string;
  logprob: number;
  bytes: number[];
  top_logprobs: { token: string; logprob: number; bytes: number[] }[];
}

/** What the server gives a sink for one request. */
export interface SinkContext {
  res: http.ServerResponse;
  /** aborted when the client goes away or the drain cuts the answer: write nothing more then */
  signal: AbortSignal;
  modelName: string;
  /** the prompt ended in an open `<think>`: the output starts as reasoning */
  thinking: boolean;
  promptTokens: number;
  /** set when max tokens was capped to what the context leaves */
  cap: TokenCap | undefined;
  /** the headers every answer carries (`X-Max-Tokens-Capped`) */
  headers: Record<string, string>;
  /** opens a 200 event stream with `headers` */
  startStream(): void;
  /** sends a 200 JSON body with `headers` */
  sendJson(body: unknown): void;
  /** stops the generation (a cancel): the sink's `aborted` follows */
  abort(): void;
}

/**
 * One API's writer of an answer. `start` comes once, with the engine's first token (or at the end of an answer
 * without tokens): a stream's headers and first events go out then, so a request still queued when the server
 * stops gets a 503 instead. `parts` comes in output order; `end` once at the end; `cut` instead of `end` when the
 * drain timeout ends a started answer; `aborted`
 * instead when the client went away or the sink's own `ctx.abort()` stopped it.
 */
export interface AnswerSink {
  start(): void;
  parts(parts: readonly ParsedOutput[], logprob: LogprobEntry | undefined): void;
  end(outcome: ChatOutcome): void;
  cut(error: ApiError): void;
  /** the generation stopped early, not by the drain: the client went away, or `ctx.abort()` cancelled it */
  aborted?(outcome: ChatOutcome): void;
  /** the generation failed (the error answer follows from the server) */
  failed?(): void;
}

/** One API's error shape: the JSON body of an error status, and the bytes that end a started stream with it. */
export interface ErrorFormat {
  body(error: ApiError): unknown;
  streamEnd(error: ApiError): string;
}

/** A server-sent event with a name (Anthropic's and the Responses API's streams). */
export function sseEvent(name: string, data: unknown): string {
  return `event: ${name}\ndata: ${JSON.stringify(data)}\n\n`;
}
