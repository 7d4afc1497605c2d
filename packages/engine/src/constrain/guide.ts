/**
 * Per-sequence guided decoding: the reasoning phase (free text until `</think>`, closed by the
 * engine once the thinking budget is spent) and then the grammar matcher of the constraint.
 *
 * The engine asks for the rules of the next positions *before* a step (`prepare`: the grammar
 * worker computes its token bitmasks while the native step runs), applies them to the logits rows
 * after the step (`apply`, synchronous) and feeds every token it keeps (`advance`, synchronous: the
 * matcher answers from the masks `prepare` made known). Speculative decoding prepares one rule per
 * draft position by advancing through the drafts and rolling the matcher back (one round trip to the
 * worker for all of them), and drafts are checked against the grammar (`validDrafts`).
 *
 * Outputs that finish: `prepare` is told how many tokens the sequence may still write. The guide keeps an
 * estimate of the shortest way to finish the document from where it is (a closing walk through the grammar,
 * `closingPlan`, preferring tokens that close what is open) and, when the tokens left come within a margin of
 * it, forces that walk, so the answer closes within `max_tokens` instead of being cut off. Reasoning before a
 * constrained answer is closed early enough to leave the answer room (`answerReserve`).
 */

/**
 * The grammar matcher as the guide uses it (a RemoteMatcher: the mirror of a matcher on the grammar
 * worker). `acceptToken` is synchronous and needs the current position's mask known: the guide calls
 * `mask` or `lookahead` before it advances.
 */
export interface GuideMatcher {
  /** the current position's bitmask (bit `id` of word `id >> 5` set = allowed) */
  mask(): Promise<Int32Array>;
  /** makes the masks along `drafts` known (the current one, and after each draft the grammar allows) */
  lookahead(drafts: readonly number[]): Promise<void>;
  /** accepts `token` if the grammar allows it */
  acceptToken(token: number): boolean;
  isTerminated(): boolean;
  rollBack(tokens: number): void;
  /** what the next mask would wait behind (a compile of the grammar engine), undefined when nothing */
  blockedBy?(): Promise<void> | undefined;
  /**
   * The closing walk from the current position, without moving: at each position the first of `closers` the
   * grammar takes whole, else the allowed token of most bytes (another after `maxRepeats` choices of one token in
   * a row), until a stop token is allowed (the walk's last token); undefined when none within `limit` tokens.
   */
  close(limit: number, closers: readonly (readonly number[])[], maxRepeats: number): Promise<number[] | undefined>;
}

/** What may come at one position. */
export type PositionRule =
  /** anything (reasoning without a budget left to enforce, or no constraint at all) */
  | { kind: "free" }
  /** anything but an end-of-generation token (reasoning before a constrained answer) */
  | { kind: "no_eog" }
  /** exactly this token (the thinking budget closes the reasoning) */
  | { kind: "forced"; token: number }
  /** the grammar's bitmask: bit `id` of word `id >> 5` set = allowed */
  | { kind: "mask"; bits: Int32Array }
  /** nothing: the grammar has ended */
  | { kind: "done" };

type Phase = "reasoning" | "constrained" | "free" | "done";

export interface GuideState {
  phase: Phase;
  reasoningTokens: number;
  thinkMatched: number;
  matcherSteps: number;
  /** the reasoning must close now (the answer needs the tokens left) */
  closeThinking: boolean;
  /** the forced closing walk (ends with a stop token) and how far along it the sequence is */
  closing: readonly number[] | undefined;
  closed: number;
}

/** Longest closing walk tried: past it the document is left to the model (and may be cut off). */
export const MAX_CLOSING_TOKENS = 1024;
/** A closing walk that picked one token this many times in a row tries another once (a pattern's repeated character). */
const MAX_REPEATS = 8;

/**
 * Tokens kept between the shortest close and the tokens left before the close is forced: a free token can open
 * more than it closes (a nested object with required keys), so the margin grows with the close's length.
 */
export function closingMargin(closeTokens: number): number {
  return 8 + Math.floor(closeTokens / 2);
}

