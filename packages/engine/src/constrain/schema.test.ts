import { describe, expect, it } from "vitest";
import { caught } from "./test-support.js";
import { planGuide } from "./index.js";
import { checkJsonSchema } from "./schema.js";
import { resolveConstraint } from "./spec.js";

describe("checkJsonSchema", () => {
  it("accepts the keywords the grammar engine enforces, and annotations", () => {
    expect(() =>
      checkJsonSchema(
        {
          title: "person",
          type: "object",
          properties: {
            name: { type: "string", minLength: 1, maxLength: 20, description: "who" },
            age: { type: "integer", minimum: 0, maximum: 150 },
            tags: { type: "array", items: { enum: ["a", "b", 3, null] }, maxItems: 3 },
            when: { type: "string", format: "date" },
            next: { $ref: "#/$defs/node" },
            either: { anyOf: [{ type: "null" }, { const: true }] },
          },
          required: ["name", "age"],
          additionalProperties: false,
          $defs: { node: { type: ["object", "null"] } },
        },
        "constraint.schema",
      ),
    ).not.toThrow();
  });

  it("refuses a keyword it cannot enforce, naming the keyword and its JSON pointer", () => {
    const error = caught(() =>
      checkJsonSchema({ type: "object", properties: { n: { type: "integer", multipleOf: 3 } } }, "response_format.json_schema.schema"),
    );
    expect(error.code).toBe("CONSTRAINT_UNSUPPORTED_KEYWORD");
    expect(error.keyword).toBe("multipleOf");
    expect(error.path).toBe("/properties/n");
    expect(error.field).toBe("response_format.json_schema.schema");
    expect(error.message).toContain('"multipleOf"');
    expect(caught(() => checkJsonSchema({ type: "array", uniqueItems: true }, "s")).keyword).toBe("uniqueItems");
    expect(caught(() => checkJsonSchema({ not: { type: "string" } }, "s")).keyword).toBe("not");
    // an allOf whose merge would not be exact (one conjunct's additionalProperties forbids the other's property)
    const unmerged = { allOf: [{ properties: { a: {} }, additionalProperties: false }, { properties: { b: {} } }] };
    expect(caught(() => checkJsonSchema(unmerged, "s")).keyword).toBe("allOf");
    // merged exactly, and a const object as the schema of that value: enforced
    expect(() => checkJsonSchema({ allOf: [{ type: "integer" }, { minimum: 1 }] }, "s")).not.toThrow();
    expect(() => checkJsonSchema({ const: { a: 1 } }, "s")).not.toThrow();
    // what keeps something else from being enforced is named: multipleOf beside bounds, a format beside a pattern
    expect(caught(() => checkJsonSchema({ type: "integer", minimum: 0, multipleOf: 3 }, "s")).keyword).toBe("multipleOf");
    expect(caught(() => checkJsonSchema({ type: "string", format: "uuid", pattern: "^[0-9a-f-]{36}$" }, "s")).keyword).toBe("format");
    expect(caught(() => checkJsonSchema({ type: "string", format: "email", pattern: "^(?!\\.)\\S+$" }, "s")).keyword).toBe("pattern");
    const escaped = caught(() => checkJsonSchema({ properties: { "a/b~c": { minProperties: 1 } } }, "s"));
    expect(escaped.path).toBe("/properties/a~1b~0c");
  });

  it("refuses what is not a JSON Schema with CONSTRAINT_BAD_SCHEMA", () => {
    expect(caught(() => checkJsonSchema("object", "s")).code).toBe("CONSTRAINT_BAD_SCHEMA");
    expect(caught(() => checkJsonSchema(false, "s")).code).toBe("CONSTRAINT_BAD_SCHEMA");
    const type = caught(() => checkJsonSchema({ type: "foo" }, "s"));
    expect([type.code, type.keyword, type.path]).toEqual(["CONSTRAINT_BAD_SCHEMA", "type", "/type"]);
    expect(caught(() => checkJsonSchema({ properties: { a: 3 } }, "s")).path).toBe("/properties/a");
    expect(caught(() => checkJsonSchema({ $ref: "#/$defs/missing" }, "s")).keyword).toBe("$ref");
    expect(caught(() => checkJsonSchema({ type: "array", minItems: 3, maxItems: 1 }, "s")).code).toBe("CONSTRAINT_BAD_SCHEMA");
    expect(caught(() => checkJsonSchema({ type: "string", pattern: "(" }, "s")).keyword).toBe("pattern");
    expect(caught(() => checkJsonSchema({ required: ["x"], additionalProperties: false }, "s")).keyword).toBe("required");
  });

  it("bounds the nesting it walks", () => {
    let deep: Record<string, unknown> = { type: "integer" };
    for (let i = 0; i < 100; i++) deep = { type: "array", items: deep };
    expect(caught(() => checkJsonSchema(deep, "s")).message).toMatch(/nested more than 64 levels/);
  });
});

