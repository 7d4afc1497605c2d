/**
 * Prometheus metrics (prom-client), one registry per server. Engine state (requests, KV blocks,
 * GDN state slots, prefix cache, preemptions) is read from `Engine.stats()` at scrape time;
 * token counters and latency histograms are fed by the server as requests run. Names follow
 * vLLM's where one exists (`vllm:num_requests_running` -> `keepquant_requests_running`, ...).
 */
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from "prom-client";
import type { EngineStats } from "@keepquant/engine";
import type { Capacity } from "./capacity.js";

export const TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80];
export const ITL_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5];
export const E2E_BUCKETS = [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320];

/**
 * The engine-state metrics, read from `Engine.stats()` when scraped, in registration (exposition) order:
 * gauges of the current state and counters that mirror the engine's own totals.
 */
const ENGINE_METRICS: ReadonlyArray<readonly [typeof Gauge | typeof Counter, string, string, (s: EngineStats) => number]> = [
  [Gauge, "keepquant_requests_running", "Requests in the engine's running set (prefill or decode).", (s) => s.requests.running],
  [Gauge, "keepquant_requests_waiting", "Requests waiting for a state slot or KV blocks.", (s) => s.requests.waiting],
  [
    Gauge,
    "keepquant_kv_blocks_used",
    "KV cache blocks in use (sequences and prefix-cache entries).",
    (s) => s.kv.blocksTotal - s.kv.blocksFree,
  ],
  [Gauge, "keepquant_kv_blocks_total", "KV cache blocks in the pool.", (s) => s.kv.blocksTotal],
  [Gauge, "keepquant_kv_block_tokens", "Tokens per KV block.", (s) => s.kv.blockSize],
  [
    Gauge,
    "keepquant_gdn_state_slots_used",
    "Gated DeltaNet state slots in use (one per running sequence).",
    (s) => s.states.slotsTotal - s.states.slotsFree,
  ],
  [Gauge, "keepquant_gdn_state_slots_total", "Gated DeltaNet state slots (the most concurrent sequences).", (s) => s.states.slotsTotal],
  [
    Gauge,
    "keepquant_prefix_cache_entries",
    "Prefix-cache entries (each holds KV blocks and a GDN state snapshot).",
    (s) => s.prefixCache?.entries ?? 0,
  ],
  [Counter, "keepquant_prefix_cache_queries_total", "Prefix-cache lookups.", (s) => s.prefixCache?.lookups ?? 0],
  [Counter, "keepquant_prefix_cache_hits_total", "Prefix-cache lookups that hit.", (s) => s.prefixCache?.hits ?? 0],
  [
    Counter,
    "keepquant_prefix_cache_hit_tokens_total",
    "Prompt tokens served from the prefix cache (not recomputed).",
    (s) => s.prefixCache?.hitTokens ?? 0,
  ],
  [Counter, "keepquant_prefix_cache_evictions_total", "Prefix-cache entries evicted.", (s) => s.prefixCache?.evictions ?? 0],
  [Counter, "keepquant_preemptions_total", "Sequences preempted by recompute when KV blocks ran out.", (s) => s.counters.preemptions],
  [Counter, "keepquant_engine_steps_total", "Scheduler steps (batched forward passes).", (s) => s.counters.steps],
  [
    Counter,
    "keepquant_prefill_tokens_computed_total",
    "Prompt tokens run through the model (cache hits excluded, recomputes included).",
    (s) => s.counters.prefillTokens,
  ],
  // speculative decoding (vLLM's vllm:spec_decode_*), zero when it is off
  [Counter, "keepquant_spec_decode_draft_tokens_total", "Drafted tokens verified by the target.", (s) => s.speculative?.drafted ?? 0],
  [Counter, "keepquant_spec_decode_accepted_tokens_total", "Drafted tokens the target accepted.", (s) => s.speculative?.accepted ?? 0],
  [
    Counter,
    "keepquant_spec_decode_verifications_total",
    "Verifications (a sequence's drafts scored in one target step).",
    (s) => s.speculative?.verifications ?? 0,
  ],
  [
    Counter,
    "keepquant_spec_decode_rollbacks_total",
    "Verifications with a rejected draft (GDN state restored, accepted prefix recomputed next step).",
    (s) => s.speculative?.rollbacks ?? 0,
  ],
  [
    Gauge,
    "keepquant_spec_decode_acceptance_rate",
    "Accepted / drafted tokens since the engine started.",
    (s) => s.speculative?.acceptanceRate ?? 0,
  ],
  [
    Gauge,
    "keepquant_spec_decode_tokens_per_target_step",
    "Tokens produced per verification (accepted drafts + the target's own token).",
    (s) => s.speculative?.tokensPerTargetStep ?? 0,
  ],
];