/**
 * Tokens a constrained answer is left after reasoning, of `total` the request may write: its shortest form
 * (`answerTokens`) plus a quarter of the total (at least 16) to write it well.
 */
export function answerReserve(answerTokens: number, total: number): number {
  return answerTokens + Math.max(16, Math.floor(total / 4));
}

export interface GuideOptions {
  /** the constraint's matcher (none: a thinking budget alone) */
  matcher: GuideMatcher | undefined;
  /** gives the matcher back (disposes it) */
  release?: () => void;
  /** the prompt ends inside an open <think> block */
  reasoning: boolean;
  /** reasoning tokens before the engine writes `thinkEnd` */
  thinkingBudget: number | undefined;
  /** the token ids of `</think>` */
  thinkEnd: readonly number[];
  /** end-of-generation ids (kept out of the reasoning when a constraint follows it) */
  eogIds: ReadonlySet<number>;
  /**
   * Token sequences a closing walk prefers, best first (those that close a string, an object or an array, then
   * a separator, then the shortest values; a tool call's closing tags); when none is taken, the allowed token of
   * most bytes.
   */
  closers?: readonly (readonly number[])[];
}

export class DecodeGuide {
  private state: GuideState;
  private rules: PositionRule[] = [];
  private disposed = false;
  /** the last closing estimate: its length (stop token included) and where it was made */
  private estimate: { tokens: number; atStep: number } | undefined;
  /** the shortest answer (tokens, stop included) from the grammar's start, for the reasoning's reserve */
  private answerTokens: number | undefined;
  /** the tokens left at the first `prepare` (the request's whole budget) */
  private totalTokens: number | undefined;
  /** closing walks in a row that found no close within the tokens left */
  private misses = 0;

  constructor(private readonly options: GuideOptions) {
    this.state = {
      phase: options.reasoning ? "reasoning" : options.matcher ? "constrained" : "free",
      reasoningTokens: 0,
      thinkMatched: 0,
      matcherSteps: 0,
      closeThinking: false,
      closing: undefined,
      closed: 0,
    };
  }

  /**
   * The next token is the stop token of a forced close: the document is complete, and a sequence out of tokens
   * ends here as finished (not cut off).
   */
  get endsNext(): boolean {
    const { closing, closed, phase } = this.state;
    return phase === "constrained" && closing !== undefined && closed === closing.length - 1;
  }

  /** The grammar has accepted a stop token: the sequence is complete. */
  get done(): boolean {
    return this.state.phase === "done";
  }

  /**
   * What preparing the next position's rule would wait behind (the grammar worker compiling a new
   * grammar), or undefined: the engine steps the other sequences meanwhile.
   */
  blockedBy(): Promise<void> | undefined {
    return this.state.phase === "constrained" ? this.options.matcher!.blockedBy?.() : undefined;
  }

  /** Still in the reasoning block. */
  get reasoning(): boolean {
    return this.state.phase === "reasoning";
  }

  /** The rule at the current position (async: the grammar engine computes a bitmask). */
  private async ruleNow(): Promise<PositionRule> {
    const s = this.state;
    switch (s.phase) {
      case "free":
        return { kind: "free" };
      case "done":
        return { kind: "done" };
      case "reasoning": {
        if (this.thinkingForced()) return { kind: "forced", token: this.options.thinkEnd[s.thinkMatched]! };
        return this.options.matcher ? { kind: "no_eog" } : { kind: "free" };
      }
      case "constrained":
        if (s.closing) return { kind: "forced", token: s.closing[s.closed]! };
        return { kind: "mask", bits: await this.options.matcher!.mask() };
    }
  }

  /**
   * Computes the rules of the next `drafts.length + 1` positions: the next token, and after each
   * draft (the matcher advances through the drafts and is rolled back). Call it before the step
   * whose logits `apply` masks; any `advance` invalidates them.
   */
  async prepare(drafts: readonly number[] = [], tokensLeft?: number): Promise<void> {
    if (tokensLeft !== undefined) await this.budget(tokensLeft);
    this.rules = (await this.walk(drafts, true)).rules;
  }

  private thinkingForced(): boolean {
    const budget = this.options.thinkingBudget;
    return this.state.closeThinking || (budget !== undefined && this.state.reasoningTokens >= budget);
  }

