/**
 * The cost of constrained decoding: decode tokens/s of the same file and prompt with and without a
 * JSON-schema constraint, in one process, and their ratio (docs/benchmarks/constrained.md).
 *
 *   flock /work/bench.lock pnpm --filter @keepquant/bench bench:constrained
 *
 * The file is the real Qwen3.5-0.8B shape (Q4_K_M, vocabulary 248,320: the mask covers the whole
 * vocabulary each step), `.cache/real-shape/` (generated and pinned by real-shape.ts). Its synthetic
 * weights write gibberish, so the constraint masks a real share of the vocabulary at every step. The
 * schema's array needs at least 8 objects (well over 64 tokens), so a constrained run does not end
 * before `decodeTokens` (the bench says so when it did).
 * The grammar's bitmask for the next step is computed on the JS thread while the native step runs;
 * the compile of the schema (once per schema, cached) is timed apart and excluded.
 *
 * Environment: KEEPQUANT_BENCH_DECODE (tokens per run, default 64), KEEPQUANT_BENCH_REPEATS (default
 * 5; the best run of each side counts), KEEPQUANT_BENCH_THREADS (default 2), KEEPQUANT_BENCH_FILE (a
 * GGUF file instead of the real-shape Q4_K_M).
 */
import os from "node:os";
import { Engine, type GenerateParams } from "@keepquant/engine";
import { measureGuidedSteps } from "@keepquant/engine/bench";
import { ensureRealShape } from "./real-shape.js";

const decodeTokens = Number(process.env.KEEPQUANT_BENCH_DECODE ?? 64);
const repeats = Number(process.env.KEEPQUANT_BENCH_REPEATS ?? 5);
const threads = Number(process.env.KEEPQUANT_BENCH_THREADS ?? 2);
const file = process.env.KEEPQUANT_BENCH_FILE || (await ensureRealShape(["Q4_K_M"], (line) => console.error(line)))["Q4_K_M"];

const SCHEMA = {
  type: "object",
  properties: {
    people: {
      type: "array",
      minItems: 8,
      items: {
        type: "object",
        properties: {
          id: { type: "integer", minimum: 0, maximum: 99999 },
          name: { type: "string", maxLength: 24 },
          role: { enum: ["admin", "user", "guest"] },
          active: { type: "boolean" },
        },
        required: ["id", "name", "role", "active"],
        additionalProperties: false,
      },
    },
  },
  required: ["people"],
  additionalProperties: false,
} as const;
const PROMPT = "List the people of the team as JSON: ";

const engine = await Engine.load(file, { threads, maxSequences: 1 });
const base: GenerateParams = { temperature: 0, maxTokens: decodeTokens, ignoreEog: true };
const constrained: GenerateParams = {
  temperature: 0,
  maxTokens: decodeTokens,
  constraint: { type: "json_schema", schema: SCHEMA as unknown as Record<string, unknown> },
};

const compileStart = performance.now();
await engine.prepareConstraint(constrained.constraint!);
const compileMs = performance.now() - compileStart;

// warm-up of both paths (page cache, first matcher)
await engine.generateToEnd(PROMPT, { ...base, maxTokens: 4 });
await engine.generateToEnd(PROMPT, { ...constrained, maxTokens: 4 });

const free: number[] = [];
const guided: number[] = [];
let guidedTokens = 0;
let sample = "";
let sampleTokens: number[] = [];
for (let r = 0; r < repeats; r++) {
  free.push((await engine.generateToEnd(PROMPT, base)).stats.decodeTokensPerSecond);
  const result = await engine.generateToEnd(PROMPT, constrained);
  guided.push(result.stats.decodeTokensPerSecond);
  guidedTokens = result.tokens.length;
  sample = result.text;
  sampleTokens = result.tokens;
}
// the grammar work per token alone (the same tokens replayed through a fresh matcher), best of 3
let grammarMs = Number.POSITIVE_INFINITY;
let prepareMs = 0;
let applyMs = 0;
for (let r = 0; r < 3; r++) {
  const times = await measureGuidedSteps(engine.tokenizer!, constrained.constraint!, sampleTokens);
  const perToken = (times.prepareMs + times.applyMs) / Math.max(1, times.tokens);
  if (perToken < grammarMs) {
    grammarMs = perToken;
    prepareMs = times.prepareMs / Math.max(1, times.tokens);
    applyMs = times.applyMs / Math.max(1, times.tokens);
  }
}
engine.dispose();

const best = (values: number[]): number => Math.max(...values);
const ratio = best(guided) / best(free);
console.log(`constrained decoding on ${file}`);
console.log(`CPU: ${os.cpus()[0]?.model ?? "unknown"}, ${threads} threads; ${decodeTokens} tokens per run, best of ${repeats}`);
console.log("");
console.log("| run | decode tok/s | runs |");
console.log("|---|---:|---|");
console.log(`| unconstrained (greedy) | ${best(free).toFixed(2)} | ${free.map((v) => v.toFixed(2)).join(", ")} |`);
console.log(`| JSON-schema constraint (greedy) | ${best(guided).toFixed(2)} | ${guided.map((v) => v.toFixed(2)).join(", ")} |`);
console.log("");
console.log(`ratio constrained / unconstrained: ${ratio.toFixed(3)} (target >= 0.90)`);
const stepMs = 1000 / best(free);
console.log(
  `grammar work per token on the JS thread: ${grammarMs.toFixed(3)} ms (bitmask ${prepareMs.toFixed(3)} ms, mask + advance ${applyMs.toFixed(3)} ms) = ${((100 * grammarMs) / stepMs).toFixed(2)}% of an unconstrained decode step (${stepMs.toFixed(1)} ms)`,
);
console.log(`schema compile (once, cached): ${compileMs.toFixed(0)} ms; constrained run: ${guidedTokens} tokens`);
console.log(`constrained output starts: ${JSON.stringify(sample.slice(0, 160))}`);
if (guidedTokens < decodeTokens) console.log(`WARNING: the constrained run ended after ${guidedTokens} of ${decodeTokens} tokens`);
