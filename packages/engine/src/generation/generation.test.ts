import { describe, expect, it } from "vitest";
import type { AbortSignalLike, GenerationEvent } from "../engine-types.js";
import type { GuideState, PositionRule } from "../constrain/index.js";
import { Sampler, StopStringMatcher } from "../sampling/index.js";
import { Generation, type GenerationHost, type GenerationSetup, type PendingRules, type StepOutcome } from "./generation.js";
import type { GuidePlugin, SpeculationPlugin } from "./plugins.js";
import type { DrafterWork, SpeculativeSequence } from "./speculative.js";

const VOCAB = 8;
const PROMPT = [1, 2, 3];

/** A logits row whose greedy token is `token` (the next best is `token + 1`). */
function rowFor(token: number): Float32Array {
  const row = new Float32Array(VOCAB);
  row[token] = 5;
  row[(token + 1) % VOCAB] = 4;
  return row;
}

/** The engine's side, recorded: what a generation asked of it, in order. */
class RecordingHost implements GenerationHost {
  readonly calls: string[] = [];
  readonly eog = new Set<number>();
  isEog(token: number): boolean {
    return this.eog.has(token);
  }
  release(generation: Generation): void {
    this.calls.push("release");
    // the scheduler's remove marks it finished
    generation.finished = true;
  }
  afterStep(generation: Generation, hidden: Float32Array | undefined): void {
    this.calls.push(`afterStep ${generation.numComputed}${hidden ? " hidden" : ""}`);
  }
  truncateBlocks(_generation: Generation, positions: number): void {
    this.calls.push(`truncate ${positions}`);
  }
  countTokens(kind: "prefill" | "decode", count: number): void {
    this.calls.push(`${kind} ${count}`);
  }
}

/** Letters per token (0 -> "a", 1 -> "b", ...): a detokenizer for stop strings. */
const LETTERS = { push: (token: number) => String.fromCharCode(97 + token), flush: () => "" };

function generation(host: GenerationHost, setup: Partial<GenerationSetup> = {}): Generation {
  return new Generation(host, {
    id: 7,
    tokens: [...PROMPT],
    params: {},
    maxTokens: 4,
    ignoreEog: false,
    maxLength: 64,
    sampler: new Sampler({ temperature: 0 }),
    detokenizer: undefined,
    stops: new StopStringMatcher([]),
    ...setup,
  });
}

/** What a plain step computed for `g`: the rest of its known tokens, and a logits row sampling `token` (none: no row). */
function outcome(g: Generation, token: number | undefined, extra: Partial<StepOutcome> = {}): StepOutcome {
  const numTokens = g.tokens.length - g.numComputed;
  return {
    numTokens,
    draftTokens: 0,
    startPos: g.numComputed,
    logits: token === undefined ? new Float32Array(0) : rowFor(token),
    keptFirst: g.numComputed + numTokens - 1,
    keptHidden: undefined,
    lastHidden: undefined,
    ...extra,
  };
}

/** Steps `g` once per token of `tokens` (the first step is the prompt's prefill). */
function run(g: Generation, tokens: readonly number[]): void {
  for (const token of tokens) g.take(outcome(g, token), undefined);
}

/** The rules of `g`'s next step (sampling, after `draftTokens` drafts), once they have come. */
async function settledRules(g: Generation, draftTokens: number): Promise<PendingRules | undefined> {
  const rules = g.prepareRules(true, draftTokens);
  await rules?.promise;
  return rules;
}

async function eventsOf(g: Generation): Promise<GenerationEvent[]> {
  const events: GenerationEvent[] = [];
  for await (const event of g.events()) events.push(event);
  return events;
}

const FREE_STATE: GuideState = {
  phase: "free",
  reasoningTokens: 0,
  thinkMatched: 0,
  matcherSteps: 0,
  closeThinking: false,
  closing: undefined,
  closed: 0,
};