  /**
   * With `tokensLeft` tokens still to write: closes the reasoning when the answer needs the rest, and forces the
   * shortest close of the document when the tokens left come within `closingMargin` of it.
   */
  private async budget(tokensLeft: number): Promise<void> {
    this.totalTokens ??= tokensLeft;
    const s = this.state;
    const matcher = this.options.matcher;
    if (!matcher) return;
    if (s.phase === "reasoning") {
      if (s.closeThinking) return;
      // the answer's shortest form from the grammar's start (the matcher has accepted nothing yet)
      this.answerTokens ??= (await this.closingPlan(Math.min(tokensLeft, MAX_CLOSING_TOKENS)))?.length ?? 0;
      const reserve = this.options.thinkEnd.length + answerReserve(this.answerTokens, this.totalTokens);
      if (tokensLeft <= reserve) s.closeThinking = true;
      return;
    }
    if (s.phase !== "constrained" || s.closing) return;
    const last = this.estimate;
    const since = last === undefined ? 0 : s.matcherSteps - last.atStep;
    // estimate again at every token near the end, and before the tokens left could have reached the last estimate
    // (a close that did not fit the tokens left is looked for again every few tokens: the model may shorten it)
    const near = last !== undefined && tokensLeft <= last.tokens + 2 * closingMargin(last.tokens) + 16;
    const every =
      last === undefined
        ? 1
        : last.tokens - 1 > tokensLeft
          ? Math.max(4 << Math.min(this.misses, 10), Math.floor(tokensLeft / 8))
          : near
            ? 1
            : Math.floor((tokensLeft - last.tokens) / 2);
    if (last !== undefined && since >= 0 && since < Math.max(1, every)) return;
    // a walk longer than the tokens left cannot be used: it stops there (and the estimate says "does not fit")
    const limit = Math.min(tokensLeft, MAX_CLOSING_TOKENS);
    const plan = await this.closingPlan(limit);
    this.estimate = { tokens: plan?.length ?? limit + 2, atStep: s.matcherSteps };
    // the tokens the close writes: the stop token is not one of the tokens left, it ends the sequence
    const closeTokens = plan ? plan.length - 1 : undefined;
    // (a close longer than the tokens left cannot help: the model goes on and the answer is cut off)
    const fits = closeTokens !== undefined && closeTokens <= tokensLeft;
    // a grammar with no close in reach (one that never ends) is looked at less and less often
    this.misses = fits ? 0 : this.misses + 1;
    if (fits && closeTokens + closingMargin(closeTokens) >= tokensLeft) {
      // the masks along the walk, for the mirror to accept its tokens (one round trip)
      await matcher.lookahead(plan!.slice(0, -1));
      s.closing = plan;
      s.closed = 0;
    }
  }

  /** The matcher's closing walk from the current position (stop token last), within `limit` tokens. */
  private closingPlan(limit: number): Promise<number[] | undefined> {
    return this.options.matcher!.close(limit, this.options.closers ?? [], MAX_REPEATS);
  }

  /**
   * Steps through `drafts` from the current position (rolled back afterwards): how many the
   * constraint allows, and with `withRules` the rule before each of them and after the last. The
   * matcher's masks along the drafts are made known first (one round trip at most).
   */
  private async walk(drafts: readonly number[], withRules: boolean): Promise<{ rules: PositionRule[]; allowed: number }> {
    const saved = { ...this.state };
    const rules: PositionRule[] = [];
    let allowed = 0;
    let lookedAhead = false;
    try {
      for (let i = 0; ; i++) {
        if (this.state.phase === "constrained" && !lookedAhead) {
          lookedAhead = true;
          await this.options.matcher!.lookahead(drafts.slice(i));
        }
        if (withRules) rules.push(await this.ruleNow());
        if (i === drafts.length || !this.step(drafts[i]!)) break;
        allowed++;
      }
    } finally {
      this.restore(saved);
    }
    return { rules, allowed };
  }

  /** The rules `prepare` computed (tests, diagnostics). */
  get prepared(): readonly PositionRule[] {
    return this.rules;
  }

