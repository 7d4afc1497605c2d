/**
 * The grammar worker and the main thread's mirror of its matchers, on the fixture vocabulary: the
 * mirror's synchronous answers come from the worker's bitmasks (checked exact against the worker's
 * own acceptToken), rollbacks and drafts keep masks known without a round trip, an unknown mask is an
 * internal error, a dead worker fails what waits on it and the next request starts a new worker,
 * and dispose ends it.
 */
import { afterAll, describe, expect, it } from "vitest";
import { fixtureTokenizer } from "../tokenizer/test-support.js";
import { ConstraintCompiler } from "./compiler.js";
import { ConstraintError } from "./errors.js";
import type { GrammarThreadMessage, GrammarThreadReply, GrammarThreadRequest } from "./grammar-thread.js";
import { type MatcherChannel, maskAllows, RemoteMatcher } from "./remote-matcher.js";

const tokenizer = fixtureTokenizer();
const single = (text: string): number => {
  const ids = tokenizer.encode(text);
  if (ids.length !== 1) throw new Error(`the fixture vocabulary writes ${JSON.stringify(text)} in ${ids.length} tokens`);
  return ids[0]!;
};
const [A, B, C] = ["a", "b", "c"].map(single) as [number, number, number];
const STOP = [...tokenizer.eogIds][0]!;
/** "a", any number of "b", "c" (then the grammar may end) */
const SOURCE = { kind: "ebnf" as const, ebnf: 'root ::= "a" "b"* "c"' };

const channelOf = (matcher: RemoteMatcher): MatcherChannel => (matcher as unknown as { channel: MatcherChannel }).channel;

/** The matcher's channel, counting the round trips. */
function counted(matcher: RemoteMatcher): { trips: () => number } {
  const channel = (matcher as unknown as { channel: MatcherChannel }).channel;
  let trips = 0;
  const request = channel.request.bind(channel);
  (matcher as unknown as { channel: MatcherChannel }).channel = {
    request: (message: GrammarThreadRequest) => {
      trips++;
      return request(message);
    },
    post: (message: GrammarThreadMessage) => channel.post(message),
  };
  return { trips: () => trips };
}