/** A guide plug-in that logs each hook it is called at into `log`; `refuse` tokens are masked out and refused. */
class RecordingGuide implements GuidePlugin {
  isDone = false;
  closesNext = false;
  /** the token after which the grammar has accepted its stop token */
  stopToken: number | undefined;
  pending: Promise<void> = Promise.resolve();
  constructor(
    private readonly log: string[],
    private readonly refuse: ReadonlySet<number> = new Set(),
  ) {}
  blockedBy(): Promise<void> | undefined {
    this.log.push("guide.blockedBy");
    return undefined;
  }
  prepare(drafts: readonly number[], tokensLeft: number): Promise<void> {
    this.log.push(`guide.prepare [${drafts.join(",")}] ${tokensLeft}`);
    return this.pending;
  }
  apply(row: Float32Array, position = 0): Float32Array {
    this.log.push(`guide.apply ${position}`);
    const masked = row.slice();
    for (const token of this.refuse) masked[token] = Number.NEGATIVE_INFINITY;
    return masked;
  }
  advance(token: number): boolean {
    this.log.push(`guide.advance ${token}`);
    if (token === this.stopToken) this.isDone = true;
    return !this.refuse.has(token);
  }
  get done(): boolean {
    this.log.push("guide.done");
    return this.isDone;
  }
  get endsNext(): boolean {
    this.log.push("guide.endsNext");
    return this.closesNext;
  }
  async validDrafts(drafts: readonly number[]): Promise<number[]> {
    return [...drafts];
  }
  checkpoint(): Readonly<GuideState> {
    return FREE_STATE;
  }
  restore(): void {}
  async currentRule(): Promise<PositionRule> {
    return { kind: "free" };
  }
  dispose(): void {
    this.log.push("guide.dispose");
  }
}

/** A speculation plug-in that logs its hooks; its verification accepts `accepts` through the sequence. */
class RecordingSpeculation implements SpeculationPlugin {
  readonly lookahead = 3;
  constructor(
    private readonly log: string[],
    private readonly accepts: readonly number[],
  ) {}
  verify(sequence: SpeculativeSequence, known: number, draftCount: number, rowsLogits: Float32Array): number {
    this.log.push(`speculation.verify ${known} ${draftCount} ${rowsLogits.length / VOCAB}`);
    sequence.numComputed += known + draftCount;
    sequence.specDrafted += draftCount;
    sequence.specAccepted += this.accepts.length - 1;
    for (const token of this.accepts) if (sequence.active) sequence.accept(token);
    if (sequence.active) sequence.truncateBlocks(sequence.tokens.length + sequence.lookahead);
    return sequence.numComputed - 1;
  }
  async draft(work: readonly DrafterWork[]): Promise<void> {
    this.log.push(`speculation.draft ${work.length}`);
  }
}

