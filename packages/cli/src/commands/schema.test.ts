import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { gzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { expectBuiltCli, CLI_BIN } from "./test-support.js";

const bin = CLI_BIN;
const dir = mkdtempSync(path.join(tmpdir(), "kq-schema-"));

beforeAll(() => {
  expectBuiltCli();
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function keepquant(args: string[], input?: string) {
  const result = spawnSync(process.execPath, [bin, "schema", ...args], {
    cwd: dir,
    encoding: "utf8",
    input,
    env: { ...process.env, KEEPQUANT_DEBUG: "", CI: "1" },
  });
  return { code: result.status, stdout: result.stdout, stderr: result.stderr };
}

const RECORDS = [
  // Snowplow-style: a vendor key, an int32 format; one valid instance, one invalid
  {
    id: "vendor",
    schema: { self: { vendor: "x" }, type: "object", properties: { n: { type: "integer", format: "int32" } }, required: ["n"] },
    tests: [
      { data: { n: 5 }, valid: true },
      { data: { n: 2147483648 }, valid: false },
    ],
  },
  // a lookahead: refused with its reason
  { id: "pattern", schema: { type: "string", pattern: "^(?=a)a$" }, tests: [{ data: "a", valid: true }] },
  { id: "floats", schema: { type: "array", items: { type: "number" } }, tests: [{ data: [1.5, 2], valid: true }] },
];

describe("keepquant schema check", () => {
  it("one schema file: supported (exit 0), or not with the keyword and why (exit 1)", () => {
    writeFileSync(path.join(dir, "ok.json"), JSON.stringify(RECORDS[0]!.schema));
    writeFileSync(path.join(dir, "no.json"), JSON.stringify(RECORDS[1]!.schema));
    const ok = keepquant(["check", "ok.json"]);
    expect(ok.code, ok.stderr).toBe(0);
    expect(ok.stdout).toMatch(/^ok\.json: supported \(checked and compiled in \d+ ms\)\n$/);
    const no = keepquant(["check", "no.json"]);
    expect(no.code).toBe(1);
    expect(no.stdout).toMatch(
      /^no\.json: not supported: the schema: keyword "pattern" at the root cannot be enforced.*\(CONSTRAINT_UNSUPPORTED_KEYWORD\)\n$/,
    );
  });

  it("--json over JSONL (a file, gzip, or stdin): one result line per record in order, a summary on stderr", () => {
    const text = `${RECORDS.map((r) => JSON.stringify(r)).join("\n")}\n`;
    writeFileSync(path.join(dir, "records.jsonl"), text);
    writeFileSync(path.join(dir, "records.jsonl.gz"), gzipSync(text));
    const outputs = [
      keepquant(["check", "records.jsonl", "--json"]),
      keepquant(["check", "records.jsonl.gz", "--json"]),
      keepquant(["check", "-", "--json"], text),
    ];
    for (const run of outputs) {
      expect(run.code, run.stderr).toBe(1);
      const lines = run.stdout
        .trim()
        .split("\n")
        .map((line) => JSON.parse(line) as Record<string, unknown>);
      expect(lines.map((l) => [l["id"], l["compiled"], l["tests"]])).toEqual([
        ["vendor", true, [{ accepted: true }, { accepted: false }]],
        ["pattern", false, []],
        ["floats", true, [{ accepted: true }]],
      ]);
      expect(lines[1]!["error"]).toMatchObject({ code: "CONSTRAINT_UNSUPPORTED_KEYWORD" });
      expect(lines[0]!["maskUs"]).toMatchObject({ p50: expect.any(Number), p99: expect.any(Number), max: expect.any(Number) });
      expect(JSON.parse(run.stderr.trim().split("\n").at(-1)!)).toEqual({
        schemas: 3,
        compiled: 2,
        passing: 2,
        tests: 3,
        validationErrors: 0,
        invalidationErrors: 0,
      });
    }
  });

  it("--open-objects: an object takes the other keys its schema allows (by default its listed properties only)", () => {
    const record = {
      id: "open",
      schema: { type: "object", properties: { a: { type: "integer" } }, required: ["a"] },
      tests: [
        { data: { a: 1, note: "x" }, valid: true },
        { data: { a: "1", note: "x" }, valid: false },
      ],
    };
    const text = `${JSON.stringify(record)}\n`;
    const open = keepquant(["check", "-", "--json", "--open-objects"], text);
    expect(open.code, open.stderr).toBe(0);
    expect((JSON.parse(open.stdout) as { tests: unknown[] }).tests).toEqual([{ accepted: true }, { accepted: false }]);
    const listed = keepquant(["check", "-", "--json"], text);
    expect(listed.code).toBe(1);
    expect((JSON.parse(listed.stdout) as { tests: unknown[] }).tests).toEqual([{ accepted: false }, { accepted: false }]);
  });

  it("a line that is not a record is reported where it is and the rest go on; bad command lines are usage errors", () => {
    const run = keepquant(["check", "-", "--json"], `not json\n${JSON.stringify(RECORDS[2])}\n`);
    expect(run.code).toBe(1);
    const [bad, good] = run.stdout
      .trim()
      .split("\n")
      .map((line) => JSON.parse(line) as Record<string, unknown>);
    expect(bad).toMatchObject({ id: null, line: 1, compiled: false, error: { code: "BAD_RECORD" } });
    expect(good).toMatchObject({ id: "floats", compiled: true });
    expect(keepquant([]).code).toBe(2);
    expect(keepquant(["check"]).code).toBe(2);
    expect(keepquant(["check", "missing.json"]).stderr).toMatch(/missing\.json: no such file/);
    writeFileSync(path.join(dir, "broken.json"), "{");
    const broken = keepquant(["check", "broken.json"]);
    expect(broken.code).toBe(2);
    expect(broken.stderr).toMatch(/broken\.json is not JSON/);
  });
});
