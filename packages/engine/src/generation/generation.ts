/**
 * One request's generation: its state (tokens, progress, the resources the scheduler gave it), what
 * it takes from a step (sampling, or the verification of its drafts), the acceptance of a token (EOG,
 * stop strings, token and context limits), finishing, failure and abort, and its events. Its grammar
 * guide and its speculative decoding are plug-ins it calls (plugins.ts); the engine's step loop
 * batches generations (step-loop.ts).
 */
import type { AbortSignalLike, GenerateParams, GenerationEvent, GenerationResult, StopReason } from "../engine-types.js";
import { checkOutput, type RelaxedKeyword, type SchemaCheck, THINK_END } from "../constrain/index.js";
import type { ScheduledSequence } from "../scheduler.js";
import { logprobsOf, type Sampler, type SampledLogprobs, type StopStringMatcher, type TokenDistribution } from "../sampling/index.js";
import type { DrafterWork, SpeculativeSequence } from "./speculative.js";
import type { GuidePlugin, SpeculationPlugin } from "./plugins.js";
import type { PromptMedia } from "../vision/media.js";

/** What a generation needs of the engine that runs it. */
export interface GenerationHost {
  /** an end-of-generation token of the model (false without a tokenizer) */
  isEog(token: number): boolean;
  /** takes an ended generation out of the engine: out of the scheduler, its blocks and state slot back to the pools */
  release(generation: Generation): void;
  /** after a step computed its tokens: the prefix cache's registration (`hidden`: the target's at the last row) */
  afterStep(generation: Generation, hidden: Float32Array | undefined): void;
  /** gives back its blocks past its first `positions` positions */
  truncateBlocks(generation: Generation, positions: number): void;
  /** counts tokens a step computed */
  countTokens(kind: "prefill" | "decode", count: number): void;
}

/** Streaming detokenization with stop strings (the tokenizer's `StreamingDetokenizer`). */
export interface Detokenizer {
  push(token: number): string;
  flush(): string;
}

/** A best-effort (relaxed) schema: the output is checked against the whole schema when done. */
export interface OutputValidation {
  schema: unknown;
  relaxed: RelaxedKeyword[];
  /** the request reasons: the JSON after the reasoning block is checked */
  afterThinking: boolean;
}

/** The constraint rules of one chunk, asked for before its step (a grammar worker computes them while the forward runs). */
export interface PendingRules {
  /** settles when the rules are known or failed (never rejects) */
  promise: Promise<void>;
  settled: boolean;
  failed: boolean;
  error: unknown;
}

/** What a step computed for one generation's chunk. */
export interface StepOutcome {
  numTokens: number;
  draftTokens: number;
  /** the chunk's first position */
  startPos: number;
  /** its logits rows (the last known row first for a verification; none when it samples nothing) */
  logits: Float32Array;
  /** the target's hidden rows the step kept for it (from position keptFirst; the drafter's) */
  keptFirst: number;
  keptHidden: Float32Array | undefined;
  /** the target's hidden state at the chunk's last row when the step kept every row (a prefix-cache entry's) */
  lastHidden: Float32Array | undefined;
}

/** An outcome whose rules came after its forward: taken in once they are there (its logits copied out of the step's buffer). */
interface DeferredOutcome extends StepOutcome {
  rules: PendingRules;
  /** the preemptions when deferred (a preempted generation recomputes the chunk: this outcome is dropped) */
  preemptions: number;
}

export interface GenerationSetup {
  id: number;
  /** the prompt's tokens (the generation appends to this array) */
  tokens: number[];
  params: GenerateParams;
  maxTokens: number;
  ignoreEog: boolean;
  /** the longest sequence: prompt + generated tokens */
  maxLength: number;
  sampler: Sampler;
  detokenizer: Detokenizer | undefined;
  stops: StopStringMatcher;
  snapshotPoints?: readonly number[] | undefined;
  validation?: OutputValidation | undefined;
  speculation?: SpeculationPlugin | undefined;
  /** the prompt's images: their rows and the rotary positions of the sequence (vision/media.ts) */
  media?: PromptMedia | undefined;
}