describe("Generation: acceptance and finishing", () => {
  it("samples each step's row, counts prefill then decode, and finishes at max_tokens", async () => {
    const host = new RecordingHost();
    const g = generation(host, { maxTokens: 3 });
    run(g, [5, 6, 2]);
    const result = await g.result;
    expect(result.tokens).toEqual([5, 6, 2]);
    expect(result.stopReason).toBe("max_tokens");
    expect(result.stats.promptTokens).toBe(3);
    expect(result.stats.generatedTokens).toBe(3);
    expect(result.stats.speculative).toBeUndefined();
    expect(g.tokens).toEqual([...PROMPT, 5, 6, 2]);
    expect(host.calls).toEqual(["prefill 3", "afterStep 3", "decode 1", "afterStep 4", "decode 1", "afterStep 5", "release"]);
    expect(g.active).toBe(false);
    const events = await eventsOf(g);
    expect(events.map((e) => (e.type === "token" ? e.token : e.type))).toEqual([5, 6, 2, "done"]);
  });

  it("a chunk without a logits row only counts and advances (a prefill chunk before the last)", () => {
    const host = new RecordingHost();
    const g = generation(host);
    g.take({ ...outcome(g, undefined), numTokens: 2 }, undefined);
    expect(g.numComputed).toBe(2);
    expect(g.generated).toEqual([]);
    expect(host.calls).toEqual(["prefill 2", "afterStep 2"]);
  });

  it("an end-of-generation token ends it with eog, unkept; ignoreEog keeps it", async () => {
    const host = new RecordingHost();
    host.eog.add(6);
    const g = generation(host);
    run(g, [5, 6]);
    expect(await g.result).toMatchObject({ tokens: [5], stopReason: "eog" });

    const kept = generation(host, { ignoreEog: true, maxTokens: 2 });
    run(kept, [5, 6]);
    expect(await kept.result).toMatchObject({ tokens: [5, 6], stopReason: "max_tokens" });
  });

  it("a stop string ends it with stop_string: the text before it, the string named", async () => {
    const g = generation(new RecordingHost(), { detokenizer: LETTERS, stops: new StopStringMatcher(["cd"]), maxTokens: 10 });
    run(g, [0, 2, 3, 4]);
    const result = await g.result;
    expect(result).toMatchObject({ tokens: [0, 2, 3], text: "a", stopReason: "stop_string", stopString: "cd" });
  });

  it("text held back for a stop string that never came is flushed at the end", async () => {
    const g = generation(new RecordingHost(), { detokenizer: LETTERS, stops: new StopStringMatcher(["cd"]), maxTokens: 2 });
    run(g, [0, 2]);
    expect(await g.result).toMatchObject({ text: "ac", stopReason: "max_tokens" });
    const events = await eventsOf(g);
    expect(events.filter((e) => e.type === "token").map((e) => [e.token, e.text])).toEqual([
      [0, "a"],
      [2, ""],
      [-1, "c"],
    ]);
  });

  it("the context limit ends it with context", async () => {
    const g = generation(new RecordingHost(), { maxLength: 5, maxTokens: 10 });
    run(g, [5, 6, 7]);
    expect(await g.result).toMatchObject({ tokens: [5, 6], stopReason: "context" });
  });

  it("logprobs: each token event carries the sampled token's logprob and the top ones", async () => {
    const g = generation(new RecordingHost(), { params: { logprobs: 2 }, maxTokens: 1 });
    run(g, [5]);
    const [event] = await eventsOf(g);
    expect(event?.type === "token" && event.topLogprobs?.map((t) => t.token)).toEqual([5, 6]);
    expect(event?.type === "token" && event.logprob).toBeLessThan(0);
  });
});

describe("Generation: failure and abort", () => {
  it("fails once: the result rejects, the stream throws, it leaves the engine and drops its guide", async () => {
    const host = new RecordingHost();
    const log: string[] = [];
    const g = generation(host);
    g.guide = new RecordingGuide(log);
    const error = new Error("worker died");
    g.fail(error);
    g.fail(new Error("again"));
    g.finish("abort");
    await expect(g.result).rejects.toBe(error);
    await expect(eventsOf(g)).rejects.toBe(error);
    expect(host.calls).toEqual(["release"]);
    expect(log).toEqual(["guide.dispose"]);
  });

  it("aborts through its signal (once), and removes its listener when it ends otherwise", async () => {
    const listeners = new Set<() => void>();
    const signal: AbortSignalLike & { fire(): void } = {
      aborted: false,
      addEventListener: (_type, listener) => listeners.add(listener),
      removeEventListener: (_type, listener) => listeners.delete(listener),
      fire: () => {
        for (const listener of [...listeners]) listener();
      },
    };
    const host = new RecordingHost();
    const aborted = generation(host, { params: { signal } });
    aborted.abortOn(signal);
    expect(listeners.size).toBe(1);
    run(aborted, [5]);
    signal.fire();
    expect(await aborted.result).toMatchObject({ tokens: [5], stopReason: "abort" });
    expect(listeners.size).toBe(0);

    const finished = generation(host, { params: { signal }, maxTokens: 1 });
    finished.abortOn(signal);
    run(finished, [5]);
    expect((await finished.result).stopReason).toBe("max_tokens");
    expect(listeners.size).toBe(0);
  });

  it("a signal aborted already ends it in a microtask", async () => {
    const g = generation(new RecordingHost());
    g.abortOn(AbortSignal.abort());
    expect(g.active).toBe(true);
    expect(await g.result).toMatchObject({ tokens: [], stopReason: "abort" });
  });

  it("ends once: a finish after its end changes nothing", async () => {
    const host = new RecordingHost();
    const g = generation(host, { maxTokens: 1 });
    run(g, [5]);
    g.finish("abort");
    expect((await g.result).stopReason).toBe("max_tokens");
    expect(host.calls.filter((c) => c === "release")).toHaveLength(1);
  });
});

