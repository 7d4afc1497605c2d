/**
 * Speculative decoding (docs/usage/speculative.md): the options, the verification of drafts
 * against the target's logits (greedy agreement or the speculative-sampling rule), the rollback of a
 * sequence's GDN state, the MTP drafter's catch-up and chained draft steps, and the counters. One
 * decoder is the speculation plug-in of every generation (generation/plugins.ts); the engine owns the
 * pools and the forward, which it lends through `SpeculativeHost`.
 */
import { MAX_DRAFT_TOKENS, type SpeculativeStats } from "../engine-types.js";
import { EngineOptionError } from "../errors.js";
import { applyRule, type PositionRule } from "../constrain/index.js";
import type { GuidePlugin, SpeculationPlugin } from "./plugins.js";
import { allocateJsStorage, type AllocateStorage } from "../kv/paged-kv.js";
import { GdnStatePool } from "../kv/state-pool.js";
import { modelDescription } from "../model/config.js";
import type { DrafterEntry } from "../model/forward.js";
import type { ModelWeights } from "../model/weights.js";
import { drawFrom, logprobsOf, type Sampler, type SampledLogprobs, speculativeAccept, type TokenDistribution } from "../sampling/index.js";

/** Drafts per step when `speculative.draftTokens` is not given. */
const DEFAULT_DRAFT_TOKENS = 3;
/** The rule of an unconstrained drafter row. */
const FREE_RULE: PositionRule = { kind: "free" };

export interface ResolvedSpeculative {
  method: "mtp" | "function";
  draftTokens: number;
  /** `speculative.draftVocab`: the drafter head's rows (checked against the vocabulary when the weights are known) */
  draftVocab: number | undefined;
  /** "function": the drafts; "mtp" (tests, benchmarks): replaces the drafter's picks, its cost still paid */
  propose: ((tokens: readonly number[], count: number) => readonly number[]) | undefined;
}

export function resolveSpeculative(value: unknown): ResolvedSpeculative | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== "object" || value === null) {
    throw new EngineOptionError(
      "ENGINE_BAD_OPTION",
      `speculative must be an object such as { method: "mtp", draftTokens: 3 }, got ${String(value)}`,
      {
        field: "speculative",
      },
    );
  }
  const v = value as { method?: unknown; draftTokens?: unknown; propose?: unknown; draftVocab?: unknown };
  if (v.method !== "mtp" && v.method !== "function") {
    throw new EngineOptionError("ENGINE_BAD_OPTION", `speculative.method must be "mtp" ("function" for tests), got ${String(v.method)}`, {
      field: "speculative.method",
    });
  }
  const k = v.draftTokens ?? DEFAULT_DRAFT_TOKENS;
  if (typeof k !== "number" || !Number.isInteger(k) || k < 1 || k > MAX_DRAFT_TOKENS) {
    throw new EngineOptionError(
      "ENGINE_BAD_OPTION",
      `speculative.draftTokens must be an integer in [1, ${MAX_DRAFT_TOKENS}], got ${String(v.draftTokens)}`,
      { field: "speculative.draftTokens" },
    );
  }
  if (v.propose !== undefined && typeof v.propose !== "function") {
    throw new EngineOptionError("ENGINE_BAD_OPTION", `speculative.propose must be a function, got ${typeof v.propose}`, {
      field: "speculative.propose",
    });
  }
  if (v.method === "function" && typeof v.propose !== "function") {
    throw new EngineOptionError("ENGINE_BAD_OPTION", 'speculative method "function" needs a propose(tokens, count) function', {
      field: "speculative.propose",
    });
  }
  const draftVocab = v.draftVocab;
  if (draftVocab !== undefined) {
    if (v.method !== "mtp") {
      throw new EngineOptionError("ENGINE_BAD_OPTION", 'speculative.draftVocab applies to method "mtp" only', {
        field: "speculative.draftVocab",
      });
    }
    if (typeof draftVocab !== "number" || !Number.isInteger(draftVocab) || draftVocab < 1) {
      throw new EngineOptionError(
        "ENGINE_BAD_OPTION",
        `speculative.draftVocab must be a positive integer (token ids 0 .. draftVocab - 1), got ${String(draftVocab)}`,
        { field: "speculative.draftVocab" },
      );
    }
  }
  return {
    method: v.method,
    draftTokens: k,
    draftVocab: draftVocab as number | undefined,
    propose: v.propose as ResolvedSpeculative["propose"],
  };
}

