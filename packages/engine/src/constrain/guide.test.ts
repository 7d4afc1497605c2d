/**
 * DecodeGuide's phases with a scripted matcher (the grammar engine's part is tested through the
 * engine): free reasoning until `</think>` (written by the model, or forced at the budget, also when
 * it is several tokens), then the matcher; drafts and checkpoints roll the matcher back.
 */
import { describe, expect, it } from "vitest";
import { closingMargin, DecodeGuide, type GuideMatcher } from "./guide.js";

const EOG = 99;
/** A matcher that accepts the tokens of `script` in order, then EOG (terminated). */
function scriptedMatcher(script: readonly number[]): GuideMatcher & { accepted: number[] } {
  const accepted: number[] = [];
  return {
    accepted,
    acceptToken(token) {
      const expected = accepted.length < script.length ? script[accepted.length] : EOG;
      if (token !== expected || accepted.length > script.length) return false;
      accepted.push(token);
      return true;
    },
    async lookahead() {},
    async mask() {
      const next = accepted.length < script.length ? script[accepted.length]! : EOG;
      const bits = new Int32Array(4);
      bits[next >> 5] = 1 << (next & 31);
      return bits;
    },
    isTerminated: () => accepted.length === script.length + 1,
    rollBack(n) {
      accepted.length -= n;
    },
    async close(limit) {
      const rest = [...script.slice(accepted.length), EOG];
      return rest.length - 1 <= limit ? rest : undefined;
    },
  };
}

const THINK_END = [50, 51];
const guideOf = (matcher: GuideMatcher | undefined, thinkingBudget?: number): DecodeGuide =>
  new DecodeGuide({ matcher, reasoning: true, thinkingBudget, thinkEnd: THINK_END, eogIds: new Set([EOG]) });

describe("DecodeGuide", () => {
  it("reasoning is free (no end of generation while a constraint waits), the matcher starts after </think>", async () => {
    const matcher = scriptedMatcher([7, 8]);
    const guide = guideOf(matcher);
    await guide.prepare();
    expect(guide.prepared).toEqual([{ kind: "no_eog" }]);
    expect(guide.advance(EOG)).toBe(false);
    for (const token of [1, 50, 2, 50]) expect(guide.advance(token)).toBe(true);
    expect(guide.reasoning).toBe(true);
    expect(guide.advance(51)).toBe(true); // 50 51 = </think>
    expect(guide.reasoning).toBe(false);
    await guide.prepare();
    expect(guide.prepared[0]!.kind).toBe("mask");
    expect(guide.advance(9)).toBe(false);
    expect(guide.advance(7)).toBe(true);
    expect(guide.advance(8)).toBe(true);
    expect(guide.done).toBe(false);
    expect(guide.advance(EOG)).toBe(true);
    expect(guide.done).toBe(true);
    await guide.prepare();
    expect(guide.prepared).toEqual([{ kind: "done" }]);
  });

  it("the budget forces every token of </think>, continuing a partial one", async () => {
    const guide = guideOf(scriptedMatcher([7]), 3);
    for (const token of [1, 2]) expect(guide.advance(token)).toBe(true);
    expect(guide.advance(50)).toBe(true); // the third reasoning token happens to start </think>
    await guide.prepare();
    expect(guide.prepared).toEqual([{ kind: "forced", token: 51 }]);
    expect(guide.advance(3)).toBe(false);
    expect(guide.advance(51)).toBe(true);
    expect(guide.reasoning).toBe(false);
    const fresh = guideOf(undefined, 0);
    await fresh.prepare();
    expect(fresh.prepared).toEqual([{ kind: "forced", token: 50 }]);
    expect(fresh.advance(50) && fresh.advance(51)).toBe(true);
    await fresh.prepare();
    // no constraint after the reasoning: free
    expect(fresh.prepared).toEqual([{ kind: "free" }]);
  });

  it("prepare(drafts) gives one rule per position and rolls the matcher back; validDrafts cuts at the first refused", async () => {
    const matcher = scriptedMatcher([7, 8, 9]);
    const guide = new DecodeGuide({ matcher, reasoning: false, thinkingBudget: undefined, thinkEnd: THINK_END, eogIds: new Set([EOG]) });
    expect(await guide.validDrafts([7, 8, 5, 9])).toEqual([7, 8]);
    expect(matcher.accepted).toEqual([]);
    await guide.prepare([7, 8]);
    expect(guide.prepared).toHaveLength(3);
    expect(matcher.accepted).toEqual([]);
    const allowed = (position: number): number[] => {
      const row = guide.apply(new Float32Array(128), position);
      return [...row].flatMap((v, i) => (v === Number.NEGATIVE_INFINITY ? [] : [i]));
    };
    expect([allowed(0), allowed(1), allowed(2)]).toEqual([[7], [8], [9]]);
    expect(() => guide.apply(new Float32Array(128), 3)).toThrow(/no constraint rule prepared/);
    const saved = guide.checkpoint();
    guide.advance(7);
    guide.advance(8);
    guide.restore(saved);
    expect(matcher.accepted).toEqual([]);
  });
});

/**
 * A grammar of nested brackets: OPEN first, then OPEN / CLOSE / FILL while a bracket is open, EOG once all are
 * closed (the shape of a JSON document's structure).
 */