describe("Generation: the guide plug-in", () => {
  it("is called before the step (prepare), before sampling (apply), at acceptance (advance, done, endsNext), at the end (dispose)", async () => {
    const log: string[] = [];
    const guide = new RecordingGuide(log, new Set([5]));
    const g = generation(new RecordingHost(), { maxTokens: 2 });
    g.guide = guide;
    expect(g.waitsOn()).toBeUndefined();
    // the raw row's best token (5) is masked out: the next best is sampled
    g.take(outcome(g, 5), await settledRules(g, 0));
    expect(g.generated).toEqual([6]);
    g.take(outcome(g, 1), await settledRules(g, 0));
    await g.result;
    expect(log).toEqual([
      "guide.blockedBy",
      "guide.prepare [] 2",
      "guide.apply 0",
      "guide.advance 6",
      "guide.done",
      "guide.endsNext",
      "guide.prepare [] 1",
      "guide.apply 0",
      "guide.advance 1",
      "guide.done",
      "guide.endsNext",
      "guide.dispose",
    ]);
  });

  it("no rules for a chunk that samples nothing, or without a guide", () => {
    const g = generation(new RecordingHost());
    expect(g.prepareRules(true, 0)).toBeUndefined();
    g.guide = new RecordingGuide([]);
    expect(g.prepareRules(false, 0)).toBeUndefined();
    expect(g.prepareRules(false, 2)).toBeDefined();
  });

  it("the grammar's stop token ends it with eog (unkept); a forced close at max tokens ends it with eog, not max_tokens", async () => {
    const stopped = generation(new RecordingHost());
    const guide = new RecordingGuide([]);
    guide.stopToken = 6;
    stopped.guide = guide;
    run(stopped, [5, 6]);
    expect(await stopped.result).toMatchObject({ tokens: [5], stopReason: "eog" });

    const closed = generation(new RecordingHost(), { maxTokens: 1 });
    const closing = new RecordingGuide([]);
    closing.closesNext = true;
    closed.guide = closing;
    run(closed, [5]);
    expect(await closed.result).toMatchObject({ tokens: [5], stopReason: "eog" });
  });

  it("a token the guide refuses is a bug, thrown", () => {
    const g = generation(new RecordingHost());
    g.guide = new RecordingGuide([], new Set([5]));
    expect(() => g.accept(5)).toThrow(/token 5 was sampled against the constraint of request 7/);
  });

  it("rules that come after the forward: the outcome waits (it sits out), then is taken in", async () => {
    const log: string[] = [];
    const guide = new RecordingGuide(log);
    let ready!: () => void;
    guide.pending = new Promise<void>((resolve) => (ready = resolve));
    const g = generation(new RecordingHost());
    g.guide = guide;
    const rules = g.prepareRules(true, 0);
    const step = outcome(g, 5);
    expect(g.take(step, rules)).toBeUndefined();
    // the step's buffer is reused by the next step: the deferred outcome kept a copy
    step.logits.fill(0);
    expect(g.generated).toEqual([]);
    expect(g.waitsOn()).toBe(rules?.promise);
    expect(g.takeDeferred()).toBeUndefined();
    ready();
    await rules?.promise;
    g.takeDeferred();
    expect(g.generated).toEqual([5]);
    expect(g.waitsOn()).toBeUndefined();
  });

  it("a deferred outcome of a generation preempted meanwhile is dropped; rules that failed fail it", async () => {
    const preempted = generation(new RecordingHost());
    const slow = new RecordingGuide([]);
    let ready!: () => void;
    slow.pending = new Promise<void>((resolve) => (ready = resolve));
    preempted.guide = slow;
    const rules = preempted.prepareRules(true, 0);
    preempted.take(outcome(preempted, 5), rules);
    expect(preempted.waitsOn()).toBe(rules?.promise);
    preempted.preemptions++;
    ready();
    await rules?.promise;
    expect(preempted.takeDeferred()).toBeUndefined();
    expect(preempted.generated).toEqual([]);
    // the outcome is gone: its recompute gives the same logits again
    expect(preempted.waitsOn()).toBeUndefined();

    const failing = generation(new RecordingHost());
    const guide = new RecordingGuide([]);
    const error = new Error("grammar engine failed");
    guide.pending = Promise.reject(error);
    failing.guide = guide;
    const pending = failing.prepareRules(true, 0);
    failing.take(outcome(failing, 5), pending);
    await pending?.promise;
    failing.takeDeferred();
    await expect(failing.result).rejects.toBe(error);
  });
});

