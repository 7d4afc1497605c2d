/**
 * The HTTP server over an `Engine`: OpenAI's chat completions and completions, and the agent APIs (Anthropic's
 * Messages, messages-api.ts; OpenAI's Responses, responses-api.ts), which share one generation path (generation.ts).
 * `createKeepquantServer(options).handler` is a plain `(req, res)` listener an application can mount (node:http,
 * or `app.use` in express-like frameworks); `listen()` runs it on its own node:http server, and `close()` drains it.
 *
 * The server sits on the public Engine API only: generate (with an AbortSignal per request),
 * stats(), tokenizer and encodeChat. It never reaches into the scheduler step.
 */
import { randomInt, timingSafeEqual } from "node:crypto";
import http from "node:http";
import type { AddressInfo, Socket } from "node:net";
import {
  ConstraintError,
  type EncodeChatOptions,
  type EncodedImage,
  type Engine,
  type EngineStats,
  EngineError,
  encodeChatAsync,
  encodeMultimodalChat,
  type MultimodalChatMessage,
  type MultimodalPrompt,
  type GenerateParams,
  type GenerationResult,
  OutputParser,
  type StopReason,
  type TokenLogprob,
  type Tokenizer,
  toolCallFormatOf,
} from "@keepquant/engine";
import {
  type DrainAbort,
  drainReason,
  RequestTracker,
  refuseByteLength,
  refuseChatBytes,
  shuttingDown,
  type TrackedRequest,
} from "./admission.js";
import { BodyReader, lingerAfterAnswer } from "./body.js";
import { chatCompletionSink, newId, OPENAI_ERRORS, SYSTEM_FINGERPRINT, timingsOf, usageOf } from "./chat-api.js";
import type { Capacity } from "./capacity.js";
import { chatConstraint, constraintError, constraintParam } from "./constraint.js";
import { ApiError, invalidRequest } from "./errors.js";
import {
  DEFAULT_IMAGE_FETCH_TIMEOUT_MS,
  DEFAULT_MAX_IMAGE_BYTES,
  DEFAULT_MAX_IMAGES_PER_REQUEST,
  type ImageOptions,
  imageBytes,
  imageError,
  imageRefs,
  noProjector,
  type RequestMessage,
  refuseImageUrls,
  textMessages,
} from "./images.js";
import { JsonParser, JsonShapeError, parseJsonBody } from "./json-worker.js";
import type { AnswerSink, Endpoint, ErrorFormat, LogprobEntry, SinkContext } from "./generation.js";
import { ANTHROPIC_ERRORS, messagesParam, messagesSink, parseMessagesRequest } from "./messages-api.js";
import { type FinishLabel, ServerMetrics } from "./metrics.js";
import {
  RESPONSES_ERRORS,
  ResponseStore,
  type ResponseStoreOptions,
  parseResponsesRequest,
  responsesParam,
  responsesSink,
} from "./responses-api.js";
import { type ChatRequest, type CompletionRequest, parseChatRequest, parseCompletionRequest, type SamplingFields } from "./requests.js";
import { detokenizeRoute, type TokenizationOptions, tokenizationLimit, tokenizeRoute } from "./tokenize-endpoint.js";
import { loadWebUi, type StaticFile } from "./webui.js";

export interface KeepquantServerOptions {
  /** The engine, or its loading promise (the server answers 503 until it resolves). */
  engine: Engine | Promise<Engine>;
  /** Model id in /v1/models and responses (default "keepquant"). */
  modelName?: string;
  /** Whether the model is the synthetic embedded one (said in /v1/models and the web page). */
  synthetic?: boolean;
  /** When set, every route but /health and the web page needs `Authorization: Bearer <apiKey>`. */
  apiKey?: string;
  /** Most tokens one request may hold, prompt plus generated (default 4096). */
  contextTokens?: number;
  /** Requests accepted beyond the engine's concurrent sequences before 429 (default 64). */
  maxQueue?: number;
  /** Largest request body in bytes (default 8 MiB): 413 beyond. */
  maxBodyBytes?: number;
  /** Bytes of all request bodies being read at once (default 8 x maxBodyBytes): 503 `server_busy` beyond. */
  maxBodyBytesInFlight?: number;
  /** Longest wait for the next bytes of a request body, in ms (default 10 s): 408 `request_timeout` beyond. */
  bodyIdleTimeoutMs?: number;
  /** Longest time to receive a whole request body, in ms (default 60 s): 408 `request_timeout` beyond. */
  bodyTimeoutMs?: number;
  /** How long `listen()`'s server keeps an idle keep-alive connection, in ms (default 5 s, as Node's). */
  keepAliveTimeoutMs?: number;
  /** Most messages in one chat request (default 4096): 400 `too_many_messages` beyond, before the template runs. */
  maxMessages?: number;
  /** Bounds of the /v1/responses store (default 1000 responses, 64 MiB): least recently used out first. */
  responseStore?: ResponseStoreOptions;
  /** Serve the web chat page on GET / (default true). */
  webui?: boolean;
  /** Folder of the web page's files (default: the package's `webui/`). */
  webuiDir?: string;
  /** How long close() waits for in-flight requests before aborting them (default 10 s; at most MAX_DRAIN_TIMEOUT_MS, Node's timer maximum). */
  drainTimeoutMs?: number;
  /** The sizes `planCapacity` chose (shown as /metrics gauges). */
  capacity?: Capacity;
  /**
   * Start the engine's grammar worker and build its vocabulary tables while the engine loads (before the server
   * reports ready), so that the first request with a `response_format` or a forced `tool_choice` does not wait
   * for them (about 0.8 s on a 248,320-token vocabulary; on the worker thread, the event loop runs meanwhile
   * either way). Default false (`keepquant serve` warms the engine it passes itself, before it says ready).
   */
  warmConstraints?: boolean;
  /** Thinking budget of chat requests that send no `thinking_budget` (default: none, the model thinks until it closes </think>). */
  thinkingBudget?: number;
  /**
   * A vision projector (an `mmproj` GGUF path or its bytes) loaded onto the engine before the server is ready:
   * requests may then send images. Without one (and without a projector the engine loaded itself) an image is a 400.
   */
  projector?: string | Uint8Array;
  /** Fetch http(s) image URLs requests send (default false: such a URL is a 400 that says how to allow it). */
  allowImageUrls?: boolean;
  /** Largest image a request may send or the server fetch, in bytes (default 20 MiB; a data: URL is also bounded by maxBodyBytes). */
  maxImageBytes?: number;
  /** Longest fetch of an image URL, in ms (default 10 s). */
  imageFetchTimeoutMs?: number;
  /** Most images in one request (default 16): each is decoded and encoded before generation starts. */
  maxImagesPerRequest?: number;
}

