import { describe, expect, it } from "vitest";
import { caught } from "./test-support.js";
import { disjointBranches, normalizeJsonSchema } from "./normalize.js";
import { checkJsonSchema } from "./schema.js";

describe("normalizeJsonSchema: what the specification says a validator ignores is dropped, not refused", () => {
  it("drops vendor extensions, OpenAPI's nullable, draft-04's id and typos, but keeps property names that look like them", () => {
    // a Snowplow-style schema with `self`, a Kubernetes extension, an example and a misspelt keyword
    const schema = {
      $schema: "http://iglucentral.com/schemas/com.snowplowanalytics.self-desc/schema/jsonschema/1-0-0#",
      self: { vendor: "com.acme", name: "event", format: "jsonschema", version: "1-0-0" },
      id: "http://example.com/event",
      type: "object",
      "x-kubernetes-preserve-unknown-fields": true,
      properties: {
        self: { type: "string", decription: "typo", nullable: true, example: "x", readonly: true },
        "x-id": { type: "integer", _format: "int" },
      },
      required: ["self"],
    };
    const given = structuredClone(schema);
    expect(normalizeJsonSchema(schema)).toEqual({
      $schema: schema.$schema,
      type: "object",
      properties: { self: { type: "string" }, "x-id": { type: "integer" } },
      required: ["self"],
    });
    // the input is left as it was
    expect(schema).toEqual(given);
    expect(() => checkJsonSchema(schema, "s")).not.toThrow();
  });

  it("rewrites draft-04's boolean exclusive bounds and the array form of items", () => {
    expect(normalizeJsonSchema({ type: "number", minimum: 0, exclusiveMinimum: true, maximum: 1, exclusiveMaximum: false })).toEqual({
      type: "number",
      exclusiveMinimum: 0,
      maximum: 1,
    });
    expect(normalizeJsonSchema({ type: "array", items: [{ type: "string" }, { type: "integer" }], additionalItems: false })).toEqual({
      type: "array",
      prefixItems: [{ type: "string" }, { type: "integer" }],
      items: false,
    });
    // without additionalItems a tuple allows more items (of any kind)
    expect(normalizeJsonSchema({ items: [{ type: "string" }] })).toEqual({ prefixItems: [{ type: "string" }] });
    // beside a schema `items`, additionalItems means nothing
    expect(normalizeJsonSchema({ items: { type: "string" }, additionalItems: false })).toEqual({ items: { type: "string" } });
  });

  it("drops then/else without if and keywords that assert nothing; keeps what asserts for the check to refuse", () => {
    expect(
      normalizeJsonSchema(
        JSON.parse('{"then": {"type": "string"}, "else": false, "uniqueItems": false, "minProperties": 0, "dependencies": {"a": []}}'),
      ),
    ).toEqual({});
    expect(caught(() => checkJsonSchema(JSON.parse('{"if": {"type": "string"}, "then": {"minLength": 1}}'), "s")).keyword).toBe("if");
    expect(caught(() => checkJsonSchema({ type: "array", uniqueItems: true }, "s")).keyword).toBe("uniqueItems");
    expect(caught(() => checkJsonSchema({ type: "object", minProperties: 1 }, "s")).keyword).toBe("minProperties");
  });

  it("an unknown format is ignored; fixed-width integer formats become their range; enforced formats stay", () => {
    expect(normalizeJsonSchema({ type: "string", format: "credit-card" })).toEqual({ type: "string" });
    expect(normalizeJsonSchema({ type: "integer", format: "int32" })).toEqual({
      type: "integer",
      minimum: -2147483648,
      maximum: 2147483647,
    });
    expect(normalizeJsonSchema({ type: "integer", format: "uint8", minimum: 10, maximum: 1000 })).toEqual({
      type: "integer",
      minimum: 10,
      maximum: 255,
    });
    // int64 is not exact as a double: the format is ignored, not turned into a range that would be wrong
    expect(normalizeJsonSchema({ type: "integer", format: "int64" })).toEqual({ type: "integer" });
    expect(normalizeJsonSchema({ type: "string", format: "email" })).toEqual({ type: "string", format: "email" });
  });

  it("a oneOf no value can match twice is the anyOf it means; one that may overlap is refused by name", () => {
    const cat = { type: "object", properties: { kind: { const: "cat" }, lives: { type: "integer" } }, required: ["kind"] };
    const dog = { type: "object", properties: { kind: { enum: ["dog", "wolf"] }, bark: { type: "string" } }, required: ["kind", "bark"] };
    expect(normalizeJsonSchema({ oneOf: [cat, dog] })).toEqual({ anyOf: [cat, dog] });
    expect(normalizeJsonSchema({ oneOf: [{ type: "string" }, { type: ["integer", "null"] }] })).toEqual({
      anyOf: [{ type: "string" }, { type: ["integer", "null"] }],
    });
    expect(disjointBranches([{ type: "integer" }, { type: "number" }])).toBe(false);
    // the discriminator must be required in every branch, and its values distinct
    expect(disjointBranches([cat, { ...dog, required: ["bark"] }])).toBe(false);
    expect(disjointBranches([cat, { ...cat }])).toBe(false);
    expect(caught(() => checkJsonSchema({ oneOf: [{ type: "string" }, { minLength: 1 }] }, "s")).keyword).toBe("oneOf");
  });

  it("definitions no $ref reaches are left out (their keywords are not checked); reached ones are, through chains", () => {
    const schema = {
      $ref: "#/definitions/a~1b",
      definitions: {
        "a/b": { type: "object", properties: { c: { $ref: "#/$defs/c" } } },
        unused: { not: { type: "string" } },
      },
      $defs: { c: { type: "string" }, alsoUnused: { uniqueItems: true } },
    };
    expect(normalizeJsonSchema(schema)).toEqual({
      $ref: "#/definitions/a~1b",
      definitions: { "a/b": schema.definitions["a/b"] },
      $defs: { c: { type: "string" } },
    });
    expect(() => checkJsonSchema(schema, "s")).not.toThrow();
    const used = { $ref: "#/definitions/bad", definitions: { bad: { not: { type: "string" } } } };
    expect(caught(() => checkJsonSchema(used, "s")).keyword).toBe("not");
    // a recursive schema keeps its definitions
    const tree = {
      $ref: "#/$defs/node",
      $defs: { node: { type: "object", properties: { kids: { type: "array", items: { $ref: "#/$defs/node" } } } } },
    };
    expect(normalizeJsonSchema(tree)).toEqual(tree);
  });

  it("walks without recursion: a schema nested far past the bound is refused by the check, not a stack overflow", () => {
    let deep: Record<string, unknown> = { type: "integer" };
    for (let i = 0; i < 20_000; i++) deep = { type: "array", items: deep, "x-vendor": i };
    expect(caught(() => checkJsonSchema(deep, "s")).message).toMatch(/nested more than 64 levels/);
  });
});