const OPEN = 1;
const CLOSE = 2;
const FILL = 3;
function bracketMatcher(): GuideMatcher & { accepted: number[] } {
  const accepted: number[] = [];
  const depth = (): number => accepted.reduce((d, t) => d + (t === OPEN ? 1 : t === CLOSE ? -1 : 0), 0);
  const allowed = (): number[] => {
    if (accepted.length === 0) return [OPEN];
    if (accepted.at(-1) === EOG) return [];
    return depth() === 0 ? [EOG] : [OPEN, CLOSE, FILL];
  };
  return {
    accepted,
    acceptToken(token) {
      if (!allowed().includes(token)) return false;
      accepted.push(token);
      return true;
    },
    async lookahead() {},
    async mask() {
      const bits = new Int32Array(4);
      for (const id of allowed()) bits[id >> 5]! |= 1 << (id & 31);
      return bits;
    },
    isTerminated: () => accepted.at(-1) === EOG,
    rollBack(n) {
      accepted.length -= n;
    },
    // the grammar engine's walk in miniature: a closer when allowed, else the lowest allowed token
    async close(limit, closers) {
      const plan: number[] = [];
      try {
        while (plan.length <= limit) {
          const now = allowed();
          if (now.includes(EOG)) return [...plan, EOG];
          const token = closers.map((c) => c[0]!).find((id) => now.includes(id)) ?? Math.min(...now);
          accepted.push(token);
          plan.push(token);
        }
        return undefined;
      } finally {
        accepted.length -= plan.length;
      }
    },
  };
}

describe("DecodeGuide: outputs that finish", () => {
  const guideWith = (matcher: GuideMatcher, options: { reasoning?: boolean; closers?: number[] } = {}): DecodeGuide =>
    new DecodeGuide({
      matcher,
      reasoning: options.reasoning ?? false,
      thinkingBudget: undefined,
      thinkEnd: THINK_END,
      eogIds: new Set([EOG]),
      closers: (options.closers ?? [CLOSE]).map((id) => [id]),
    });

  it("leaves the model free while the tokens left are far from the shortest close", async () => {
    const guide = guideWith(bracketMatcher());
    for (const token of [OPEN, OPEN, OPEN]) {
      await guide.prepare([], 100);
      expect(guide.prepared[0]!.kind).toBe("mask");
      expect(guide.advance(token)).toBe(true);
    }
    await guide.prepare([], 100);
    expect(guide.prepared[0]!.kind).toBe("mask");
  });

  it("forces the shortest close when the tokens left come within its margin, ending exactly at the stop token", async () => {
    const matcher = bracketMatcher();
    const guide = guideWith(matcher);
    for (const token of [OPEN, OPEN, FILL, OPEN]) {
      await guide.prepare([], 100);
      expect(guide.advance(token)).toBe(true);
    }
    // three CLOSE then EOG: forced once the tokens left are at most 3 + closingMargin(3)
    const forcedAt = 3 + closingMargin(3);
    await guide.prepare([], forcedAt);
    expect(guide.prepared).toEqual([{ kind: "forced", token: CLOSE }]);
    expect(matcher.accepted).toEqual([OPEN, OPEN, FILL, OPEN]); // the walk was rolled back
    expect(guide.advance(FILL)).toBe(false);
    for (let left = forcedAt; left > forcedAt - 3; left--) {
      expect(guide.endsNext).toBe(false);
      await guide.prepare([], left);
      expect(guide.prepared).toEqual([{ kind: "forced", token: CLOSE }]);
      expect(guide.advance(CLOSE)).toBe(true);
    }
    expect(guide.endsNext).toBe(true);
    await guide.prepare([], forcedAt - 3);
    expect(guide.prepared).toEqual([{ kind: "forced", token: EOG }]);
    expect(guide.advance(EOG)).toBe(true);
    expect(guide.done).toBe(true);
  });

  it("one token more left than the close and its margin: still free", async () => {
    const guide = guideWith(bracketMatcher());
    for (const token of [OPEN, OPEN, FILL, OPEN]) {
      await guide.prepare([], 100);
      guide.advance(token);
    }
    await guide.prepare([], 3 + closingMargin(3) + 1);
    expect(guide.prepared[0]!.kind).toBe("mask");
  });

  it("a close that never ends (no closer allowed leads anywhere) is not forced", async () => {
    // without CLOSE as a closer the walk takes the lowest allowed token, OPEN, forever
    const guide = guideWith(bracketMatcher(), { closers: [] });
    await guide.prepare([], 100);
    guide.advance(OPEN);
    await guide.prepare([], 2);
    expect(guide.prepared[0]!.kind).toBe("mask");
  });

  it("closes the reasoning early enough to leave the answer its reserve", async () => {
    const guide = guideWith(bracketMatcher(), { reasoning: true });
    // total 40: answer OPEN CLOSE EOG = 3 tokens; reserve = </think> (2) + 3 + max(16, 40 / 4) = 21
    await guide.prepare([], 40);
    expect(guide.prepared).toEqual([{ kind: "no_eog" }]);
    for (let left = 40; left > 21; left--) {
      guide.advance(7);
      await guide.prepare([], left - 1);
      expect(guide.prepared).toEqual([{ kind: left - 1 <= 21 ? "forced" : "no_eog", ...(left - 1 <= 21 ? { token: 50 } : {}) }]);
    }
    expect(guide.advance(7)).toBe(false);
    expect(guide.advance(50) && guide.advance(51)).toBe(true);
    expect(guide.reasoning).toBe(false);
  });
});