/** How a generation request ended, as a label. */
export type FinishLabel = "stop" | "length" | "tool_calls" | "abort" | "error";

export class ServerMetrics {
  readonly registry = new Registry();
  readonly promptTokens: Counter;
  readonly generationTokens: Counter;
  readonly requests: Counter<"endpoint" | "finish_reason">;
  readonly httpResponses: Counter<"route" | "status">;
  readonly ttft: Histogram;
  readonly itl: Histogram;
  readonly e2e: Histogram;

  /** `capacity`: what serve sized from the planner and the memory budget (its gauges read 0 without one). */
  constructor(stats: () => EngineStats | undefined, capacity?: Capacity) {
    const registers = [this.registry];
    for (const [name, help, value] of [
      [
        "keepquant_capacity_max_sequences",
        "Sequences the engine runs at once, as sized at start (planner and memory budget, or --max-seqs).",
        capacity?.maxSequences,
      ],
      ["keepquant_capacity_kv_cache_tokens", "Tokens the KV cache holds, as sized at start (or --kv-tokens).", capacity?.kvCacheTokens],
      [
        "keepquant_capacity_memory_budget_bytes",
        "The memory budget the sizes were planned for (--memory-budget).",
        capacity?.memoryBudgetBytes,
      ],
      ["keepquant_capacity_planned_bytes", "What the residency planner counts for the chosen sizes.", capacity?.plannedBytes],
    ] as const) {
      new Gauge({ name, help, registers }).set(value ?? 0);
    }
    collectDefaultMetrics({ register: this.registry });
    // engine state, read when scraped
    for (const [kind, name, help, read] of ENGINE_METRICS) {
      if (kind === Gauge) {
        new Gauge({
          name,
          help,
          registers,
          collect() {
            const s = stats();
            this.set(s ? read(s) : 0);
          },
        });
      } else {
        new Counter({
          name,
          help,
          registers,
          collect() {
            const s = stats();
            this.reset();
            if (s) this.inc(read(s));
          },
        });
      }
    }
    for (const [name, help, read] of [
      ["keepquant_spec_decode_draft_tokens_per_pos_total", "Drafted tokens verified, by draft position.", "draftedByPosition"],
      ["keepquant_spec_decode_accepted_tokens_per_pos_total", "Drafted tokens accepted, by draft position.", "acceptedByPosition"],
    ] as const) {
      new Counter({
        name,
        help,
        labelNames: ["position"],
        registers,
        collect() {
          const s = stats();
          this.reset();
          s?.speculative?.[read].forEach((count, position) => this.inc({ position: String(position) }, count));
        },
      });
    }

    this.promptTokens = new Counter({
      name: "keepquant_prompt_tokens_total",
      help: "Prompt tokens of finished requests (cached ones included).",
      registers,
    });
    this.generationTokens = new Counter({
      name: "keepquant_generation_tokens_total",
      help: "Tokens generated, aborted requests included.",
      registers,
    });
    this.requests = new Counter({
      name: "keepquant_requests_total",
      help: "Generation requests that ended, by endpoint and finish reason (abort = client went away).",
      labelNames: ["endpoint", "finish_reason"],
      registers,
    });
    this.httpResponses = new Counter({
      name: "keepquant_http_responses_total",
      help: "HTTP responses by route and status code.",
      labelNames: ["route", "status"],
      registers,
    });
    this.ttft = new Histogram({
      name: "keepquant_time_to_first_token_seconds",
      help: "Time from request arrival to the first generated token.",
      buckets: TTFT_BUCKETS,
      registers,
    });
    this.itl = new Histogram({
      name: "keepquant_inter_token_latency_seconds",
      help: "Time between consecutive generated tokens of a request.",
      buckets: ITL_BUCKETS,
      registers,
    });
    this.e2e = new Histogram({
      name: "keepquant_e2e_request_latency_seconds",
      help: "Time from request arrival to its last token.",
      buckets: E2E_BUCKETS,
      registers,
    });
  }

  async text(): Promise<string> {
    return this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }
}
