import { setTimeout as delay } from "node:timers/promises";
import type { HubConfig } from "./config.js";
import { HubError } from "./errors.js";

/** How failed requests are retried: 429 and 5xx and dropped connections, with exponential backoff. */
export interface RetryPolicy {
  /** Attempts in all, the first included (default 5). */
  attempts: number;
  /** The first backoff in ms, doubled each retry (default 1000); a Retry-After header wins when it says longer. */
  baseDelayMs: number;
  /** The longest single backoff in ms (default 30 000). */
  maxDelayMs: number;
}

export const DEFAULT_RETRY: RetryPolicy = Object.freeze({ attempts: 5, baseDelayMs: 1000, maxDelayMs: 30_000 });

/** What a client does besides the configuration: its retries and the fetch it calls (tests pass their own). */
export interface HubClientOptions {
  retry?: Partial<RetryPolicy>;
  /** Called before each retry with the reason (for a status line); never given the token. */
  onRetry?: (event: { url: string; attempt: number; delayMs: number; reason: string }) => void;
}

/** Statuses worth another try. */
const RETRIED = (status: number): boolean => status === 429 || status === 408 || (status >= 500 && status <= 599);

/** The URL without its query (what an error shows). */
const shown = (url: string): string => url.split("?")[0]!;

/**
 * HTTP to the Hub: the token as a Bearer header (sent to the Hub's own host only: fetch drops it on a redirect to
 * another origin), retries on 429/5xx/connection errors with backoff, and 401/403/404 as typed errors that name
 * the repository and what to do.
 */
export class HubClient {
  readonly retry: RetryPolicy;
  constructor(
    readonly config: HubConfig,
    private readonly options: HubClientOptions = {},
  ) {
    this.retry = { ...DEFAULT_RETRY, ...options.retry };
  }

  /** Headers for a request to the Hub. */
  headers(extra: Record<string, string> = {}): Record<string, string> {
    return { "user-agent": "keepquant", ...(this.config.token ? { authorization: `Bearer ${this.config.token}` } : {}), ...extra };
  }

  /**
   * `fetch` with retries. `repo` names the repository in errors. A 2xx (or, with `init.redirect = "manual"`, a
   * 3xx) is returned; 401/403/404 throw at once; 429/5xx and network errors are retried, then HUB_HTTP.
   */
  async fetch(url: string, init: RequestInit & { repo: string; signal?: AbortSignal | undefined }): Promise<Response> {
    const { repo, ...request } = init;
    let lastReason = "";
    for (let attempt = 1; attempt <= this.retry.attempts; attempt++) {
      if (request.signal?.aborted) throw aborted(repo, request.signal);
      let response: Response | undefined;
      let retryAfterMs: number | undefined;
      try {
        response = await fetch(url, { ...request, headers: { ...this.headers(), ...(request.headers as Record<string, string>) } });
      } catch (error) {
        if (request.signal?.aborted) throw aborted(repo, request.signal);
        lastReason = `connection failed (${(error as Error & { cause?: { code?: string } }).cause?.code ?? (error as Error).message})`;
      }
      if (response) {
        if (response.ok || (response.status >= 300 && response.status < 400)) return response;
        await response.body?.cancel().catch(() => undefined);
        if (!RETRIED(response.status)) throw statusError(response.status, repo, url, this.config);
        lastReason = `HTTP ${response.status}`;
        const retryAfter = Number(response.headers.get("retry-after"));
        if (Number.isFinite(retryAfter) && retryAfter > 0) retryAfterMs = retryAfter * 1000;
      }
      if (attempt === this.retry.attempts) break;
      const backoff = Math.min(this.retry.maxDelayMs, this.retry.baseDelayMs * 2 ** (attempt - 1));
      const delayMs = Math.min(this.retry.maxDelayMs, Math.max(backoff, retryAfterMs ?? 0));
      this.options.onRetry?.({ url: shown(url), attempt, delayMs, reason: lastReason });
      try {
        await delay(delayMs, undefined, request.signal ? { signal: request.signal } : {});
      } catch {
        throw aborted(repo, request.signal!);
      }
    }
    throw new HubError("HUB_HTTP", `${shown(url)}: ${lastReason} after ${this.retry.attempts} attempts`, { field: repo });
  }
}

export function aborted(field: string, signal: AbortSignal): HubError {
  return new HubError("HUB_ABORTED", `download of ${field} aborted`, { field, cause: signal.reason });
}

/** The typed error for a status that retrying will not change, saying what to do. */
export function statusError(status: number, repo: string, url: string, config: HubConfig): HubError {
  const tokenState = config.token ? "the token in use" : "no token (set HF_TOKEN or run huggingface-cli login)";
  if (status === 401) {
    return new HubError(
      "HUB_UNAUTHORIZED",
      `${repo}: the Hub refused access (401) with ${tokenState}: the repository is private, gated or does not exist; check the name, and for a gated or private one set HF_TOKEN to a token that can read it`,
      { field: repo, status },
    );
  }
  if (status === 403) {
    return new HubError(
      "HUB_FORBIDDEN",
      `${repo}: the Hub forbids access (403) with ${tokenState}: the repository is gated; accept its terms on ${config.endpoint}/${repo} with the account of HF_TOKEN, or use a token with read access`,
      { field: repo, status },
    );
  }
  if (status === 404) {
    return new HubError(
      "HUB_NOT_FOUND",
      `${repo}: not found on ${config.endpoint} (404): ${shown(url)}; check the repository, file and revision names`,
      {
        field: repo,
        status,
      },
    );
  }
  return new HubError("HUB_HTTP", `${shown(url)}: HTTP ${status}`, { field: repo, status });
}