/** The check of a relaxed schema's output: the JSON after the reasoning block when the request reasons. */
function outputCheck(text: string, validation: OutputValidation): SchemaCheck {
  const end = validation.afterThinking ? text.lastIndexOf(THINK_END) : -1;
  return checkOutput(end < 0 ? text : text.slice(end + THINK_END.length), validation.schema, validation.relaxed);
}

export class Generation implements ScheduledSequence, SpeculativeSequence {
  readonly id: number;
  readonly tokens: number[];
  readonly promptLength: number;
  readonly params: GenerateParams;
  readonly maxTokens: number;
  readonly ignoreEog: boolean;
  readonly maxLength: number;
  readonly sampler: Sampler;
  readonly snapshotPoints: readonly number[] | undefined;
  /** the prompt's images (undefined: a text prompt) */
  readonly media: PromptMedia | undefined;
  numComputed = 0;
  cachedTokens = 0;
  blockTable: number[] = [];
  stateSlot = -1;
  finished = false;
  preemptions = 0;
  /** speculative decoding: drafts to verify in the next step, and the drafter distribution of each (sampling) */
  drafts: number[] = [];
  draftDistributions: TokenDistribution[] = [];
  /** KV positions the drafter's chain writes past the verified ones (reserved by the scheduler) */
  readonly lookahead: number;
  /** the next position the MTP drafter computes with the target's hidden state */
  drafterFrontier = 0;
  resumed: { position: number; hidden: Float32Array | undefined } | undefined = undefined;
  specDrafted = 0;
  specAccepted = 0;
  /** the grammar guide plug-in (constrained decoding, the thinking budget); set before it is scheduled */
  guide: GuidePlugin | undefined;
  /** the speculation plug-in (undefined: no speculative decoding) */
  readonly speculation: SpeculationPlugin | undefined;
  readonly generated: number[] = [];
  text = "";
  /** the stop string that ended the generation (stop reason "stop_string") */
  private stopString: string | undefined;
  private readonly detokenizer: Detokenizer | undefined;
  private readonly stops: StopStringMatcher;
  private readonly validation: OutputValidation | undefined;
  /** a step's outcome whose rules were not ready when its forward was done (sampled once they are) */
  private deferred: DeferredOutcome | undefined;
  private readonly submittedAt = performance.now();
  private firstTokenAt = 0;
  private ended = false;
  private onAbort: (() => void) | undefined;
  private readonly queue: GenerationEvent[] = [];
  private wake: (() => void) | undefined;
  private done = false;
  private failure: unknown;
  private resolveResult!: (result: GenerationResult) => void;
  private rejectResult!: (error: unknown) => void;
  readonly result: Promise<GenerationResult>;

  constructor(
    private readonly host: GenerationHost,
    setup: GenerationSetup,
  ) {
    this.id = setup.id;
    this.tokens = setup.tokens;
    this.promptLength = setup.tokens.length;
    this.params = setup.params;
    this.maxTokens = setup.maxTokens;
    this.ignoreEog = setup.ignoreEog;
    this.maxLength = setup.maxLength;
    this.sampler = setup.sampler;
    this.detokenizer = setup.detokenizer;
    this.stops = setup.stops;
    this.snapshotPoints = setup.snapshotPoints;
    this.media = setup.media;
    this.validation = setup.validation;
    this.speculation = setup.speculation;
    // the drafter's chain writes KV up to draftTokens - 1 positions past a verification's last token
    this.lookahead = setup.speculation?.lookahead ?? 0;
    this.result = new Promise((resolve, reject) => {
      this.resolveResult = resolve;
      this.rejectResult = reject;
    });
    this.result.catch(() => undefined);
  }

  /** Still running: not finished, aborted or failed. */
  get active(): boolean {
    return !this.ended;
  }

  /** Ends it with stopReason "abort" when `signal` aborts (at once, in a microtask, when it already has). */
  abortOn(signal: AbortSignalLike | undefined): void {
    if (!signal) return;
    if (signal.aborted) {
      queueMicrotask(() => this.finish("abort"));
    } else {
      this.onAbort = () => this.finish("abort");
      signal.addEventListener("abort", this.onAbort, { once: true });
    }
  }