export const DEFAULT_CONTEXT_TOKENS = 4096;
export const DEFAULT_MAX_QUEUE = 64;
export const DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024;
export const DEFAULT_DRAIN_TIMEOUT_MS = 10_000;
export const DEFAULT_BODY_IDLE_TIMEOUT_MS = 10_000;
export const DEFAULT_BODY_TIMEOUT_MS = 60_000;
export const DEFAULT_KEEP_ALIVE_TIMEOUT_MS = 5_000;
export const DEFAULT_MAX_MESSAGES = 4096;
/**
 * The longest drain: Node's timer maximum, 2^31 - 1 ms (about 24.8 days). A longer setTimeout
 * delay is not honoured: Node warns (TimeoutOverflowWarning) and fires after 1 ms.
 */
export const MAX_DRAIN_TIMEOUT_MS = 2 ** 31 - 1;

type Handler = (req: http.IncomingMessage, res: http.ServerResponse, params: readonly string[]) => Promise<void>;

interface Route {
  name: string;
  method: "GET" | "POST" | "DELETE";
  /** needs the API key when one is set */
  auth: boolean;
  run: Handler;
  /** the API's error shape (default OpenAI's) */
  errors?: ErrorFormat;
}

/** A timer duration in ms: finite, in [0, MAX_DRAIN_TIMEOUT_MS]; RangeError naming the option and the range otherwise. */
function duration(value: number | undefined, name: string, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== "number" || !Number.isFinite(value) || value < 0 || value > MAX_DRAIN_TIMEOUT_MS)
    throw new RangeError(`${name} must be a number of ms in [0, ${MAX_DRAIN_TIMEOUT_MS}] (Node's timer maximum), got ${value}`);
  return value;
}

/**
 * An API key a client can send: HTTP header values are Latin-1 bytes, and the key received is trimmed, so a key
 * with other characters or with white space at either end could never match. TypeError naming `apiKey` otherwise.
 */
function checkApiKey(key: string): string {
  if (typeof key !== "string") throw new TypeError(`apiKey must be a string, got ${typeof key}`);
  // what Node accepts in a header value: tab, printable ASCII and the bytes 0x80-0xff (as Latin-1)
  if (/[^\t\x20-\x7e\x80-\xff]/.test(key))
    throw new TypeError(
      "apiKey must be Latin-1 text without control characters (an HTTP header carries nothing else): it could never match",
    );
  if (key.trim() !== key)
    throw new TypeError("apiKey must not begin or end with white space (the key a client sends is trimmed): it could never match");
  return key;
}

function positive(value: number | undefined, name: string, fallback: number): number {
  if (value === undefined) return fallback;
  if (!Number.isSafeInteger(value) || value < 1) throw new RangeError(`${name} must be a positive integer, got ${value}`);
  return value;
}

function finishReason(stop: StopReason, toolCalls: number): "stop" | "length" | "tool_calls" {
  if (stop === "max_tokens" || stop === "context") return "length";
  return toolCalls > 0 ? "tool_calls" : "stop";
}

/** A chat request's prompt: token ids, or token runs and encoded images. */
interface ChatPrompt {
  tokenizer: Tokenizer;
  prompt: readonly number[] | MultimodalPrompt;
  promptTokens: number;
  /** the rendered prompt (images as `<image>`) */
  text: string;
  /** the prompt's ids up to its first image (all of them without images): the shared system head is looked for there */
  leadingIds: readonly number[];
  useTools: boolean;
}

/** The tokens an answer may take, and the request's max_tokens when the context made it smaller. */
interface AnswerBudget {
  maxTokens: number;
  capped: { requested: number; granted: number } | undefined;
}

/** The answer's mention of a capped max_tokens: a header, and a `max_tokens_capped` field on the body or last chunk. */
function capNotice(budget: AnswerBudget): {
  headers: Record<string, string>;
  field: { max_tokens_capped?: { requested: number; granted: number } };
} {
  if (!budget.capped) return { headers: {}, field: {} };
  return { headers: { "X-Max-Tokens-Capped": String(budget.capped.granted) }, field: { max_tokens_capped: budget.capped } };
}

export class KeepquantServer {
  /** Mountable request listener. */
  readonly handler: (req: http.IncomingMessage, res: http.ServerResponse) => void;
  readonly metrics: ServerMetrics;
  private engine: Engine | undefined;
  private loadError: Error | undefined;
  private readonly modelName: string;
  private readonly synthetic: boolean;
  private readonly apiKey: Buffer | undefined;
  readonly contextTokens: number;
  private readonly maxQueue: number;
  private readonly thinkingBudget: number | undefined;
  private readonly images: ImageOptions;
  private readonly bodies: BodyReader;
  private readonly keepAliveTimeoutMs: number;
  private readonly maxMessages: number;
  private readonly drainTimeoutMs: number;
  private readonly webui: Map<string, StaticFile> | undefined;
  private readonly routes = new Map<string, Route>();
  /** routes with ids in the path (`/v1/responses/{id}`): the pattern's groups are the run's params */
  private readonly patternRoutes: { pattern: RegExp; route: Route }[] = [];
  /** each response's error shape (its route's) */
  private readonly errorFormats = new WeakMap<http.ServerResponse, ErrorFormat>();
  private readonly created = Math.floor(Date.now() / 1000);
  private readonly tracker = new RequestTracker();
  /** stored responses of /v1/responses (previous_response_id, GET, DELETE, cancel) */
  readonly responseStore: ResponseStore;
  private readonly jsonParser = new JsonParser();
  /**
   * The signals of requests not yet handed to the engine (reading, tokenizing): the drain aborts them. Each leaves
   * when its response closes. (One AbortSignal.any per request over a server-long signal leaked: Node 20 keeps a
   * WeakRef per dependant of the long-lived signal and never prunes it.)
   */
  private readonly beforeEngine = new Set<AbortController>();
  private draining = false;
  private httpServer: http.Server | undefined;