/** What speculative decoding reads and writes of a running request. */
export interface SpeculativeSequence {
  /** prompt + generated tokens */
  readonly tokens: number[];
  readonly generated: readonly number[];
  readonly maxTokens: number;
  /** the longest sequence (prompt + generated) */
  readonly maxLength: number;
  numComputed: number;
  readonly stateSlot: number;
  readonly blockTable: readonly number[];
  readonly sampler: Sampler;
  readonly params: { readonly logprobs?: number | undefined };
  readonly finished: boolean;
  /** still running (not finished, aborted or failed) */
  readonly active: boolean;
  /** takes in a token the verification chose */
  accept(token: number, logprobs?: SampledLogprobs): void;
  /** gives back its blocks past its first `positions` positions */
  truncateBlocks(positions: number): void;
  /** drafts to verify in the next step, and the drafter distribution of each (sampling) */
  drafts: number[];
  draftDistributions: TokenDistribution[];
  /** KV positions the drafter's chain writes past the verified ones (reserved by the scheduler) */
  lookahead: number;
  /** the next position the MTP drafter computes with the target's hidden state */
  drafterFrontier: number;
  /**
   * Set by the scheduler when the sequence was (re)admitted: the drafter starts over at `position` (0,
   * or a prefix-cache hit whose `hidden` is the target's hidden state at position - 1; the drafter's
   * K/V for the cached positions is in the shared blocks). Taken at the next draft.
   */
  resumed: { position: number; hidden: Float32Array | undefined } | undefined;
  specDrafted: number;
  specAccepted: number;
  /** constrained decoding: drafts are checked against it, verification rows masked by it */
  readonly guide?: GuidePlugin | undefined;
}

/** What the Engine gives speculative decoding. */
export interface SpeculativeHost {
  readonly weights: ModelWeights;
  readonly maxBatchTokens: number;
  countDecodeTokens(count: number): void;
  /** one MTP drafter step (its hidden rows then in lastHiddenRows) */
  draftStep(entries: readonly DrafterEntry[], hiddenIn: Float32Array): Promise<Float32Array>;
  lastHiddenRows(): Float32Array;
}

type Counters = Omit<SpeculativeStats, "acceptanceRate" | "acceptanceRateByPosition" | "tokensPerTargetStep">;

function speculativeStats(counters: Counters): SpeculativeStats {
  return {
    ...counters,
    draftedByPosition: [...counters.draftedByPosition],
    acceptedByPosition: [...counters.acceptedByPosition],
    acceptanceRate: counters.drafted > 0 ? counters.accepted / counters.drafted : 0,
    acceptanceRateByPosition: counters.draftedByPosition.map((d, i) => (d > 0 ? counters.acceptedByPosition[i]! / d : 0)),
    tokensPerTargetStep: counters.verifications > 0 ? counters.verifiedTokens / counters.verifications : 0,
  };
}

/** What the drafter needs of one sequence after a target step. */
export interface DrafterWork {
  readonly request: SpeculativeSequence;
  /** the last position whose target state the step kept */
  readonly lastValid: number;
  /** the position of the first hidden row the step kept for this sequence */
  readonly keptFirst: number;
  readonly keptHidden: Float32Array | undefined;
}

export class SpeculativeDecoder implements SpeculationPlugin {
  /** the GDN state of each slot at the last known token of its verification step (the forward writes it) */
  readonly rollback: GdnStatePool;
  private readonly counters: Counters;

