/**
 * `pattern` as our own grammar rules (regex.ts): the reader's refusals and lengths, and, through the real grammar
 * engine, every probe string accepted exactly when JavaScript's own RegExp matches it, written as JSON (quotes,
 * backslashes, control characters escaped; two-, three- and four-byte UTF-8 characters inside classes).
 */
import { afterAll, describe, expect, it } from "vitest";
import { fixtureTokenizer } from "../tokenizer/test-support.js";
import { SchemaChecker } from "./checker.js";
import { PatternRefusal, patternGrammar, patternPlacement } from "./regex.js";
import { resolveConstraint } from "./spec.js";
import { caught } from "./test-support.js";

const checker = new SchemaChecker(fixtureTokenizer());
afterAll(() => checker.dispose());

/** Strings of up to 4 characters drawn from a pool that crosses every way a character is written in JSON. */
function probes(count: number, seed: number): string[] {
  const pool = [
    "a",
    "b",
    "z",
    "A",
    "0",
    "9",
    "_",
    "-",
    ".",
    " ",
    '"',
    "\\",
    "\n",
    "\t",
    "\u0001",
    "é",
    "ß",
    "€",
    "中",
    "😀",
    "\u2000",
    "\u2028",
    "\u00a0",
    "@",
    "/",
  ];
  let state = seed;
  const next = (n: number): number => {
    state = (state * 1103515245 + 12345) % 2147483648;
    return Math.floor((state / 2147483648) * n);
  };
  const out: string[] = ["", "ab", "abc", "x", "中文", "é€", "a@b.cd", "😀", "123-4567", "123e4567-e89b-12d3-a456-426614174000"];
  for (let i = 0; i < count; i++) {
    let s = "";
    for (let n = next(5); n > 0; n--) s += pool[next(pool.length)];
    out.push(s);
  }
  return out;
}

describe("pattern", () => {
  it("the reader refuses what it cannot enforce, with the reason", () => {
    const refused: [string, RegExp][] = [
      ["(?=a)b", /lookahead/],
      ["(?<!a)b", /lookbehind/],
      ["(a)\\1", /backreferences/],
      ["\\bword", /word boundaries/],
      ["\\p{L}+", /property escapes/],
      ["a^b", /anchor/],
      ["a(", /not an ECMA-262 regular expression/],
      ["[b-a]", /not an ECMA-262 regular expression/],
    ];
    for (const [pattern, why] of refused) {
      expect(() => patternGrammar(pattern), pattern).toThrow(PatternRefusal);
      expect(() => patternGrammar(pattern), pattern).toThrow(why);
    }
  });

  it("knows the lengths a pattern allows (a search unless anchored at both ends)", () => {
    expect(patternGrammar("^[0-9]{5}$")).toMatchObject({ minLength: 5, maxLength: 5 });
    expect(patternGrammar("^(ab|c)?$")).toMatchObject({ minLength: 0, maxLength: 2 });
    expect(patternGrammar("^ab")).toMatchObject({ minLength: 2, maxLength: undefined });
    expect(patternGrammar("[0-9]{2,7}$").repetitions).toEqual([7]);
  });

  it("length bounds beside a pattern are kept when the pattern already meets them, refused otherwise", () => {
    expect(patternPlacement({ type: "string", pattern: "^[0-9]{5}$", maxLength: 5, minLength: 5 })).toHaveProperty("grammar");
    expect(patternPlacement({ type: "string", pattern: "^[0-9]+$", maxLength: 5 })).toHaveProperty("problem");
    expect(patternPlacement({ type: "string", pattern: "^[0-9]+$", format: "email" })).toHaveProperty("problem");
    const error = caught(() => resolveConstraint({ type: "json_schema", schema: { type: "string", pattern: "^a+$", maxLength: 3 } }));
    expect(error.code).toBe("CONSTRAINT_UNSUPPORTED_KEYWORD");
    expect(error.message).toMatch(/"pattern".*minLength\/maxLength/);
  });

  it("is refused in the XML tool-call format (its parameters are the grammar engine's own)", () => {
    const tools = [{ name: "f", parameters: { type: "object", properties: { id: { type: "string", pattern: "^a+$" } } } }];
    const error = caught(() => resolveConstraint({ type: "tool_call", format: "xml", tools, choice: "required" }));
    expect(error.code).toBe("CONSTRAINT_UNSUPPORTED_KEYWORD");
    expect(error.message).toMatch(/XML tool-call format/);
    expect(() => resolveConstraint({ type: "tool_call", format: "json", tools, choice: "required" })).not.toThrow();
  });

  it("accepts exactly the JSON strings whose value RegExp matches, through the grammar engine", async () => {
    const patterns = [
      "^.{2,3}$",
      "^[^a]*$",
      "abc|^x",
      "^\\S+$",
      "^\\w+@\\w+\\.[a-z]{2,}$",
      "^[\\u4e00-\\u9fa5]+$",
      "^[^\\u2000]+$",
      "^\\s*$",
      "^(é|€)+$",
      '^[^"\\\\]*$',
      "^\\D\\W$",
      "[😀-😐]",
      "^[a-zé€]{1,4}$",
      "^\\d{3}-\\d{4}$",
      "^(?:[0-9a-f]{8}-[0-9a-f]{4}-[1-8][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12})$",
    ];
    let seed = 11;
    for (const pattern of patterns) {
      const strings = probes(40, seed++);
      const result = await checker.check(
        { type: "string", pattern },
        strings.map((data) => ({ data })),
      );
      expect(result.compiled, `${pattern}: ${result.error?.message}`).toBe(true);
      const expected = strings.map((s) => new RegExp(pattern, "u").test(s));
      const wrong = strings.filter((_s, i) => result.tests[i]!.accepted !== expected[i]);
      expect(wrong, pattern).toEqual([]);
      // each pattern has probes on both sides
      expect(expected.some((m) => m) || pattern === "^\\D\\W$", pattern).toBe(true);
    }
  });

  it("a pattern inside an object, beside an exact integer range", async () => {
    const schema = {
      type: "object",
      properties: { zip: { type: "string", pattern: "^[0-9]{5}$" }, n: { type: "integer", minimum: 1, maximum: 9 } },
      required: ["zip", "n"],
      additionalProperties: false,
    };
    const result = await checker.check(schema, [
      { data: { zip: "12345", n: 3 } },
      { data: { zip: "1234", n: 3 } },
      { data: { zip: "12345", n: 10 } },
      { data: { zip: "1234a", n: 3 } },
    ]);
    expect(result.tests.map((t) => t.accepted)).toEqual([true, false, false, false]);
  });
});