describe("resolveConstraint", () => {
  const tools = [
    { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } },
    { name: "noop", parameters: { type: "object", properties: { n: { type: "integer", multipleOf: 2 } } } },
  ];

  it("a named tool_choice must name a listed tool", () => {
    const error = caught(() =>
      resolveConstraint({ type: "tool_call", format: "json", tools: tools.slice(0, 1), choice: { name: "nope" } }),
    );
    expect(error.code).toBe("CONSTRAINT_UNKNOWN_TOOL");
    expect(error.field).toBe("constraint.choice");
    expect(error.message).toContain('"nope"');
  });

  it("checks the schemas of the tools it enforces: all for a forced call, strict ones under auto", () => {
    const forced = caught(() => resolveConstraint({ type: "tool_call", format: "xml", tools, choice: "required" }));
    expect([forced.keyword, forced.field]).toEqual(["multipleOf", "constraint.tools[1].parameters"]);
    // under auto a non-strict tool's arguments are any object: its schema is not enforced, so not refused
    const auto = resolveConstraint({ type: "tool_call", format: "xml", tools, choice: "auto" });
    expect(auto.kind).toBe("structural_tag");
    const strict = caught(() =>
      resolveConstraint({ type: "tool_call", format: "xml", tools: [tools[0]!, { ...tools[1]!, strict: true }], choice: "auto" }),
    );
    expect(strict.keyword).toBe("multipleOf");
  });

  it("builds tags in the model's own call format", () => {
    const xml = JSON.stringify(
      resolveConstraint({ type: "tool_call", format: "xml", tools: tools.slice(0, 1), choice: { name: "get_weather" } }),
    );
    expect(xml).toContain("<function=get_weather>");
    expect(xml).toContain("qwen_xml_parameter");
    const json = JSON.stringify(resolveConstraint({ type: "tool_call", format: "json", tools: tools.slice(0, 1), choice: "required" }));
    expect(json).toContain('{\\"name\\": \\"get_weather\\", \\"arguments\\": ');
    expect(json).toContain("tags_with_separator");
  });

  it("refuses malformed specs by field", () => {
    expect(caught(() => resolveConstraint({ type: "yaml" })).field).toBe("constraint.type");
    expect(caught(() => resolveConstraint({ type: "grammar", ebnf: "" })).field).toBe("constraint.ebnf");
    expect(caught(() => resolveConstraint({ type: "tool_call", format: "yaml", tools, choice: "auto" })).field).toBe("constraint.format");
    expect(caught(() => resolveConstraint({ type: "tool_call", format: "json", tools: [], choice: "auto" })).field).toBe(
      "constraint.tools",
    );
    expect(caught(() => resolveConstraint({ type: "json_schema", schema: {}, strict: "yes" })).field).toBe("constraint.strict");
  });
});

describe("planGuide", () => {
  it("checks the thinking budget", () => {
    expect(planGuide({})).toBeUndefined();
    expect(planGuide({ reasoning: true, thinkingBudget: 0 })).toEqual({ source: undefined, reasoning: true, thinkingBudget: 0 });
    expect(caught(() => planGuide({ thinkingBudget: 5 })).field).toBe("thinkingBudget");
    expect(caught(() => planGuide({ reasoning: true, thinkingBudget: -1 })).field).toBe("thinkingBudget");
    expect(caught(() => planGuide({ reasoning: true, thinkingBudget: 1.5 })).field).toBe("thinkingBudget");
  });
});

describe("applyRule", () => {
  it("masks exactly the tokens whose bit is clear, in rows shorter than the mask too", async () => {
    const { applyRule } = await import("./guide.js");
    const row = Float32Array.from({ length: 70 }, (_, i) => i);
    const bits = new Int32Array(3);
    bits[0] = -1; // 0..31 allowed
    bits[1] = 0; // 32..63 refused
    bits[2] = 0b101; // 64 and 66 allowed
    const out = applyRule({ kind: "mask", bits }, row, new Set());
    const allowed = [...out].flatMap((v, i) => (v === Number.NEGATIVE_INFINITY ? [] : [i]));
    expect(allowed).toEqual([...Array.from({ length: 32 }, (_, i) => i), 64, 66]);
    expect(row[40]).toBe(40); // the input is not modified
    expect([...applyRule({ kind: "mask", bits }, row.subarray(0, 10), new Set())]).toEqual([...row.subarray(0, 10)]);
    const forced = applyRule({ kind: "forced", token: 5 }, row, new Set());
    expect([...forced].flatMap((v, i) => (v === Number.NEGATIVE_INFINITY ? [] : [i]))).toEqual([5]);
    const noEog = applyRule({ kind: "no_eog" }, row, new Set([3, 69]));
    expect([noEog[3], noEog[69], noEog[4]]).toEqual([Number.NEGATIVE_INFINITY, Number.NEGATIVE_INFINITY, 4]);
    expect(applyRule({ kind: "free" }, row, new Set())).toBe(row);
  });
});
