import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { spawnCli, expectBuiltCli, CLI_BIN } from "./test-support.js";

const _bin = CLI_BIN;
const folder = mkdtempSync(path.join(os.tmpdir(), "kq-json-schema-"));

beforeAll(() => {
  expectBuiltCli();
});
afterAll(() => rmSync(folder, { recursive: true, force: true }));

function run(...args: string[]) {
  return spawnCli(args, { ...process.env, KEEPQUANT_DEBUG: "", CI: "1" });
}

function file(name: string, text: string): string {
  const at = path.join(folder, name);
  writeFileSync(at, text);
  return at;
}

const SCHEMA = {
  type: "object",
  properties: { title: { type: "string", maxLength: 16 }, stars: { type: "integer", minimum: 1, maximum: 5 }, good: { type: "boolean" } },
  required: ["title", "stars", "good"],
  additionalProperties: false,
};

describe("keepquant run --json-schema", () => {
  it("prints one JSON document valid for the schema, sampled or greedy", () => {
    const schemaFile = file("review.json", JSON.stringify(SCHEMA));
    for (const extra of [[], ["--temperature", "1", "--seed", "3"]]) {
      const r = run("run", "--prompt", "Review:", "--json-schema", schemaFile, "--threads", "1", ...extra);
      expect(r.code, r.stderr).toBe(0);
      const value = JSON.parse(r.stdout) as Record<string, unknown>;
      expect(Object.keys(value).sort()).toEqual(["good", "stars", "title"]);
      expect(Number.isInteger(value["stars"]) && (value["stars"] as number) >= 1 && (value["stars"] as number) <= 5).toBe(true);
      expect(typeof value["good"]).toBe("boolean");
    }
  });

  it("a maxLength past --grammar-max-repetition (default 256) is refused before compiling; a larger bound takes it", () => {
    const wide = file(
      "wide.json",
      JSON.stringify({ type: "object", properties: { t: { type: "string", maxLength: 300 } }, required: ["t"] }),
    );
    const refused = run("run", "--prompt", "x", "--json-schema", wide, "--max-tokens", "4", "--threads", "1");
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/CONSTRAINT_TOO_COMPLEX.*maxLength/);
    // a larger bound compiles it (the 4 tokens then end the document unfinished: that is the next error)
    const taken = run(
      "run",
      "--prompt",
      "x",
      "--json-schema",
      wide,
      "--max-tokens",
      "4",
      "--threads",
      "1",
      "--grammar-max-repetition",
      "512",
    );
    expect(taken.stderr).not.toContain("CONSTRAINT_TOO_COMPLEX");
    expect(taken.stderr).toContain("JSON_SCHEMA_INCOMPLETE");
  });

  it("an unfinished document (max tokens) is an error, not printed as valid", () => {
    const long = file(
      "long.json",
      JSON.stringify({ type: "object", properties: { t: { type: "string", minLength: 400 } }, required: ["t"] }),
    );
    const r = run("run", "--prompt", "x", "--json-schema", long, "--max-tokens", "8", "--threads", "1");
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("JSON_SCHEMA_INCOMPLETE");
  });

  it("a bad file is a usage error naming it", () => {
    const cases: [string, RegExp][] = [
      [path.join(folder, "missing.json"), /cannot read the file/],
      [file("broken.json", "{ nope"), /not JSON/],
      [file("array.json", "[1]"), /a JSON Schema is a JSON object/],
      [file("unique.json", JSON.stringify({ type: "array", uniqueItems: true })), /"uniqueItems"/],
    ];
    for (const [schemaFile, message] of cases) {
      const r = run("run", "--prompt", "x", "--json-schema", schemaFile);
      expect(r.code, schemaFile).toBe(2);
      expect(r.stderr).toMatch(/^error: USAGE: --json-schema /);
      expect(r.stderr).toContain(schemaFile);
      expect(r.stderr).toMatch(message);
    }
  });

  it("--thinking-budget must be an integer >= 0", () => {
    const r = run("run", "--prompt", "x", "--thinking-budget", "-3");
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("--thinking-budget");
  });

  it("--thinking-budget closes the reasoning: </think> after N tokens, then the JSON", () => {
    const schemaFile = file("review2.json", JSON.stringify(SCHEMA));
    const r = run(
      "run",
      "--prompt",
      "<think>\n",
      "--parse-special",
      "--thinking-budget",
      "4",
      "--json-schema",
      schemaFile,
      "--threads",
      "1",
      "--json",
    );
    expect(r.code, r.stderr).toBe(0);
    const doc = JSON.parse(r.stdout) as { text: string; tokens: number[] };
    const at = doc.text.indexOf("</think>");
    expect(at).toBeGreaterThanOrEqual(0);
    const value = JSON.parse(doc.text.slice(at + "</think>".length)) as Record<string, unknown>;
    expect(typeof value["good"]).toBe("boolean");
  });
});
