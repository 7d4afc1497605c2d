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

interface GuideState {
  phase: Phase;
  reasoningTokens: number;
  thinkMatched: number;
  matcherSteps: number;
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
}

export class DecodeGuide {
  private state: GuideState;
  private rules: PositionRule[] = [];
  private disposed = false;

  constructor(private readonly options: GuideOptions) {
    this.state = {
      phase: options.reasoning ? "reasoning" : options.matcher ? "constrained" : "free",
      reasoningTokens: 0,
      thinkMatched: 0,
      matcherSteps: 0,
    };
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
        const budget = this.options.thinkingBudget;
        if (budget !== undefined && s.reasoningTokens >= budget) return { kind: "forced", token: this.options.thinkEnd[s.thinkMatched]! };
        return this.options.matcher ? { kind: "no_eog" } : { kind: "free" };
      }
      case "constrained":
        return { kind: "mask", bits: await this.options.matcher!.mask() };
    }
  }

  /**
   * Computes the rules of the next `drafts.length + 1` positions: the next token, and after each
   * draft (the matcher advances through the drafts and is rolled back). Call it before the step
   * whose logits `apply` masks; any `advance` invalidates them.
   */
  async prepare(drafts: readonly number[] = []): Promise<void> {
    this.rules = (await this.walk(drafts, true)).rules;
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
        const { thinkEnd, thinkingBudget, matcher } = this.options;
        const forced = thinkingBudget !== undefined && s.reasoningTokens >= thinkingBudget;
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
        if (!matcher.acceptToken(token)) return false;
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
