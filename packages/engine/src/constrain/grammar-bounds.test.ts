/**
 * No schema, grammar or request holds the others: constraints past the grammar engine's bounds are
 * refused with CONSTRAINT_TOO_COMPLEX (before compiling, from their length bounds; or while compiling,
 * past the compile's time or memory budget, when the compile is ended with its worker and the matchers
 * that lived there move to a new one; so do they when a grammar aborts the runtime), a new grammar
 * compiles on a worker where no running sequence's matcher lives, and a sequence whose mask has not come
 * sits its steps out while the others step on.
 * Ordered and counted, never timed: a time budget is tested far below what any compile needs, and
 * "meanwhile" is what arrives while a compile is in flight or while a worker is held.
 */
import { describe, expect, it } from "vitest";
import { Engine } from "../engine.js";
import type { ConstraintSpec, GenerationEvent } from "../engine-types.js";
import type { ConstraintCompiler } from "./compiler.js";
import { ConstraintError } from "./errors.js";
import type { GrammarThread } from "./grammar-thread.js";
import { planGuide } from "./index.js";
import { DEFAULT_GRAMMAR_LIMITS, type GrammarLimits, resolveGrammarLimits } from "./limits.js";

const schemaSpec = (schema: object): ConstraintSpec => ({ type: "json_schema", schema: schema as Record<string, unknown> });

/** The error `work` throws (fails when it throws none). */
function thrown(work: () => unknown): unknown {
  try {
    work();
  } catch (error) {
    return error;
  }
  throw new Error("expected an error");
}

/** Plans `constraint` under the default bounds (or `limits`): what it throws, if anything. */
function plan(constraint: ConstraintSpec, limits: Partial<GrammarLimits> = {}): unknown {
  try {
    planGuide({ constraint }, { ...DEFAULT_GRAMMAR_LIMITS, ...limits });
    return undefined;
  } catch (error) {
    return error;
  }
}

/**
 * A schema whose compile takes seconds to minutes (40 strings of distinct length bounds: the grammar
 * engine precomputes the masks of every position of each; past maxRepetitionSum by default).
 */
function heavySchema(seed = "p"): ConstraintSpec {
  const properties: Record<string, unknown> = {};
  for (let i = 0; i < 40; i++) properties[`${seed}_${i}`] = { type: "string", maxLength: 200 + i };
  return schemaSpec({ type: "object", properties, required: Object.keys(properties) });
}
/** What heavySchema needs to pass the checks before compiling. */
const HEAVY_SUM = { maxRepetitionSum: 100_000 };
/** A test that compiles heavySchema until a bound ends it may take minutes on a slow machine. */
const SLOW_MACHINE_MS = 600_000;

/** Endless output with some structure (a moved matcher must stand where its mirror does). */
const TAGS: ConstraintSpec = { type: "grammar", ebnf: 'root ::= "<" [a-z]{3} ">" root' };
const TAGS_PREFIX = /^(<[a-z]{3}>)*(<[a-z]{0,3})?$/;

/** The engine's grammar side (test hooks). */
function internals(engine: Engine): { compiler: () => ConstraintCompiler | undefined; limits: GrammarLimits } {
  const inside = engine as unknown as { guided: { compiler?: ConstraintCompiler }; options: { grammarLimits: GrammarLimits } };
  return { compiler: () => inside.guided.compiler, limits: inside.options.grammarLimits };
}

/** A stream read in the background: its tokens, each with what `mark()` said when it arrived. */
function follow(stream: AsyncIterable<GenerationEvent>, mark: () => string = () => "") {
  const marks: string[] = [];
  const waiters: { count: number; when: string | undefined; resolve: () => void }[] = [];
  const seen = (when: string | undefined): number => (when === undefined ? marks.length : marks.filter((m) => m === when).length);
  const done = (async () => {
    for await (const event of stream) {
      if (event.type === "done") return event.result;
      if (event.token < 0) continue;
      marks.push(mark());
      for (const w of [...waiters]) {
        if (seen(w.when) >= w.count) {
          waiters.splice(waiters.indexOf(w), 1);
          w.resolve();
        }
      }
    }
    return undefined;
  })();
  return {
    marks,
    done,
    /** resolves once `count` tokens (marked `when`, if given) have arrived */
    reach(count: number, when?: string): Promise<void> {
      if (seen(when) >= count) return Promise.resolve();
      return new Promise((resolve) => waiters.push({ count, when, resolve }));
    },
  };
}

