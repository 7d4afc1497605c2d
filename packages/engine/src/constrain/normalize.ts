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
 *
 * References anywhere in the schema are hoisted into `$defs`, an `allOf` is merged where the merge is exact, an
 * `enum`/`const` of arrays or objects becomes the schemas of those values, and a schema with a finite list of values
 * and other keywords beside it becomes the list of the values it accepts (checked with a validator).
 */
import { rawValidator } from "./validate.js";

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

/** Formats common validators assert that the grammar engine does not enforce (kept: refused when strict). */
const ASSERTED_FORMATS: ReadonlySet<string> = new Set(["regex", "iri", "iri-reference", "idn-email", "idn-hostname"]);

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
/** Most schemas with a finite set of values that finiteValueSets reads with a validator (each a compile). */
const MAX_FINITE_SETS = 32;
/** Keywords beside `enum`/`const` that the grammar enforces with them (nothing to read with a validator). */
const BESIDE_VALUES = new Set(["enum", "const", "type", ...ANNOTATIONS]);

/**
 * A schema whose values are a finite list (an `enum` or `const` of its own or of one of its `allOf`) allows exactly
 * those values of the list that the whole schema accepts, whatever else it says (`not`, `allOf`, ...): each value
 * is checked with a JSON Schema validator (Ajv, by the draft the schema names, its definitions with it), and the
 * schema becomes the `enum` of the ones that pass. A schema the validator cannot compile is left as it is.
 * `schema` is not changed (a copy is returned when something is rewritten).
 */
/** Whether `value` is of the JSON Schema `type` (a name or a list of names). */
function ofType(value: unknown, type: unknown): boolean {
  const names = Array.isArray(type) ? type : [type];
  const own =
    value === null
      ? "null"
      : Array.isArray(value)
        ? "array"
        : typeof value === "object"
          ? "object"
          : typeof value === "number"
            ? "number"
            : typeof value === "string"
              ? "string"
              : typeof value === "boolean"
                ? "boolean"
                : undefined;
  return names.includes(own) || (own === "number" && Number.isInteger(value) && names.includes("integer"));
}

function finiteValueSets(schema: Schema): Schema {
  const found: { holder: Schema; values: unknown[] }[] = [];
  const listOf = (s: unknown): unknown[] | undefined =>
    isObject(s) ? (Array.isArray(s["enum"]) ? s["enum"] : "const" in s ? [s["const"]] : undefined) : undefined;
  walkObjects(schema, (record) => {
    const own = listOf(record);
    const conjunct = Array.isArray(record["allOf"]) ? record["allOf"].map(listOf).find((l) => l !== undefined) : undefined;
    const values = own ?? conjunct;
    // a `type` beside the values constrains them when one of them is not of it (`{"enum": ["a"], "type": "object"}`
    // allows nothing: the grammar engine would take the values and drop the type)
    const constrained =
      Object.keys(record).some((k) => !BESIDE_VALUES.has(k)) ||
      (values !== undefined && record["type"] !== undefined && values.some((value) => !ofType(value, record["type"])));
    if (values !== undefined && constrained && values.length <= MAX_STRUCTURED_ENUM) found.push({ holder: record, values });
    return found.length < MAX_FINITE_SETS;
  });
  if (found.length === 0) return schema;
  const copies = new Map<Schema, unknown[]>();
  for (const { holder, values } of found) {
    let validate: (value: unknown) => boolean;
    try {
      const withDefinitions: Schema = { ...holder };
      for (const container of ["$defs", "definitions", "$schema"])
        if (schema[container] !== undefined && holder !== schema) withDefinitions[container] = schema[container];
      validate = rawValidator(withDefinitions) as (value: unknown) => boolean;
    } catch {
      continue;
    }
    copies.set(
      holder,
      values.filter((value) => validate(value)),
    );
  }
  if (copies.size === 0) return schema;
  // rewritten in place on a copy: the holders are found again by their place
  const rewritten = (node: unknown): unknown => {
    if (Array.isArray(node)) return node.map(rewritten);
    if (!isObject(node)) return node;
    const values = copies.get(node);
    if (values !== undefined) {
      const kept: Schema = {};
      for (const key of ANNOTATIONS) if (node[key] !== undefined) kept[key] = node[key];
      // definitions stay where they are (references reach them)
      if (node === schema)
        for (const container of ["$defs", "definitions"]) if (node[container] !== undefined) kept[container] = rewritten(node[container]);
      return { ...kept, enum: values };
    }
    return mapSubschemas(node, rewritten);
  };
  return rewritten(schema) as Schema;
}

