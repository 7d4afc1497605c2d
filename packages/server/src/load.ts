/**
 * A load generator for the server (used by the load test and `pnpm bench`): N concurrent
 * streaming chat requests with random prompt and answer lengths, some sharing long prefixes, a
 * share of them disconnecting midway. Loopback only, bounded in count; every request records
 * what it received. Not exported from the package.
 */
import { createRng } from "@keepquant/engine";

export interface LoadOptions {
  /** http://127.0.0.1:PORT */
  url: string;
  requests: number;
  /** share of requests that disconnect after a few tokens */
  disconnectShare: number;
  /** share of requests whose prompt starts with one of two long shared prefixes */
  sharedPrefixShare: number;
  seed: number;
  maxTokens: [number, number];
  promptWords: [number, number];
  apiKey?: string;
}

export interface LoadRecord {
  messages: { role: "user" | "system"; content: string }[];
  maxTokens: number;
  /** tokens to receive before disconnecting, or -1 */
  disconnectAfter: number;
  disconnected: boolean;
  /** chunks with a finish_reason, `[DONE]` lines */
  finishes: number;
  done: number;
  finishReason: string | null;
  /** tokens received (one logprobs entry per token) */
  tokens: number;
  text: string;
  usage: { prompt_tokens: number; completion_tokens: number; prompt_tokens_details?: { cached_tokens: number } } | undefined;
  status: number;
  /** ms from sending to the first token / to the end */
  ttftMs: number;
  totalMs: number;
}

const WORDS = [
  "alpha",
  "bravo",
  "charlie",
  "delta",
  "echo",
  "fox",
  "golf",
  "hotel",
  "india",
  "juliet",
  "kilo",
  "lima",
  "model",
  "token",
  "cache",
];

/** `count` words drawn from a fixed list. */
export function words(random: () => number, count: number): string {
  return Array.from({ length: count }, () => WORDS[Math.floor(random() * WORDS.length)]).join(" ");
}

/** An integer in [low, high]. */
export function between(random: () => number, [low, high]: [number, number]): number {
  return low + Math.floor(random() * (high - low + 1));
}

async function one(url: string, record: LoadRecord, apiKey: string | undefined): Promise<void> {
  const controller = new AbortController();
  const started = performance.now();
  const response = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    signal: controller.signal,
    headers: { "Content-Type": "application/json", ...(apiKey ? { Authorization: `Bearer ${apiKey}` } : {}) },
    body: JSON.stringify({
      model: "load",
      messages: record.messages,
      max_tokens: record.maxTokens,
      temperature: 0,
      stream: true,
      stream_options: { include_usage: true },
      logprobs: true,
      // every answer runs to max_tokens: the disconnect point is always reached
      ignore_eos: true,
    }),
  });
  record.status = response.status;
  if (!response.ok || !response.body) {
    await response.text();
    return;
  }
  try {
    await readDataEvents(response.body, (data) => {
      if (data === "[DONE]") {
        record.done++;
        return;
      }
      const chunk = JSON.parse(data) as {
        choices: {
          delta: { content?: string; reasoning_content?: string };
          logprobs: { content: unknown[] } | null;
          finish_reason: string | null;
        }[];
        usage?: LoadRecord["usage"] | null;
      };
      if (chunk.usage) record.usage = chunk.usage;
      for (const choice of chunk.choices) {
        const received = choice.logprobs?.content.length ?? 0;
        if (received > 0 && record.tokens === 0) record.ttftMs = performance.now() - started;
        record.tokens += received;
        record.text += (choice.delta.reasoning_content ?? "") + (choice.delta.content ?? "");
        if (choice.finish_reason) {
          record.finishes++;
          record.finishReason = choice.finish_reason;
        }
      }
      if (record.disconnectAfter >= 0 && record.tokens >= record.disconnectAfter && !record.disconnected) {
        record.disconnected = true;
        controller.abort();
        return "stop";
      }
    });
  } catch (error) {
    if (!record.disconnected) throw error;
  } finally {
    record.totalMs = performance.now() - started;
  }
}

/**
 * Reads a server-sent event stream and hands each event's `data:` payload (one line) to `onData` as it arrives,
 * until the stream ends or `onData` returns "stop" (the caller then aborts the request).
 */
export async function readDataEvents(body: ReadableStream<Uint8Array>, onData: (data: string) => "stop" | undefined): Promise<void> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    for (let cut = buffer.indexOf("\n\n"); cut >= 0; cut = buffer.indexOf("\n\n")) {
      const event = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      // an event's data line (named events, as Anthropic's and the Responses API's, have an `event:` line first)
      const data = event.split("\n").find((line) => line.startsWith("data: "));
      if (data !== undefined && onData(data.slice(6)) === "stop") return;
    }
  }
}

/** The sum of a Prometheus exposition's samples of `name` whose labels contain every one of `labels` (e.g. `finish_reason="abort"`). */
export function metricValue(exposition: string, name: string, labels: readonly string[] = []): number {
  let sum = 0;
  for (const line of exposition.split("\n")) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue;
    if (labels.every((label) => line.includes(label))) sum += Number(line.split(" ").pop());
  }
  return sum;
}

/** Builds the requests (deterministic for a seed) and runs them all at once. */
export async function runLoad(options: LoadOptions): Promise<{ records: LoadRecord[]; wallMs: number }> {
  const rng = createRng(options.seed);
  const random = (): number => rng.next();
  const prefixes = [`You are agent A. ${words(random, 60)}`, `You are agent B. ${words(random, 80)}`];
  const records: LoadRecord[] = [];
  for (let i = 0; i < options.requests; i++) {
    const shared = random() < options.sharedPrefixShare;
    const maxTokens = between(random, options.maxTokens);
    const disconnect = i % Math.round(1 / options.disconnectShare) === 1;
    records.push({
      messages: [
        ...(shared ? [{ role: "system" as const, content: prefixes[i % 2]! }] : []),
        { role: "user", content: `Request ${i}: ${words(random, between(random, options.promptWords))}` },
      ],
      maxTokens,
      disconnectAfter: disconnect ? Math.max(1, Math.floor(maxTokens / 2)) : -1,
      disconnected: false,
      finishes: 0,
      done: 0,
      finishReason: null,
      tokens: 0,
      text: "",
      usage: undefined,
      status: 0,
      ttftMs: Number.NaN,
      totalMs: Number.NaN,
    });
  }
  const started = performance.now();
  await Promise.all(records.map((record) => one(options.url, record, options.apiKey)));
  return { records, wallMs: performance.now() - started };
}

/** The q-quantile (0..1) of `values` (nearest rank). */
export function quantile(values: readonly number[], q: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!;
}