  constructor(options: KeepquantServerOptions) {
    this.modelName = options.modelName ?? "keepquant";
    this.synthetic = options.synthetic ?? false;
    this.apiKey = options.apiKey ? Buffer.from(checkApiKey(options.apiKey), "latin1") : undefined;
    this.contextTokens = positive(options.contextTokens, "contextTokens", DEFAULT_CONTEXT_TOKENS);
    this.maxQueue = options.maxQueue === 0 ? 0 : positive(options.maxQueue, "maxQueue", DEFAULT_MAX_QUEUE);
    this.thinkingBudget =
      options.thinkingBudget === undefined || options.thinkingBudget === 0
        ? options.thinkingBudget
        : positive(options.thinkingBudget, "thinkingBudget", 0);
    this.images = {
      allowUrls: options.allowImageUrls ?? false,
      maxBytes: positive(options.maxImageBytes, "maxImageBytes", DEFAULT_MAX_IMAGE_BYTES),
      fetchTimeoutMs: duration(options.imageFetchTimeoutMs, "imageFetchTimeoutMs", DEFAULT_IMAGE_FETCH_TIMEOUT_MS),
      maxPerRequest: positive(options.maxImagesPerRequest, "maxImagesPerRequest", DEFAULT_MAX_IMAGES_PER_REQUEST),
    };
    const maxBodyBytes = positive(options.maxBodyBytes, "maxBodyBytes", DEFAULT_MAX_BODY_BYTES);
    this.bodies = new BodyReader({
      maxBodyBytes,
      maxBodyBytesInFlight: positive(options.maxBodyBytesInFlight, "maxBodyBytesInFlight", 8 * maxBodyBytes),
      bodyIdleTimeoutMs: duration(options.bodyIdleTimeoutMs, "bodyIdleTimeoutMs", DEFAULT_BODY_IDLE_TIMEOUT_MS),
      bodyTimeoutMs: duration(options.bodyTimeoutMs, "bodyTimeoutMs", DEFAULT_BODY_TIMEOUT_MS),
    });
    this.keepAliveTimeoutMs = duration(options.keepAliveTimeoutMs, "keepAliveTimeoutMs", DEFAULT_KEEP_ALIVE_TIMEOUT_MS);
    this.maxMessages = positive(options.maxMessages, "maxMessages", DEFAULT_MAX_MESSAGES);
    this.responseStore = new ResponseStore(options.responseStore);
    this.drainTimeoutMs = duration(options.drainTimeoutMs, "drainTimeoutMs", DEFAULT_DRAIN_TIMEOUT_MS);
    this.metrics = new ServerMetrics(() => this.engine?.stats(), options.capacity);
    this.webui = options.webui === false ? undefined : loadWebUi(options.webuiDir);
    const warmConstraints = options.warmConstraints ?? false;
    const projector = options.projector;
    Promise.resolve(options.engine).then(
      async (engine) => {
        if (projector !== undefined) {
          try {
            await engine.loadProjector(projector);
          } catch (error) {
            this.loadError = error instanceof Error ? error : new Error(String(error));
            return;
          }
        }
        // the tokenizer's merge tables and byte bound, built now (while /health says loading) rather than on the first request
        void engine.tokenizer?.maxTokenBytes;
        // likewise the grammar worker and its vocabulary tables (about 0.8 s on a 248,320-token vocabulary, on the
        // worker thread): built on the first constrained request, they would delay that request's first token
        if (warmConstraints && engine.tokenizer) {
          await engine.prepareConstraint({ type: "json_object" }).catch(() => undefined);
        }
        this.engine = engine;
      },
      (error: unknown) => {
        this.loadError = error instanceof Error ? error : new Error(String(error));
      },
    );
    const add = (paths: string[], route: Route): void => {
      for (const path of paths) this.routes.set(path, route);
    };
    add(["/health", "/v1/health"], { name: "health", method: "GET", auth: false, run: (_req, res) => this.health(res) });
    add(["/v1/models", "/models"], { name: "models", method: "GET", auth: true, run: (_req, res) => this.models(res) });
    add(["/v1/chat/completions", "/chat/completions"], {
      name: "chat",
      method: "POST",
      auth: true,
      run: (req, res) => this.chat(req, res),
    });
    add(["/v1/messages", "/messages"], {
      name: "messages",
      method: "POST",
      auth: true,
      errors: ANTHROPIC_ERRORS,
      run: (req, res) => this.anthropicMessages(req, res),
    });
    add(["/v1/messages/count_tokens", "/messages/count_tokens"], {
      name: "count_tokens",
      method: "POST",
      auth: true,
      errors: ANTHROPIC_ERRORS,
      run: (req, res) => this.anthropicCountTokens(req, res),
    });
    add(["/v1/responses", "/responses"], {
      name: "responses",
      method: "POST",
      auth: true,
      errors: RESPONSES_ERRORS,
      run: (req, res) => this.responses(req, res),
    });
    const responseRoute = (name: string, method: Route["method"], suffix: string, run: Handler): void => {
      const route: Route = { name, method, auth: true, run };
      for (const prefix of ["/v1/responses/", "/responses/"])
        this.patternRoutes.push({ pattern: new RegExp(`^${prefix}([A-Za-z0-9_-]{1,200})${suffix}$`), route });
    };
    responseRoute("responses_get", "GET", "", async (_req, res, [id]) => this.sendJson(res, 200, this.responseStore.get(id!)));
    responseRoute("responses_delete", "DELETE", "", async (_req, res, [id]) => {
      this.responseStore.delete(id!);
      this.sendJson(res, 200, { id, object: "response", deleted: true });
    });
    responseRoute("responses_cancel", "POST", "/cancel", async (_req, res, [id]) =>
      this.sendJson(res, 200, await this.responseStore.cancel(id!)),
    );
    responseRoute("responses_input_items", "GET", "/input_items", async (_req, res, [id]) => {
      const data = this.responseStore.inputItems(id!);
      this.sendJson(res, 200, {
        object: "list",
        data,
        first_id: data[0]?.["id"] ?? null,
        last_id: data.at(-1)?.["id"] ?? null,
        has_more: false,
      });
    });
    add(["/v1/completions", "/completions"], {
      name: "completions",
      method: "POST",
      auth: true,
      run: (req, res) => this.completions(req, res),
    });
    add(["/tokenize"], { name: "tokenize", method: "POST", auth: true, run: (req, res) => this.tokenization(req, res, tokenizeRoute) });
    add(["/detokenize"], {
      name: "detokenize",
      method: "POST",
      auth: true,
      run: (req, res) => this.tokenization(req, res, detokenizeRoute),
    });
    add(["/metrics"], { name: "metrics", method: "GET", auth: true, run: (_req, res) => this.metricsRoute(res) });
    if (this.webui) {
      for (const [path, file] of this.webui) {
        add([path], { name: "webui", method: "GET", auth: false, run: async (_req, res) => this.sendStatic(res, file) });
      }
    }
    this.handler = (req, res) => {
      void this.handle(req, res);
    };
  }

  /** True once the engine is loaded (and not draining). */
  get ready(): boolean {
    return this.engine !== undefined && !this.draining;
  }

  /** Bytes of request bodies being read now (counted against `maxBodyBytesInFlight`). */
  get bodyBytesInFlight(): number {
    return this.bodies.inFlight;
  }

  /** Generation requests in flight (running or waiting in the engine). */
  get inFlight(): number {
    return this.tracker.size;
  }