  constructor(
    readonly options: ResolvedSpeculative,
    private readonly host: SpeculativeHost,
    private readonly states: GdnStatePool,
    allocate: AllocateStorage = allocateJsStorage,
  ) {
    this.rollback = GdnStatePool.forModel(modelDescription(host.weights), states.numSlots, allocate);
    const k = options.draftTokens;
    this.counters = {
      method: options.method,
      draftTokens: k,
      ...(options.method === "mtp" && host.weights.drafter ? { draftVocab: host.weights.drafter.head.rows } : {}),
      drafted: 0,
      accepted: 0,
      draftedByPosition: new Array<number>(k).fill(0),
      acceptedByPosition: new Array<number>(k).fill(0),
      verifications: 0,
      verifiedTokens: 0,
      rollbacks: 0,
      drafterSteps: 0,
      drafterMs: 0,
    };
  }

  /** Bytes of the rollback copies (one GDN state slot per sequence). */
  get bytes(): number {
    return this.rollback.bytes;
  }

  stats(): SpeculativeStats {
    return speculativeStats(this.counters);
  }

  /** KV positions a request's drafter chain may write past its verified tokens. */
  get lookahead(): number {
    return this.options.draftTokens + 1;
  }

  /** After a target step: the next drafts of every sequence that can draft. */
  async draft(work: readonly DrafterWork[]): Promise<void> {
    if (this.options.method === "mtp") await this.draftWithMtp(work);
    else await this.draftWithFunction(work);
  }

  /** One MTP drafter step, timed. */
  private async runDraft(entries: readonly DrafterEntry[], hiddenIn: Float32Array): Promise<Float32Array> {
    const t0 = performance.now();
    try {
      return await this.host.draftStep(entries, hiddenIn);
    } finally {
      this.counters.drafterSteps++;
      this.counters.drafterMs += performance.now() - t0;
    }
  }

  /**
   * Verifies `draftCount` drafts after `known` known tokens from their logits rows (the last known
   * row first). Greedy: the longest prefix the target's own choice agrees with, then the target's
   * token; sampling: the speculative-sampling rule per draft. When a draft is rejected, the GDN
   * state goes back to the copy the step took after its last known token, and the accepted drafts
   * are recomputed at the head of the next step; otherwise the step's state is the state after the
   * drafts.
   * Returns the last position whose target state is kept.
   */
  verify(request: SpeculativeSequence, known: number, draftCount: number, rowsLogits: Float32Array): number {
    const spec = this.counters;
    const vocab = this.host.weights.output.rows;
    const drafts = request.drafts.slice(0, draftCount);
    const start = request.numComputed;
    const greedyRequest = request.sampler.params.temperature <= 0;
    const history = [...request.tokens];
    const tokens: number[] = [];
    const rowOf: number[] = [];
    let accepted = 0;
    for (let i = 0; i <= draftCount; i++) {
      // a constrained request: the row under the grammar's rule after drafts 0 .. i-1 (prepared before the step)
      const rawRow = rowsLogits.subarray(i * vocab, (i + 1) * vocab);
      const rowLogits = request.guide ? request.guide.apply(rawRow, i) : rawRow;
      if (i === draftCount) {
        tokens.push(request.sampler.sample(rowLogits, history));
        rowOf.push(i);
        break;
      }
      const draft = drafts[i]!;
      let token: number;
      let kept: boolean;
      if (greedyRequest) {
        token = request.sampler.sample(rowLogits, history);
        kept = token === draft;
      } else {
        const q = request.draftDistributions[i] ?? { ids: Int32Array.of(draft), probabilities: Float32Array.of(1) };
        const verdict = speculativeAccept(
          request.sampler.distribution(rowLogits, history),
          q,
          draft,
          request.sampler.uniform(),
          request.sampler.uniform(),
        );
        token = verdict.token;
        kept = verdict.accepted;
      }
      tokens.push(token);
      rowOf.push(i);
      if (!kept) break;
      spec.acceptedByPosition[i]!++;
      accepted++;
      history.push(draft);
    }
    for (let i = 0; i < draftCount; i++) spec.draftedByPosition[i]!++;
    spec.drafted += draftCount;
    spec.accepted += accepted;
    spec.verifications++;
    spec.verifiedTokens += accepted + 1;
    request.specDrafted += draftCount;
    request.specAccepted += accepted;
    this.host.countDecodeTokens(known + draftCount);
    if (accepted === draftCount) {
      request.numComputed = start + known + draftCount;
    } else {
      // the recurrent state cannot be un-applied: back to the state after the last known token (the
      // step's snapshot row); the accepted drafts are recomputed (bit for bit the same) next step
      this.restore(request.stateSlot);
      request.numComputed = start + known;
      spec.rollbacks++;
    }
    request.drafts = [];
    request.draftDistributions = [];
    const n = request.params.logprobs;
    for (let i = 0; i < tokens.length && request.active && !request.finished; i++) {
      const rowLogits = rowsLogits.subarray(rowOf[i]! * vocab, (rowOf[i]! + 1) * vocab);
      request.accept(tokens[i]!, n === undefined ? undefined : logprobsOf(rowLogits, tokens[i]!, n));
    }
    // KV rollback: blocks past the known tokens and the drafter's next chain go back to the pool
    if (request.active) request.truncateBlocks(request.tokens.length + request.lookahead);
    return start + known - 1 + accepted;
  }