  /** What its next sampling waits on (it sits steps out meanwhile): its deferred outcome's rules, or its guide. */
  waitsOn(): Promise<void> | undefined {
    return this.deferred ? this.deferred.rules.promise : this.guide?.blockedBy();
  }

  /**
   * Before a step: asks its guide for the rules of the positions the chunk samples (the next token, and
   * after each draft); they settle while the forward runs, or later (never rejected: `failed` and
   * `error` say why). Undefined when it is unguided or the chunk samples nothing.
   */
  prepareRules(needsLogits: boolean, draftTokens: number): PendingRules | undefined {
    if (!this.guide || (!needsLogits && draftTokens === 0)) return undefined;
    const rules: PendingRules = { promise: Promise.resolve(), settled: false, failed: false, error: undefined };
    // the tokens it may still write: a constrained answer is closed within them (guide.ts)
    const tokensLeft = Math.min(this.maxTokens - this.generated.length, this.maxLength - this.tokens.length);
    rules.promise = this.guide.prepare(this.drafts.slice(0, draftTokens), tokensLeft).then(
      () => {
        rules.settled = true;
      },
      (error: unknown) => {
        rules.settled = true;
        rules.failed = true;
        rules.error = error;
      },
    );
    return rules;
  }

  /**
   * Takes what a step computed for it, under the rules prepared for the step: deferred when they have
   * not come (meanwhile it sits out), failed when its grammar engine failed, else taken in now.
   * Returns its drafter work (speculative decoding).
   */
  take(outcome: StepOutcome, rules: PendingRules | undefined): DrafterWork | undefined {
    if (rules && !rules.settled) {
      this.deferred = { ...outcome, logits: outcome.logits.slice(), rules, preemptions: this.preemptions };
      return undefined;
    }
    if (rules?.failed) {
      // its grammar engine failed (its worker died): it fails alone
      this.fail(rules.error);
      return undefined;
    }
    return this.takeOutcome(outcome);
  }

  /**
   * Its deferred outcome once the rules have come (before scheduling, so that it steps again at once),
   * with its drafter work. Dropped when it was preempted meanwhile: its recompute gives the same logits again.
   */
  takeDeferred(): DrafterWork | undefined {
    const deferred = this.deferred;
    if (!deferred?.rules.settled) return undefined;
    this.deferred = undefined;
    if (this.preemptions !== deferred.preemptions || !this.active) return undefined;
    if (deferred.rules.failed) {
      this.fail(deferred.rules.error);
      return undefined;
    }
    return this.takeOutcome(deferred);
  }

  /** Verifies its drafts, or counts the chunk and samples its next token. */
  private takeOutcome(outcome: StepOutcome): DrafterWork | undefined {
    const { numTokens, draftTokens, logits, keptFirst, keptHidden } = outcome;
    let lastValid: number;
    if (draftTokens > 0 && this.speculation) {
      lastValid = this.speculation.verify(this, numTokens, draftTokens, logits);
    } else {
      lastValid = outcome.startPos + numTokens - 1;
      // drafts the step had no room for are stale now
      this.drafts = [];
      this.draftDistributions = [];
      if (numTokens === 1 && this.numComputed >= this.promptLength) this.host.countTokens("decode", 1);
      else this.host.countTokens("prefill", numTokens);
      this.numComputed += numTokens;
      this.host.afterStep(this, outcome.lastHidden);
      if (logits.length > 0) {
        const row = this.guide ? this.guide.apply(logits) : logits;
        const token = this.sampler.sample(row, this.tokens);
        const n = this.params.logprobs;
        this.accept(token, n === undefined ? undefined : logprobsOf(logits, token, n));
      }
    }
    return this.speculation && this.active ? { request: this, lastValid, keptFirst, keptHidden } : undefined;
  }

  /** Gives back its blocks past its first `positions` positions (speculative decoding's rollback). */
  truncateBlocks(positions: number): void {
    this.host.truncateBlocks(this, positions);
  }