/** Keywords that constrain strings only. */
const STRING_KEYWORDS = new Set(["format", "pattern", "minLength", "maxLength"]);

/** Most values of an enum with array or object values rewritten as schemas. */
const MAX_STRUCTURED_ENUM = 256;

/**
 * The schema of exactly one JSON value: an array as its items in order (no more), an object as its properties,
 * all required and no others (generated in the value's key order), a primitive as `const`.
 */
function constSchema(value: unknown): unknown {
  if (Array.isArray(value)) {
    return { type: "array", prefixItems: value.map(constSchema), minItems: value.length, maxItems: value.length, items: false };
  }
  if (typeof value === "object" && value !== null) {
    const properties: Schema = {};
    for (const [key, item] of Object.entries(value)) properties[key] = constSchema(item);
    return { type: "object", properties, required: Object.keys(value), additionalProperties: false };
  }
  return { const: value };
}

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
  // an anyOf/oneOf branch `false` matches nothing: dropped (none left, nothing matches: an empty enum, which the check
  // names and an optional property drops)
  for (const keyword of ["anyOf", "oneOf"]) {
    const branches = out[keyword];
    if (!Array.isArray(branches) || !branches.includes(false)) continue;
    const kept = branches.filter((branch) => branch !== false);
    if (kept.length === 0) return { enum: [] };
    out[keyword] = kept;
  }
  // enum and const with array or object values: as schemas of exactly those values
  const structured = (v: unknown): boolean => typeof v === "object" && v !== null;
  if (structured(out["const"])) {
    const value = out["const"];
    delete out["const"];
    out["allOf"] = [...(Array.isArray(out["allOf"]) ? out["allOf"] : []), constSchema(value)];
  }
  if (Array.isArray(out["enum"]) && out["enum"].some(structured) && out["enum"].length <= MAX_STRUCTURED_ENUM) {
    const values = out["enum"] as unknown[];
    const primitives = values.filter((v) => !structured(v));
    const branches = [...(primitives.length > 0 ? [{ enum: primitives }] : []), ...values.filter(structured).map(constSchema)];
    delete out["enum"];
    if (out["anyOf"] === undefined) out["anyOf"] = branches;
    else out["allOf"] = [...(Array.isArray(out["allOf"]) ? out["allOf"] : []), { anyOf: branches }];
  }
  // string keywords with no `type`, or a list of types: they constrain strings only, other values stay valid
  const keys = Object.keys(out).filter((k) => !ANNOTATIONS.has(k) && k !== "type");
  const listed = Array.isArray(out["type"]) ? (out["type"] as unknown[]) : undefined;
  const untyped = out["type"] === undefined || (listed?.includes("string") === true && listed.every((t) => typeof t === "string"));
  if (untyped && keys.length > 0 && keys.every((k) => STRING_KEYWORDS.has(k))) {
    const stringBranch: Schema = { type: "string" };
    for (const k of keys) {
      stringBranch[k] = out[k];
      delete out[k];
    }
    const others = listed === undefined ? ["number", "boolean", "null", "object", "array"] : listed.filter((t) => t !== "string");
    delete out["type"];
    out["anyOf"] = others.length === 0 ? [stringBranch] : [stringBranch, { type: others.length === 1 ? others[0] : others }];
  }
  if (out["uniqueItems"] === false) delete out["uniqueItems"];
  if (out["minProperties"] === 0) delete out["minProperties"];
  if (out["minContains"] === 1 && out["contains"] === undefined) delete out["minContains"];
  const dependencies = out["dependencies"];
  if (isObject(dependencies) && Object.values(dependencies).every((d) => Array.isArray(d) && d.length === 0)) delete out["dependencies"];
  const dependentRequired = out["dependentRequired"];
  if (isObject(dependentRequired) && Object.values(dependentRequired).every((d) => Array.isArray(d) && d.length === 0))
    delete out["dependentRequired"];
  // the grammar engine does not enforce `required` names missing from `properties`: they get their property (the
  // additional schema). Other keys beside listed properties are placed by open-objects.ts.
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
  const format = out["format"];
  if (typeof format === "string" && !ENFORCED_FORMATS.has(format)) {
    const range = INTEGER_FORMATS[format];
    const types = typesOf(out);
    if (range && types?.has("integer") && !types.has("string")) {
      const [low, high] = range;
      out["minimum"] = typeof out["minimum"] === "number" ? Math.max(out["minimum"], low) : low;
      out["maximum"] = typeof out["maximum"] === "number" ? Math.min(out["maximum"], high) : high;
    }
    // an unknown format is an annotation: ignored, as the specification says. Formats validators do assert
    // (Python's jsonschema and Ajv's formats check them) stay, for the check to refuse by name
    if (!ASSERTED_FORMATS.has(format)) delete out["format"];
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

/** Values of these keywords are data, not schemas. */
const DATA_KEYWORDS = new Set(["enum", "const", "default", "examples"]);

/**
 * A copy of the schema object `node` with each subschema passed through `f`: the values of keywords that hold a map
 * of schemas (`properties`, `$defs`, ...) one by one, never the map itself (a property named `properties` or
 * `pattern` is not a keyword), other keywords' values whole (arrays of schemas included), data keywords kept.
 */
export function mapSubschemas(node: Schema, f: (child: unknown) => unknown): Schema {
  const out: Schema = {};
  for (const [key, value] of Object.entries(node)) {
    if (DATA_KEYWORDS.has(key)) out[key] = value;
    else if ((SCHEMA_MAP.has(key) || key === "dependencies") && isObject(value)) {
      const map: Schema = {};
      // dependencies' arrays of names are data
      for (const [name, child] of Object.entries(value)) map[name] = Array.isArray(child) ? child : f(child);
      out[key] = map;
    } else out[key] = f(value);
  }
  return out;
}

/**
 * Visits each object in `root` once, iteratively (arrays walked through, data keywords' values skipped), until
 * `visit` returns false.
 */
function walkObjects(root: unknown, visit: (record: Schema) => boolean | undefined): void {
  const stack: unknown[] = [root];
  const seen = new Set<unknown>();
  while (stack.length > 0) {
    const node = stack.pop();
    if (typeof node !== "object" || node === null || seen.has(node)) continue;
    seen.add(node);
    if (Array.isArray(node)) {
      stack.push(...node);
      continue;
    }
    const record = node as Schema;
    if (visit(record) === false) return;
    for (const [key, value] of Object.entries(record)) if (!DATA_KEYWORDS.has(key)) stack.push(value);
  }
}

/** The value at a JSON pointer (RFC 6901: `""` is `root`, segments escaped with `~0` and `~1`), or undefined. */
export function resolvePointer(root: unknown, pointer: string): unknown {
  if (pointer === "") return root;
  let node = root;
  for (const raw of pointer.slice(1).split("/")) {
    const segment = unescapePointer(raw);
    if (Array.isArray(node)) node = node[Number(segment)];
    else if (isObject(node)) node = node[segment];
    else return undefined;
  }
  return node;
}

/** Most references rewritten by hoistReferences (each target is copied once). */
const MAX_HOISTED = 1000;

function unescapePointer(segment: string): string {
  return segment.replace(/~1/g, "/").replace(/~0/g, "~");
}

/**
 * References the engine compiles are `#`, `#/$defs/NAME` and `#/definitions/NAME`. Schemas also point anywhere
 * else in themselves: into `properties` (`#/properties/root`), nested definitions, keys outside the vocabulary
 * (`#/resourceDefinitions/x`, which normalizing would drop), or at a plain-name anchor (`#name`: draft-06's
 * `$id: "#name"`, 2019-09's `$anchor`). Each such target is copied into `$defs` under a fresh name and its
 * references rewritten there (repeatedly: a copy's own references too). A reference that resolves nowhere stays
 * as it is (the check refuses it by name). `schema` is not changed.
 */
function hoistReferences(schema: Schema): Schema {
  const anchors = new Map<string, unknown>();
  const refs: { holder: Schema; ref: string }[] = [];
  const walk = (root: unknown): void =>
    walkObjects(root, (record) => {
      if (typeof record["$ref"] === "string") refs.push({ holder: record, ref: record["$ref"] });
      const id = record["$id"] ?? record["id"];
      if (typeof id === "string" && /^#[A-Za-z_][-A-Za-z0-9._]*$/.test(id) && !anchors.has(id.slice(1))) anchors.set(id.slice(1), record);
      if (typeof record["$anchor"] === "string" && !anchors.has(record["$anchor"])) anchors.set(record["$anchor"], record);
      return undefined;
    });
  walk(schema);
  const wanted = refs.filter(({ ref }) => ref !== "#" && !/^#\/(\$defs|definitions)\/[^/]+$/.test(ref) && ref.startsWith("#"));
  if (wanted.length === 0) return schema;
  const root: Schema = structuredClone(schema);
  const existing = isObject(root["$defs"]) ? root["$defs"] : {};
  const defs: Schema = { ...existing };
  root["$defs"] = defs;
  const names = new Map<string, string>();
  const resolve = (ref: string): unknown => {
    if (!ref.startsWith("#/")) return anchors.get(ref.slice(1));
    try {
      // a reference's pointer is a URI fragment: its segments may be percent-encoded
      return resolvePointer(schema, ref.slice(1).split("/").map(decodeURIComponent).join("/"));
    } catch {
      return undefined;
    }
  };
  // the clone's references, rewritten; copies added to $defs are walked in turn
  refs.length = 0;
  walk(root);
  for (let i = 0; i < refs.length && names.size <= MAX_HOISTED; i++) {
    const { holder, ref } = refs[i]!;
    if (ref === "#" || /^#\/(\$defs|definitions)\/[^/]+$/.test(ref) || !ref.startsWith("#")) continue;
    let name = names.get(ref);
    if (name === undefined) {
      const target = resolve(ref);
      if (!isObject(target) && typeof target !== "boolean") continue;
      name = `ref_${names.size}`;
      while (name in defs) name += "_";
      names.set(ref, name);
      const copy = structuredClone(target);
      defs[name] = copy;
      walk(copy);
    }
    holder["$ref"] = `#/$defs/${name}`;
  }
  if (Object.keys(defs).length === 0) delete root["$defs"];
  return root;
}

/**
 * The schema as the engine compiles it (a new value; `schema` is not changed). Not a check: a malformed schema
 * comes back malformed for checkJsonSchema to name.
 */
export function normalizeJsonSchema(given: unknown): unknown {
  if (!isObject(given)) return given;
  const hoisted = hoistReferences(given);
  const finite = finiteValueSets(hoisted);
  let root = normalizeNodes(finite);
  // allOf merged where the merge is exact; the merged nodes are normalized in turn
  if (mergeAllOf(root)) root = normalizeNodes(root);
  return dropImpossibleProperties(pruneDefinitions(root));
}

/** A schema that no value satisfies, as normalization leaves one: `false`, or an empty `enum`. */
const allowsNothing = (schema: unknown): boolean =>
  schema === false || (isObject(schema) && Array.isArray(schema["enum"]) && schema["enum"].length === 0);

/**
 * `root` (changed in place) where an optional property that allows no value (`{"type": "object", "enum": ["a"]}`:
 * no value passes both) is taken out of `properties`, and its object closed to the properties left: such a key can
 * only be absent, and the closed object is a subset of what the schema allows (its other keys could have been that
 * one). A required one stays, for the check to name (the object then has no valid value).
 */
function dropImpossibleProperties(root: Schema): Schema {
  const stack: unknown[] = [root];
  while (stack.length > 0) {
    const node = stack.pop();
    if (Array.isArray(node)) {
      stack.push(...node);
      continue;
    }
    if (!isObject(node)) continue;
    const properties = node["properties"];
    if (isObject(properties)) {
      const required = new Set(Array.isArray(node["required"]) ? node["required"] : []);
      let dropped = false;
      for (const [name, property] of Object.entries(properties)) {
        if (!allowsNothing(property) || required.has(name)) continue;
        delete properties[name];
        dropped = true;
      }
      if (dropped) node["additionalProperties"] = false;
    }
    for (const [key, child] of Object.entries(node)) {
      if (SCHEMA_MAP.has(key) && isObject(child)) stack.push(...Object.values(child));
      else if (SCHEMA_ONE.has(key) || SCHEMA_LIST.has(key) || key === "items") stack.push(child);
    }
  }
  return root;
}

/** Each schema node of `schema` rewritten (`rewrite`), walked iteratively. */
function normalizeNodes(schema: Schema): Schema {
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
  return result.value as Schema;
}

/** Keywords whose values meet as the larger (lower bounds) or the smaller (upper bounds) when two conjuncts have them. */
const LOWER_BOUNDS = new Set(["minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties"]);
const UPPER_BOUNDS = new Set(["maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties"]);
/** Most merges of one `allOf` node (a $ref met in a merge is read once per round). */
const MAX_MERGE_ROUNDS = 8;
/** Most definitions read into merges of one schema. */
const MAX_MERGE_INLINES = 256;

function sameJson(a: unknown, b: unknown): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

/** The JSON types a `type` value allows (undefined: any). */
function typeSet(type: unknown): Set<string> | undefined {
  if (type === undefined) return undefined;
  return new Set(Array.isArray(type) ? (type as string[]) : [type as string]);
}

/** Two `type` values met: the types both allow (an integer is a number), or undefined when none is. */
function meetTypes(a: unknown, b: unknown): unknown {
  const x = typeSet(a);
  const y = typeSet(b);
  if (x === undefined) return b;
  if (y === undefined) return a;
  const out: string[] = [];
  for (const t of x) {
    if (y.has(t)) out.push(t);
    else if (t === "integer" && y.has("number")) out.push("integer");
    else if (t === "number" && y.has("integer")) out.push("integer");
  }
  const unique = [...new Set(out)];
  return unique.length === 0 ? undefined : unique.length === 1 ? unique[0] : unique;
}

/**
 * The conjuncts of one `allOf` (with the node's own keywords) as one schema, when that one schema allows exactly
 * what all of them do; undefined otherwise (the allOf then stays, and is refused when strict). Exact when: each
 * keyword is held by one conjunct or meets exactly (`required` unite, `properties` join with a shared name's
 * schemas as an allOf of their own, `type`s intersect, bounds take the tighter, equal values stay); and an
 * `additionalProperties` is held by one conjunct that lists every property the others name. Not `exact` (best
 * effort, relax.ts): never undefined; where conjuncts disagree the first one's keyword stays, and a `$ref` that
 * cannot be read stays as it is.
 */
export function mergeConjuncts(node: Schema, root: Schema, budget: { inlines: number }, exact = true): Schema | undefined {
  const { allOf, ...own } = node;
  const conjuncts: unknown[] = [own, ...(allOf as unknown[])];
  const merged: Schema = {};
  // the node's own definitions stay where they are (references elsewhere reach them); a conjunct's are dropped
  for (const container of ["$defs", "definitions"]) if (own[container] !== undefined) merged[container] = own[container];
  let additionalHolder: Schema | undefined;
  const resolved: Schema[] = [];
  for (const given of conjuncts) {
    if (given === true) continue;
    if (!isObject(given)) {
      if (exact) return undefined;
      continue;
    }
    let conjunct = given;
    if (typeof conjunct["$ref"] === "string") {
      const ref = conjunct["$ref"];
      const match = /^#\/(\$defs|definitions)\/([^/]+)$/.exec(ref);
      const defs = match ? root[match[1]!] : undefined;
      const target = match && isObject(defs) ? defs[unescapePointer(match[2]!)] : undefined;
      // a recursive definition would be read again inside its own copy: the copies are bounded
      if (isObject(target) && budget.inlines > 0) {
        budget.inlines--;
        const { $ref: _ref, ...rest } = conjunct;
        resolved.push(rest);
        // a copy: the definition stays as it is for its other references
        conjunct = structuredClone(target);
      } else if (exact) return undefined;
    }
    resolved.push(conjunct);
  }
  if (exact) {
    for (const conjunct of resolved) {
      if ("additionalProperties" in conjunct || "unevaluatedProperties" in conjunct || "patternProperties" in conjunct) {
        if (additionalHolder !== undefined) return undefined;
        additionalHolder = conjunct;
      }
    }
  }
  if (additionalHolder !== undefined) {
    const listed = new Set(Object.keys(isObject(additionalHolder["properties"]) ? additionalHolder["properties"] : {}));
    for (const conjunct of resolved) {
      if (conjunct === additionalHolder || !isObject(conjunct["properties"])) continue;
      if (Object.keys(conjunct["properties"]).some((name) => !listed.has(name))) return undefined;
    }
  }
  for (const conjunct of resolved) {
    for (const [key, value] of Object.entries(conjunct)) {
      if (key === "$defs" || key === "definitions") continue;
      if (ANNOTATIONS.has(key)) {
        if (!(key in merged)) merged[key] = value;
        continue;
      }
      if (!(key in merged)) {
        merged[key] = key === "properties" && isObject(value) ? { ...value } : value;
        continue;
      }
      const before = merged[key];
      if (key === "required" && Array.isArray(value) && Array.isArray(before)) merged[key] = [...new Set([...before, ...value])];
      else if (key === "properties" && isObject(value) && isObject(before)) {
        for (const [name, schema] of Object.entries(value)) {
          // best effort: the first conjunct naming a property keeps it
          if (!(name in before)) before[name] = schema;
          else if (exact && !sameJson(before[name], schema)) before[name] = { allOf: [before[name], schema] };
        }
      } else if (key === "type") {
        const met = meetTypes(before, value);
        if (met !== undefined) merged[key] = met;
        else if (exact) return undefined;
      } else if (LOWER_BOUNDS.has(key) && typeof value === "number" && typeof before === "number") merged[key] = Math.max(before, value);
      else if (UPPER_BOUNDS.has(key) && typeof value === "number" && typeof before === "number") merged[key] = Math.min(before, value);
      else if (exact && !sameJson(before, value)) return undefined;
    }
  }
  return merged;
}

/**
 * An `anyOf` beside other keywords (`properties`, `required`, ...) as an `anyOf` of branches that each hold those
 * keywords, merged exactly: the grammar engine reads an `anyOf` without the keywords beside it (xgrammar 0.1.27
 * let an object miss a `required` property written beside `anyOf: [{required: [...]}, ...]`). Left as it is when
 * a branch's merge is not exact. True when the node changed.
 */
function distributeAnyOf(record: Schema, root: Schema, budget: { inlines: number }): boolean {
  const branches = record["anyOf"];
  if (!Array.isArray(branches) || branches.length === 0) return false;
  const rest: Schema = {};
  for (const [key, value] of Object.entries(record)) {
    if (key !== "anyOf" && key !== "$defs" && key !== "definitions" && !ANNOTATIONS.has(key)) rest[key] = value;
  }
  if (Object.keys(rest).length === 0) return false;
  const distributed: unknown[] = [];
  for (const branch of branches) {
    if (branch === false) continue;
    const merged = mergeConjuncts({ allOf: [structuredClone(rest), branch === true ? {} : branch] }, root, budget);
    if (merged === undefined) return false;
    distributed.push(merged);
  }
  for (const key of Object.keys(rest)) delete record[key];
  record["anyOf"] = distributed;
  return true;
}

/** Merges, in place, each `allOf` of several schemas whose merge is exact (mergeConjuncts); true when one was. */
function mergeAllOf(root: Schema): boolean {
  let changed = false;
  const budget = { inlines: MAX_MERGE_INLINES };
  const stack: { node: unknown; depth: number }[] = [{ node: root, depth: 1 }];
  const seen = new Set<unknown>();
  while (stack.length > 0) {
    const { node, depth } = stack.pop()!;
    // past the depth the check refuses anyway, nothing is merged (a recursive definition would grow there)
    if (typeof node !== "object" || node === null || seen.has(node) || depth > MAX_SCHEMA_DEPTH) continue;
    seen.add(node);
    if (Array.isArray(node)) {
      for (const item of node) stack.push({ node: item, depth: depth + 1 });
      continue;
    }
    const record = node as Schema;
    for (let round = 0; round < MAX_MERGE_ROUNDS && Array.isArray(record["allOf"]) && record["allOf"].length > 0; round++) {
      const merged = mergeConjuncts(record, root, budget);
      if (merged === undefined) break;
      for (const key of Object.keys(record)) delete record[key];
      Object.assign(record, merged);
      changed = true;
    }
    if (distributeAnyOf(record, root, budget)) changed = true;
    for (const [key, value] of Object.entries(record)) {
      if (key !== "enum" && key !== "const" && key !== "default" && key !== "examples") stack.push({ node: value, depth: depth + 1 });
    }
  }
  return changed;
}

/** `root` without the definitions no reference reaches (they are not part of what the schema validates). */
function pruneDefinitions(root: Schema): Schema {
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