describe("bounds checked before compiling", () => {
  it("a string bound past maxRepetition is refused, naming the field, keyword, path, value and bound", () => {
    const error = plan(schemaSpec({ type: "object", properties: { notes: { type: "string", maxLength: 32767 } } }));
    expect(ConstraintError.isInstance(error)).toBe(true);
    expect(error).toMatchObject({
      code: "CONSTRAINT_TOO_COMPLEX",
      field: "constraint.schema",
      path: "/properties/notes",
      keyword: "maxLength",
    });
    expect((error as Error).message).toMatch(
      /^constraint\.schema: maxLength 32767 at \/properties\/notes is above 256, .*\(grammarLimits\.maxRepetition\)/,
    );
    // at the bound, unbounded, a lower bound alone (it counts in the sum), or an array's maxItems (a repeated
    // reference to its items): nothing refused
    expect(plan(schemaSpec({ type: "string", minLength: 10, maxLength: 256 }))).toBeUndefined();
    expect(plan(schemaSpec({ type: "integer", maxLength: 5000 }))).toBeUndefined();
    expect(plan(schemaSpec({ type: ["string", "null"], maxLength: 5000 }))).toMatchObject({ code: "CONSTRAINT_TOO_COMPLEX" });
    expect(plan(schemaSpec({ type: "string", minLength: 300 }))).toBeUndefined();
    expect(plan(schemaSpec({ type: "string", minLength: 3000 }))).toMatchObject({ code: "CONSTRAINT_TOO_COMPLEX", keyword: "minLength" });
    expect((plan(schemaSpec({ type: "string", minLength: 3000 })) as Error).message).toMatch(
      /add up to 3000 repeated characters \(minLength 3000 at the root; .*grammarLimits\.maxRepetitionSum/,
    );
    expect(plan(schemaSpec({ type: "array", items: { type: "string", maxLength: 8 }, maxItems: 100_000 }))).toBeUndefined();
    // anywhere in the schema: in $defs, items, anyOf
    const nested = schemaSpec({
      $defs: { note: { anyOf: [{ type: "null" }, { type: "string", maxLength: 1000 }] } },
      type: "array",
      items: { $ref: "#/$defs/note" },
    });
    expect(plan(nested)).toMatchObject({ code: "CONSTRAINT_TOO_COMPLEX", path: "/$defs/note/anyOf/1", keyword: "maxLength" });
  });

  it("distinct bounds add up to maxRepetitionSum; the same bound counts once", () => {
    const strings = (bounds: number[]) =>
      schemaSpec({ type: "object", properties: Object.fromEntries(bounds.map((b, i) => [`s${i}`, { type: "string", maxLength: b }])) });
    expect(plan(strings(new Array(40).fill(250)))).toBeUndefined();
    const error = plan(strings([250, 249, 248, 247, 246, 245, 244, 243, 242]));
    expect(error).toMatchObject({ code: "CONSTRAINT_TOO_COMPLEX", field: "constraint.schema" });
    expect((error as Error).message).toMatch(
      /add up to 2214 repeated characters \(maxLength 250 at \/properties\/s0, maxLength 249 at \/properties\/s1, maxLength 248 at \/properties\/s2 and 6 more; .*above 2048 \(grammarLimits\.maxRepetitionSum\)/,
    );
  });

  it("EBNF: a repeated character class or string past the bound is refused with its line; a repeated rule, a quoted or commented brace is not", () => {
    const ebnf = (text: string): ConstraintSpec => ({ type: "grammar", ebnf: text });
    const error = plan(ebnf('root ::= "a" rest\nrest ::= [a-z]{0,5000}'));
    expect(error).toMatchObject({ code: "CONSTRAINT_TOO_COMPLEX", field: "constraint.ebnf" });
    expect((error as Error).message).toMatch(/^constraint\.ebnf: the repetition \{0,5000\} of \[a-z\] on line 2 is above 256/);
    expect(plan(ebnf('root ::= "ab"{300}'))).toMatchObject({ code: "CONSTRAINT_TOO_COMPLEX" });
    expect(plan(ebnf("root ::= [a-z]{300,}"))).toMatchObject({ code: "CONSTRAINT_TOO_COMPLEX" });
    expect(plan(ebnf('root ::= item{0,5000}\nitem ::= "a" [0-9]{2}'))).toBeUndefined();
    expect(plan(ebnf('root ::= "x{0,5000}" [a-z]{0,256} # [a-z]{0,5000}'))).toBeUndefined();
    expect(plan(ebnf('root ::= "\\"" [\\]a]{0,5000}'))).toMatchObject({ code: "CONSTRAINT_TOO_COMPLEX" });
  });

  it("tool_call: a tool's parameters are checked under its own field; a named choice counts its tool alone", () => {
    const tools = [
      { name: "short", parameters: { type: "object", properties: { q: { type: "string", maxLength: 64 } } } },
      { name: "long", parameters: { type: "object", properties: { body: { type: "string", maxLength: 4000 } } } },
    ];
    const error = plan({ type: "tool_call", format: "json", tools, choice: "required" });
    expect(error).toMatchObject({ code: "CONSTRAINT_TOO_COMPLEX", field: "constraint.tools[1].parameters", path: "/properties/body" });
    // a named choice compiles that tool alone: the other's bound is not in its grammar
    expect(plan({ type: "tool_call", format: "json", tools, choice: { name: "short" } })).toBeUndefined();
  });

  it("the limits are engine options: other values move the bounds; a bad value is ENGINE_BAD_OPTION naming the field", () => {
    expect(plan(schemaSpec({ type: "string", maxLength: 1000 }), { maxRepetition: 1000 })).toBeUndefined();
    expect(plan(schemaSpec({ type: "string", maxLength: 100 }), { maxRepetition: 64 })).toMatchObject({ code: "CONSTRAINT_TOO_COMPLEX" });
    expect(resolveGrammarLimits(undefined)).toEqual(DEFAULT_GRAMMAR_LIMITS);
    expect(resolveGrammarLimits({ workers: 3 })).toEqual({ ...DEFAULT_GRAMMAR_LIMITS, workers: 3 });
    for (const [bad, field] of [
      [{ compileTimeoutMs: 0 }, "grammarLimits.compileTimeoutMs"],
      [{ maxRepetition: 1.5 }, "grammarLimits.maxRepetition"],
      [{ memoryMiB: 4096 }, "grammarLimits.memoryMiB"],
      [{ threads: 2 }, "grammarLimits.threads"],
    ] as const) {
      expect(thrown(() => resolveGrammarLimits(bad as Partial<GrammarLimits>))).toMatchObject({ code: "ENGINE_BAD_OPTION", field });
    }
  });

  it("through the engine: generate throws it and prepareConstraint rejects with it, before any compile", async () => {
    const engine = await Engine.loadDefault({ maxSequences: 1 });
    try {
      const spec = schemaSpec({ type: "object", properties: { notes: { type: "string", maxLength: 32767 } } });
      expect(thrown(() => engine.generate("Hi", { constraint: spec }))).toMatchObject({ code: "CONSTRAINT_TOO_COMPLEX" });
      await expect(engine.prepareConstraint(spec)).rejects.toMatchObject({ code: "CONSTRAINT_TOO_COMPLEX", keyword: "maxLength" });
      expect(internals(engine).compiler()).toBeUndefined();
    } finally {
      engine.dispose();
    }
  });
});

describe("bounds while compiling: the compile is ended with its worker, the sequences on it move", () => {
  it(
    "a compile past its time budget fails with CONSTRAINT_TOO_COMPLEX; a running constrained sequence on that worker moves and finishes valid",
    async () => {
      // one worker: the compile lands where the running sequence's matcher lives
      const engine = await Engine.loadDefault({ maxSequences: 2, grammarLimits: { workers: 1, ...HEAVY_SUM } });
      const { compiler, limits } = internals(engine);
      try {
        let ended = false;
        const running = follow(engine.generate("Tell me", { temperature: 1, seed: 3, maxTokens: 120, constraint: TAGS }), () =>
          ended ? "after" : "before",
        );
        await running.reach(1);
        const first = compiler()!.workersForTests[0]!;
        // far below what the compile needs on any machine
        limits.compileTimeoutMs = 1;
        const error = await engine.prepareConstraint(heavySchema()).catch((e: unknown) => e);
        ended = true;
        limits.compileTimeoutMs = DEFAULT_GRAMMAR_LIMITS.compileTimeoutMs;
        expect(error).toMatchObject({ code: "CONSTRAINT_TOO_COMPLEX", field: "constraint.schema" });
        expect((error as Error).message).toMatch(/^constraint\.schema: compiling it ran past 1 ms, .*\(grammarLimits\.compileTimeoutMs\)/);
        expect(first.dead).toBeDefined();
        const result = await running.done;
        expect(result?.stopReason).toBe("max_tokens");
        expect(result?.text).toMatch(TAGS_PREFIX);
        // it went on after its worker was ended, on another one
        expect(running.marks.filter((m) => m === "after").length).toBeGreaterThan(0);
        expect(compiler()!.workersForTests).not.toContain(first);
        // and so does the next constrained request
        const again = await engine.generateToEnd("Tell me", { temperature: 1, seed: 4, maxTokens: 12, constraint: TAGS });
        expect(again.text).toMatch(TAGS_PREFIX);
      } finally {
        engine.dispose();
      }
    },
    SLOW_MACHINE_MS,
  );

  it(
    "a compile past the memory bound fails with CONSTRAINT_TOO_COMPLEX naming memoryMiB; the running sequence goes on",
    async () => {
      const engine = await Engine.loadDefault({
        maxSequences: 2,
        // no time budget in the way on a slow machine: the memory bound ends this compile
        grammarLimits: { workers: 1, memoryMiB: 32, compileTimeoutMs: 3_600_000, ...HEAVY_SUM },
      });
      const { compiler } = internals(engine);
      try {
        let ended = false;
        const running = follow(engine.generate("Tell me", { temperature: 1, seed: 5, maxTokens: 120, constraint: TAGS }), () =>
          ended ? "after" : "before",
        );
        await running.reach(1);
        const first = compiler()!.workersForTests[0]!;
        const error = await engine.prepareConstraint(heavySchema("m")).catch((e: unknown) => e);
        ended = true;
        expect(error).toMatchObject({ code: "CONSTRAINT_TOO_COMPLEX", field: "constraint.schema" });
        expect((error as Error).message).toMatch(
          /^constraint\.schema: the grammar engine needed more than 32 MiB of memory \(grammarLimits\.memoryMiB\)/,
        );
        expect(first.dead).toBeDefined();
        const result = await running.done;
        expect(result?.stopReason).toBe("max_tokens");
        expect(result?.text).toMatch(TAGS_PREFIX);
        expect(running.marks.filter((m) => m === "after").length).toBeGreaterThan(0);
      } finally {
        engine.dispose();
      }
    },
    SLOW_MACHINE_MS,
  );
});

describe("a grammar that aborts the grammar engine's runtime", () => {
  it("fails alone with its reason (CONSTRAINT_BAD_SCHEMA); the running sequence on that worker moves and goes on", async () => {
    const engine = await Engine.loadDefault({ maxSequences: 2, grammarLimits: { workers: 1 } });
    const { compiler } = internals(engine);
    try {
      let ended = false;
      const running = follow(engine.generate("Tell me", { temperature: 1, seed: 8, maxTokens: 80, constraint: TAGS }), () =>
        ended ? "after" : "before",
      );
      await running.reach(1);
      const first = compiler()!.workersForTests[0]!;
      // xgrammar's converter fails an internal check on an integer bound past int64: its runtime aborts. The
      // schema check refuses such a bound first (it is past the exact ranges' digits), so it is sent past the check
      const refused = await engine.prepareConstraint(schemaSpec({ type: "integer", minimum: -1e300 })).catch((e: unknown) => e);
      expect(refused).toMatchObject({ code: "CONSTRAINT_UNSUPPORTED_KEYWORD", keyword: "minimum" });
      const source = { kind: "json_schema" as const, schema: JSON.stringify({ type: "integer", minimum: -1e300 }), strictMode: true };
      const error = await compiler()!
        .check(source, "constraint")
        .catch((e: unknown) => e);
      ended = true;
      expect(error).toMatchObject({ code: "CONSTRAINT_BAD_SCHEMA", field: "constraint.schema" });
      expect((error as Error).message).toMatch(/Integer exceeds minimum limit/);
      expect(first.dead).toBeDefined();
      const result = await running.done;
      expect(result?.stopReason).toBe("max_tokens");
      expect(result?.text).toMatch(TAGS_PREFIX);
      expect(running.marks.filter((m) => m === "after").length).toBeGreaterThan(0);
    } finally {
      engine.dispose();
    }
  });
});

describe("nobody waits on a compile or a mask", () => {
  it(
    "while a long compile runs, an unconstrained stream and a running constrained sequence keep producing tokens",
    async () => {
      const engine = await Engine.loadDefault({ maxSequences: 3, grammarLimits: HEAVY_SUM });
      const { compiler } = internals(engine);
      const abort = new AbortController();
      /** the worker of the running constrained sequence's matcher */
      let home: GrammarThread | undefined;
      /** a compile is in flight on a worker other than the running sequence's */
      const compiling = (): boolean =>
        home !== undefined && compiler()?.workersForTests.some((t) => t !== home && t.compiling !== undefined) === true;
      try {
        const constrained = follow(
          engine.generate("Tell me", { temperature: 1, seed: 6, maxTokens: 100_000, constraint: TAGS, signal: abort.signal }),
          () => (compiling() ? "compiling" : ""),
        );
        await constrained.reach(1);
        home = compiler()!.workersForTests[0]!;
        const free = follow(engine.generate("Once", { temperature: 0, maxTokens: 100_000, stopAtEog: false, signal: abort.signal }), () =>
          compiling() ? "compiling" : "",
        );
        await free.reach(1);
        let settled = false;
        const heavy = engine.prepareConstraint(heavySchema("c")).then(
          () => "compiled",
          (e: unknown) => e,
        );
        void heavy.then(() => (settled = true));
        // both streams get tokens while the compile runs (it takes seconds to minutes, five tokens take milliseconds)
        await Promise.race([Promise.all([constrained.reach(5, "compiling"), free.reach(5, "compiling")]), heavy]);
        expect(settled).toBe(false);
        expect(constrained.marks.filter((m) => m === "compiling").length).toBeGreaterThanOrEqual(5);
        expect(free.marks.filter((m) => m === "compiling").length).toBeGreaterThanOrEqual(5);
        // the compile went to a second worker: the running sequence's kept serving its masks
        const other = compiler()!.workersForTests.find((t: GrammarThread) => t !== home)!;
        expect(other.compiling).toBeDefined();
        await other.terminate();
        expect(await heavy).toMatchObject({ code: "CONSTRAINT_ENGINE_UNAVAILABLE" });
        abort.abort();
        expect((await constrained.done)?.text).toMatch(TAGS_PREFIX);
        await free.done;
      } finally {
        abort.abort();
        engine.dispose();
      }
    },
    SLOW_MACHINE_MS,
  );

  it("a constrained sequence whose mask has not come when its step is done sits out; the others step on", async () => {
    const engine = await Engine.loadDefault({ maxSequences: 2 });
    const { compiler } = internals(engine);
    const abort = new AbortController();
    let held = false;
    try {
      const mark = (): string => (held ? "held" : "");
      const constrained = follow(
        engine.generate("Tell me", { temperature: 1, seed: 7, maxTokens: 100_000, constraint: TAGS, signal: abort.signal }),
        mark,
      );
      const free = follow(engine.generate("Once", { temperature: 0, maxTokens: 100_000, stopAtEog: false, signal: abort.signal }), mark);
      await Promise.all([constrained.reach(2), free.reach(2)]);
      // the grammar worker stops answering, as a slow mask would hold it (no compile: nothing says to wait)
      const release = compiler()!.workersForTests[0]!.holdForTests();
      held = true;
      await free.reach(20, "held");
      const heldTokens = constrained.marks.filter((m) => m === "held").length;
      held = false;
      release();
      const before = constrained.marks.length;
      await constrained.reach(before + 3);
      // a mask asked before the hold may still come: at most one token meanwhile, against twenty of the free stream
      expect(heldTokens).toBeLessThanOrEqual(1);
      abort.abort();
      expect((await constrained.done)?.text).toMatch(TAGS_PREFIX);
      await free.done;
    } finally {
      abort.abort();
      engine.dispose();
    }
  });
});
