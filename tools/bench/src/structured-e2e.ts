/**
 * Structured output end to end: JSONSchemaBench's schemas (the MaskBench records in ../shared/data/maskbench, which
 * carry the split in their ids) answered by the embedded default model under `json_schema` constraints, as a client
 * of `response_format` without `strict` would get them (best effort): temperature 1, max_tokens 1024. Per split:
 * schemas refused, outputs valid (checked with Ajv against the normalized schema), invalid, and cut off
 * (max_tokens or the context). docs/benchmarks/constrained.md has the table.
 *
 *   pnpm --filter @keepquant/bench bench:structured-e2e
 *
 * Environment: KEEPQUANT_BENCH_E2E_PER_SPLIT (schemas per split, the first N in file order; default 40),
 * KEEPQUANT_BENCH_E2E_MAX_TOKENS (default 1024).
 */
import fs from "node:fs";
import os from "node:os";
import readline from "node:readline";
import { createGunzip } from "node:zlib";
import { checkOutput, ConstraintError, Engine, normalizeJsonSchema } from "@keepquant/engine";
import { MASKBENCH_DATA as DATA, positiveInteger } from "./maskbench-data.js";

const perSplit = positiveInteger("KEEPQUANT_BENCH_E2E_PER_SPLIT", 40);
const maxTokens = positiveInteger("KEEPQUANT_BENCH_E2E_MAX_TOKENS", 1024);
if (!fs.existsSync(DATA)) {
  console.error(`structured-e2e: ${DATA} is absent (MaskBench data lives outside the project, in ../shared/data/maskbench): skipped`);
  process.exit(0);
}

interface Case {
  split: string;
  id: string;
  schema: Record<string, unknown>;
}
const cases: Case[] = [];
const taken = new Map<string, number>();
for await (const line of readline.createInterface({ input: fs.createReadStream(DATA).pipe(createGunzip()), crlfDelay: Infinity })) {
  if (line.trim() === "") continue;
  const record = JSON.parse(line) as { id: string; split: string; schema: Record<string, unknown> };
  const split = record.split;
  if ((taken.get(split) ?? 0) >= perSplit) continue;
  taken.set(split, (taken.get(split) ?? 0) + 1);
  cases.push({ split, id: record.id, schema: record.schema });
}

/** `invalid`: the engine's schema check says so (a relaxed keyword); `silent`: an enforced schema broken unsaid (a bug). */
type Outcome = "refused" | "valid" | "invalid" | "silent" | "cut";
interface Tally {
  schemas: number;
  refused: number;
  valid: number;
  invalid: number;
  silent: number;
  cut: number;
  tokens: number;
}
const tallies = new Map<string, Tally>();
const examples: string[] = [];
const engine = await Engine.loadDefault({ maxSequences: 4, contextLength: 4096, kvCacheTokens: 16384 });
const started = performance.now();

async function run(c: Case, seed: number): Promise<void> {
  const tally = tallies.get(c.split) ?? { schemas: 0, refused: 0, valid: 0, invalid: 0, silent: 0, cut: 0, tokens: 0 };
  tallies.set(c.split, tally);
  tally.schemas++;
  let outcome: Outcome;
  try {
    const result = await engine.generateToEnd("Answer with one JSON document.\n", {
      temperature: 1,
      seed,
      maxTokens,
      constraint: { type: "json_schema", schema: c.schema, strict: false },
    });
    tally.tokens += result.tokens.length;
    if (result.stopReason === "max_tokens" || result.stopReason === "context") {
      outcome = "cut";
      if (examples.length < 12) examples.push(`cut ${c.id}: ${result.text.length} characters`);
    } else {
      const check = result.schemaCheck ?? checkOutput(result.text, normalizeJsonSchema(c.schema), []);
      outcome = check.valid ? "valid" : result.schemaCheck ? "invalid" : "silent";
      if (!check.valid && examples.length < 12) examples.push(`${outcome} ${c.id}: ${check.errors.slice(0, 2).join("; ")}`);
    }
  } catch (error) {
    if (!ConstraintError.isInstance(error)) throw error;
    outcome = "refused";
  }
  tally[outcome]++;
}

const queue = cases.map((c, i) => () => run(c, i + 1));
await Promise.all(
  Array.from({ length: 4 }, async () => {
    for (let job = queue.shift(); job; job = queue.shift()) await job();
  }),
);
engine.dispose();

const total: Tally = { schemas: 0, refused: 0, valid: 0, invalid: 0, silent: 0, cut: 0, tokens: 0 };
const rows = [...tallies.entries()].sort(([a], [b]) => a.localeCompare(b));
const percent = (n: number, of: number): string => (of === 0 ? "-" : `${((100 * n) / of).toFixed(0)}%`);
console.log("| split | schemas | valid | refused | invalid, flagged | invalid, unflagged | cut off |");
console.log("|---|---:|---:|---:|---:|---:|---:|");
for (const [split, t] of rows) {
  for (const key of Object.keys(total) as (keyof Tally)[]) total[key] += t[key];
  console.log(
    `| ${split} | ${t.schemas} | ${t.valid} (${percent(t.valid, t.schemas)}) | ${t.refused} | ${t.invalid} | ${t.silent} | ${t.cut} |`,
  );
}
console.log(
  `| all | ${total.schemas} | ${total.valid} (${percent(total.valid, total.schemas)}) | ${total.refused} | ${total.invalid} | ${total.silent} | ${total.cut} |`,
);
for (const example of examples) console.log(example);
console.log(
  JSON.stringify({
    cpu: os.cpus()[0]?.model,
    perSplit,
    maxTokens,
    seconds: Math.round((performance.now() - started) / 1000),
    generatedTokens: total.tokens,
    ...total,
  }),
);