  /**
   * `row` masked by the rule of draft position `position` (0 = the next token); the row itself
   * when nothing is masked. Throws when that position was not prepared.
   */
  apply(row: Float32Array, position = 0): Float32Array {
    const rule = this.rules[position];
    if (!rule) throw new Error(`internal: no constraint rule prepared for position ${position}`);
    return applyRule(rule, row, this.options.eogIds);
  }

  /** Feeds a token the sequence keeps; false when the constraint does not allow it (nothing changes then). */
  advance(token: number): boolean {
    this.rules = [];
    return this.step(token);
  }

  /**
   * The longest prefix of `drafts` the constraint allows from the current position (speculative
   * decoding never verifies a draft the grammar would reject).
   */
  async validDrafts(drafts: readonly number[]): Promise<number[]> {
    return drafts.slice(0, (await this.walk(drafts, false)).allowed);
  }

  /** Saves the state (drafting advances through the drafts, then `restore` rolls back). */
  checkpoint(): Readonly<GuideState> {
    return { ...this.state };
  }

  /** Back to a checkpoint (the matcher rolls back the tokens accepted since). */
  restore(saved: Readonly<GuideState>): void {
    const back = this.state.matcherSteps - saved.matcherSteps;
    if (back > 0) this.options.matcher!.rollBack(back);
    this.state = { ...saved };
  }

  /** The rule at the current position, for the drafter's own logits (MTP drafting; its mask becomes known for `advance`). */
  async currentRule(): Promise<PositionRule> {
    return this.ruleNow();
  }

  private step(token: number): boolean {
    const s = this.state;
    switch (s.phase) {
      case "free":
        return true;
      case "done":
        return false;
      case "reasoning": {
        const { thinkEnd, matcher } = this.options;
        const forced = this.thinkingForced();
        if (forced && token !== thinkEnd[s.thinkMatched]) return false;
        if (matcher && this.options.eogIds.has(token)) return false;
        if (token === thinkEnd[s.thinkMatched]) s.thinkMatched++;
        else s.thinkMatched = token === thinkEnd[0] ? 1 : 0;
        if (s.thinkMatched === thinkEnd.length) {
          s.phase = matcher ? "constrained" : "free";
          s.thinkMatched = 0;
        } else if (!forced) {
          s.reasoningTokens++;
        }
        return true;
      }
      case "constrained": {
        const matcher = this.options.matcher!;
        if (s.closing && token !== s.closing[s.closed]) return false;
        if (!matcher.acceptToken(token)) return false;
        if (s.closing) s.closed++;
        s.matcherSteps++;
        if (matcher.isTerminated()) s.phase = "done";
        return true;
      }
    }
  }

  /** Gives the matcher back; the guide is unusable afterwards. */
  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    this.options.release?.();
  }
}

/** `row` under `rule` (a copy when something is masked; `row` may be shorter than the vocabulary). */
export function applyRule(rule: PositionRule, row: Float32Array, eogIds: ReadonlySet<number>): Float32Array {
  switch (rule.kind) {
    case "free":
      return row;
    case "no_eog": {
      const out = row.slice();
      for (const id of eogIds) if (id < out.length) out[id] = Number.NEGATIVE_INFINITY;
      return out;
    }
    case "forced": {
      const out = new Float32Array(row.length).fill(Number.NEGATIVE_INFINITY);
      if (rule.token < out.length) out[rule.token] = 0;
      return out;
    }
    case "done":
      return new Float32Array(row.length).fill(Number.NEGATIVE_INFINITY);
    case "mask": {
      const out = row.slice();
      const bits = rule.bits;
      const n = row.length;
      for (let w = 0; w * 32 < n; w++) {
        const word = bits[w] ?? 0;
        if (word === -1) continue;
        const base = w * 32;
        const end = Math.min(32, n - base);
        if (word === 0) {
          out.fill(Number.NEGATIVE_INFINITY, base, base + end);
          continue;
        }
        for (let b = 0; b < end; b++) if (((word >>> b) & 1) === 0) out[base + b] = Number.NEGATIVE_INFINITY;
      }
      return out;
    }
  }
}
