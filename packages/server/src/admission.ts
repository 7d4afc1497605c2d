/**
 * Admission and drain of generation requests, and the prompt-size check that runs before tokenizing.
 *
 * A request is *started* once the engine produced its first token: only then are a stream's `200`
 * headers sent. So when the server stops, a request that has not started gets a `503` (nothing of an
 * answer was sent: a load balancer may retry it elsewhere), at once when the drain begins; a started
 * stream cut at the drain timeout ends with an error event, a chunk with `finish_reason: "abort"` and
 * `[DONE]` (docs/DEPLOY.md).
 */
import type { Tokenizer } from "@keepquant/engine";
import { ApiError, invalidRequest } from "./errors.js";
import { contentText, type RequestMessage } from "./images.js";

/** Why the server aborted a request (the AbortSignal's reason). */
export type DrainAbort = "drain-not-started" | "drain-timeout";

const DRAIN_REASONS: ReadonlySet<unknown> = new Set<DrainAbort>(["drain-not-started", "drain-timeout"]);

/** The drain reason a signal was aborted with, or undefined (the client went away, or not aborted). */
export function drainReason(signal: AbortSignal): DrainAbort | undefined {
  return signal.aborted && DRAIN_REASONS.has(signal.reason) ? (signal.reason as DrainAbort) : undefined;
}

/**
 * The 503 of a request the drain stopped before its answer was sent: not started yet (nothing was computed:
 * retry), or, for a non-streamed request, started and cut at the drain timeout (generation had begun; nothing of
 * it was sent).
 */
export function shuttingDown(started = false): ApiError {
  return new ApiError(
    503,
    "unavailable_error",
    started
      ? "the server is shutting down: the answer was cut at the drain timeout after generation had started, and nothing of it was sent"
      : "the server is shutting down; nothing was started, retry",
    null,
    "shutting_down",
    { "Retry-After": "1" },
  );
}

/** One generation request in flight. */
export interface TrackedRequest {
  readonly controller: AbortController;
  /** The engine produced its first token (a stream's headers may be sent). */
  started: boolean;
}

/** The generation requests in flight: counted for admission (429), stopped by the drain. */
export class RequestTracker {
  private readonly requests = new Set<TrackedRequest>();
  private idleWaiters: (() => void)[] = [];

  get size(): number {
    return this.requests.size;
  }

  add(controller: AbortController): TrackedRequest {
    const request: TrackedRequest = { controller, started: false };
    this.requests.add(request);
    return request;
  }

  remove(request: TrackedRequest): void {
    this.requests.delete(request);
    if (this.requests.size === 0) {
      const waiters = this.idleWaiters;
      this.idleWaiters = [];
      for (const wake of waiters) wake();
    }
  }

  /** Aborts the requests the engine has not started (they answer 503). */
  abortNotStarted(): void {
    for (const request of this.requests) if (!request.started) request.controller.abort("drain-not-started" satisfies DrainAbort);
  }

  /** Aborts every request left (the drain timeout). */
  abortAll(): void {
    for (const request of this.requests) request.controller.abort("drain-timeout" satisfies DrainAbort);
  }

  idle(): Promise<void> {
    if (this.requests.size === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }
}

/**
 * Refuses a prompt that certainly cannot fit the context, from its byte length alone (before it is
 * tokenized): with a closed vocabulary each token stands for at most `maxTokenBytes` bytes, so a text
 * of B bytes has at least ceil(B / maxTokenBytes) tokens. A vocabulary without that bound skips it.
 */
export function refuseByteLength(tokenizer: Tokenizer, text: string, contextTokens: number, param: string): void {
  refuseBytes(tokenizer, Buffer.byteLength(text, "utf8"), contextTokens, param, "the prompt");
}

/**
 * refuseByteLength for a chat before its template runs: the content of system, user and tool messages, which a
 * chat template renders as it is (an assistant turn's text may be cut, e.g. earlier turns' reasoning, so it is
 * not counted), must fit.
 */
export function refuseChatBytes(tokenizer: Tokenizer, messages: readonly RequestMessage[], contextTokens: number): void {
  let bytes = 0;
  for (const message of messages) if (message.role !== "assistant") bytes += Buffer.byteLength(contentText(message.content), "utf8");
  refuseBytes(tokenizer, bytes, contextTokens, "messages", "the text of the messages alone");
}

function refuseBytes(tokenizer: Tokenizer, bytes: number, contextTokens: number, param: string, what: string): void {
  const perToken = tokenizer.maxTokenBytes;
  if (perToken === undefined) return;
  const atLeast = Math.ceil(bytes / perToken);
  if (atLeast >= contextTokens) {
    throw invalidRequest(
      param,
      `This model's maximum context length is ${contextTokens} tokens; ${what} has at least ${atLeast} tokens (${bytes} bytes, and one token of this vocabulary covers at most ${perToken} bytes). Please shorten it.`,
      "context_length_exceeded",
    );
  }
}