describe("normalizeJsonSchema keeps the order of names", () => {
  it("properties and definitions in their order (the grammar writes properties in schema order)", () => {
    const names = ["zeta", "alpha", "mid", "beta"];
    const schema = {
      type: "object",
      properties: Object.fromEntries(names.map((n) => [n, { type: "integer", "x-note": n }])),
      $defs: Object.fromEntries(names.map((n) => [n, { type: "string" }])),
      anyOf: names.map((n) => ({ $ref: `#/$defs/${n}` })),
    };
    const normalized = normalizeJsonSchema(schema) as { properties: object; $defs: object };
    expect(Object.keys(normalized.properties)).toEqual(names);
    expect(Object.keys(normalized.$defs)).toEqual(names);
    expect(JSON.stringify(normalized)).toBe(
      JSON.stringify({
        type: "object",
        properties: Object.fromEntries(names.map((n) => [n, { type: "integer" }])),
        $defs: Object.fromEntries(names.map((n) => [n, { type: "string" }])),
        anyOf: names.map((n) => ({ $ref: `#/$defs/${n}` })),
      }),
    );
  });
});

describe("normalizeJsonSchema: references, allOf, and finite value lists as the engine compiles them", () => {
  it("hoists references that point elsewhere (into properties, nested definitions, keys outside the vocabulary, anchors)", () => {
    const schema = {
      type: "object",
      resourceDefinitions: { partner: { type: "string" } },
      definitions: { outer: { definitions: { inner: { type: "integer" } } }, id: { $id: "#ident", type: "boolean" } },
      properties: {
        root: { type: "object", properties: { children: { type: "array", items: { $ref: "#/properties/root" } } } },
        partner: { $ref: "#/resourceDefinitions/partner" },
        inner: { $ref: "#/definitions/outer/definitions/inner" },
        flag: { $ref: "#ident" },
        broken: { $ref: "#/nowhere" },
      },
    };
    const given = structuredClone(schema);
    const normalized = normalizeJsonSchema(schema) as { properties: Record<string, { $ref?: string }>; $defs: Record<string, unknown> };
    expect(schema).toEqual(given);
    const target = (name: string): unknown => normalized.$defs[normalized.properties[name]!.$ref!.replace("#/$defs/", "")];
    expect(target("partner")).toEqual({ type: "string" });
    expect(target("inner")).toEqual({ type: "integer" });
    expect(target("flag")).toMatchObject({ type: "boolean" });
    // the recursive one points at a copy of its target, which points at itself
    type Tree = { properties: { children: { items: { $ref: string } } } };
    const ref = (normalized.properties["root"] as unknown as Tree).properties.children.items.$ref;
    const copy = normalized.$defs[ref.replace("#/$defs/", "")] as Tree;
    expect(copy.properties.children.items.$ref).toBe(ref);
    // one that resolves nowhere is left for the check to refuse by name
    expect(normalized.properties["broken"]!.$ref).toBe("#/nowhere");
    expect(caught(() => checkJsonSchema(schema, "s")).path).toBe("/properties/broken/$ref");
  });

  it("merges allOf where the merge is exact, and leaves it where it is not", () => {
    const merged = normalizeJsonSchema({
      $defs: { base: { type: "object", properties: { id: { type: "integer", minimum: 0 } }, required: ["id"] } },
      allOf: [{ $ref: "#/$defs/base" }, { properties: { id: { maximum: 9 }, name: { type: "string" } }, required: ["name"] }],
    });
    expect(merged).toEqual({
      type: "object",
      properties: { id: { type: "integer", minimum: 0, maximum: 9 }, name: { type: "string" } },
      required: ["id", "name"],
    });
    // additionalProperties: false in one conjunct forbids the other's property: not merged (refused when strict)
    const open = { allOf: [{ properties: { a: {} }, additionalProperties: false }, { properties: { b: {} } }] };
    expect((normalizeJsonSchema(open) as { allOf?: unknown[] }).allOf).toHaveLength(2);
    // types that share nothing: not merged
    expect((normalizeJsonSchema({ allOf: [{ type: "string" }, { type: "integer" }] }) as { allOf?: unknown[] }).allOf).toHaveLength(2);
    // a recursive definition read into its own allOf stays bounded
    const recursive = { $defs: { node: { allOf: [{ $ref: "#/$defs/node" }, { type: "object" }] } }, $ref: "#/$defs/node" };
    expect(() => normalizeJsonSchema(recursive)).not.toThrow();
  });

  it("enum and const of arrays and objects become the schemas of exactly those values", () => {
    expect(normalizeJsonSchema({ enum: ["a", ["deleted"], { k: 1 }] })).toEqual({
      anyOf: [
        { enum: ["a"] },
        { type: "array", prefixItems: [{ const: "deleted" }], minItems: 1, maxItems: 1, items: false },
        { type: "object", properties: { k: { const: 1 } }, required: ["k"], additionalProperties: false },
      ],
    });
    expect(() => checkJsonSchema({ const: { a: [1, null] } }, "s")).not.toThrow();
  });

  it("a finite list of values beside other keywords becomes the values the whole schema accepts (checked by a validator)", () => {
    // the JSON-Schema-Test-Suite style MaskBench's Synthesized split is made of
    // no value is left: the check then says the schema accepts nothing
    expect(normalizeJsonSchema({ allOf: [{ enum: [[1, 2, 3]] }, { not: { not: { maxItems: 2 } } }] })).toEqual({ enum: [] });
    expect(normalizeJsonSchema({ allOf: [{ enum: [[1, 2, 3]] }, { not: { not: { maxItems: 3 } } }] })).toEqual({
      anyOf: [{ type: "array", prefixItems: [{ const: 1 }, { const: 2 }, { const: 3 }], minItems: 3, maxItems: 3, items: false }],
    });
    expect(normalizeJsonSchema({ type: "string", enum: ["intramural", "varsity", "club"], not: { enum: ["intramural"] } })).toEqual({
      enum: ["varsity", "club"],
    });
    expect(normalizeJsonSchema({ enum: [{ foo: 1 }, { bar: 2 }], not: { required: ["bar"] } })).toEqual({
      anyOf: [{ type: "object", properties: { foo: { const: 1 } }, required: ["foo"], additionalProperties: false }],
    });
  });

  it("an optional property that allows no value is taken out and its object closed; a required one is named", () => {
    // an API description's enum of strings under `"type": "object"` (MaskBench's Github_medium---o30265): no value
    // is both, so the key can only be absent
    const schema = {
      type: "object",
      properties: {
        builtin: { enum: ["MODIFIABLE", "DELETABLE"], readonly: true, type: "object" },
        name: { type: "string" },
        inner: { type: "object", properties: { never: { type: "string", enum: [1, 2] }, n: { type: "integer" } } },
      },
    };
    expect(normalizeJsonSchema(schema)).toEqual({
      type: "object",
      properties: {
        name: { type: "string" },
        inner: { type: "object", properties: { n: { type: "integer" } }, additionalProperties: false },
      },
      additionalProperties: false,
    });
    expect(() => checkJsonSchema(schema, "s")).not.toThrow();
    // required: the object has no valid value, and the check says so where the value is impossible
    const required = caught(() => checkJsonSchema({ ...schema, required: ["builtin"] }, "s"));
    expect(required.code).toBe("CONSTRAINT_BAD_SCHEMA");
    expect(required.message).toBe(
      "s at /properties/builtin: no value satisfies this schema (none of its enum values passes the schema's other keywords, e.g. its type)",
    );
    expect(caught(() => checkJsonSchema({ enum: [] }, "s")).message).toContain("no value satisfies this schema");
    expect(caught(() => checkJsonSchema({ enum: "a" }, "s")).message).toBe("s at /enum: enum must be an array");
  });
});