  /** Starts a node:http server on host:port (port 0 = any free port). */
  async listen(port: number, host = "127.0.0.1"): Promise<AddressInfo> {
    const server = http.createServer(this.handler);
    server.keepAliveTimeout = this.keepAliveTimeoutMs;
    // An idle keep-alive connection times out here. Node would destroy it at once, even when the client has just
    // sent its next request and those bytes wait unread (the event loop was busy while the timer came due): the
    // destroy then resets the connection under that request. So it is closed one turn later, after the poll phase
    // has read what arrived, and only if nothing did.
    server.on("timeout", (socket: Socket) => {
      const seen = socket.bytesRead;
      setImmediate(() => {
        if (!socket.destroyed && socket.bytesRead === seen) socket.destroy();
      });
    });
    this.httpServer = server;
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(port, host, () => {
        server.off("error", reject);
        resolve();
      });
    });
    return server.address() as AddressInfo;
  }

  /**
   * Drains: stops accepting connections, answers 503 to new requests and to every request the engine
   * has not started yet (nothing of their answer was sent), waits up to `timeoutMs` for the started
   * ones, then ends the rest (a stream: an error event, `finish_reason: "abort"`, `[DONE]`; their
   * blocks and slots return to the pools) and closes every connection. The engine is the caller's to
   * dispose.
   */
  async close(timeoutMs = this.drainTimeoutMs): Promise<void> {
    timeoutMs = duration(timeoutMs, "close(timeoutMs)", this.drainTimeoutMs);
    this.draining = true;
    for (const controller of this.beforeEngine) controller.abort("drain-not-started" satisfies DrainAbort);
    const server = this.httpServer;
    const closed = server ? new Promise<void>((resolve) => server.close(() => resolve())) : Promise.resolve();
    server?.closeIdleConnections();
    this.tracker.abortNotStarted();
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([this.tracker.idle(), new Promise<void>((resolve) => (timer = setTimeout(resolve, timeoutMs)))]);
    clearTimeout(timer);
    this.tracker.abortAll();
    await this.tracker.idle();
    server?.closeAllConnections();
    await closed;
    await this.jsonParser.close();
  }

  /** Aborted when the client goes away or the drain begins (for work before the engine: tokenizing). */
  private requestSignal(res: http.ServerResponse): AbortSignal {
    const controller = new AbortController();
    if (this.draining) {
      controller.abort("drain-not-started" satisfies DrainAbort);
      return controller.signal;
    }
    // the client may be gone already: its "close" has fired, and nothing would take it out of the set
    if (res.destroyed || res.socket?.destroyed === true) {
      controller.abort("client-gone");
      return controller.signal;
    }
    this.beforeEngine.add(controller);
    res.once("close", () => {
      this.beforeEngine.delete(controller);
      if (!res.writableFinished) controller.abort("client-gone");
    });
    return controller.signal;
  }

  /** Requests not yet handed to the engine (for tests: none is left once every response closed). */
  get requestsBeforeEngine(): number {
    return this.beforeEngine.size;
  }

  /** Runs the tokenization of a prompt; a drain that stops it is a 503. */
  private async tokenizing<T>(work: Promise<T>): Promise<T> {
    try {
      return await work;
    } catch (error) {
      if (error === "drain-not-started") throw shuttingDown();
      throw error;
    }
  }

  private async handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const path = (req.url ?? "/").split("?")[0]!;
    let route = this.routes.get(path);
    let params: readonly string[] = [];
    for (const entry of route ? [] : this.patternRoutes) {
      const match = entry.pattern.exec(path);
      if (match && entry.route.method === req.method) {
        route = entry.route;
        params = match.slice(1);
        break;
      }
      if (match && !route) route = entry.route;
    }
    if (route?.errors) this.errorFormats.set(res, route.errors);
    // "close" comes for finished responses and for clients that went away mid-stream alike
    res.once("close", () => this.metrics.httpResponses.inc({ route: route?.name ?? "unknown", status: String(res.statusCode) }));
    // an answer sent before the body was read (404, 401, 413, 415, 503, ...) stays readable: body.ts
    lingerAfterAnswer(req, res);
    if (this.draining) res.setHeader("Connection", "close");
    try {
      if (!route) throw new ApiError(404, "not_found_error", `no route for ${req.method} ${path}`, null, "not_found");
      if (req.method !== route.method && !(route.method === "GET" && req.method === "HEAD")) {
        throw new ApiError(405, "invalid_request_error", `${path} accepts ${route.method}, not ${req.method}`, null, "method_not_allowed", {
          Allow: route.method,
        });
      }
      if (route.auth) this.authorize(req);
      await route.run(req, res, params);
    } catch (error) {
      this.sendError(res, error);
    }
  }

  /** The API key as `Authorization: Bearer <key>` (OpenAI's clients) or `x-api-key: <key>` (Anthropic's). */
  private authorize(req: http.IncomingMessage): void {
    if (!this.apiKey) return;
    const header = req.headers.authorization ?? "";
    const match = /^Bearer\s+(.+)$/i.exec(header);
    const xApiKey = req.headers["x-api-key"];
    const sent = match ? match[1]!.trim() : typeof xApiKey === "string" ? xApiKey.trim() : undefined;
    const given = sent === undefined ? undefined : Buffer.from(sent, "latin1");
    if (!given || given.length !== this.apiKey.length || !timingSafeEqual(given, this.apiKey)) {
      throw new ApiError(
        401,
        "authentication_error",
        given ? "invalid API key" : "missing API key: send Authorization: Bearer <key> (or x-api-key: <key>)",
        null,
        "invalid_api_key",
        {
          "WWW-Authenticate": "Bearer",
        },
      );
    }
  }

  private requireEngine(): Engine {
    if (this.draining)
      throw new ApiError(503, "unavailable_error", "the server is shutting down", null, "shutting_down", { "Retry-After": "1" });
    if (this.loadError) throw new ApiError(500, "server_error", `the model failed to load: ${this.loadError.message}`, null, "load_failed");
    if (!this.engine) throw new ApiError(503, "unavailable_error", "the model is still loading", null, "loading", { "Retry-After": "1" });
    return this.engine;
  }

  private sendJson(res: http.ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
    if (res.headersSent) {
      res.end();
      return;
    }
    const text = JSON.stringify(body);
    res.writeHead(status, { "Content-Type": "application/json; charset=utf-8", "Content-Length": Buffer.byteLength(text), ...headers });
    res.end(text);
  }

  private sendError(res: http.ServerResponse, error: unknown): void {
    const api = ApiError.isInstance(error) ? error : new ApiError(500, "server_error", "internal server error", null, "internal_error");
    const format = this.errorFormats.get(res) ?? OPENAI_ERRORS;
    if (res.headersSent) {
      // mid-stream: one error event, then the end (as llama.cpp's server does)
      if (!res.writableEnded) res.end(format.streamEnd(api));
      return;
    }
    this.sendJson(res, api.status, format.body(api), api.headers);
  }

  private health(res: http.ServerResponse): Promise<void> {
    if (this.loadError) this.sendJson(res, 500, { status: "error", message: this.loadError.message });
    else if (this.draining) this.sendJson(res, 503, { status: "draining" });
    else if (!this.engine) this.sendJson(res, 503, { status: "loading" });
    else this.sendJson(res, 200, { status: "ok" });
    return Promise.resolve();
  }

  private models(res: http.ServerResponse): Promise<void> {
    const engine = this.requireEngine();
    const stats = engine.stats();
    this.sendJson(res, 200, {
      object: "list",
      data: [
        {
          id: this.modelName,
          object: "model",
          created: this.created,
          owned_by: "keepquant",
          meta: {
            synthetic: this.synthetic,
            context_tokens: this.contextTokens,
            vocab_size: engine.weights.vocab,
            numerics: stats.numerics,
            max_sequences: stats.states.slotsTotal,
            kv_blocks: stats.kv.blocksTotal,
            kv_block_tokens: stats.kv.blockSize,
            prefix_cache: stats.prefixCache !== undefined,
            // requests may send images (a vision projector is loaded)
            vision: engine.projector !== undefined,
            image_urls: engine.projector !== undefined && this.images.allowUrls,
          },
        },
      ],
    });
    return Promise.resolve();
  }

  private async metricsRoute(res: http.ServerResponse): Promise<void> {
    const text = await this.metrics.text();
    res.writeHead(200, { "Content-Type": this.metrics.contentType, "Content-Length": Buffer.byteLength(text) });
    res.end(text);
  }

  private sendStatic(res: http.ServerResponse, file: StaticFile): void {
    res.writeHead(200, {
      "Content-Type": file.contentType,
      "Content-Length": file.body.length,
      "Cache-Control": "no-cache",
      "X-Content-Type-Options": "nosniff",
      // the page runs its own files only: no inline script, nothing from elsewhere
      "Content-Security-Policy":
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'none'",
      "Referrer-Policy": "no-referrer",
    });
    res.end(file.body);
  }

  /**
   * The body as JSON. The request must say `Content-Type: application/json` (a charset, if given,
   * utf-8): text/plain, a form, or no type at all is a 415 before the body is read, so that a
   * browser's simple cross-origin POST (which cannot set application/json without a preflight)
   * never reaches the model and a client's mistake is named instead of guessed around.
   */
  private readJson(req: http.IncomingMessage): Promise<unknown> {
    const type = req.headers["content-type"];
    const [mediaType = "", ...params] = (type ?? "").split(";").map((part) => part.trim().toLowerCase());
    const charset = params
      .find((p) => p.startsWith("charset="))
      ?.slice("charset=".length)
      .replace(/^"|"$/g, "");
    if (mediaType !== "application/json" || (charset !== undefined && charset !== "utf-8" && charset !== "utf8")) {
      return Promise.reject(
        new ApiError(
          415,
          "invalid_request_error",
          type === undefined
            ? "the request has no Content-Type: send the body as JSON with Content-Type: application/json"
            : `Content-Type ${JSON.stringify(type)} is not supported: send the body as JSON with Content-Type: application/json`,
          null,
          "unsupported_media_type",
          { Accept: "application/json" },
        ),
      );
    }
    // large bodies are parsed on a worker thread (json-worker.ts)
    return this.bodies.read(req).then((bytes) =>
      parseJsonBody(this.jsonParser, bytes).catch((error: unknown) => {
        if (error instanceof JsonShapeError) throw invalidRequest(null, error.message, "too_complex");
        throw invalidRequest(null, `the request body is not valid JSON: ${(error as Error).message}`, "invalid_json");
      }),
    );
  }

  /**
   * The prompt checked against the context (a 400 when it alone fills it) and the tokens left for the answer: a
   * `max_tokens` larger than what the context leaves is capped to it (as llama-server does; clients such as Qwen
   * Code send 32000 to every model), and the cap is said in the answer (`capped`).
   */
  private fitContext(promptTokens: number, requested: number | undefined, param: string): AnswerBudget {
    const ctx = this.contextTokens;
    if (promptTokens >= ctx) {
      throw invalidRequest(
        param,
        `This model's maximum context length is ${ctx} tokens; the prompt has ${promptTokens} tokens. Please shorten it.`,
        "context_length_exceeded",
      );
    }
    const room = ctx - promptTokens;
    if (requested !== undefined && requested > room) return { maxTokens: room, capped: { requested, granted: room } };
    return { maxTokens: requested ?? room, capped: undefined };
  }

  private admit(engine: Engine): void {
    const slots = engine.stats().states.slotsTotal;
    const limit = slots + this.maxQueue;
    if (this.tracker.size >= limit) {
      throw new ApiError(
        429,
        "rate_limit_error",
        `the server is at capacity (${this.tracker.size} requests in flight: ${slots} running at most, ${this.maxQueue} queued); retry later`,
        null,
        "queue_full",
        { "Retry-After": "1" },
      );
    }
  }

  private engineParams(request: SamplingFields, maxTokens: number, signal: AbortSignal): GenerateParams {
    return {
      maxTokens,
      temperature: request.temperature,
      topK: request.topK,
      topP: request.topP,
      minP: request.minP,
      repeatPenalty: request.repeatPenalty,
      presencePenalty: request.presencePenalty,
      frequencyPenalty: request.frequencyPenalty,
      seed: request.seed ?? randomInt(0, 2 ** 31),
      stop: request.stop,
      ignoreEog: request.ignoreEos,
      signal,
      ...(request.logprobs === undefined ? {} : { logprobs: request.logprobs }),
    };
  }

  /**
   * Runs one generation and feeds `onToken` each token event; returns the result (stopReason
   * "abort" when the client went away). Counts tokens and latencies in the metrics.
   */
  private async run(
    engine: Engine,
    endpoint: Endpoint,
    prompt: readonly number[] | MultimodalPrompt,
    params: GenerateParams,
    arrival: number,
    onToken: (text: string, token: number, logprob: number | undefined, top: TokenLogprob[] | undefined) => void,
  ): Promise<GenerationResult> {
    let stream: ReturnType<Engine["generate"]>;
    try {
      stream = engine.generate(prompt, params);
    } catch (error) {
      if (EngineError.isInstance(error)) throw invalidRequest(error.field ?? null, error.message);
      if (ConstraintError.isInstance(error)) throw constraintError(error, error.field ?? null);
      throw error;
    }
    let last = 0;
    let result: GenerationResult | undefined;
    try {
      for await (const event of stream) {
        if (event.type === "token") {
          if (event.token >= 0) {
            const now = performance.now();
            if (last === 0) this.metrics.ttft.observe((now - arrival) / 1000);
            else this.metrics.itl.observe((now - last) / 1000);
            last = now;
          }
          onToken(event.text, event.token, event.logprob, event.topLogprobs);
        } else {
          result = event.result;
        }
      }
      if (!result) throw new Error("generation ended without a result");
    } catch (error) {
      this.metrics.requests.inc({ endpoint, finish_reason: "error" });
      // a request the engine refuses once it runs (e.g. image rows on a step that takes none) is named, as before it runs
      if (EngineError.isInstance(error) && error.code === "ENGINE_BAD_REQUEST") throw invalidRequest(error.field ?? null, error.message);
      throw error;
    }
    this.metrics.promptTokens.inc(result.stats.promptTokens);
    this.metrics.generationTokens.inc(result.stats.generatedTokens);
    this.metrics.e2e.observe((performance.now() - arrival) / 1000);
    if (result.stopReason === "abort") this.metrics.requests.inc({ endpoint, finish_reason: "abort" });
    return result;
  }

  private countFinish(endpoint: Endpoint, finish: FinishLabel): void {
    this.metrics.requests.inc({ endpoint, finish_reason: finish });
  }

  /** A token's text and bytes for logprobs. */
  private tokenEntry(engine: Engine, token: number, logprob: number): { token: string; logprob: number; bytes: number[] } {
    const tokenizer = engine.tokenizer!;
    return {
      token: tokenizer.decode([token], { special: true }),
      logprob,
      bytes: Array.from(tokenizer.tokenToPiece(token, { special: true })),
    };
  }

  /**
   * Tracks a generation request for admission and drain; aborts it when the client goes away. It
   * leaves the tracker once its response is flushed, so the drain never closes a connection under an
   * answer's last bytes.
   */
  private async track<T>(res: http.ServerResponse, body: (controller: AbortController, request: TrackedRequest) => Promise<T>): Promise<T> {
    if (this.draining) throw shuttingDown();
    const controller = new AbortController();
    const request = this.tracker.add(controller);
    const onClose = (): void => {
      if (!res.writableFinished) controller.abort();
    };
    res.on("close", onClose);
    // the client may have gone while the body was read or the prompt tokenized
    if (res.destroyed || res.socket?.destroyed === true) controller.abort();
    try {
      return await body(controller, request);
    } catch (error) {
      // the error answer goes out before the request leaves the tracker (the drain waits for it)
      this.sendError(res, error);
      throw error;
    } finally {
      res.off("close", onClose);
      if (!res.writableEnded && drainReason(controller.signal) && !res.headersSent) this.sendError(res, shuttingDown(request.started));
      await flushed(res);
      this.tracker.remove(request);
    }
  }

  /**
   * What a request aborted by the drain sends: nothing yet (the caller's 503 follows), or for a started stream
   * its ending in the API's terms (`cut`: for OpenAI's, an error event, the finish chunk with
   * `finish_reason: "abort"` and `[DONE]`).
   */
  private endCutStream(res: http.ServerResponse, controller: AbortController, cut: (error: ApiError) => void): void {
    if (!drainReason(controller.signal) || !res.headersSent || res.writableEnded) return;
    cut(
      new ApiError(503, "unavailable_error", "the server is shutting down: the answer was cut at the drain timeout", null, "shutting_down"),
    );
  }

  private startStream(res: http.ServerResponse, headers: Record<string, string> = {}): void {
    res.writeHead(200, {
      "Content-Type": "text/event-stream; charset=utf-8",
      "Cache-Control": "no-cache",
      Connection: this.draining ? "close" : "keep-alive",
      "X-Accel-Buffering": "no",
      ...headers,
    });
    res.flushHeaders();
  }

  /** /tokenize and /detokenize (tokenize-endpoint.ts). */
  private async tokenization(
    req: http.IncomingMessage,
    res: http.ServerResponse,
    route: (tokenizer: Tokenizer, body: unknown, options: TokenizationOptions) => Promise<string>,
  ): Promise<void> {
    const engine = this.requireEngine();
    const body = await this.readJson(req);
    if (!engine.tokenizer) throw invalidRequest(null, "this model has no usable tokenizer", "no_tokenizer");
    const options = { limit: tokenizationLimit(this.contextTokens), signal: this.requestSignal(res) };
    const text = await this.tokenizing(route(engine.tokenizer, body, options));
    res.writeHead(200, { "Content-Type": "application/json; charset=utf-8", "Content-Length": Buffer.byteLength(text) });
    res.end(text);
  }

  private async chat(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const arrival = performance.now();
    const engine = this.requireEngine();
    const request: ChatRequest = parseChatRequest(await this.readJson(req), { maxMessages: this.maxMessages });
    await this.generateChat(res, engine, "chat", request, arrival, (ctx) => chatCompletionSink(ctx, request));
  }

  /** OpenAI's Responses API (responses-api.ts). */
  private async responses(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const arrival = performance.now();
    const engine = this.requireEngine();
    const request = parseResponsesRequest(await this.readJson(req), { maxMessages: this.maxMessages, store: this.responseStore });
    await this.generateChat(
      res,
      engine,
      "responses",
      request.chat,
      arrival,
      (ctx) => responsesSink(ctx, request, this.responseStore),
      responsesParam(request),
    );
  }

  /** Anthropic's Messages API (messages-api.ts). */
  private async anthropicMessages(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const arrival = performance.now();
    const engine = this.requireEngine();
    const request = parseMessagesRequest(await this.readJson(req), { maxMessages: this.maxMessages });
    await this.generateChat(res, engine, "messages", request.chat, arrival, (ctx) => messagesSink(ctx, request), messagesParam);
  }

  /** `/v1/messages/count_tokens`: the prompt's tokens, `{input_tokens}`. */
  private async anthropicCountTokens(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    this.requireEngine();
    const request = parseMessagesRequest(await this.readJson(req), { maxMessages: this.maxMessages, countOnly: true });
    this.sendJson(res, 200, { input_tokens: await this.countChatTokens(res, request.chat) });
  }

  /**
   * A chat request's prompt: the messages' text bounded before the template runs, the template rendered and
   * tokenized off the event loop (a template error is a 400 naming `messages`). A request with images takes the
   * multimodal path (`encodeMultimodalChat`): each image's bytes resolved and encoded by the engine's projector.
   */
  private async encodeChatRequest(engine: Engine, request: ChatRequest, signal: AbortSignal): Promise<ChatPrompt> {
    const tokenizer = engine.tokenizer;
    if (!tokenizer) throw invalidRequest("messages", "this model has no usable tokenizer: use /v1/completions with token ids");
    refuseChatBytes(tokenizer, request.messages, this.contextTokens);
    const useTools = request.tools !== undefined && request.tools.length > 0 && request.toolChoice !== "none";
    const options = {
      ...(useTools ? { tools: request.tools } : {}),
      ...(request.enableThinking === undefined ? {} : { enableThinking: request.enableThinking }),
      variables: request.templateKwargs,
    };
    const messages = textMessages(request.messages);
    if (!messages) return this.encodeMultimodalRequest(engine, tokenizer, request, options, useTools, signal);
    try {
      const encoded = await this.tokenizing(
        encodeChatAsync(tokenizer, messages, options, {
          signal,
          beforeEncode: (text) => refuseByteLength(tokenizer, text, this.contextTokens, "messages"),
        }),
      );
      return { tokenizer, prompt: encoded.ids, promptTokens: encoded.ids.length, text: encoded.text, leadingIds: encoded.ids, useTools };
    } catch (error) {
      if (ApiError.isInstance(error) || signal.aborted) throw error;
      throw invalidRequest("messages", `the chat template failed: ${(error as Error).message}`, "template_error");
    }
  }

  /**
   * The prompt of a request with images: no projector is a 400 naming the first image part; the images' bytes
   * (decoded, or fetched when allowed) and the template's text, then each image encoded (a refused image is a 400
   * naming its part and the reason).
   */
  private async encodeMultimodalRequest(
    engine: Engine,
    tokenizer: Tokenizer,
    request: ChatRequest,
    options: EncodeChatOptions,
    useTools: boolean,
    signal: AbortSignal,
  ): Promise<ChatPrompt> {
    const refs = imageRefs(request.messages);
    if (!engine.projector) throw noProjector(refs[0]!.param);
    if (refs.length > this.images.maxPerRequest) {
      throw invalidRequest(
        refs[this.images.maxPerRequest]!.param,
        `the request has ${refs.length} images; this server takes at most ${this.images.maxPerRequest} per request`,
        "too_many_images",
      );
    }
    refuseImageUrls(refs, this.images);
    // a server at capacity says so before it fetches and encodes images (the work admission would throw away)
    this.admit(engine);
    const bytes = await this.tokenizing(Promise.all(refs.map((ref) => imageBytes(ref, this.images, signal))));
    let next = 0;
    const messages: MultimodalChatMessage[] = request.messages.map((message) => {
      if (typeof message.content === "string") return message as MultimodalChatMessage;
      return {
        ...message,
        content: message.content.map((part) => (part.type === "text" ? part : { type: "image" as const, image: bytes[next++]! })),
      };
    });
    let chat: ReturnType<typeof encodeMultimodalChat>;
    try {
      chat = encodeMultimodalChat(tokenizer, messages, options);
    } catch (error) {
      throw invalidRequest("messages", `the chat template failed: ${(error as Error).message}`, "template_error");
    }
    refuseByteLength(tokenizer, chat.text, this.contextTokens, "messages");
    const encodedImages: EncodedImage[] = [];
    for (let k = 0; k < chat.images.length; k++) {
      if (signal.aborted) throw signal.reason === "drain-not-started" ? shuttingDown() : signal.reason;
      encodedImages.push(
        await engine.encodeImage(chat.images[k]!, { maxBytes: this.images.maxBytes }).catch((error: unknown) => {
          throw imageError(error, refs[k]!.param);
        }),
      );
    }
    const pieces = chat.pieces.map((piece) => (Array.isArray(piece) ? piece : encodedImages[piece.image]!));
    const promptTokens = pieces.reduce((sum, piece) => sum + (Array.isArray(piece) ? piece.length : piece.tokens), 0);
    const first = chat.pieces[0];
    return {
      tokenizer,
      prompt: { pieces },
      promptTokens,
      text: chat.text,
      leadingIds: Array.isArray(first) ? first : [],
      useTools,
    };
  }

  /** The prompt tokens of a chat request (Anthropic's /v1/messages/count_tokens). */
  private async countChatTokens(res: http.ServerResponse, request: ChatRequest): Promise<number> {
    const engine = this.requireEngine();
    const { promptTokens } = await this.encodeChatRequest(engine, request, this.requestSignal(res));
    return promptTokens;
  }

  /**
   * The one generation path of the chat APIs (generation.ts): the request mapped onto the engine, its output parsed
   * (reasoning, content, tool calls) and handed to the API's sink. `param` names a chat-completions field in the
   * API's own terms for its 400s.
   */
  private async generateChat(
    res: http.ServerResponse,
    engine: Engine,
    endpoint: Endpoint,
    request: ChatRequest,
    arrival: number,
    sinkOf: (ctx: SinkContext) => AnswerSink,
    param: (name: string | null) => string | null = (name) => name,
  ): Promise<void> {
    const signal = this.requestSignal(res);
    const renamed = (error: unknown): never => {
      if (ApiError.isInstance(error) && error.status === 400) {
        throw new ApiError(400, error.type, error.message, param(error.param), error.code, error.headers);
      }
      throw error;
    };
    const encoded = await this.encodeChatRequest(engine, request, signal).catch(renamed);
    const { tokenizer, useTools } = encoded;
    const budget = (() => {
      try {
        return this.fitContext(encoded.promptTokens, request.maxTokens, "messages");
      } catch (error) {
        return renamed(error);
      }
    })();
    const cap = capNotice(budget);
    const head = await this.tokenizing(
      sharedHeadLength(
        tokenizer,
        request.messages,
        useTools ? request.tools : undefined,
        request.templateKwargs,
        encoded.leadingIds,
        signal,
      ),
    );
    // structured output: the constraint (compiled now, so that a refused schema is a 400) and the thinking budget
    const thinking = /<think>\s*$/.test(encoded.text);
    const format = toolCallFormatOf(tokenizer.chatTemplate);
    const constraint = chatConstraint(request, format);
    if (constraint) {
      await engine.prepareConstraint(constraint).catch((error: unknown) => {
        throw ConstraintError.isInstance(error) ? constraintError(error, param(constraintParam(error.field, request))) : error;
      });
    }
    const thinkingBudget = request.thinkingBudget ?? this.thinkingBudget;
    const guided: Partial<GenerateParams> = {
      ...(constraint ? { constraint } : {}),
      ...(thinking && (constraint || thinkingBudget !== undefined) ? { reasoning: true } : {}),
      ...(thinking && thinkingBudget !== undefined ? { thinkingBudget } : {}),
    };
    this.admit(engine);
    await this.track(res, async (controller, tracked) => {
      const parser = new OutputParser({ reasoning: thinking, tools: useTools ? request.tools! : false, format });
      const sink = sinkOf({
        res,
        signal: controller.signal,
        modelName: this.modelName,
        thinking,
        promptTokens: encoded.promptTokens,
        cap: budget.capped,
        headers: cap.headers,
        startStream: () => this.startStream(res, cap.headers),
        sendJson: (body) => this.sendJson(res, 200, body, cap.headers),
        abort: () => controller.abort("cancelled"),
      });
      // a stream's headers and first events wait for the engine's first token: a request still queued
      // when the server stops gets a 503 instead (see admission.ts)
      const open = (): void => {
        if (tracked.started || controller.signal.aborted) return;
        tracked.started = true;
        sink.start();
      };
      let result: GenerationResult;
      try {
        result = await this.run(
          engine,
          endpoint,
          encoded.prompt,
          {
            ...this.engineParams(request, budget.maxTokens, controller.signal),
            ...(head > 0 ? { prefixCachePoints: [head] } : {}),
            ...guided,
          },
          arrival,
          (text, token, logprob, top) => {
            open();
            let entry: LogprobEntry | undefined;
            if (logprob !== undefined && token >= 0) {
              entry = {
                ...this.tokenEntry(engine, token, logprob),
                top_logprobs: (top ?? []).map((t) => this.tokenEntry(engine, t.token, t.logprob)),
              };
            }
            const parts = parser.push(text);
            if (!controller.signal.aborted) sink.parts(parts, entry);
          },
        );
      } catch (error) {
        sink.failed?.();
        throw error;
      }
      if (result.stopReason === "abort") {
        if (drainReason(controller.signal)) this.endCutStream(res, controller, (error) => sink.cut(error));
        else sink.aborted?.({ result, finish: "stop", toolCalls: parser.toolCallCount });
        return;
      }
      open();
      sink.parts(parser.flush(), undefined);
      const finish = finishReason(result.stopReason, parser.toolCallCount);
      this.countFinish(endpoint, finish);
      sink.end({ result, finish, toolCalls: parser.toolCallCount });
    });
  }

  private async completions(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const arrival = performance.now();
    const engine = this.requireEngine();
    const request: CompletionRequest = parseCompletionRequest(await this.readJson(req), engine.weights.vocab);
    let ids: number[];
    if (typeof request.prompt === "string") {
      const tokenizer = engine.tokenizer;
      if (!tokenizer) throw invalidRequest("prompt", "this model has no usable tokenizer: send the prompt as token ids");
      refuseByteLength(tokenizer, request.prompt, this.contextTokens, "prompt");
      ids = await this.tokenizing(
        tokenizer.encodeAsync(request.prompt, { parseSpecial: request.parseSpecial, signal: this.requestSignal(res) }),
      );
      if (ids.length === 0) throw invalidRequest("prompt", "prompt has no tokens");
    } else {
      ids = request.prompt;
    }
    if (request.echo && request.logprobs !== undefined)
      throw invalidRequest("echo", "echo with logprobs is not supported", "unsupported_value");
    const budget = this.fitContext(ids.length, request.maxTokens, "prompt");
    const maxTokens = budget.maxTokens;
    const cap = capNotice(budget);
    this.admit(engine);
    await this.track(res, async (controller, tracked) => {
      const id = newId("cmpl-");
      const created = Math.floor(Date.now() / 1000);
      const base = { id, object: "text_completion", created, model: this.modelName, system_fingerprint: SYSTEM_FINGERPRINT };
      const usageField = request.stream && request.includeUsage ? { usage: null } : {};
      const echo = request.echo && engine.tokenizer ? engine.tokenizer.decode(ids) : "";
      let text = echo;
      const legacy = {
        tokens: [] as string[],
        token_logprobs: [] as number[],
        top_logprobs: [] as Record<string, number>[],
        text_offset: [] as number[],
      };
      const send = (chunkText: string, logprobs: unknown, finish: string | null, extra: Record<string, unknown> = {}): void => {
        if (controller.signal.aborted) return;
        res.write(
          `data: ${JSON.stringify({ ...base, choices: [{ index: 0, text: chunkText, logprobs, finish_reason: finish }], ...usageField, ...extra })}\n\n`,
        );
      };
      // as in chat: the stream opens with the engine's first token
      const open = (): void => {
        if (tracked.started || controller.signal.aborted) return;
        tracked.started = true;
        if (!request.stream) return;
        this.startStream(res, cap.headers);
        if (echo) send(echo, null, null);
      };
      const result = await this.run(
        engine,
        "completions",
        ids,
        this.engineParams(request, maxTokens, controller.signal),
        arrival,
        (delta, token, logprob, top) => {
          open();
          let logprobs: unknown = null;
          if (logprob !== undefined && token >= 0) {
            const tokenText = this.tokenEntry(engine, token, logprob).token;
            const topMap: Record<string, number> = {};
            for (const t of top ?? []) topMap[this.tokenEntry(engine, t.token, t.logprob).token] = t.logprob;
            legacy.tokens.push(tokenText);
            legacy.token_logprobs.push(logprob);
            legacy.top_logprobs.push(topMap);
            legacy.text_offset.push(text.length);
            logprobs = { tokens: [tokenText], token_logprobs: [logprob], top_logprobs: [topMap], text_offset: [text.length] };
          }
          text += delta;
          if (request.stream && (delta !== "" || logprobs !== null)) send(delta, logprobs, null);
        },
      );
      if (result.stopReason === "abort") {
        this.endCutStream(res, controller, (error) => {
          res.write(OPENAI_ERRORS.streamEnd(error));
          res.write(`data: ${JSON.stringify({ ...base, choices: [{ index: 0, text: "", logprobs: null, finish_reason: "abort" }] })}\n\n`);
          res.end("data: [DONE]\n\n");
        });
        return;
      }
      open();
      const finish = finishReason(result.stopReason, 0);
      this.countFinish("completions", finish);
      if (request.stream) {
        send("", null, finish, { timings: timingsOf(result), ...cap.field });
        if (request.includeUsage) res.write(`data: ${JSON.stringify({ ...base, choices: [], usage: usageOf(result) })}\n\n`);
        res.end("data: [DONE]\n\n");
        return;
      }
      this.sendJson(
        res,
        200,
        {
          ...base,
          choices: [{ index: 0, text, logprobs: request.logprobs === undefined ? null : legacy, finish_reason: finish }],
          usage: usageOf(result),
          timings: timingsOf(result),
          ...cap.field,
        },
        cap.headers,
      );
    });
  }

  /** Engine stats, or undefined while loading (for embedding applications and tests). */
  engineStats(): EngineStats | undefined {
    return this.engine?.stats();
  }
}