  /** Takes in a sampled token: its guide, EOG, stop strings, then the token and context limits. */
  accept(token: number, logprobs?: SampledLogprobs): void {
    if (this.finished) return;
    if (this.generated.length === 0) this.firstTokenAt = performance.now();
    if (this.guide && !this.guide.advance(token)) {
      throw new Error(`internal: token ${token} was sampled against the constraint of request ${this.id}`);
    }
    // the grammar accepted its stop token: the document is complete
    if (this.guide?.done) {
      this.finish("eog");
      return;
    }
    if (!this.ignoreEog && this.host.isEog(token)) {
      this.finish("eog");
      return;
    }
    this.tokens.push(token);
    this.generated.push(token);
    let text = "";
    let stopped = false;
    if (this.detokenizer) {
      const match = this.stops.push(this.detokenizer.push(token));
      text = match.text;
      stopped = match.stop !== undefined;
      if (match.stop !== undefined) this.stopString = match.stop;
      this.text += text;
    }
    this.push(
      logprobs ? { type: "token", token, text, logprob: logprobs.logprob, topLogprobs: logprobs.top } : { type: "token", token, text },
    );
    // out of tokens just as a forced close completed the document: it is finished, not cut off
    const complete = this.guide?.endsNext === true;
    if (stopped) this.finish("stop_string");
    else if (this.generated.length >= this.maxTokens) this.finish(complete ? "eog" : "max_tokens");
    else if (this.tokens.length >= this.maxLength) this.finish(complete ? "eog" : "context");
  }

  /** Ends it with `stopReason` (once): out of the engine, the text's tail flushed, the result resolved. */
  finish(stopReason: StopReason): void {
    if (!this.end()) return;
    if (this.detokenizer && stopReason !== "stop_string") {
      const tail = this.stops.push(this.detokenizer.flush()).text + this.stops.flush();
      if (tail) {
        this.text += tail;
        this.push({ type: "token", token: -1, text: tail });
      }
    }
    const now = performance.now();
    const first = this.firstTokenAt || now;
    const ttft = first - this.submittedAt;
    const generated = this.generated.length;
    this.done = true;
    const result: GenerationResult = {
      tokens: [...this.generated],
      text: this.text,
      stopReason,
      ...(stopReason === "stop_string" && this.stopString !== undefined ? { stopString: this.stopString } : {}),
      ...(this.validation === undefined ? {} : { schemaCheck: outputCheck(this.text, this.validation) }),
      stats: {
        promptTokens: this.promptLength,
        generatedTokens: generated,
        timeToFirstTokenMs: ttft,
        totalMs: now - this.submittedAt,
        prefillTokensPerSecond: ttft > 0 ? (this.promptLength / ttft) * 1000 : 0,
        decodeTokensPerSecond: generated > 1 && now > first ? ((generated - 1) / (now - first)) * 1000 : 0,
        preemptions: this.preemptions,
        cachedPromptTokens: this.cachedTokens,
        ...(this.speculation ? { speculative: { drafted: this.specDrafted, accepted: this.specAccepted } } : {}),
      },
    };
    this.push({ type: "done", result });
    this.resolveResult(result);
  }

  /** Ends it with `error` (once): out of the engine, its stream throws and its result rejects. */
  fail(error: unknown): void {
    if (!this.end()) return;
    this.done = true;
    this.failure = error;
    this.rejectResult(error);
    this.wake?.();
  }

  /** Leaves the engine and drops its plug-ins and its abort listener; false when it had ended already. */
  private end(): boolean {
    if (this.ended) return false;
    this.ended = true;
    this.host.release(this);
    this.guide?.dispose();
    if (this.onAbort) this.params.signal?.removeEventListener("abort", this.onAbort);
    return true;
  }

  private push(event: GenerationEvent): void {
    this.queue.push(event);
    this.wake?.();
  }

  /** Its token/text deltas, ending with the `done` event (or throwing its failure). */
  async *events(): AsyncGenerator<GenerationEvent> {
    for (;;) {
      const event = this.queue.shift();
      if (event) {
        yield event;
        if (event.type === "done") return;
        continue;
      }
      if (this.done && this.failure !== undefined) throw this.failure;
      await new Promise<void>((resolve) => (this.wake = resolve));
      this.wake = undefined;
    }
  }
}