  /** How many drafts `request` can use: the configured count, within its token and context limits. */
  private draftBudget(request: SpeculativeSequence): number {
    const remaining = request.maxTokens - request.generated.length;
    return Math.max(0, Math.min(this.options.draftTokens, remaining - 1, request.maxLength - request.tokens.length - 1));
  }

  /**
   * Test/benchmark drafter: the caller's proposals (a constrained request's, up to the first its
   * grammar refuses: one round trip to the grammar worker per request, all of them at once).
   */
  private async draftWithFunction(work: readonly DrafterWork[]): Promise<void> {
    const propose = this.options.propose!;
    const checks: Promise<void>[] = [];
    for (const { request, lastValid } of work) {
      const count = this.draftBudget(request);
      if (count === 0 || lastValid + 1 !== request.tokens.length - 1) continue;
      const drafts = this.validProposals(propose(request.tokens, count).slice(0, count));
      const guide = request.guide;
      if (!guide) {
        request.drafts = drafts;
        continue;
      }
      // checking them would wait behind a compile on its grammar worker: no drafts this time
      if (guide.blockedBy()) {
        request.drafts = [];
        continue;
      }
      // a grammar engine that failed fails the request at its next step's rules; no drafts meanwhile
      checks.push(
        guide.validDrafts(drafts).then(
          (valid) => {
            request.drafts = valid;
          },
          () => {
            request.drafts = [];
          },
        ),
      );
    }
    await Promise.all(checks);
  }

  /** The proposals up to the first that is not a token id. */
  private validProposals(proposed: readonly number[]): number[] {
    const vocab = this.host.weights.vocab;
    const invalid = proposed.findIndex((t) => !Number.isInteger(t) || t < 0 || t >= vocab);
    return invalid < 0 ? [...proposed] : proposed.slice(0, invalid);
  }

