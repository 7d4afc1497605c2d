/**
 * Structured output of /v1/chat/completions: `response_format` and forcing `tool_choice` values
 * become the engine's ConstraintSpec (constrained decoding), and the engine's ConstraintError
 * becomes a 400 that names the request parameter (docs/usage/structured-output.md).
 */
import { ConstraintError, type ConstraintSpec, checkJsonSchema, relaxJsonSchema, type ToolCallFormat } from "@keepquant/engine";
import { type ApiError, invalidRequest } from "./errors.js";
import type { ChatRequest } from "./requests.js";

export type ResponseFormat =
  | { type: "text" }
  | { type: "json_object" }
  | { type: "json_schema"; name: string; schema: Record<string, unknown> | undefined; strict: boolean };

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** The 400's code of each ConstraintError code (the others: invalid_value). */
const CONSTRAINT_CODES: Partial<Record<ConstraintError["code"], string>> = {
  CONSTRAINT_UNSUPPORTED_KEYWORD: "unsupported_schema_keyword",
  CONSTRAINT_UNKNOWN_TOOL: "unknown_tool",
  CONSTRAINT_BAD_SCHEMA: "invalid_schema",
  // past a bound of the grammar engine (a length bound, or its compile's time or memory budget)
  CONSTRAINT_TOO_COMPLEX: "schema_too_complex",
};

/** A ConstraintError as the 400 of parameter `param` (its code: unsupported_schema_keyword, invalid_schema, schema_too_complex, ...). */
export function constraintError(error: ConstraintError, param: string | null): ApiError {
  return invalidRequest(param, error.message, CONSTRAINT_CODES[error.code] ?? "invalid_value");
}

/**
 * Checks a JSON Schema the output will be constrained to; a 400 naming `param` and the keyword otherwise. Not
 * strict (`strict: false`): what cannot be enforced is relaxed instead (the output is checked when done), and
 * only a schema that is not a schema is refused.
 */
export function checkSchemaParam(schema: unknown, param: string, strict = true): void {
  try {
    if (strict) checkJsonSchema(schema, param);
    else relaxJsonSchema(schema, param);
  } catch (error) {
    if (ConstraintError.isInstance(error)) throw constraintError(error, param);
    throw error;
  }
}

const FORMAT_FIELDS: ReadonlySet<string> = new Set(["type", "json_schema"]);
const JSON_SCHEMA_FIELDS: ReadonlySet<string> = new Set(["name", "description", "schema", "strict"]);

/** OpenAI's response_format: {type: "text"}, {type: "json_object"} or {type: "json_schema", json_schema: {name, schema, strict}}. */
export function parseResponseFormat(value: unknown): ResponseFormat {
  if (value === undefined || value === null) return { type: "text" };
  if (!isObject(value))
    throw invalidRequest("response_format", 'response_format must be an object such as {"type": "json_object"}', "invalid_type");
  for (const key of Object.keys(value)) {
    if (!FORMAT_FIELDS.has(key))
      throw invalidRequest(`response_format.${key}`, `unrecognized request field "response_format.${key}"`, "unknown_parameter");
  }
  const type = value["type"];
  if (type === "text" || type === "json_object") {
    if (value["json_schema"] !== undefined)
      throw invalidRequest("response_format.json_schema", `response_format.json_schema needs type "json_schema"`);
    return { type };
  }
  if (type !== "json_schema") {
    throw invalidRequest(
      "response_format.type",
      `response_format.type must be "text", "json_object" or "json_schema", got ${JSON.stringify(type)}`,
    );
  }
  const spec = value["json_schema"];
  if (!isObject(spec))
    throw invalidRequest(
      "response_format.json_schema",
      "response_format.json_schema must be an object {name, schema, strict}",
      "invalid_type",
    );
  for (const key of Object.keys(spec)) {
    if (!JSON_SCHEMA_FIELDS.has(key)) {
      throw invalidRequest(
        `response_format.json_schema.${key}`,
        `unrecognized request field "response_format.json_schema.${key}"`,
        "unknown_parameter",
      );
    }
  }
  const name = spec["name"];
  if (typeof name !== "string" || !/^[A-Za-z0-9_-]{1,64}$/.test(name)) {
    throw invalidRequest(
      "response_format.json_schema.name",
      "response_format.json_schema.name must be 1-64 characters of a-z, A-Z, 0-9, _ and -",
    );
  }
  if (spec["description"] !== undefined && typeof spec["description"] !== "string") {
    throw invalidRequest(
      "response_format.json_schema.description",
      "response_format.json_schema.description must be a string",
      "invalid_type",
    );
  }
  const strict = spec["strict"];
  if (strict !== undefined && strict !== null && typeof strict !== "boolean") {
    throw invalidRequest("response_format.json_schema.strict", "response_format.json_schema.strict must be a boolean", "invalid_type");
  }
  const schema = spec["schema"];
  if (schema !== undefined && !isObject(schema)) {
    throw invalidRequest(
      "response_format.json_schema.schema",
      "response_format.json_schema.schema must be a JSON Schema object",
      "invalid_type",
    );
  }
  if (schema !== undefined) checkSchemaParam(schema, "response_format.json_schema.schema", strict === true);
  return { type: "json_schema", name, schema, strict: strict === true };
}

/** The constraint of a chat request (undefined: free output), in the model's tool-call format. */
export function chatConstraint(request: ChatRequest, format: ToolCallFormat): ConstraintSpec | undefined {
  const rf = request.responseFormat;
  if (rf.type === "json_object" || (rf.type === "json_schema" && rf.schema === undefined)) return { type: "json_object" };
  if (rf.type === "json_schema") return { type: "json_schema", schema: rf.schema!, strict: rf.strict };
  const tools = request.tools ?? [];
  const choice = request.toolChoice;
  if (tools.length === 0 || choice === "none") return undefined;
  // under "auto" only strict tools make a constraint (free text or valid calls)
  if (choice === "auto" && !tools.some((t) => t.function.strict === true)) return undefined;
  return {
    type: "tool_call",
    format,
    tools: tools.map((t) => ({
      name: t.function.name,
      ...(t.function.parameters === undefined ? {} : { parameters: t.function.parameters as Record<string, unknown> }),
      ...(t.function.strict === true ? { strict: true } : {}),
    })),
    choice,
  };
}

/** The request parameter an engine ConstraintError field points into. */
export function constraintParam(field: string | undefined, request: ChatRequest): string | null {
  if (field === undefined) return null;
  const tool = /^constraint\.tools\[(\d+)\](.*)$/.exec(field);
  if (tool) return `tools[${tool[1]}].function${tool[2] === "" ? "" : tool[2]}`;
  if (field.startsWith("constraint.choice")) return "tool_choice";
  if (field.startsWith("constraint.schema")) return `response_format.json_schema.schema${field.slice("constraint.schema".length)}`;
  if (field === "thinkingBudget") return "thinking_budget";
  return request.responseFormat.type !== "text" ? "response_format" : "tools";
}
