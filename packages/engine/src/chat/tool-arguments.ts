/**
 * Typing the parameters of an XML tool call by the tool's JSON Schema.
 *
 * Qwen3.5's XML format writes every argument as text (`<parameter=days>\n3\n</parameter>`); its
 * template renders a string argument as is and any other value as JSON. So the text is read back
 * by the type the tool's schema gives the parameter:
 *
 * - `string` only: the text, unchanged ("001", "true" and "null" stay strings).
 * - `integer`, `number`, `boolean`, `null`, `object`, `array`: the text parsed as that JSON type
 *   (booleans also as `True` / `False`, as models trained on Python write them).
 * - several types (`["integer", "null"]`, `anyOf`, `oneOf`, an `enum`'s values): the first non-string
 *   type the text parses as, else the text when `string` is allowed.
 * - no type known (no schema, a parameter the schema does not list, a `$ref`): the text parsed as
 *   JSON when it is JSON, else the text.
 *
 * A text that parses as none of the allowed types stays a string and is reported as a warning.
 */

/** A tool as the parser needs it: OpenAI's `{type: "function", function: {name, parameters}}`. */
export interface ToolSchema {
  type?: string;
  function: { name: string; parameters?: unknown };
}

/** JSON Schema type names (JSON Schema's `type` keyword). */
export type JsonTypeName = "string" | "integer" | "number" | "boolean" | "null" | "object" | "array";

const JSON_TYPE_NAMES: ReadonlySet<string> = new Set(["string", "integer", "number", "boolean", "null", "object", "array"]);
/** Deepest `anyOf` / `oneOf` nesting followed when collecting a parameter's types. */
const MAX_SCHEMA_DEPTH = 8;

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function jsonTypeOf(value: unknown): JsonTypeName {
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  switch (typeof value) {
    case "number":
      return Number.isInteger(value) ? "integer" : "number";
    case "boolean":
      return "boolean";
    case "object":
      return "object";
    default:
      return "string";
  }
}

/**
 * The JSON types a (sub)schema allows, in the schema's order; undefined when the schema says
 * nothing about the type (any value).
 */
export function schemaTypes(schema: unknown, depth = 0): JsonTypeName[] | undefined {
  if (!isRecord(schema) || depth > MAX_SCHEMA_DEPTH) return undefined;
  const type = schema["type"];
  if (typeof type === "string") return JSON_TYPE_NAMES.has(type) ? [type as JsonTypeName] : undefined;
  if (Array.isArray(type)) {
    const names = type.filter((t): t is JsonTypeName => typeof t === "string" && JSON_TYPE_NAMES.has(t));
    return names.length > 0 ? names : undefined;
  }
  for (const key of ["anyOf", "oneOf"] as const) {
    const branches = schema[key];
    if (!Array.isArray(branches) || branches.length === 0) continue;
    const out: JsonTypeName[] = [];
    for (const branch of branches) {
      const types = schemaTypes(branch, depth + 1);
      if (types === undefined) return undefined;
      for (const t of types) if (!out.includes(t)) out.push(t);
    }
    return out;
  }
  const values = Array.isArray(schema["enum"]) ? (schema["enum"] as unknown[]) : "const" in schema ? [schema["const"]] : undefined;
  if (values && values.length > 0) {
    const out: JsonTypeName[] = [];
    for (const value of values) {
      const t = jsonTypeOf(value === undefined ? null : value);
      if (!out.includes(t)) out.push(t);
    }
    return out;
  }
  if (isRecord(schema["properties"])) return ["object"];
  if (schema["items"] !== undefined) return ["array"];
  return undefined;
}

/** The schema of parameter `name` of `tool`, and whether the tool's schema lists its parameters. */
export function parameterSchema(tool: ToolSchema | undefined, name: string): { schema: unknown; listed: boolean; known: boolean } {
  const parameters = tool?.function.parameters;
  if (!isRecord(parameters) || !isRecord(parameters["properties"])) return { schema: undefined, listed: false, known: false };
  const properties = parameters["properties"];
  const known = Object.hasOwn(properties, name);
  return { schema: known ? properties[name] : undefined, listed: true, known };
}

/** True when the parameter's value is always a string (its text is streamed as it comes). */
export function isStringOnly(types: readonly JsonTypeName[] | undefined): boolean {
  return types !== undefined && types.length > 0 && types.every((t) => t === "string");
}

function parseJson(text: string): { ok: true; value: unknown } | { ok: false } {
  try {
    return { ok: true, value: JSON.parse(text) };
  } catch {
    return { ok: false };
  }
}

function parseAs(type: JsonTypeName, text: string): { ok: true; value: unknown } | { ok: false } {
  const trimmed = text.trim();
  switch (type) {
    case "string":
      return { ok: true, value: text };
    case "boolean": {
      const lower = trimmed.toLowerCase();
      return lower === "true" ? { ok: true, value: true } : lower === "false" ? { ok: true, value: false } : { ok: false };
    }
    case "null":
      return trimmed === "null" ? { ok: true, value: null } : { ok: false };
    case "integer":
    case "number": {
      if (!/^-?(?:\d+)(?:\.\d+)?(?:[eE][+-]?\d+)?$/.test(trimmed)) return { ok: false };
      const value = Number(trimmed);
      if (!Number.isFinite(value) || (type === "integer" && !Number.isInteger(value))) return { ok: false };
      return { ok: true, value };
    }
    case "object":
    case "array": {
      const parsed = parseJson(trimmed);
      if (!parsed.ok) return parsed;
      const isArray = Array.isArray(parsed.value);
      return (type === "array" ? isArray : isRecord(parsed.value)) ? parsed : { ok: false };
    }
  }
}

export interface CoercedArgument {
  value: unknown;
  /** Set when the text did not parse as any type the schema allows (the value is then the text). */
  expected?: string;
}

/** The values an `enum` or `const` allows a parameter, or undefined when its schema has neither. */
export function schemaValues(schema: unknown): readonly unknown[] | undefined {
  if (!isRecord(schema)) return undefined;
  if (Array.isArray(schema["enum"])) return schema["enum"] as unknown[];
  return "const" in schema ? [schema["const"]] : undefined;
}

/**
 * Types `text` (a parameter's text, its one leading and trailing newline already removed) by `types`. With the
 * schema's `values` (an enum or const), a text that is one of them, or the JSON of one (`"Oslo"` for Oslo: the
 * call grammar writes an enum's strings as JSON), is that value.
 */
export function coerceArgument(text: string, types: readonly JsonTypeName[] | undefined, values?: readonly unknown[]): CoercedArgument {
  if (values !== undefined) {
    if (values.includes(text)) return { value: text };
    const parsed = parseJson(text.trim());
    if (parsed.ok && values.some((v) => v === parsed.value)) return { value: parsed.value };
  }
  if (types === undefined) {
    const parsed = parseJson(text.trim());
    return { value: parsed.ok ? parsed.value : text };
  }
  for (const type of types) {
    if (type === "string") continue;
    const parsed = parseAs(type, text);
    if (parsed.ok) return { value: parsed.value };
  }
  if (types.includes("string")) return { value: text };
  return { value: text, expected: types.join(" | ") };
}