  /**
   * The MTP drafter after a target step: for each sequence, the drafter rows from its frontier up to
   * the first token the target has not computed (row p pairs token p with the target's hidden state
   * at p - 1; zeros at 0), in one batched drafter step; the last row's logits give the first draft.
   * Further drafts chain on the drafter's own hidden state, one batched step each.
   */
  private async draftWithMtp(work: readonly DrafterWork[]): Promise<void> {
    const D = this.host.weights.config.embeddingLength;
    const vocab = this.drafterVocab;
    const rows: {
      request: SpeculativeSequence;
      entry: DrafterEntry;
      hidden: Float32Array;
      budget: number;
      override: number[] | undefined;
    }[] = [];
    for (const { request, lastValid, keptFirst, keptHidden } of work) {
      const resumed = request.resumed;
      if (resumed) {
        request.drafterFrontier = resumed.position;
        request.resumed = undefined;
      }
      const last = Math.min(lastValid + 1, request.tokens.length - 1);
      const first = request.drafterFrontier;
      if (first > last) continue;
      const count = last - first + 1;
      const hidden = new Float32Array(count * D);
      for (let p = first; p <= last; p++) {
        if (p === 0) continue; // h_{-1} = 0
        const at = p - 1 - keptFirst;
        if (at < 0 && p === first && resumed?.hidden) {
          // resuming after a prefix-cache hit: the entry kept the target's hidden state at first - 1
          hidden.set(resumed.hidden, 0);
          continue;
        }
        if (!keptHidden || at < 0 || (at + 1) * D > keptHidden.length) {
          throw new Error(`internal: the drafter needs the target's hidden state at position ${p - 1}, which the step did not keep`);
        }
        hidden.set(keptHidden.subarray(at * D, (at + 1) * D), (p - first) * D);
      }
      request.drafterFrontier = last + 1;
      let budget = last === request.tokens.length - 1 ? this.draftBudget(request) : 0;
      // a constrained chain's masks would wait behind a compile on its grammar worker: no drafts this time
      if (request.guide?.blockedBy()) budget = 0;
      let override: number[] | undefined;
      if (budget > 0 && this.options.propose) {
        override = this.validProposals(this.options.propose(request.tokens, budget).slice(0, budget));
        budget = override.length;
      }
      const entry: DrafterEntry = {
        tokens: request.tokens.slice(first, last + 1),
        startPos: first,
        blockTable: request.blockTable,
        logitRows: budget > 0 ? [count - 1] : [],
      };
      rows.push({ request, entry, hidden, budget, override });
    }
    // catch-up rows and the first drafts, in steps of at most maxBatchTokens rows
    const first = await this.draftInSteps(rows.map((r) => ({ entry: r.entry, hidden: r.hidden })));
    let chain = rows
      .map((r, i) => ({ ...r, logits: first.logits[i], own: first.hidden[i] }))
      .filter((r): r is typeof r & { logits: Float32Array; own: Float32Array } => r.budget > 0 && r.logits !== undefined);
    for (const c of chain) {
      c.request.drafts = [];
      c.request.draftDistributions = [];
    }
    // constrained requests: the drafter's logits are masked too, the guide advancing through the drafts (rolled back below)
    const saved = chain.flatMap((c) => (c.request.guide ? [{ guide: c.request.guide, state: c.request.guide.checkpoint() }] : []));
    while (chain.length > 0) {
      // every chain's rule at once (their requests to the grammar worker overlap); no await without a constraint
      const rules: (PositionRule | undefined)[] = chain.some((c) => c.request.guide)
        ? await Promise.all(chain.map((c) => (c.request.guide ? c.request.guide.currentRule().catch(() => undefined) : FREE_RULE)))
        : chain.map(() => FREE_RULE);
      for (const [i, c] of chain.entries()) {
        const guide = c.request.guide;
        const rule = rules[i];
        if (!rule) {
          // the grammar engine failed (the request fails at its next step's rules): no more drafts
          c.budget = c.request.drafts.length;
          c.request.draftDistributions.length = Math.min(c.request.draftDistributions.length, c.budget);
          continue;
        }
        const logits = applyRule(rule, c.logits, new Set());
        const picked = this.pickDraft(c.request, logits);
        const draft = c.override ? c.override[c.request.drafts.length]! : picked;
        if (guide && !guide.advance(draft)) {
          // an override the grammar refuses ends this chain (its q, if drawn, goes too)
          c.budget = c.request.drafts.length;
          c.request.draftDistributions.length = Math.min(c.request.draftDistributions.length, c.budget);
          continue;
        }
        c.request.drafts.push(draft);
      }
      chain = chain.filter((c) => c.request.drafts.length < c.budget);
      if (chain.length === 0) break;
      const hiddenIn = new Float32Array(chain.length * D);
      chain.forEach((c, i) => hiddenIn.set(c.own, i * D));
      const entries = chain.map((c) => {
        const position = c.request.tokens.length - 1 + c.request.drafts.length;
        return { tokens: [c.request.drafts.at(-1)!], startPos: position, blockTable: c.request.blockTable, logitRows: [0] };
      });
      const logits = await this.runDraft(entries, hiddenIn);
      const own = this.host.lastHiddenRows();
      chain = chain.map((c, i) => ({
        ...c,
        logits: logits.slice(i * vocab, (i + 1) * vocab),
        own: own.slice(i * D, (i + 1) * D),
      }));
    }
    for (const { guide, state } of saved) guide.restore(state);
  }

