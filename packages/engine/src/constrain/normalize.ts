/**
 * Real-world JSON Schemas as the grammar engine's input. What the specification says a validator ignores is
 * dropped, never refused: keywords outside the JSON Schema vocabulary (vendor extensions such as Snowplow's `self`
 * or `x-kubernetes-*`, OpenAPI's `nullable`, typos, draft-04's `id`), `then`/`else` without `if`,
 * `additionalItems` beside a schema `items`, unknown `format`s (an annotation unless a format-assertion
 * vocabulary is asked for), keywords that assert nothing (`uniqueItems: false`, `minProperties: 0`, empty
 * `dependencies`), and `$defs` no `$ref` reaches. Older drafts' forms are rewritten to the 2020-12 ones the engine
 * compiles: draft-04's boolean `exclusiveMinimum`/`exclusiveMaximum`, the array form of `items` (with
 * `additionalItems`) as `prefixItems`/`items`. `format: int32` (and the other fixed-width integer formats) become
 * the range they mean; a `oneOf` whose branches no value can match twice (distinct `type`s, or a property every
 * branch requires with distinct constant values: a discriminated union) is the `anyOf` it is equivalent to.
 *
 * Everything else stays for checkJsonSchema (schema.ts), which refuses by name what the grammar engine cannot enforce.
 * The walk is iterative; past MAX_SCHEMA_DEPTH a subschema is passed through unchanged (the check refuses it).
 */

/** Deepest schema nesting checked (the walk is iterative; this bounds the grammar the engine builds). */
export const MAX_SCHEMA_DEPTH = 64;

/** Keywords with no effect on which values are valid. */
export const ANNOTATIONS: ReadonlySet<string> = new Set([
  "title",
  "description",
  "default",
  "examples",
  "$schema",
  "$id",
  "$comment",
  "deprecated",
  "readOnly",
  "writeOnly",
]);

/** String formats the grammar engine enforces (each checked against a valid and an invalid value). */
export const ENFORCED_FORMATS: ReadonlySet<string> = new Set([
  "date",
  "time",
  "date-time",
  "duration",
  "email",
  "uuid",
  "ipv4",
  "ipv6",
  "hostname",
  "uri",
  "uri-reference",
  "uri-template",
  "json-pointer",
  "relative-json-pointer",
]);

/** Keywords of JSON Schema drafts 4 to 2020-12 kept for the check (annotations, assertions, applicators, references). */
const VOCABULARY: ReadonlySet<string> = new Set([
  ...ANNOTATIONS,
  // assertions and applicators
  "type",
  "enum",
  "const",
  "multipleOf",
  "maximum",
  "exclusiveMaximum",
  "minimum",
  "exclusiveMinimum",
  "maxLength",
  "minLength",
  "pattern",
  "format",
  "maxItems",
  "minItems",
  "uniqueItems",
  "maxContains",
  "minContains",
  "contains",
  "maxProperties",
  "minProperties",
  "required",
  "dependentRequired",
  "dependencies",
  "dependentSchemas",
  "properties",
  "patternProperties",
  "additionalProperties",
  "propertyNames",
  "unevaluatedProperties",
  "items",
  "prefixItems",
  "additionalItems",
  "unevaluatedItems",
  "allOf",
  "anyOf",
  "oneOf",
  "not",
  "if",
  "then",
  "else",
  "$ref",
  "$dynamicRef",
  "$recursiveRef",
  "$defs",
  "definitions",
]);

/** Subschema positions: keyword -> how its value holds schemas. */
const SCHEMA_MAP = new Set(["properties", "patternProperties", "$defs", "definitions", "dependentSchemas"]);
const SCHEMA_ONE = new Set([
  "additionalProperties",
  "additionalItems",
  "contains",
  "propertyNames",
  "not",
  "if",
  "then",
  "else",
  "unevaluatedItems",
  "unevaluatedProperties",
]);
const SCHEMA_LIST = new Set(["allOf", "anyOf", "oneOf", "prefixItems"]);

/** Fixed-width integer formats and the ranges they mean (exact as doubles). */
const INTEGER_FORMATS: Readonly<Record<string, [number, number]>> = {
  int8: [-128, 127],
  int16: [-32768, 32767],
  int32: [-2147483648, 2147483647],
  uint8: [0, 255],
  uint16: [0, 65535],
  uint32: [0, 4294967295],
};

type Schema = Record<string, unknown>;

