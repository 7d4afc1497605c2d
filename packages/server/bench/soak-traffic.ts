/**
 * The traffic of bench/soak.ts: concurrent clients that each send one request after another until a
 * deadline, a mix of chat and completions, streamed and not, a share aborted mid-stream, and chat
 * requests with response_format (json_object, or one of SCHEMA_VARIANTS json_schemas: more than the
 * engine's compiled-grammar cache holds, so it evicts) or tools (tool_choice auto or required). Half of
 * the prompts start with one of two shared system prompts (the prefix cache). Loopback only: the URL
 * must be http://127.0.0.1:PORT.
 */
import { createRng } from "@keepquant/engine";
import { between, readDataEvents, words } from "../src/load.js";

/** Distinct json_schema response formats drawn from (above COMPILED_GRAMMAR_CACHE_ENTRIES, 32). */
export const SCHEMA_VARIANTS = 48;
/** A request still running after this long is cut and counted as an error (a hung server ends the soak). */
const REQUEST_TIMEOUT_MS = 120_000;

export interface TrafficOptions {
  /** http://127.0.0.1:PORT */
  url: string;
  clients: number;
  /** no request starts after this (performance.now() time); those in flight finish */
  deadline: number;
  /** share of requests aborted by the client halfway through their stream */
  abortShare: number;
  seed: number;
}

/** What one round of traffic did, as the clients saw it. */
export interface TrafficTally {
  sent: number;
  /** 2xx answers read to their end */
  completed: number;
  /** streams the client cut halfway */
  aborted: number;
  /** non-2xx answers, network errors and timeouts, by status ("network" for no answer) */
  errors: Record<string, number>;
  chat: number;
  completions: number;
  streamed: number;
  structured: number;
  tools: number;
}

type Extra = "none" | "json_object" | "json_schema" | "tools_auto" | "tools_required";

interface PlannedRequest {
  route: "/v1/chat/completions" | "/v1/completions";
  body: Record<string, unknown>;
  stream: boolean;
  /** data events to read before aborting, or -1 */
  abortAfter: number;
  extra: Extra;
}

const WEATHER_TOOL = {
  type: "function",
  function: {
    name: "get_weather",
    description: "The weather in a city",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  },
} as const;

function schemaVariant(index: number): Record<string, unknown> {
  return {
    type: "object",
    properties: { [`field_${index}`]: { type: "string" }, count: { type: "integer" } },
    required: [`field_${index}`],
    additionalProperties: false,
  };
}

function plan(random: () => number, abortShare: number, prefixes: readonly string[], index: number): PlannedRequest {
  const chat = random() < 0.7;
  const abort = random() < abortShare;
  const stream = abort || random() < 0.5;
  const maxTokens = between(random, [4, 48]);
  const system = random() < 0.5 ? prefixes[index % prefixes.length] : undefined;
  const user = `Request ${index}: ${words(random, between(random, [2, 40]))}`;
  const draw = random();
  const extra: Extra = !chat
    ? "none"
    : draw < 0.1
      ? "json_object"
      : draw < 0.15
        ? "json_schema"
        : draw < 0.25
          ? "tools_auto"
          : draw < 0.3
            ? "tools_required"
            : "none";
  const common = {
    model: "soak",
    max_tokens: maxTokens,
    temperature: random() < 0.5 ? 0 : 0.8,
    stream,
    ...(stream ? { stream_options: { include_usage: true } } : {}),
    // a constrained answer ends where its grammar does; the others run to max_tokens, so an abort point is reached
    ...(extra === "none" ? { ignore_eos: true } : {}),
  };
  const abortAfter = abort ? Math.max(1, Math.floor(maxTokens / 2)) : -1;
  if (!chat) {
    return { route: "/v1/completions", body: { ...common, prompt: system ? `${system}\n${user}` : user }, stream, abortAfter, extra };
  }
  const formats: Partial<Record<Extra, Record<string, unknown>>> = {
    json_object: { response_format: { type: "json_object" } },
    json_schema: {
      response_format: {
        type: "json_schema",
        json_schema: { name: "answer", schema: schemaVariant(Math.floor(random() * SCHEMA_VARIANTS)), strict: true },
      },
    },
    tools_auto: { tools: [WEATHER_TOOL], tool_choice: "auto" },
    tools_required: { tools: [WEATHER_TOOL], tool_choice: "required" },
  };
  return {
    route: "/v1/chat/completions",
    body: {
      ...common,
      messages: [...(system ? [{ role: "system", content: system }] : []), { role: "user", content: user }],
      ...formats[extra],
    },
    stream,
    abortAfter,
    extra,
  };
}

function count(tally: TrafficTally, request: PlannedRequest): void {
  tally.sent++;
  if (request.route === "/v1/chat/completions") tally.chat++;
  else tally.completions++;
  if (request.stream) tally.streamed++;
  if (request.extra === "json_object" || request.extra === "json_schema") tally.structured++;
  if (request.extra === "tools_auto" || request.extra === "tools_required") tally.tools++;
}

function fail(tally: TrafficTally, what: string): void {
  tally.errors[what] = (tally.errors[what] ?? 0) + 1;
}

async function send(url: string, request: PlannedRequest, tally: TrafficTally): Promise<void> {
  const controller = new AbortController();
  let cut = false;
  try {
    const response = await fetch(`${url}${request.route}`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(request.body),
      signal: AbortSignal.any([controller.signal, AbortSignal.timeout(REQUEST_TIMEOUT_MS)]),
    });
    if (!response.ok || !response.body) {
      await response.text();
      fail(tally, String(response.status));
      return;
    }
    if (!request.stream) {
      await response.json();
      tally.completed++;
      return;
    }
    let events = 0;
    await readDataEvents(response.body, (data) => {
      if (data === "[DONE]") return;
      events++;
      if (request.abortAfter >= 0 && events >= request.abortAfter) {
        cut = true;
        controller.abort();
        return "stop";
      }
    });
    if (cut) tally.aborted++;
    else tally.completed++;
  } catch (error) {
    if (cut) tally.aborted++;
    else fail(tally, (error as Error).name === "TimeoutError" ? "timeout" : "network");
  }
}

/** Runs `clients` clients until the deadline and returns what they saw. */
export async function runTraffic(options: TrafficOptions): Promise<TrafficTally> {
  if (!/^http:\/\/127\.0\.0\.1:\d+$/.test(options.url)) throw new Error(`the soak talks to 127.0.0.1 only, not ${options.url}`);
  const tally: TrafficTally = {
    sent: 0,
    completed: 0,
    aborted: 0,
    errors: {},
    chat: 0,
    completions: 0,
    streamed: 0,
    structured: 0,
    tools: 0,
  };
  const shared = createRng(options.seed);
  const prefixes = [`You are agent A. ${words(() => shared.next(), 60)}`, `You are agent B. ${words(() => shared.next(), 80)}`];
  let index = 0;
  // each client draws from its own generator: its sequence of requests depends on the seed, not on timing
  const client = async (_: unknown, which: number): Promise<void> => {
    const rng = createRng(options.seed * 1009 + which + 1);
    const random = (): number => rng.next();
    while (performance.now() < options.deadline) {
      const request = plan(random, options.abortShare, prefixes, index++);
      count(tally, request);
      await send(options.url, request, tally);
    }
  };
  await Promise.all(Array.from({ length: options.clients }, client));
  return tally;
}