/**
 * Tokens of the conversation's leading system turn(s) (tools included) when the prompt starts with
 * exactly them, else 0: the prefix cache also snapshots there, so other conversations with the same
 * system prompt skip recomputing it.
 */
/** Resolves once an ended response is flushed (or its connection closed); at once for one never ended. */
function flushed(res: http.ServerResponse): Promise<void> {
  if (res.writableFinished || res.destroyed || !res.writableEnded) return Promise.resolve();
  return new Promise((resolve) => {
    res.once("finish", resolve);
    res.once("close", resolve);
  });
}

async function sharedHeadLength(
  tokenizer: Tokenizer,
  messages: readonly RequestMessage[],
  tools: readonly unknown[] | undefined,
  variables: Record<string, unknown>,
  ids: readonly number[],
  signal: AbortSignal,
): Promise<number> {
  let count = 0;
  while (count < messages.length && messages[count]!.role === "system") count++;
  if (count === 0 || count === messages.length) return 0;
  const system = textMessages(messages.slice(0, count));
  if (!system) return 0;
  try {
    const head = (
      await encodeChatAsync(tokenizer, system, { addGenerationPrompt: false, variables, ...(tools ? { tools } : {}) }, { signal })
    ).ids;
    if (head.length === 0 || head.length >= ids.length) return 0;
    for (let i = 0; i < head.length; i++) if (head[i] !== ids[i]) return 0;
    return head.length;
  } catch (error) {
    if (signal.aborted) throw error;
    return 0;
  }
}

export function createKeepquantServer(options: KeepquantServerOptions): KeepquantServer {
  return new KeepquantServer(options);
}
