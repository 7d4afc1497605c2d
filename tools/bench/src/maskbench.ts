/**
 * MaskBench (JSONSchemaBench's schemas with valid and invalid instances, ../shared/data/maskbench) through the
 * constraint engine, no model run: per schema, the check and compile, then each instance fed token by token
 * (`SchemaChecker`, the same as `keepquant schema check`). Reported as the published engines are (its README):
 * passing schemas, compile errors, validation errors (valid instances rejected), invalidation errors (invalid ones
 * accepted), mask time per token and compile time (docs/benchmarks/constrained.md).
 *
 *   flock /work/bench.lock pnpm --filter @keepquant/bench bench:maskbench
 *
 * Environment: KEEPQUANT_BENCH_MASKBENCH_EVERY (check every Nth schema, default 1: all 11,305),
 * KEEPQUANT_BENCH_MASKBENCH_VOCAB (`qwen35`: the fixture vocabulary grown to Qwen3.5's 248,320 tokens, the default;
 * `fixture`: the 4,096-token fixture vocabulary), KEEPQUANT_BENCH_MASKBENCH_OBJECTS (`listed`: objects hold their listed
 * properties only, the engine's default; `open`: the constraint's `openObjects`, JSON Schema's own semantics).
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import readline from "node:readline";
import { createGunzip } from "node:zlib";
import { parseJsonKeepingNumbers, plainJson, SchemaChecker, Tokenizer, vocabFromJson } from "@keepquant/engine";
import { growVocab, QWEN35_VOCAB_SIZE } from "@keepquant/engine/testing";
import { MASKBENCH_DATA as DATA, positiveInteger, REPO_ROOT } from "./maskbench-data.js";

const every = positiveInteger("KEEPQUANT_BENCH_MASKBENCH_EVERY", 1);
const vocabKind = process.env.KEEPQUANT_BENCH_MASKBENCH_VOCAB || "qwen35";
if (vocabKind !== "qwen35" && vocabKind !== "fixture")
  throw new Error(`KEEPQUANT_BENCH_MASKBENCH_VOCAB must be "qwen35" or "fixture", got ${JSON.stringify(vocabKind)}`);
if (!fs.existsSync(DATA)) {
  console.error(`maskbench: ${DATA} is absent (MaskBench data lives outside the project, in ../shared/data/maskbench): skipped`);
  process.exit(0);
}

const objects = process.env.KEEPQUANT_BENCH_MASKBENCH_OBJECTS || "listed";
if (objects !== "listed" && objects !== "open")
  throw new Error(`KEEPQUANT_BENCH_MASKBENCH_OBJECTS must be "listed" or "open", got ${JSON.stringify(objects)}`);

const fixture = vocabFromJson(JSON.parse(fs.readFileSync(path.join(REPO_ROOT, "goldens", "tokenizer", "vocab.json"), "utf8")));
const tokenizer = Tokenizer.fromVocab(vocabKind === "qwen35" ? growVocab(fixture, QWEN35_VOCAB_SIZE) : fixture);
const checker = new SchemaChecker(tokenizer);

const quantile = (sorted: readonly number[], q: number): number =>
  sorted.length === 0 ? 0 : sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;

let index = 0;
let schemas = 0;
let compiled = 0;
let passing = 0;
let validationErrors = 0;
let invalidationErrors = 0;
const compileMs: number[] = [];
const maskP50: number[] = [];
const maskP99: number[] = [];
const errors = new Map<string, number>();
const bySplit = new Map<string, { schemas: number; passing: number }>();
const started = performance.now();
const lines = readline.createInterface({ input: fs.createReadStream(DATA).pipe(createGunzip()), crlfDelay: Number.POSITIVE_INFINITY });
for await (const line of lines) {
  if (line === "" || index++ % every !== 0) continue;
  const record = parseJsonKeepingNumbers(line) as {
    id: string;
    split: string;
    schema: unknown;
    tests: { data: unknown; valid: boolean }[];
  };
  schemas++;
  const split = bySplit.get(record.split) ?? { schemas: 0, passing: 0 };
  split.schemas++;
  bySplit.set(record.split, split);
  const result = await checker.check(plainJson(record.schema), record.tests, { openObjects: objects === "open" });
  if (!result.compiled) {
    const key = result.error!.code;
    errors.set(key, (errors.get(key) ?? 0) + 1);
    continue;
  }
  compiled++;
  compileMs.push(result.compileMs);
  if (result.maskUs) {
    maskP50.push(result.maskUs.p50);
    maskP99.push(result.maskUs.p99);
  }
  let ok = true;
  result.tests.forEach((test, i) => {
    const valid = record.tests[i]!.valid;
    if (valid && !test.accepted) validationErrors++;
    if (!valid && test.accepted) {
      invalidationErrors++;
      console.error(`maskbench: invalid instance accepted: ${record.id} test ${i}`);
    }
    if (valid !== test.accepted) ok = false;
  });
  if (ok) {
    passing++;
    split.passing++;
  }
  if (schemas % 200 === 0)
    console.error(`maskbench: ${schemas} schemas, ${passing} passing, ${Math.round((performance.now() - started) / 1000)} s`);
}
await checker.dispose();
compileMs.sort((a, b) => a - b);
maskP50.sort((a, b) => a - b);
maskP99.sort((a, b) => a - b);
const cpu = os.cpus()[0]?.model ?? "unknown CPU";
console.log(
  JSON.stringify(
    {
      cpu,
      vocabulary: tokenizer.vocabSize,
      objects,
      every,
      schemas,
      compiled,
      passing,
      compileErrors: Object.fromEntries(errors),
      validationErrors,
      invalidationErrors,
      compileMs: { p50: quantile(compileMs, 0.5), p99: quantile(compileMs, 0.99) },
      // per schema, its median and 99th-percentile mask time; here the median of medians and of the 99th percentiles
      maskUs: { p50: quantile(maskP50, 0.5), p99: quantile(maskP99, 0.5) },
      bySplit: Object.fromEntries(bySplit),
      seconds: Math.round((performance.now() - started) / 1000),
    },
    null,
    2,
  ),
);
