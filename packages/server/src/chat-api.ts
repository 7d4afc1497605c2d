/**
 * /v1/chat/completions' answer: OpenAI's chat completion object, or its `chat.completion.chunk` stream ending in
 * `data: [DONE]`, with llama.cpp's `timings` and keepquant's `warnings`, `max_tokens_capped` and `schema_check`.
 */
import { randomBytes } from "node:crypto";
import type { GenerationResult } from "@keepquant/engine";
import type { ApiError } from "./errors.js";
import { type AnswerSink, type ErrorFormat, type LogprobEntry, type SinkContext, schemaCheckField } from "./generation.js";
import type { ChatRequest } from "./requests.js";
import { ChatOutput } from "./tool-calls.js";

export const SYSTEM_FINGERPRINT = "keepquant";

export function newId(prefix: string): string {
  return `${prefix}${randomBytes(12).toString("hex")}`;
}

/** OpenAI's error shape, `{"error": {message, type, param, code}}`; a stream ends with it as one data event. */
export const OPENAI_ERRORS: ErrorFormat = {
  body: (error) => error.toJSON(),
  streamEnd: (error) => `data: ${JSON.stringify(error.toJSON())}\n\n`,
};

export function usageOf(result: GenerationResult) {
  const s = result.stats;
  return {
    prompt_tokens: s.promptTokens,
    completion_tokens: s.generatedTokens,
    total_tokens: s.promptTokens + s.generatedTokens,
    prompt_tokens_details: { cached_tokens: s.cachedPromptTokens },
  };
}

/** llama.cpp's `timings` object (the web page shows it). */
export function timingsOf(result: GenerationResult) {
  const s = result.stats;
  const predictedMs = Math.max(0, s.totalMs - s.timeToFirstTokenMs);
  return {
    cache_n: s.cachedPromptTokens,
    prompt_n: s.promptTokens,
    prompt_ms: s.timeToFirstTokenMs,
    prompt_per_second: s.prefillTokensPerSecond,
    predicted_n: s.generatedTokens,
    predicted_ms: predictedMs,
    predicted_per_second: s.generatedTokens > 0 && predictedMs > 0 ? (s.generatedTokens * 1000) / predictedMs : 0,
  };
}

export function chatCompletionSink(ctx: SinkContext, request: ChatRequest): AnswerSink {
  const id = newId("chatcmpl-");
  const created = Math.floor(Date.now() / 1000);
  const output = new ChatOutput(() => newId("call_"));
  const base = { id, object: "chat.completion.chunk", created, model: ctx.modelName, system_fingerprint: SYSTEM_FINGERPRINT };
  const usageField = request.stream && request.includeUsage ? { usage: null } : {};
  const capField = ctx.cap ? { max_tokens_capped: ctx.cap } : {};
  const logprobEntries: LogprobEntry[] = [];
  const chunk = (delta: Record<string, unknown>, logprobs: unknown[] | undefined, finish: string | null, extra = {}): string => {
    const choice = { index: 0, delta, logprobs: logprobs ? { content: logprobs } : null, finish_reason: finish };
    return `data: ${JSON.stringify({ ...base, choices: [choice], ...usageField, ...extra })}\n\n`;
  };
  const send = (delta: Record<string, unknown>, logprobs: unknown[] | undefined, finish: string | null, extra = {}): void => {
    if (!ctx.signal.aborted) ctx.res.write(chunk(delta, logprobs, finish, extra));
  };
  return {
    start() {
      if (!request.stream) return;
      ctx.startStream();
      send({ role: "assistant", content: "" }, undefined, null);
    },
    parts(parts, logprob) {
      if (logprob) logprobEntries.push(logprob);
      let pending: unknown[] | undefined = logprob ? [logprob] : undefined;
      for (const delta of output.apply(parts)) {
        if (request.stream) send(delta, pending, null);
        pending = undefined;
      }
      if (request.stream && pending) send({}, pending, null);
    },
    end({ result, finish }) {
      if (request.stream) {
        send({}, undefined, finish, { timings: timingsOf(result), ...output.warningsField(), ...capField, ...schemaCheckField(result) });
        if (request.includeUsage) ctx.res.write(`data: ${JSON.stringify({ ...base, choices: [], usage: usageOf(result) })}\n\n`);
        ctx.res.end("data: [DONE]\n\n");
        return;
      }
      ctx.sendJson({
        id,
        object: "chat.completion",
        created,
        model: ctx.modelName,
        system_fingerprint: SYSTEM_FINGERPRINT,
        choices: [
          {
            index: 0,
            message: output.message(),
            logprobs: request.logprobs === undefined ? null : { content: logprobEntries },
            finish_reason: finish,
          },
        ],
        usage: usageOf(result),
        timings: timingsOf(result),
        ...output.warningsField(),
        ...capField,
        ...schemaCheckField(result),
      });
    },
    cut(error: ApiError) {
      // an error event, the finish chunk (finish_reason "abort") and [DONE]
      ctx.res.write(OPENAI_ERRORS.streamEnd(error));
      ctx.res.write(chunk({}, undefined, "abort"));
      ctx.res.end("data: [DONE]\n\n");
    },
  };
}
