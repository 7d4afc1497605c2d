/**
 * JSON Schema checks before a schema reaches the grammar engine. Only keywords the grammar engine
 * (xgrammar) enforces are accepted, so that a constrained output is valid for the whole schema; a
 * keyword it would ignore (e.g. `multipleOf`, `uniqueItems`, `not`) is refused with its name and
 * JSON-pointer path instead of being dropped silently. Annotations that never change validity
 * (`title`, `description`, `default`, ...) are accepted, and what the specification says a validator ignores
 * (keywords outside its vocabulary, unknown formats, ...) is dropped first (normalize.ts).
 */
import { ConstraintError } from "./errors.js";
import { boundsEnforced, MAX_RANGE_DIGITS } from "./integer-ranges.js";
import { patternPlacement } from "./regex.js";
import { ANNOTATIONS, ENFORCED_FORMATS, MAX_SCHEMA_DEPTH, normalizeJsonSchema } from "./normalize.js";

/** JSON Schema's type names. */
const TYPE_NAMES = new Set(["string", "number", "integer", "boolean", "null", "object", "array"]);

export { ENFORCED_FORMATS };

/** Keywords enforced by the grammar engine (their values are checked below). */
const ENFORCED = new Set([
  "type",
  "properties",
  "patternProperties",
  "required",
  "additionalProperties",
  "unevaluatedProperties",
  "items",
  "prefixItems",
  "minItems",
  "maxItems",
  "enum",
  "const",
  "anyOf",
  "allOf",
  "$ref",
  "$defs",
  "definitions",
  "minimum",
  "maximum",
  "exclusiveMinimum",
  "exclusiveMaximum",
  "pattern",
  "format",
  "minLength",
  "maxLength",
]);

export { MAX_SCHEMA_DEPTH };

/** Keywords that may sit beside `patternProperties` (open-objects.ts writes the object). */
const BESIDE_PATTERN_PROPERTIES = new Set([
  "type",
  "patternProperties",
  "properties",
  "required",
  "additionalProperties",
  "$defs",
  "definitions",
]);

