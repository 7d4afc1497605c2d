/**
 * `keepquant schema check`: JSON Schemas (and instances) against the constraint engine, no model run. A schema file
 * (`my-schema.json`) gets a readable verdict: supported, or why not. A JSONL file (or `-`, or `.jsonl.gz`) of
 * MaskBench records `{"id", "schema", "tests": [{"data", "valid"}]}` gets, with `--json`, one result line per record
 * and a summary on stderr. Instances are written as Python's json.dumps writes them and fed token by token with the
 * model's tokenizer (default: the embedded model's).
 */
import fs from "node:fs";
import readline from "node:readline";
import { createGunzip } from "node:zlib";
import { defaultModelPath } from "@keepquant/default-model";
import {
  JsonTextError,
  parseJsonKeepingNumbers,
  plainJson,
  SchemaChecker,
  type SchemaCheckResult,
  type SchemaTest,
  Tokenizer,
} from "@keepquant/engine";
import { readGgufModel } from "@keepquant/gguf";
import { CliUsageError, defineCommand, write } from "../command.js";
import { localModelFile } from "../hub-model.js";

interface Tally {
  schemas: number;
  compiled: number;
  passing: number;
  tests: number;
  validationErrors: number;
  invalidationErrors: number;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** The lines of `file` (`-`: stdin; `.gz`: gunzipped). */
function lines(file: string): AsyncIterable<string> {
  const raw = file === "-" ? process.stdin : fs.createReadStream(file);
  const input = file.endsWith(".gz") ? raw.pipe(createGunzip()) : raw;
  return readline.createInterface({ input, crlfDelay: Number.POSITIVE_INFINITY });
}

/** A record's verdicts against its tests' `valid` flags (a test without one counts for neither error). */
function score(result: SchemaCheckResult, tests: readonly SchemaTest[], tally: Tally): boolean {
  tally.schemas++;
  if (!result.compiled) return false;
  tally.compiled++;
  let ok = true;
  result.tests.forEach((test, i) => {
    tally.tests++;
    const valid = tests[i]?.valid;
    if (valid === undefined) return;
    if (valid && !test.accepted) tally.validationErrors++;
    if (!valid && test.accepted) tally.invalidationErrors++;
    if (valid !== test.accepted) ok = false;
  });
  if (ok) tally.passing++;
  return ok;
}

function round(value: number): number {
  return Math.round(value * 1000) / 1000;
}

export const command = defineCommand({
  name: "schema",
  summary: "check JSON Schemas (and instances) against the constraint engine, no model run",
  usage: "schema check <schema.json | records.jsonl[.gz] | -> [model.gguf] [--json] [--open-objects]",
  help: [
    "schema.json            one JSON Schema: says whether it is supported, and why not",
    "records.jsonl[.gz], -  MaskBench records, one per line: {id, schema, tests: [{data, valid}]}",
    "model.gguf             whose tokenizer feeds the instances (default: the embedded model's)",
    "--json                 one result line per record on stdout, {id, compiled, error?, compileMs, tests: [{accepted}], maskUs}; a summary line on stderr",
    "--open-objects         objects take the other keys their schema allows (the constraint's openObjects); default: their listed properties only",
    "exit 0 when every schema compiled and every test's verdict matches its valid flag, 1 otherwise",
  ],
  options: {
    json: { type: "boolean", default: false },
    "open-objects": { type: "boolean", default: false },
  },
  async run(values, positionals, io): Promise<number> {
    const [verb, input, model, ...extra] = positionals;
    if (verb !== "check" || input === undefined || extra.length > 0) {
      throw new CliUsageError(
        "usage: keepquant schema check <schema.json | records.jsonl[.gz] | -> [model.gguf] [--json] [--open-objects]",
      );
    }
    if (input !== "-") {
      let stat: fs.Stats;
      try {
        stat = fs.statSync(input);
      } catch {
        throw new CliUsageError(`schema check: ${input}: no such file`);
      }
      if (!stat.isFile()) throw new CliUsageError(`schema check: ${input}: not a file`);
    }
    const modelFile = model === undefined ? await defaultModelPath() : await localModelFile(model, io);
    const tokenizer = Tokenizer.fromGguf(await readGgufModel(modelFile));
    const checker = new SchemaChecker(tokenizer);
    const json = values.json === true;
    const checkOptions = { openObjects: values["open-objects"] === true };
    const tally: Tally = { schemas: 0, compiled: 0, passing: 0, tests: 0, validationErrors: 0, invalidationErrors: 0 };
    try {
      // one schema (a .json file whose whole text is a schema, not a record)
      if (input !== "-" && !input.endsWith(".jsonl") && !input.endsWith(".gz")) {
        let schema: unknown;
        try {
          schema = plainJson(parseJsonKeepingNumbers(fs.readFileSync(input, "utf8")));
        } catch (error) {
          if (error instanceof JsonTextError) throw new CliUsageError(`schema check: ${input} is not JSON (${error.message})`);
          throw error;
        }
        const record = isObject(schema) && "schema" in schema ? schema : { id: input, schema, tests: [] };
        return await checkRecords([JSON.stringify(record)], checker, checkOptions, tally, json, io);
      }
      return await checkRecords(lines(input), checker, checkOptions, tally, json, io);
    } finally {
      await checker.dispose();
    }
  },
});

async function checkRecords(
  source: Iterable<string> | AsyncIterable<string>,
  checker: SchemaChecker,
  checkOptions: { openObjects: boolean },
  tally: Tally,
  json: boolean,
  io: { stdout: NodeJS.WritableStream; stderr: NodeJS.WritableStream },
): Promise<number> {
  let allGood = true;
  let lineNumber = 0;
  for await (const line of source) {
    lineNumber++;
    if (line.trim() === "") continue;
    let record: Record<string, unknown>;
    try {
      const parsed = parseJsonKeepingNumbers(line);
      if (!isObject(parsed) || !("schema" in parsed)) throw new JsonTextError('a record is an object with "schema" (and "id", "tests")');
      record = parsed;
    } catch (error) {
      if (!(error instanceof JsonTextError)) throw error;
      allGood = false;
      tally.schemas++;
      const bad = { id: null, line: lineNumber, compiled: false, error: { code: "BAD_RECORD", message: error.message } };
      if (json) write(io.stdout, JSON.stringify(bad));
      else write(io.stdout, `line ${lineNumber}: not a record: ${error.message}`);
      continue;
    }
    const id = typeof record["id"] === "string" ? record["id"] : `line ${lineNumber}`;
    const tests: SchemaTest[] = Array.isArray(record["tests"])
      ? record["tests"].map((t) =>
          isObject(t) ? { data: t["data"], ...(typeof t["valid"] === "boolean" ? { valid: t["valid"] } : {}) } : { data: t },
        )
      : [];
    const result = await checker.check(plainJson(record["schema"]), tests, checkOptions);
    const ok = score(result, tests, tally);
    if (!ok) allGood = false;
    if (json) {
      write(
        io.stdout,
        JSON.stringify({
          id,
          compiled: result.compiled,
          ...(result.error ? { error: result.error } : {}),
          compileMs: round(result.compileMs),
          tests: result.tests.map((t) => ({ accepted: t.accepted })),
          maskUs: result.maskUs ? { p50: round(result.maskUs.p50), p99: round(result.maskUs.p99), max: round(result.maskUs.max) } : null,
        }),
      );
      continue;
    }
    if (!result.compiled) {
      write(io.stdout, `${id}: not supported: ${result.error!.message} (${result.error!.code})`);
      continue;
    }
    write(io.stdout, `${id}: supported (checked and compiled in ${Math.round(result.compileMs)} ms)`);
    result.tests.forEach((test, i) => {
      const valid = tests[i]!.valid;
      const verdict = test.accepted ? "accepted" : `rejected after ${test.tokens} tokens`;
      const expectation =
        valid === undefined ? "" : valid === test.accepted ? " (as expected)" : ` (expected ${valid ? "accepted" : "rejected"})`;
      write(io.stdout, `  test ${i}: ${verdict}${expectation}`);
    });
  }
  const summary = {
    schemas: tally.schemas,
    compiled: tally.compiled,
    passing: tally.passing,
    tests: tally.tests,
    validationErrors: tally.validationErrors,
    invalidationErrors: tally.invalidationErrors,
  };
  write(
    io.stderr,
    json
      ? JSON.stringify(summary)
      : `keepquant schema check: ${summary.schemas} schemas, ${summary.compiled} compiled, ${summary.passing} passing; ${summary.validationErrors} valid instances rejected, ${summary.invalidationErrors} invalid instances accepted`,
  );
  return allGood ? 0 : 1;
}