  /** Drafter entries (row hidden inputs alongside), split into steps of at most maxBatchTokens rows; per entry its logits and hidden row (when it has a logit row). */
  private async draftInSteps(
    items: readonly { entry: DrafterEntry; hidden: Float32Array }[],
  ): Promise<{ logits: (Float32Array | undefined)[]; hidden: (Float32Array | undefined)[] }> {
    const D = this.host.weights.config.embeddingLength;
    const vocab = this.drafterVocab;
    const limit = this.host.maxBatchTokens;
    const outLogits: (Float32Array | undefined)[] = items.map(() => undefined);
    const outHidden: (Float32Array | undefined)[] = items.map(() => undefined);
    // pieces of at most `limit` rows; the logit row stays with the last piece of its entry
    const pieces: { item: number; entry: DrafterEntry; hidden: Float32Array }[] = [];
    items.forEach(({ entry, hidden }, item) => {
      const n = entry.tokens.length;
      for (let from = 0; from < n; from += limit) {
        const to = Math.min(n, from + limit);
        pieces.push({
          item,
          entry: {
            tokens: Array.from(entry.tokens).slice(from, to),
            startPos: entry.startPos + from,
            blockTable: entry.blockTable,
            logitRows: entry.logitRows.filter((r) => r >= from && r < to).map((r) => r - from),
          },
          hidden: hidden.subarray(from * D, to * D),
        });
      }
    });
    for (let at = 0; at < pieces.length; ) {
      const group: typeof pieces = [];
      let rowsInGroup = 0;
      while (at < pieces.length && rowsInGroup + pieces[at]!.entry.tokens.length <= limit) {
        rowsInGroup += pieces[at]!.entry.tokens.length;
        group.push(pieces[at++]!);
      }
      const hiddenIn = new Float32Array(rowsInGroup * D);
      let offset = 0;
      for (const piece of group) {
        hiddenIn.set(piece.hidden, offset);
        offset += piece.hidden.length;
      }
      const logits = await this.runDraft(
        group.map((g) => g.entry),
        hiddenIn,
      );
      const own = this.host.lastHiddenRows();
      let k = 0;
      for (const piece of group) {
        if (piece.entry.logitRows.length === 0) continue;
        outLogits[piece.item] = logits.slice(k * vocab, (k + 1) * vocab);
        outHidden[piece.item] = own.slice(k * D, (k + 1) * D);
        k++;
      }
    }
    return { logits: outLogits, hidden: outHidden };
  }

  /** Logits per row of a drafter step: the drafter head's rows (the vocabulary, or the prefix `draftVocab` keeps). */
  private get drafterVocab(): number {
    return this.host.weights.drafter?.head.rows ?? this.host.weights.vocab;
  }

  /**
   * A draft from the drafter's logits: top-1 for greedy requests, else a draw from the request's
   * sampling distribution (kept as q). A reduced drafter head's logits cover the first ids only:
   * for sampling the others get -Infinity (probability 0 under q), so penalties and filters see
   * the whole vocabulary.
   */
  private pickDraft(request: SpeculativeSequence, logits: Float32Array): number {
    if (request.sampler.params.temperature <= 0) return request.sampler.argmax(logits);
    const vocab = this.host.weights.vocab;
    if (logits.length < vocab) {
      const full = new Float32Array(vocab).fill(Number.NEGATIVE_INFINITY);
      full.set(logits);
      logits = full;
    }
    const q = request.sampler.distribution(logits, [...request.tokens, ...request.drafts]);
    request.draftDistributions.push(q);
    return drawFrom(q, request.sampler.uniform());
  }

  /** Puts back the GDN state of `slot` that the verification step copied at its last known token. */
  private restore(slot: number): void {
    const from = this.rollback;
    const to = this.states;
    for (let l = 0; l < to.numLayers; l++) {
      to.conv[l]!.set(from.conv[l]!.subarray(slot * to.convStride, (slot + 1) * to.convStride), slot * to.convStride);
      to.ssm[l]!.set(from.ssm[l]!.subarray(slot * to.ssmStride, (slot + 1) * to.ssmStride), slot * to.ssmStride);
    }
  }
}