/** A JSON pointer segment (RFC 6901 escaping). */
function pointer(path: string, segment: string | number): string {
  return `${path}/${String(segment).replace(/~/g, "~0").replace(/\//g, "~1")}`;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

const isPrimitive = (value: unknown): boolean =>
  value === null || typeof value === "string" || typeof value === "boolean" || (typeof value === "number" && Number.isFinite(value));

/**
 * Checks that `schema` is a JSON Schema whose every keyword the grammar engine enforces, after what the
 * specification says to ignore is dropped (normalize.ts), and returns that normalized schema (what to compile).
 * `field` names the request parameter in errors (e.g. "constraint.schema"). Throws ConstraintError
 * CONSTRAINT_BAD_SCHEMA (not a schema) or CONSTRAINT_UNSUPPORTED_KEYWORD (with `keyword` and `path`).
 */
export function checkJsonSchema(given: unknown, field: string): unknown {
  const schema = normalizeJsonSchema(given);
  const bad = (path: string, message: string, keyword?: string): never => {
    throw new ConstraintError("CONSTRAINT_BAD_SCHEMA", `${field}${path === "" ? "" : ` at ${path}`}: ${message}`, {
      field,
      path,
      ...(keyword === undefined ? {} : { keyword }),
    });
  };
  const unsupported = (path: string, keyword: string, why: string): never => {
    throw new ConstraintError(
      "CONSTRAINT_UNSUPPORTED_KEYWORD",
      `${field}: keyword "${keyword}" at ${path === "" ? "the root" : path} cannot be enforced by constrained decoding (${why}); remove it or express it with supported keywords`,
      { field, path, keyword },
    );
  };
  if (schema === false) bad("", "the schema `false` accepts no value");
  if (!isObject(schema) && typeof schema !== "boolean") bad("", `a JSON Schema is an object or a boolean, got ${JSON.stringify(schema)}`);
  const root = schema;
  const resolves = (ref: string): boolean => {
    if (ref === "#") return true;
    const match = /^#\/(\$defs|definitions)\/([^/]+)$/.exec(ref);
    if (!match || !isObject(root)) return false;
    const defs = root[match[1]!];
    const name = match[2]!.replace(/~1/g, "/").replace(/~0/g, "~");
    return isObject(defs) && (isObject(defs[name]) || typeof defs[name] === "boolean");
  };
  const stack: { value: unknown; path: string; depth: number }[] = [{ value: schema, path: "", depth: 1 }];
  while (stack.length > 0) {
    const { value: item, path, depth } = stack.pop()!;
    if (typeof item === "boolean") continue;
    if (!isObject(item)) return bad(path, `a schema must be an object or a boolean, got ${JSON.stringify(item)}`);
    const value = item;
    if (depth > MAX_SCHEMA_DEPTH) bad(path, `the schema is nested more than ${MAX_SCHEMA_DEPTH} levels deep`);
    const sub = (child: unknown, at: string): void => {
      stack.push({ value: child, path: at, depth: depth + 1 });
    };
    const nonNegativeInteger = (keyword: string): void => {
      const n = value[keyword];
      if (typeof n !== "number" || !Number.isSafeInteger(n) || n < 0)
        bad(pointer(path, keyword), `${keyword} must be an integer >= 0`, keyword);
    };
    for (const [keyword, child] of Object.entries(value)) {
      const at = pointer(path, keyword);
      if (ANNOTATIONS.has(keyword)) continue;
      if (!ENFORCED.has(keyword)) unsupported(path, keyword, "the grammar engine does not enforce it");
      switch (keyword) {
        case "type": {
          const names = Array.isArray(child) ? child : [child];
          if (names.length === 0 || names.some((n) => typeof n !== "string" || !TYPE_NAMES.has(n))) {
            bad(at, `type must be one of ${[...TYPE_NAMES].join(", ")} (or an array of them), got ${JSON.stringify(child)}`, keyword);
          }
          break;
        }
        case "properties":
        case "$defs":
        case "definitions":
          if (!isObject(child)) bad(at, `${keyword} must be an object of schemas`, keyword);
          for (const [name, property] of Object.entries(child as Record<string, unknown>)) {
            // an optional one was dropped by normalization: this one is required, and the object has no valid value
            if (keyword === "properties" && property === false)
              bad(pointer(at, name), "no value satisfies this schema (`false`), and the property is required", keyword);
            sub(property, pointer(at, name));
          }
          break;
        case "patternProperties": {
          if (!isObject(child)) bad(at, "patternProperties must be an object of schemas", keyword);
          const entries = Object.entries(child as Record<string, unknown>);
          const refuse = (why: string): never => unsupported(path, keyword, why);
          const listed = value["properties"];
          if (isObject(listed) && Object.keys(listed).length > 0) {
            // beside listed properties the object holds those only (open-objects.ts closes it): the patterns
            // constrain nothing written as long as no listed name matches one
            for (const [pattern] of entries) {
              let regex: RegExp;
              try {
                regex = new RegExp(pattern, "u");
              } catch {
                return refuse(`its pattern ${JSON.stringify(pattern)} is not an ECMA-262 regular expression`);
              }
              const name = Object.keys(listed).find((n) => regex.test(n));
              if (name !== undefined)
                refuse(`the listed property "${name}" matches its pattern ${JSON.stringify(pattern)}: both schemas would apply`);
            }
            break;
          }
          if (entries.length !== 1) refuse(`one pattern is enforced, not ${entries.length}`);
          const [pattern, property] = entries[0]!;
          if (Array.isArray(value["required"]) && value["required"].length > 0) refuse("it is enforced on an object with nothing required");
          const type = value["type"];
          if (type !== undefined && type !== "object") refuse('it is enforced on a schema of "type": "object"');
          const other = Object.keys(value).find((k) => !BESIDE_PATTERN_PROPERTIES.has(k) && !ANNOTATIONS.has(k));
          if (other !== undefined) refuse(`it is enforced with annotations beside it, not with "${other}"`);
          const placement = patternPlacement({ type: "string", pattern });
          if (placement !== undefined && "problem" in placement) refuse(`its pattern: ${placement.problem}`);
          sub(property, pointer(at, pattern));
          break;
        }
        case "required":
          if (!Array.isArray(child) || child.some((n) => typeof n !== "string")) bad(at, "required must be an array of strings", keyword);
          break;
        case "additionalProperties":
        case "items":
          sub(child, at);
          break;
        case "unevaluatedProperties":
          if (typeof child !== "boolean") unsupported(path, keyword, "only `true` or `false` is enforced");
          break;
        case "prefixItems":
        case "anyOf":
          if (!Array.isArray(child) || child.length === 0) bad(at, `${keyword} must be a non-empty array of schemas`, keyword);
          (child as unknown[]).forEach((item, i) => sub(item, pointer(at, i)));
          break;
        case "allOf":
          if (!Array.isArray(child) || child.length === 0) bad(at, "allOf must be a non-empty array of schemas", keyword);
          if ((child as unknown[]).length > 1) unsupported(path, keyword, "allOf with more than one schema is not enforced");
          sub((child as unknown[])[0], pointer(at, 0));
          break;
        case "minItems":
        case "maxItems":
        case "minLength":
        case "maxLength":
          nonNegativeInteger(keyword);
          break;
        case "minimum":
        case "maximum":
        case "exclusiveMinimum":
        case "exclusiveMaximum":
          if (typeof child !== "number" || !Number.isFinite(child)) bad(at, `${keyword} must be a finite number`, keyword);
          // a keyword beside the bounds that is not enforced at all is named first (it is what keeps them from being placed)
          for (const beside of ["multipleOf", "not", "if"])
            if (beside in value) unsupported(path, beside, "the grammar engine does not enforce it");
          // the grammar engine's own bounds are not exact (integer-ranges.ts): only the ones placed are enforced
          if (!boundsEnforced(value))
            unsupported(
              path,
              keyword,
              `bounds are enforced exactly on an "integer" (up to ${MAX_RANGE_DIGITS} digits, with nothing but its bounds and annotations beside them) and on a "number" with whole-number bounds (or minimum 0 / maximum 0 alone)`,
            );
          break;
        case "enum":
          if (!Array.isArray(child)) bad(at, "enum must be an array", keyword);
          // empty as given, or emptied by normalization: none of its values is of the schema's type or passes its
          // other keywords
          if ((child as unknown[]).length === 0)
            bad(
              path,
              "no value satisfies this schema (none of its enum values passes the schema's other keywords, e.g. its type)",
              keyword,
            );
          if ((child as unknown[]).some((v) => !isPrimitive(v)))
            unsupported(path, keyword, "only string, number, boolean and null values are enforced");
          break;
        case "const":
          if (!isPrimitive(child)) unsupported(path, keyword, "only a string, number, boolean or null value is enforced");
          break;
        case "pattern": {
          // placed as rules of our own (regex.ts): xgrammar 0.1.27 turns a pattern's "." and negated classes
          // into any character, quotes and control characters included, so its strings need not be JSON
          const placement = patternPlacement(value);
          if (placement !== undefined && "problem" in placement) {
            // beside a format, a pattern that is enforceable alone is kept and the format named (best effort then
            // relaxes the format: the pattern is usually the stricter of the two, as zod writes them)
            const { format: _format, ...alone } = value;
            const patternAlone = value["format"] !== undefined ? patternPlacement(alone) : undefined;
            if (patternAlone !== undefined && "grammar" in patternAlone) {
              unsupported(path, "format", "a format and a pattern are not enforced together; the pattern alone is");
            }
            unsupported(path, keyword, placement.problem);
          }
          break;
        }
        case "format":
          if (typeof child !== "string") bad(at, "format must be a string", keyword);
          if (!ENFORCED_FORMATS.has(child as string)) {
            unsupported(path, keyword, `format "${String(child)}" is not one of ${[...ENFORCED_FORMATS].join(", ")}`);
          }
          break;
        case "$ref":
          if (typeof child !== "string" || !resolves(child)) {
            bad(at, `$ref ${JSON.stringify(child)} does not resolve (supported: "#", "#/$defs/NAME", "#/definitions/NAME")`, keyword);
          }
          break;
      }
    }
    const min = value["minItems"];
    const max = value["maxItems"];
    if (typeof min === "number" && typeof max === "number" && min > max)
      bad(path, `minItems ${min} > maxItems ${max}: no array is valid`, "minItems");
    const minLength = value["minLength"];
    const maxLength = value["maxLength"];
    if (typeof minLength === "number" && typeof maxLength === "number" && minLength > maxLength) {
      bad(path, `minLength ${minLength} > maxLength ${maxLength}: no string is valid`, "minLength");
    }
    const required = value["required"];
    const properties = value["properties"];
    if (Array.isArray(required) && value["additionalProperties"] === false) {
      for (const name of required as string[]) {
        if (!isObject(properties) || !(name in properties)) {
          bad(pointer(path, "required"), `"${name}" is required but not in properties while additionalProperties is false`, "required");
        }
      }
    }
  }
  return schema;
}
