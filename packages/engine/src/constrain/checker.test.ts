/**
 * The schema checker (what `keepquant schema check` and `pnpm bench:maskbench` run): verdicts on instances fed token
 * by token through the real grammar engine, compile errors reported rather than thrown, exact integer ranges and
 * the required/additional-properties rewrite checked end to end, and a fixed subset of MaskBench (read from
 * ../shared/data/maskbench, skipped when absent) with no invalid instance accepted.
 */
import fs from "node:fs";
import { fileURLToPath } from "node:url";
import { gunzipSync } from "node:zlib";
import { afterAll, describe, expect, it } from "vitest";
import { fixtureTokenizer } from "../tokenizer/test-support.js";
import { SchemaChecker } from "./checker.js";
import { JsonNumber, parseJsonKeepingNumbers, plainJson } from "./python-json.js";

const checker = new SchemaChecker(fixtureTokenizer());
afterAll(() => checker.dispose());

const MASKBENCH = fileURLToPath(new URL("../../../../../shared/data/maskbench/maskbench.jsonl.gz", import.meta.url));
const haveMaskbench = fs.existsSync(MASKBENCH);

describe("SchemaChecker", () => {
  it("accepts a valid instance and rejects invalid ones (a wrong type, a missing required property, text after the end)", async () => {
    const schema = { type: "object", properties: { name: { type: "string" }, n: { type: "integer" } }, required: ["name", "n"] };
    const result = await checker.check(schema, [
      { data: { name: "Ada", n: 3 } },
      { data: { name: "Ada", n: "3" } },
      { data: { name: "Ada" } },
      { data: [1] },
    ]);
    expect(result.compiled).toBe(true);
    expect(result.tests.map((t) => t.accepted)).toEqual([true, false, false, false]);
    expect(result.maskUs!.p50).toBeGreaterThan(0);
  });

  it("a schema the engine refuses is reported (compiled: false, the code and message), never thrown", async () => {
    const result = await checker.check({ type: "array", uniqueItems: true }, [{ data: [1] }]);
    expect(result.compiled).toBe(false);
    expect(result.error?.code).toBe("CONSTRAINT_UNSUPPORTED_KEYWORD");
    expect(result.error?.message).toMatch(/"uniqueItems"/);
    expect(result.tests).toEqual([]);
  });

  it("integer bounds are exact through the grammar engine (its own ranges were not: [0, 120] took 121)", async () => {
    const ranges: [Record<string, unknown>, bigint | undefined, bigint | undefined][] = [
      [{ minimum: 0, maximum: 120 }, 0n, 120n],
      [{ maximum: -3 }, undefined, -3n],
      [{ minimum: 123456789, maximum: 987654321987654 }, 123456789n, 987654321987654n],
      [{ minimum: -2147483648, maximum: 2147483647 }, -2147483648n, 2147483647n],
      [{ exclusiveMinimum: 0, exclusiveMaximum: 10 }, 1n, 9n],
    ];
    for (const [bounds, low, high] of ranges) {
      const probes = new Set<bigint>([0n, 1n, -1n, 7n, 1000000n, -1000000n]);
      for (const b of [low, high]) if (b !== undefined) for (const d of [-1n, 0n, 1n]) probes.add(b + d);
      const values = [...probes];
      const result = await checker.check(
        { type: "integer", ...bounds },
        values.map((v) => ({ data: new JsonNumber(v.toString()) })),
      );
      values.forEach((v, i) => {
        const inside = (low === undefined || v >= low) && (high === undefined || v <= high);
        expect(result.tests[i]!.accepted, `${JSON.stringify(bounds)} ${v}`).toBe(inside);
      });
    }
  });

  it("an enum of strings takes its values only (xgrammar 0.1.27's own alternation of literals also took IMC here)", async () => {
    const codes = ["COP", "CUC", "CUP", "IMP"];
    const others = ["IMC", "COC", "CUO", "IUP", "CMP"];
    for (const schema of [
      { type: "string", enum: codes },
      { enum: codes },
      { type: "object", properties: { c: { enum: codes } }, required: ["c"] },
    ]) {
      const wrap = (v: string) => (schema.type === "object" ? { c: v } : v);
      const result = await checker.check(
        schema,
        [...codes, ...others].map((v) => ({ data: wrap(v) })),
      );
      expect(result.tests.map((t) => t.accepted)).toEqual([...codes.map(() => true), ...others.map(() => false)]);
    }
    // a value with a quote, a backslash and a non-ASCII character, beside others sharing its first characters
    const odd = ['a"b', "a\\c", "aé", "ab"];
    const result = await checker.check(
      { enum: odd },
      [...odd, 'a"c', "aè", "a"].map((data) => ({ data })),
    );
    expect(result.tests.map((t) => t.accepted)).toEqual([true, true, true, true, false, false, false]);
  });

  it("numbers have bounded digits (20 integer, 20 fraction, 3 exponent) unless a bound needs more", async () => {
    const raw = (text: string) => ({ data: parseJsonKeepingNumbers(text) });
    const number = await checker.check({ type: "number" }, [
      raw("12345678901234567890"),
      raw("123456789012345678901"),
      raw("0.12345678901234567"),
      raw("1e308"),
      raw("1e3080"),
    ]);
    // (a fraction of more than 20 digits cannot be tested here: Python writes a float in at most 17)
    expect(number.tests.map((t) => t.accepted)).toEqual([true, false, true, true, false]);
    const integers = await checker.check({ type: "object", properties: { n: { type: "integer" } } }, [
      raw('{"n": -12345678901234567890}'),
      raw('{"n": 123456789012345678901}'),
    ]);
    expect(integers.tests.map((t) => t.accepted)).toEqual([true, false]);
    // a lower bound of 25 digits asks for more: longer numbers stay
    const huge = await checker.check({ type: "integer", minimum: 1e24 }, [
      raw("1000000000000000000000000"),
      raw("10000000000000000000000000"),
    ]);
    expect(huge.tests.map((t) => t.accepted)).toEqual([true, true]);
    const ranged = await checker.check({ type: "integer", minimum: 1 }, [raw(`1${"0".repeat(19)}`), raw(`1${"0".repeat(20)}`)]);
    expect(ranged.tests.map((t) => t.accepted)).toEqual([true, false]);
  });

  it("number bounds that are whole numbers are exact through the grammar engine (fractions at the bounds included)", async () => {
    const literals = [
      "-361",
      "-360",
      "-360.0",
      "-359.99",
      "-2",
      "-1.5",
      "-1",
      "-1.000",
      "-0.5",
      "0",
      "0.0",
      "0.25",
      "1",
      "1.0",
      "1.5",
      "2",
      "7.25",
      "99.999",
      "100",
      "100.00",
      "100.01",
      "101",
      "360",
      "360.5",
    ];
    const ranges: Record<string, unknown>[] = [
      { minimum: 0, maximum: 1 },
      { minimum: -360, maximum: 360 },
      { exclusiveMinimum: 0, exclusiveMaximum: 100 },
      { minimum: -1 },
      { maximum: -1 },
      { exclusiveMaximum: 2, minimum: -1 },
      { minimum: 1, maximum: 1 },
    ];
    for (const bounds of ranges) {
      const result = await checker.check(
        { type: "number", ...bounds },
        literals.map((text) => ({ data: new JsonNumber(text) })),
      );
      expect(result.compiled, JSON.stringify(bounds)).toBe(true);
      literals.forEach((text, i) => {
        const v = Number(text);
        const inside =
          (bounds["minimum"] === undefined || v >= (bounds["minimum"] as number)) &&
          (bounds["maximum"] === undefined || v <= (bounds["maximum"] as number)) &&
          (bounds["exclusiveMinimum"] === undefined || v > (bounds["exclusiveMinimum"] as number)) &&
          (bounds["exclusiveMaximum"] === undefined || v < (bounds["exclusiveMaximum"] as number));
        expect(result.tests[i]!.accepted, `${JSON.stringify(bounds)} ${text}`).toBe(inside);
      });
    }
    // decimal bounds are refused by name rather than broken
    const decimal = await checker.check({ type: "number", minimum: 0.5, maximum: 0.75 }, []);
    expect(decimal.error?.code).toBe("CONSTRAINT_UNSUPPORTED_KEYWORD");
  });

  it("date, time and date-time are exact calendars (xgrammar's own took 2020-02-31)", async () => {
    const realDate = (text: string): boolean => {
      const m = /^(\d{4})-(\d{2})-(\d{2})$/.exec(text);
      if (!m) return false;
      const [y, mo, d] = [Number(m[1]), Number(m[2]), Number(m[3])];
      const date = new Date(Date.UTC(2000, mo - 1, d));
      date.setUTCFullYear(y);
      return y >= 1 && date.getUTCFullYear() === y && date.getUTCMonth() === mo - 1 && date.getUTCDate() === d;
    };
    const dates = [
      "2020-02-29",
      "2021-02-29",
      "1900-02-29",
      "2000-02-29",
      "2020-02-31",
      "2020-04-30",
      "2020-04-31",
      "2020-12-31",
      "2020-13-01",
      "2020-00-10",
      "0000-01-01",
      "0001-01-01",
      "2020-1-01",
      "2020-01-00",
      "9999-12-31",
    ];
    const onDates = await checker.check(
      { type: "string", format: "date" },
      dates.map((data) => ({ data })),
    );
    dates.forEach((text, i) => expect(onDates.tests[i]!.accepted, text).toBe(realDate(text)));
    const times: [string, boolean][] = [
      ["2020-02-29T23:59:59Z", true],
      ["2021-02-29T10:00:00Z", false],
      ["2020-01-01T24:00:00Z", false],
      ["2020-01-01T12:00:00.000", false],
      ["2020-01-01T12:00:00.125+05:30", true],
      ["Invalid Date", false],
    ];
    const onTimes = await checker.check(
      { type: "string", format: "date-time" },
      times.map(([data]) => ({ data })),
    );
    times.forEach(([text, valid], i) => expect(onTimes.tests[i]!.accepted, text).toBe(valid));
    // without a type, a format constrains strings only
    const untyped = await checker.check({ format: "date" }, [{ data: "2020-02-31" }, { data: 5 }, { data: "2020-02-28" }]);
    expect(untyped.tests.map((t) => t.accepted)).toEqual([false, true, true]);
    const listed = await checker.check({ type: ["string", "null"], format: "date" }, [{ data: "2020-02-31" }, { data: null }, { data: 5 }]);
    expect(listed.tests.map((t) => t.accepted)).toEqual([false, true, false]);
  });

  it("a listed property cannot come back through additionalProperties with another type (Snowplow's alias event)", async () => {
    const schema = {
      type: "object",
      additionalProperties: true,
      properties: { from: { type: "string" }, to: { type: "string" } },
      self: { vendor: "com.segment", name: "alias", format: "jsonschema", version: "1-0-0" },
    };
    const result = await checker.check(schema, [
      { data: { from: "a", to: "b" } },
      { data: { from: 12345, to: "b" } },
      { data: { from: null } },
    ]);
    expect(result.tests.map((t) => t.accepted)).toEqual([true, false, false]);
    // a required name that is not listed must be there
    const required = await checker.check({ type: "object", required: ["id"] }, [{ data: {} }, { data: { id: 1 } }]);
    expect(required.tests.map((t) => t.accepted)).toEqual([false, true]);
  });

  it("with openObjects an object takes keys beside its listed properties, anywhere between them, unless additionalProperties is false", async () => {
    const properties = { id: { type: "integer" }, name: { type: "string" }, tag: { enum: ["x", "y"] } };
    const tests = [
      { data: { id: 1, name: "a" } },
      { data: { id: 1, extra: [1, { q: null }], name: "a", tag: "x", more: "z" } },
      { data: { other: true, id: 1, name: "a" } },
      // a listed key cannot come back as another key with another value, nor be left out when required
      { data: { id: 1, name: "a", tag: "z" } },
      { data: { id: 1, tag: "x" } },
      { data: { extra: 1 } },
      // listed keys keep their order
      { data: { name: "a", id: 1 } },
      // keys that begin or end like a listed one are other keys
      { data: { id: 1, name: "a", nam: 5, names: 6, "": 7, 'na"me': 8 } },
    ];
    const open = await checker.check({ type: "object", properties, required: ["id", "name"] }, tests, { openObjects: true });
    expect(open.tests.map((t) => t.accepted)).toEqual([true, true, true, false, false, false, false, true]);
    const closed = await checker.check({ type: "object", properties, required: ["id", "name"], additionalProperties: false }, tests, {
      openObjects: true,
    });
    expect(closed.tests.map((t) => t.accepted)).toEqual([true, false, false, false, false, false, false, false]);
    // by default objects hold their listed properties only (a subset of what the schema allows)
    const listed = await checker.check({ type: "object", properties, required: ["id", "name"] }, tests);
    expect(listed.tests.map((t) => t.accepted)).toEqual([true, false, false, false, false, false, false, false]);
    // other keys' values follow the additionalProperties schema; nested and recursive objects are open too
    const typed = await checker.check(
      {
        type: "object",
        properties: { a: { type: "integer" }, child: { $ref: "#" } },
        additionalProperties: { type: "string" },
      },
      [
        { data: { a: 1, b: "s" } },
        { data: { a: 1, b: 2 } },
        { data: { child: { a: 2, z: "y", child: {} }, q: "r" } },
        { data: { child: { z: 1 } } },
      ],
      { openObjects: true },
    );
    expect(typed.tests.map((t) => t.accepted)).toEqual([true, false, true, false]);
  });

  it("a type beside an enum keeps the values of that type only (the grammar engine took the values and dropped the type)", async () => {
    const result = await checker.check({ enum: ["M", { a: 1 }], type: "object" }, [{ data: { a: 1 } }, { data: "M" }]);
    expect(result.tests.map((t) => t.accepted)).toEqual([true, false]);
    // no value left (MaskBench's Github_easy---o30060): the key can only be absent, not a property that takes anything
    const none = await checker.check({ type: "object", properties: { b: { enum: ["M"], type: "object" } } }, [
      { data: { b: "M" } },
      { data: { b: {} } },
      { data: {} },
    ]);
    expect(none.tests.map((t) => t.accepted)).toEqual([false, false, true]);
    // required, the object has no valid value: refused, saying so
    const required = await checker.check({ type: "object", properties: { b: { enum: ["M"], type: "object" } }, required: ["b"] });
    expect(required.compiled).toBe(false);
    expect(required.error?.message).toMatch(/at \/properties\/b: no value satisfies this schema/);
    // `false` as a property or a branch: the same, in our words (the grammar engine's were its failed check)
    const falseRequired = await checker.check({ type: "object", properties: { a: false }, required: ["a"] });
    expect(falseRequired.error?.message).toBe(
      "the schema at /properties/a: no value satisfies this schema (`false`), and the property is required",
    );
    const branches = await checker.check(
      { type: "object", properties: { a: { anyOf: [false, { type: "string" }] }, b: { anyOf: [false] } } },
      [{ data: { a: "s" } }, { data: { a: 1 } }, { data: { b: 1 } }],
    );
    expect(branches.tests.map((t) => t.accepted)).toEqual([true, false, false]);
  });

  it("properties named like keywords are properties (MaskBench's Github_easy---o60843 has one named `properties`)", async () => {
    const schema = {
      type: "object",
      properties: {
        properties: { type: "object", properties: { a: { type: "string" } }, required: ["a"] },
        pattern: { type: "string", pattern: "^x$" },
        patternProperties: { type: "integer", minimum: 1, maximum: 3 },
        const: { type: "boolean" },
      },
      required: ["properties", "pattern", "patternProperties"],
    };
    for (const openObjects of [false, true]) {
      const result = await checker.check(
        schema,
        [
          { data: { properties: { a: "s" }, pattern: "x", patternProperties: 2, const: true } },
          { data: { properties: { a: "s" }, pattern: "y", patternProperties: 2 } },
          { data: { properties: { a: "s" }, pattern: "x", patternProperties: 4 } },
          { data: { properties: {}, pattern: "x", patternProperties: 2 } },
        ],
        { openObjects },
      );
      expect(result.error).toBeUndefined();
      expect(result.tests.map((t) => t.accepted)).toEqual([true, false, false, false]);
    }
  });

  it("patternProperties: a map whose keys match the pattern, each value of its schema, in both object modes", async () => {
    const tests = [
      { data: {} },
      { data: { "12": { n: 1 }, "7": { n: 2 } } },
      // a key outside the pattern, a value outside its schema, text around the digits (the pattern is anchored)
      { data: { a: { n: 1 } } },
      { data: { "12": { n: "x" } } },
      { data: { "1a": { n: 1 } } },
    ];
    const schema = {
      type: "object",
      patternProperties: { "^[0-9]+$": { type: "object", properties: { n: { type: "integer" } }, required: ["n"] } },
      additionalProperties: false,
    };
    for (const openObjects of [false, true]) {
      const result = await checker.check(schema, tests, { openObjects });
      expect(result.compiled).toBe(true);
      expect(result.tests.map((t) => t.accepted)).toEqual([true, true, false, false, false]);
    }
    // an unanchored pattern matches anywhere in the key; keys are JSON strings, escapes included
    const unanchored = await checker.check({ type: "object", patternProperties: { x: { type: "integer" } } }, [
      { data: { axb: 1, 'q"x': 2 } },
      { data: { ab: 1 } },
    ]);
    expect(unanchored.tests.map((t) => t.accepted)).toEqual([true, false]);
    // what it does not enforce is refused by name (best effort then relaxes it)
    for (const [refused, why] of [
      [{ patternProperties: { a: {}, b: {} } }, /one pattern is enforced, not 2/],
      [{ properties: { ab: {} }, patternProperties: { a: {} } }, /the listed property "ab" matches its pattern "a"/],
      [{ properties: { ab: {} }, patternProperties: { "(": {} } }, /is not an ECMA-262 regular expression/],
      // (a required name is listed by normalization: refused as listed properties are)
      [{ patternProperties: { a: {} }, required: ["a"] }, /the listed property "a" matches its pattern/],
      [{ patternProperties: { a: {} }, minProperties: 1 }, /"minProperties"/],
    ] as const) {
      const result = await checker.check(refused);
      expect(result.error?.code).toBe("CONSTRAINT_UNSUPPORTED_KEYWORD");
      expect(result.error?.message).toMatch(why);
    }
    // beside listed properties whose names no pattern matches, the object holds the listed ones (in both modes): the
    // patterns constrain nothing it writes, and a pattern key (valid) is not generated
    const beside = { type: "object", properties: { name: { type: "string" } }, patternProperties: { "^x-": { type: "integer" }, "[": {} } };
    for (const openObjects of [false, true]) {
      const result = await checker.check(beside, [{ data: { name: "a" } }, { data: { name: 1 } }, { data: { name: "a", "x-q": 1 } }], {
        openObjects,
      });
      expect(result.error?.message).toMatch(/"\[" is not an ECMA-262/);
    }
    const besideValid = { ...beside, patternProperties: { "^x-": { type: "integer" }, "^[0-9]": { not: {} } } };
    for (const openObjects of [false, true]) {
      const result = await checker.check(besideValid, [{ data: { name: "a" } }, { data: { name: 1 } }, { data: { name: "a", "x-q": 1 } }], {
        openObjects,
      });
      expect(result.tests.map((t) => t.accepted)).toEqual([true, false, false]);
    }
    // the keys' pattern counts against the repetition budget as a value's pattern does
    const long = await checker.check({ type: "object", patternProperties: { "^a{300}$": { type: "integer" } } });
    expect(long.error?.code).toBe("CONSTRAINT_TOO_COMPLEX");
    expect(long.error?.message).toMatch(/a repetition of 300 in the keys' pattern at the root/);
  });

  it.skipIf(!haveMaskbench)(`MaskBench, every 200th schema: no invalid instance accepted (skipped without ${MASKBENCH})`, async () => {
    const lines = gunzipSync(fs.readFileSync(MASKBENCH)).toString("utf8").split("\n").filter(Boolean);
    let schemas = 0;
    let compiled = 0;
    let passing = 0;
    let validationErrors = 0;
    const invalidAccepted: string[] = [];
    for (let i = 0; i < lines.length; i += 200) {
      const record = parseJsonKeepingNumbers(lines[i]!) as { id: string; schema: unknown; tests: { data: unknown; valid: boolean }[] };
      schemas++;
      // open objects: what they accept holds what listed-only objects accept, so no invalid instance here means none there
      const result = await checker.check(plainJson(record.schema), record.tests, { openObjects: true });
      if (!result.compiled) continue;
      compiled++;
      let ok = true;
      result.tests.forEach((t, k) => {
        if (t.accepted && !record.tests[k]!.valid) invalidAccepted.push(`${record.id} #${k}`);
        if (!t.accepted && record.tests[k]!.valid) validationErrors++;
        if (t.accepted !== record.tests[k]!.valid) ok = false;
      });
      if (ok) passing++;
    }
    expect(schemas).toBe(57);
    expect(invalidAccepted).toEqual([]);
    // measured (fixture vocabulary, open objects: 48 compiled, 44 passing, 7 validation errors; objects holding their
    // listed properties only gave 36 passing, 8 validation errors; Github_medium---o30856, whose optional property
    // allows no value, compiles with its object closed and refuses a valid instance with another key): floors it must
    // not fall below, and a ceiling on valid instances refused
    expect(compiled).toBeGreaterThanOrEqual(48);
    expect(passing).toBeGreaterThanOrEqual(44);
    expect(validationErrors).toBeLessThanOrEqual(7);
  });
});
