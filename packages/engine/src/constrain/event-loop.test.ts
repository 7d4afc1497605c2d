/**
 * The grammar engine never stops the event loop (issue 22): building its view of a Qwen3.5-sized
 * vocabulary (248,320 tokens) and compiling a new, large JSON Schema happen on the grammar worker,
 * while this thread keeps turning. Counted, never timed: the event loop's turns while the worker is
 * compiling (a compile on this thread would allow none).
 */
import { afterAll, describe, expect, it } from "vitest";
import { fixtureVocab, growVocab, QWEN35_VOCAB_SIZE } from "../tokenizer/test-support.js";
import { Tokenizer } from "../tokenizer/tokenizer.js";
import { ConstraintCompiler } from "./compiler.js";

/** A JSON Schema with `count` properties of mixed types, all required. */
function bigSchema(count: number, seed: string): string {
  const properties: Record<string, unknown> = {};
  for (let i = 0; i < count; i++) {
    const kind = i % 4;
    properties[`${seed}_${i}`] =
      kind === 0
        ? { type: "string", maxLength: 16 }
        : kind === 1
          ? { type: "integer", minimum: 0, maximum: 1000 }
          : kind === 2
            ? { type: "array", items: { type: "boolean" }, maxItems: 3 }
            : { enum: ["red", "green", `blue_${i}`] };
  }
  return JSON.stringify({ type: "object", properties, required: Object.keys(properties), additionalProperties: false });
}

/** Runs `work` while the event loop turns: the turns taken while `compiling()` said a compile was in flight. */
async function turnsDuring(work: () => Promise<unknown>, compiling: () => boolean): Promise<{ turns: number }> {
  let turns = 0;
  let running = true;
  const spin = (): void => {
    if (compiling()) turns++;
    if (running) setImmediate(spin);
  };
  setImmediate(spin);
  try {
    await work();
  } finally {
    running = false;
  }
  return { turns };
}

describe("the grammar engine and the event loop", () => {
  const tokenizer = Tokenizer.fromVocab(growVocab(fixtureVocab(), QWEN35_VOCAB_SIZE));
  const compiler = new ConstraintCompiler(tokenizer);
  afterAll(() => compiler.dispose?.());

  it("the vocabulary's first load and a new 200-property schema's compile run on the worker: this thread keeps turning meanwhile", async () => {
    expect(tokenizer.vocabSize).toBe(QWEN35_VOCAB_SIZE);
    const source = (seed: string) => ({ kind: "json_schema" as const, schema: bigSchema(200, seed), strictMode: true });
    const compiling = () => compiler.workerForTests?.compiling !== undefined;
    const first = await turnsDuring(() => compiler.check(source("first"), "constraint"), compiling);
    const second = await turnsDuring(() => compiler.check(source("second"), "constraint"), compiling);
    const seen = JSON.stringify({ first, second });
    expect(first.turns, seen).toBeGreaterThan(3);
    expect(second.turns, seen).toBeGreaterThan(3);
  }, 120_000);
});