function isObject(value: unknown): value is Schema {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

const isPrimitive = (value: unknown): boolean => value === null || ["string", "number", "boolean"].includes(typeof value);

/** The schema's types as a set, or undefined when it names none. */
function typesOf(schema: unknown): Set<string> | undefined {
  if (!isObject(schema)) return undefined;
  const type = schema["type"];
  if (typeof type === "string") return new Set(type === "integer" ? ["integer", "number"] : [type]);
  if (Array.isArray(type) && type.every((t) => typeof t === "string")) {
    const set = new Set<string>(type as string[]);
    if (set.has("integer")) set.add("number");
    return set;
  }
  return undefined;
}

/** The constant values a branch allows for property `name` (when it requires it and fixes it), else undefined. */
function fixedValues(branch: unknown, name: string): unknown[] | undefined {
  if (!isObject(branch)) return undefined;
  const required = branch["required"];
  const properties = branch["properties"];
  if (!Array.isArray(required) || !required.includes(name) || !isObject(properties)) return undefined;
  const property = properties[name];
  if (!isObject(property)) return undefined;
  if ("const" in property && isPrimitive(property["const"])) return [property["const"]];
  const values = property["enum"];
  if (Array.isArray(values) && values.length > 0 && values.every(isPrimitive)) return values;
  return undefined;
}

/** Whether no value can match two of `branches` (so that oneOf means anyOf). */
export function disjointBranches(branches: readonly unknown[]): boolean {
  if (branches.length <= 1) return true;
  // by type: every branch names its types, and no two share one
  const types = branches.map(typesOf);
  if (types.every((t) => t !== undefined)) {
    const seen = new Set<string>();
    let overlap = false;
    for (const set of types as Set<string>[]) {
      for (const t of set) if (seen.has(t)) overlap = true;
      for (const t of set) seen.add(t);
    }
    if (!overlap) return true;
  }
  // by a discriminator: a property every branch requires, with constant values no two branches share
  const first = branches[0];
  if (!isObject(first) || !isObject(first["properties"])) return false;
  for (const name of Object.keys(first["properties"] as Schema)) {
    const seen = new Set<string>();
    let ok = true;
    for (const branch of branches) {
      const values = fixedValues(branch, name);
      if (!values) {
        ok = false;
        break;
      }
      for (const value of values) {
        const key = JSON.stringify(value);
        if (seen.has(key)) ok = false;
        seen.add(key);
      }
      if (!ok) break;
    }
    if (ok) return true;
  }
  return false;
}

/** One schema object's own rewrite (its subschemas are normalized by the walk). */
function rewrite(schema: Schema): Schema {
  const out: Schema = {};
  for (const [key, value] of Object.entries(schema)) if (VOCABULARY.has(key)) out[key] = value;
  // draft-04: boolean exclusive bounds modify minimum/maximum
  for (const [exclusive, bound] of [
    ["exclusiveMinimum", "minimum"],
    ["exclusiveMaximum", "maximum"],
  ] as const) {
    const flag = out[exclusive];
    if (typeof flag !== "boolean") continue;
    if (flag && typeof out[bound] === "number") {
      out[exclusive] = out[bound];
      delete out[bound];
    } else delete out[exclusive];
  }
  // drafts 4 to 2019-09: `items` as an array is a tuple, `additionalItems` the rest; else additionalItems is ignored
  if (Array.isArray(out["items"])) {
    if (out["prefixItems"] === undefined) {
      out["prefixItems"] = out["items"];
      delete out["items"];
      if (out["additionalItems"] !== undefined) out["items"] = out["additionalItems"];
      delete out["additionalItems"];
    }
  } else delete out["additionalItems"];
  if (out["if"] === undefined) {
    delete out["then"];
    delete out["else"];
  }
  if (out["uniqueItems"] === false) delete out["uniqueItems"];
  if (out["minProperties"] === 0) delete out["minProperties"];
  if (out["minContains"] === 1 && out["contains"] === undefined) delete out["minContains"];
  const dependencies = out["dependencies"];
  if (isObject(dependencies) && Object.values(dependencies).every((d) => Array.isArray(d) && d.length === 0)) delete out["dependencies"];
  const dependentRequired = out["dependentRequired"];
  if (isObject(dependentRequired) && Object.values(dependentRequired).every((d) => Array.isArray(d) && d.length === 0))
    delete out["dependentRequired"];
  // the grammar engine neither enforces `required` names missing from `properties` nor keeps an additional key from
  // repeating a listed one (with any value): required names get their property (the additional schema), and beside
  // listed properties no other key is generated (a subset of what the schema allows: every output stays valid)
  const required = out["required"];
  const additional = out["additionalProperties"];
  if (Array.isArray(required) && required.every((name) => typeof name === "string") && additional !== false) {
    const listed = isObject(out["properties"]) ? out["properties"] : {};
    const missing = (required as string[]).filter((name) => !Object.hasOwn(listed, name));
    if (missing.length > 0) {
      const properties: Schema = { ...listed };
      for (const name of missing) {
        Object.defineProperty(properties, name, {
          value: additional === undefined || additional === true ? {} : additional,
          enumerable: true,
          writable: true,
          configurable: true,
        });
      }
      out["properties"] = properties;
    }
  }
  if (isObject(out["properties"]) && Object.keys(out["properties"]).length > 0 && additional !== undefined && additional !== false)
    out["additionalProperties"] = false;
  const format = out["format"];
  if (typeof format === "string" && !ENFORCED_FORMATS.has(format)) {
    const range = INTEGER_FORMATS[format];
    const types = typesOf(out);
    if (range && types?.has("integer") && !types.has("string")) {
      const [low, high] = range;
      out["minimum"] = typeof out["minimum"] === "number" ? Math.max(out["minimum"], low) : low;
      out["maximum"] = typeof out["maximum"] === "number" ? Math.min(out["maximum"], high) : high;
    }
    // an unknown format is an annotation: ignored, as the specification says
    delete out["format"];
  }
  // bounds beside a list of types (["integer", "null"]): one branch per type, the bounds on the numeric ones
  const types = out["type"];
  const boundKeys = ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"];
  if (
    Array.isArray(types) &&
    types.length > 1 &&
    out["anyOf"] === undefined &&
    boundKeys.some((k) => out[k] !== undefined) &&
    Object.keys(out).every((k) => k === "type" || boundKeys.includes(k) || ANNOTATIONS.has(k))
  ) {
    const bounds = Object.fromEntries(boundKeys.filter((k) => out[k] !== undefined).map((k) => [k, out[k]]));
    const branches = types.map((t) => (t === "integer" || t === "number" ? { type: t, ...bounds } : { type: t }));
    for (const k of ["type", ...boundKeys]) delete out[k];
    out["anyOf"] = branches;
  }
  const oneOf = out["oneOf"];
  if (Array.isArray(oneOf) && out["anyOf"] === undefined && disjointBranches(oneOf)) {
    out["anyOf"] = oneOf;
    delete out["oneOf"];
  }
  return out;
}

/** The `$defs`/`definitions` entries a `$ref` of `"#/$defs/NAME"` form names, found from `root` through every reference. */
function reachableDefinitions(root: Schema): Set<string> {
  const reached = new Set<string>();
  // the root without its definitions: they count only when referenced
  const { $defs: _defs, definitions: _definitions, ...rest } = root;
  const stack: unknown[] = [rest];
  while (stack.length > 0) {
    const value = stack.pop();
    if (Array.isArray(value)) {
      for (const item of value) stack.push(item);
      continue;
    }
    if (!isObject(value)) continue;
    for (const [key, child] of Object.entries(value)) {
      if (key === "$ref" && typeof child === "string") {
        if (child === "#") continue;
        const match = /^#\/(\$defs|definitions)\/([^/]+)$/.exec(child);
        if (!match) continue;
        const id = `${match[1]}/${match[2]}`;
        if (reached.has(id)) continue;
        reached.add(id);
        const defs = root[match[1]!];
        const name = match[2]!.replace(/~1/g, "/").replace(/~0/g, "~");
        if (isObject(defs) && defs[name] !== undefined) stack.push(defs[name]);
      } else if (typeof child === "object" && child !== null) stack.push(child);
    }
  }
  return reached;
}

/**
 * The schema as the engine compiles it (a new value; `schema` is not changed). Not a check: a malformed schema
 * comes back malformed for checkJsonSchema to name.
 */
export function normalizeJsonSchema(schema: unknown): unknown {
  if (!isObject(schema)) return schema;
  const result: { value: unknown } = { value: undefined };
  const stack: { value: unknown; depth: number; set: (v: unknown) => void }[] = [
    { value: schema, depth: 1, set: (v) => (result.value = v) },
  ];
  while (stack.length > 0) {
    const { value, depth, set } = stack.pop()!;
    if (!isObject(value) || depth > MAX_SCHEMA_DEPTH) {
      set(value);
      continue;
    }
    const out = rewrite(value);
    set(out);
    for (const [key, child] of Object.entries(out)) {
      if (SCHEMA_MAP.has(key) && isObject(child)) {
        // the names in their order now (the walk fills the values later, last first): property order is the output's
        const copy: Schema = { ...child };
        out[key] = copy;
        for (const [name, sub] of Object.entries(child)) stack.push({ value: sub, depth: depth + 1, set: (v) => (copy[name] = v) });
      } else if (key === "dependencies" && isObject(child)) {
        const copy: Schema = { ...child };
        out[key] = copy;
        for (const [name, sub] of Object.entries(child)) {
          if (Array.isArray(sub)) copy[name] = sub;
          else stack.push({ value: sub, depth: depth + 1, set: (v) => (copy[name] = v) });
        }
      } else if ((SCHEMA_ONE.has(key) || key === "items") && (isObject(child) || typeof child === "boolean")) {
        stack.push({ value: child, depth: depth + 1, set: (v) => (out[key] = v) });
      } else if (SCHEMA_LIST.has(key) && Array.isArray(child)) {
        const copy: unknown[] = new Array(child.length);
        out[key] = copy;
        child.forEach((sub, i) => stack.push({ value: sub, depth: depth + 1, set: (v) => (copy[i] = v) }));
      }
    }
  }
  const root = result.value as Schema;
  // definitions no reference reaches are not part of what the schema validates
  const reached = reachableDefinitions(root);
  for (const container of ["$defs", "definitions"] as const) {
    const defs = root[container];
    if (!isObject(defs)) continue;
    const kept: Schema = {};
    for (const [name, def] of Object.entries(defs)) {
      const pointerName = name.replace(/~/g, "~0").replace(/\//g, "~1");
      if (reached.has(`${container}/${pointerName}`)) kept[name] = def;
    }
    if (Object.keys(kept).length > 0) root[container] = kept;
    else delete root[container];
  }
  return root;
}
