/**
 * DecodeGuide's phases with a scripted matcher (the grammar engine's part is tested through the
 * engine): free reasoning until `</think>` (written by the model, or forced at the budget, also when
 * it is several tokens), then the matcher; drafts and checkpoints roll the matcher back.
 */
import { describe, expect, it } from "vitest";
import { DecodeGuide, type GuideMatcher } from "./guide.js";

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
