/**
 * Best effort for schemas that are not strict (relax.ts, validate.ts): each keyword constrained decoding cannot
 * enforce is relaxed where it is and named, a schema that is not a schema is still refused, the output is checked
 * against the whole schema with Ajv, and through the engine a relaxed schema's result carries that check.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Engine } from "../engine.js";
import { planGuide } from "./index.js";
import { relaxJsonSchema } from "./relax.js";
import { caught } from "./test-support.js";
import { checkOutput } from "./validate.js";

const LIMITS = { maxRepetition: 256, maxRepetitionSum: 2048 };

describe("relaxJsonSchema", () => {
  it("relaxes each keyword it cannot enforce, where it is, and names it", () => {
    const schema = {
      type: "object",
      properties: {
        tags: { type: "array", items: { type: "string" }, uniqueItems: true },
        score: { type: "number", minimum: 0.5, maximum: 0.75 },
        code: { type: "string", pattern: "^(?=a)\\w+$" },
        note: { type: "string", maxLength: 100000 },
        either: { oneOf: [{ type: "string" }, { type: "string", maxLength: 3 }] },
      },
      required: ["tags", "score"],
    };
    const result = relaxJsonSchema(schema, "s", LIMITS);
    expect(result.relaxed.map((r) => `${r.path} ${r.keyword}`).sort()).toEqual([
      "/properties/code pattern",
      "/properties/either oneOf",
      "/properties/note maxLength",
      "/properties/score minimum",
      "/properties/tags uniqueItems",
    ]);
    const relaxed = result.relaxedSchema as { properties: Record<string, Record<string, unknown>> };
    expect(relaxed.properties["score"]).toEqual({ type: "number" });
    expect(relaxed.properties["either"]!["anyOf"]).toHaveLength(2);
    expect(relaxed.properties["tags"]!["uniqueItems"]).toBeUndefined();
    // the schema the output is checked against keeps every keyword
    expect((result.normalized as typeof schema).properties.score).toEqual({ type: "number", minimum: 0.5, maximum: 0.75 });
    expect(result.relaxed.every((r) => r.reason.length > 0)).toBe(true);
  });

  it("merges an allOf whose exact merge is impossible (additionalProperties against another's property) into one schema", () => {
    const schema = {
      $defs: { base: { type: "object", properties: { id: { type: "integer" } }, required: ["id"], additionalProperties: false } },
      allOf: [{ $ref: "#/$defs/base" }, { properties: { name: { type: "string" } }, required: ["name"] }],
    };
    const result = relaxJsonSchema(schema, "s", LIMITS);
    expect(result.relaxed.map((r) => r.keyword)).toEqual(["allOf"]);
    expect(result.relaxedSchema).toMatchObject({ type: "object", properties: { id: { type: "integer" }, name: { type: "string" } } });
    expect(((result.relaxedSchema as { required: string[] }).required ?? []).sort()).toEqual(["id", "name"]);
  });

  it("a schema that is not a schema is still refused; a strict one that needs relaxing is refused by name", () => {
    expect(caught(() => relaxJsonSchema({ $ref: "#/$defs/missing" }, "s", LIMITS)).code).toBe("CONSTRAINT_BAD_SCHEMA");
    expect(caught(() => relaxJsonSchema({ type: "string", minLength: 5, maxLength: 2 }, "s", LIMITS)).code).toBe("CONSTRAINT_BAD_SCHEMA");
    const schema = { type: "array", uniqueItems: true };
    expect(caught(() => planGuide({ constraint: { type: "json_schema", schema } })).keyword).toBe("uniqueItems");
    expect(caught(() => planGuide({ constraint: { type: "json_schema", schema, strict: true } })).keyword).toBe("uniqueItems");
    const plan = planGuide({ constraint: { type: "json_schema", schema, strict: false } })!;
    expect(plan.validation?.relaxed.map((r) => r.keyword)).toEqual(["uniqueItems"]);
    // nothing to relax: no check is needed (the grammar enforces the whole schema)
    expect(planGuide({ constraint: { type: "json_schema", schema: { type: "array" }, strict: false } })!.validation).toBeUndefined();
  });
});

describe("checkOutput", () => {
  const schema = { type: "array", items: { type: "integer" }, uniqueItems: true, maxItems: 3 };
  it("valid, invalid with the validator's reason, and not JSON", () => {
    expect(checkOutput("[1, 2]", schema, [])).toEqual({ valid: true, errors: [], relaxed: [] });
    const dup = checkOutput("[1, 1]", schema, []);
    expect(dup.valid).toBe(false);
    expect(dup.errors.join()).toMatch(/duplicate/);
    const cut = checkOutput("[1, ", schema, []);
    expect(cut.valid).toBe(false);
    expect(cut.errors[0]).toMatch(/not one JSON document/);
  });

  it("formats, draft-04 schemas after normalizing, and patterns written without the u flag", () => {
    expect(checkOutput('"not an email"', { type: "string", format: "email" }, []).valid).toBe(false);
    expect(checkOutput('"a@b.co"', { type: "string", format: "email" }, []).valid).toBe(true);
    expect(
      checkOutput('"a-b"', { $schema: "http://json-schema.org/draft-04/schema#", type: "string", pattern: "^[\\w\\-]+$" }, []).valid,
    ).toBe(true);
  });
});

describe("a relaxed schema through the engine", () => {
  let engine: Engine;
  beforeAll(async () => {
    engine = await Engine.loadDefault({ maxSequences: 2, kvCacheTokens: 2048, contextLength: 512 });
  });
  afterAll(() => engine?.dispose());

  it("generates against the relaxed schema and reports the check of the whole one", async () => {
    // uniqueItems cannot be enforced: the grammar keeps the rest (three integers 0-1), the check says whether they are unique
    const schema = { type: "array", items: { type: "integer", minimum: 0, maximum: 1 }, minItems: 3, maxItems: 3, uniqueItems: true };
    for (const seed of [1, 2]) {
      const result = await engine.generateToEnd("Numbers:", {
        temperature: 1,
        seed,
        maxTokens: 40,
        constraint: { type: "json_schema", schema, strict: false },
      });
      const value = JSON.parse(result.text) as number[];
      expect(value).toHaveLength(3);
      // three values from {0, 1} are never unique: the check must say so
      expect(result.schemaCheck?.valid, result.text).toBe(false);
      expect(result.schemaCheck?.relaxed.map((r) => r.keyword)).toEqual(["uniqueItems"]);
      expect(result.schemaCheck?.errors.join()).toMatch(/duplicate/);
    }
    const strict = await engine.generateToEnd("Numbers:", {
      seed: 1,
      maxTokens: 40,
      constraint: { type: "json_schema", schema: { type: "array", items: { type: "integer" }, maxItems: 2 }, strict: false },
    });
    expect(strict.schemaCheck).toBeUndefined();
  });
});