describe("Generation: the speculation plug-in", () => {
  it("reserves its lookahead; a step with drafts is verified by it, tokens accepted through the guide, drafter work returned", async () => {
    const log: string[] = [];
    const host = new RecordingHost();
    const speculation = new RecordingSpeculation(log, [4, 6]);
    const g = generation(host, { speculation, maxTokens: 10 });
    g.guide = new RecordingGuide(log);
    expect(g.lookahead).toBe(3);
    // the prompt: sampled plainly; drafter work from its last position
    const first = g.take(outcome(g, 5), await settledRules(g, 0));
    expect(first).toMatchObject({ request: g, lastValid: 2, keptFirst: 2 });
    // two drafts after the known token: verified by the plug-in
    g.drafts = [4, 1];
    const rules = await settledRules(g, 2);
    const rows = new Float32Array(3 * VOCAB);
    const work = g.take({ ...outcome(g, undefined), numTokens: 1, draftTokens: 2, logits: rows, keptFirst: 3 }, rules);
    expect(work).toMatchObject({ request: g, lastValid: 5, keptFirst: 3 });
    expect(g.generated).toEqual([5, 4, 6]);
    expect(log).toEqual([
      "guide.prepare [] 10",
      "guide.apply 0",
      "guide.advance 5",
      "guide.done",
      "guide.endsNext",
      "guide.prepare [4,1] 9",
      "speculation.verify 1 2 3",
      "guide.advance 4",
      "guide.done",
      "guide.endsNext",
      "guide.advance 6",
      "guide.done",
      "guide.endsNext",
    ]);
    expect(host.calls).toEqual(["prefill 3", "afterStep 3", "truncate 9"]);
    g.finish("abort");
    expect((await g.result).stats.speculative).toEqual({ drafted: 2, accepted: 1 });
  });

  it("drafts a step had no room for are dropped; an ended generation hands no drafter work", async () => {
    const speculation = new RecordingSpeculation([], []);
    const g = generation(new RecordingHost(), { speculation, maxTokens: 2 });
    run(g, [5]);
    g.drafts = [1, 2];
    g.draftDistributions = [];
    const work = g.take(outcome(g, 6), undefined);
    expect(g.drafts).toEqual([]);
    expect(work).toBeUndefined();
    expect((await g.result).stopReason).toBe("max_tokens");
  });
});