describe("the grammar worker's matchers, mirrored", () => {
  const compiler = new ConstraintCompiler(tokenizer);
  afterAll(() => compiler.dispose());

  it("accepts synchronously from the known mask; an unknown mask is an internal error until it is fetched", async () => {
    const { matcher, release } = await compiler.matcher(SOURCE, "constraint");
    try {
      expect(matcher.knowsMask).toBe(true);
      expect(matcher.acceptToken(B)).toBe(false);
      expect(matcher.acceptToken(A)).toBe(true);
      expect(matcher.knowsMask).toBe(false);
      expect(() => matcher.acceptToken(B)).toThrow(/internal: the grammar's mask at this position is not known/);
      const mask = await matcher.mask();
      expect([maskAllows(mask, B), maskAllows(mask, C), maskAllows(mask, A), maskAllows(mask, STOP)]).toEqual([true, true, false, false]);
      expect(matcher.acceptToken(B)).toBe(true);
      await matcher.mask();
      expect(matcher.acceptToken(C)).toBe(true);
      expect(maskAllows(await matcher.mask(), STOP)).toBe(true);
      expect(matcher.isTerminated()).toBe(false);
      expect(matcher.acceptToken(STOP)).toBe(true);
      expect(matcher.isTerminated()).toBe(true);
      expect(matcher.acceptToken(C)).toBe(false);
      // the worker agreed with every accept (a disagreement breaks its matcher: the next request fails)
      matcher.rollBack(1);
      const { masks } = await channelOf(matcher).request({ op: "mask", matcher: matcher.id });
      expect(maskAllows(masks[0]!, STOP)).toBe(true);
    } finally {
      release();
    }
  });

  it("the bitmask is exact: a bit is set iff the worker's matcher accepts the token; a stop token is accepted iff the grammar ends", async () => {
    const { matcher, release } = await compiler.matcher(
      { kind: "json_schema", schema: '{"type":"integer"}', strictMode: true },
      "constraint",
    );
    try {
      for (const prefix of [[], [single("1")]]) {
        for (const token of prefix) {
          await matcher.mask();
          expect(matcher.acceptToken(token)).toBe(true);
        }
        const mask = await matcher.mask();
        // every token of the fixture vocabulary, one `prepare` of one draft each
        const channel = channelOf(matcher);
        const verdicts = await Promise.all(
          Array.from({ length: tokenizer.vocabSize }, (_, token) =>
            channel.request({ op: "prepare", matcher: matcher.id, drafts: [token], withCurrent: false }),
          ),
        );
        const accepted = verdicts.flatMap((v: GrammarThreadReply, token) => (v.accepted === 1 ? [token] : []));
        const allowed = Array.from({ length: tokenizer.vocabSize }, (_, token) => token).filter((token) => maskAllows(mask, token));
        expect(accepted).toEqual(allowed);
        expect(allowed.length).toBeGreaterThan(0);
        const terminated = verdicts.flatMap((v, token) => (v.terminated ? [token] : []));
        expect(terminated).toEqual(allowed.filter((token) => tokenizer.eogIds.has(token)));
        // an empty integer cannot end; "1" can
        expect(terminated.length > 0).toBe(prefix.length > 0);
      }
    } finally {
      release();
    }
  });

  it("a rollback restores the earlier masks and advancing again through the same tokens needs no round trip", async () => {
    const { matcher, release } = await compiler.matcher(SOURCE, "constraint");
    const { trips } = counted(matcher);
    try {
      expect(matcher.acceptToken(A)).toBe(true);
      await matcher.mask();
      expect(matcher.acceptToken(B)).toBe(true);
      await matcher.mask();
      expect(trips()).toBe(2);
      matcher.rollBack(2);
      expect(matcher.knowsMask).toBe(true);
      expect(matcher.acceptToken(B)).toBe(false);
      expect(matcher.acceptToken(A)).toBe(true);
      expect(matcher.acceptToken(B)).toBe(true);
      expect(matcher.acceptToken(C)).toBe(true);
      // a different path than before: this position's mask is not known
      expect(matcher.knowsMask).toBe(false);
      expect(trips()).toBe(2);
    } finally {
      release();
    }
  });

  it("lookahead computes the masks along drafts in one round trip, up to the first refused; the drafts then advance with none", async () => {
    const { matcher, release } = await compiler.matcher(SOURCE, "constraint");
    const { trips } = counted(matcher);
    try {
      await matcher.lookahead([A, B, B, A, C]);
      expect(trips()).toBe(1);
      for (const token of [A, B, B]) expect(matcher.acceptToken(token)).toBe(true);
      // the refused draft: known to be refused, and the masks end there
      expect(matcher.acceptToken(A)).toBe(false);
      expect(matcher.acceptToken(C)).toBe(true);
      expect(matcher.knowsMask).toBe(false);
      matcher.rollBack(4);
      // everything along [A, B, B] is known again: no round trip
      await matcher.lookahead([A, B, B]);
      expect(trips()).toBe(1);
      await matcher.lookahead([A, B, B, C]);
      expect(trips()).toBe(2);
      for (const token of [A, B, B, C]) expect(matcher.acceptToken(token)).toBe(true);
      expect(maskAllows(await matcher.mask(), STOP)).toBe(true);
      expect(trips()).toBe(2);
    } finally {
      release();
    }
  });

  it("a mirror with no known mask throws a clear internal error (a channel that never answers is never asked)", () => {
    const channel: MatcherChannel = {
      request: () => new Promise<never>(() => undefined),
      post: () => undefined,
    };
    const matcher = new RemoteMatcher(channel, 0, new Int32Array(1).fill(1 << 3), new Set([4]));
    expect(matcher.acceptToken(2)).toBe(false);
    expect(matcher.acceptToken(3)).toBe(true);
    expect(() => matcher.acceptToken(3)).toThrow(/internal: .*not known yet \(token 3\)/);
    expect(() => matcher.rollBack(2)).toThrow(/cannot roll back 2 tokens/);
    matcher.dispose();
    expect(() => matcher.acceptToken(3)).toThrow(/disposed/);
  });

  it("a dead worker fails what waits on it with CONSTRAINT_ENGINE_UNAVAILABLE; the next request starts a new worker", async () => {
    const { matcher } = await compiler.matcher(SOURCE, "constraint");
    const first = compiler.workerForTests!;
    expect(matcher.acceptToken(A)).toBe(true);
    first.crashForTests();
    const error = await matcher.mask().catch((e: unknown) => e);
    expect(ConstraintError.isInstance(error)).toBe(true);
    expect(error).toMatchObject({ code: "CONSTRAINT_ENGINE_UNAVAILABLE", message: expect.stringMatching(/worker thread died/) });
    expect(first.dead).toBeDefined();
    await expect(matcher.lookahead([B])).rejects.toMatchObject({ code: "CONSTRAINT_ENGINE_UNAVAILABLE" });
    matcher.dispose();
    const again = await compiler.matcher(SOURCE, "constraint");
    try {
      expect(compiler.workerForTests).not.toBe(first);
      expect(again.matcher.acceptToken(A)).toBe(true);
      await again.matcher.mask();
      expect(again.matcher.acceptToken(C)).toBe(true);
    } finally {
      again.release();
    }
  });

  it("an aborted WebAssembly runtime ends the worker at once (fatal): what waits fails, the next request gets a new worker", async () => {
    const { matcher } = await compiler.matcher(SOURCE, "constraint");
    const first = compiler.workerForTests!;
    expect(matcher.acceptToken(A)).toBe(true);
    first.crashForTests(true);
    const error = await matcher.mask().catch((e: unknown) => e);
    expect(error).toMatchObject({
      code: "CONSTRAINT_ENGINE_UNAVAILABLE",
      message: expect.stringMatching(/WebAssembly runtime aborted \(Aborted\(tests\)\)/),
    });
    expect(first.dead).toBe(error);
    matcher.dispose();
    // no wait for the old worker's exit: the next request already starts a new one
    const again = await compiler.matcher(SOURCE, "constraint");
    expect(compiler.workerForTests).not.toBe(first);
    again.release();
  });

  it("dispose ends the worker: requests waiting on it fail, the next one starts a new worker", async () => {
    const own = new ConstraintCompiler(tokenizer);
    await own.check(SOURCE, "constraint");
    const thread = own.workerForTests!;
    // sent, and the worker ended before it can answer (nothing runs between these two lines)
    const waiting = thread
      .request({ op: "compile", key: "b", source: { kind: "ebnf", ebnf: 'root ::= "b"' }, field: "constraint" })
      .catch((e: unknown) => e);
    await own.dispose();
    expect(thread.dead).toMatchObject({ code: "CONSTRAINT_ENGINE_UNAVAILABLE", message: "the grammar engine was closed" });
    expect(await waiting).toMatchObject({ code: "CONSTRAINT_ENGINE_UNAVAILABLE" });
    expect(own.workerForTests).toBeUndefined();
    await own.check(SOURCE, "constraint");
    expect(own.workerForTests).toBeDefined();
    await own.dispose();
  });

  it("a refused grammar keeps its error code and the runtime's reason", async () => {
    const error = await compiler.check({ kind: "ebnf", ebnf: "root ::= (" }, "constraint").catch((e: unknown) => e);
    expect(error).toMatchObject({ code: "CONSTRAINT_BAD_GRAMMAR", field: "constraint.ebnf" });
    expect((error as Error).message).toMatch(/^constraint\.ebnf: the grammar was refused by the grammar engine: \S/);
  });
});
