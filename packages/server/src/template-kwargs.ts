/**
 * `chat_template_kwargs` of /v1/chat/completions: extra variables for the chat template, as vLLM and
 * llama.cpp's server take them. Every key reaches the template (`enable_thinking`,
 * `preserve_thinking`, `reasoning_effort`, or any other a model's template reads); the keys the
 * server sets itself are refused, the known switches are type-checked, and the whole is bounded.
 */
import { invalidRequest } from "./errors.js";

/** Most keys in chat_template_kwargs. */
export const MAX_TEMPLATE_KWARGS = 32;
/** Longest key (a Jinja variable name). */
export const MAX_TEMPLATE_KWARG_NAME = 64;
/** Deepest nesting of a value (objects and arrays; the template's renderer recurses per level). */
export const MAX_TEMPLATE_KWARG_DEPTH = 16;
/** Largest value as JSON text, all keys together. */
export const MAX_TEMPLATE_KWARGS_BYTES = 64 * 1024;

/** Variables the server sets from the request itself: a kwarg may not replace them. */
const RESERVED: ReadonlySet<string> = new Set(["messages", "tools", "add_generation_prompt", "bos_token", "eos_token"]);
/** The switches templates test with `is true` / `is false` or compare as text: their type is checked. */
const TYPED: Readonly<Record<string, "boolean" | "string">> = {
  enable_thinking: "boolean",
  preserve_thinking: "boolean",
  reasoning_effort: "string",
};

export interface TemplateKwargs {
  /** Every kwarg, as given (the template's variables). */
  variables: Record<string, unknown>;
  /** `enable_thinking`, when given. */
  enableThinking: boolean | undefined;
}

function typeName(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  return typeof value;
}

function depthOf(value: unknown): number {
  let deepest = 0;
  const stack: [unknown, number][] = [[value, 0]];
  while (stack.length > 0) {
    const [item, depth] = stack.pop()!;
    if (typeof item !== "object" || item === null) continue;
    deepest = Math.max(deepest, depth + 1);
    if (deepest > MAX_TEMPLATE_KWARG_DEPTH) return deepest;
    for (const child of Object.values(item)) stack.push([child, depth + 1]);
  }
  return deepest;
}

/** Checks `value` (the request's chat_template_kwargs, already JSON) and returns the template variables. */
export function parseTemplateKwargs(value: unknown): TemplateKwargs {
  if (value === undefined || value === null) return { variables: {}, enableThinking: undefined };
  const field = "chat_template_kwargs";
  if (typeof value !== "object" || Array.isArray(value))
    throw invalidRequest(field, `${field} must be an object, got ${typeName(value)}`, "invalid_type");
  const entries = Object.entries(value as Record<string, unknown>);
  if (entries.length > MAX_TEMPLATE_KWARGS)
    throw invalidRequest(field, `${field} has ${entries.length} keys (at most ${MAX_TEMPLATE_KWARGS})`, "too_many");
  let bytes = 0;
  const variables: Record<string, unknown> = {};
  for (const [key, item] of entries) {
    const param = `${field}.${key}`;
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(key) || key.length > MAX_TEMPLATE_KWARG_NAME) {
      throw invalidRequest(
        param,
        `${param}: a key must be a template variable name (letters, digits, _; at most ${MAX_TEMPLATE_KWARG_NAME} characters)`,
      );
    }
    if (RESERVED.has(key)) {
      throw invalidRequest(
        param,
        `${param} cannot be set: the server sets ${key} from the request (${[...RESERVED].join(", ")})`,
        "unsupported_value",
      );
    }
    const expected = TYPED[key];
    if (expected !== undefined && item !== null && typeof item !== expected) {
      throw invalidRequest(param, `${param} must be a ${expected}, got ${typeName(item)}`, "invalid_type");
    }
    if (depthOf(item) > MAX_TEMPLATE_KWARG_DEPTH) {
      throw invalidRequest(
        param,
        `${param} is nested more than ${MAX_TEMPLATE_KWARG_DEPTH} levels deep (at most ${MAX_TEMPLATE_KWARG_DEPTH})`,
        "too_deep",
      );
    }
    bytes += Buffer.byteLength(JSON.stringify(item ?? null));
    if (bytes > MAX_TEMPLATE_KWARGS_BYTES) {
      throw invalidRequest(field, `${field} is larger than ${MAX_TEMPLATE_KWARGS_BYTES} bytes as JSON`, "too_large");
    }
    if (item !== null) variables[key] = item;
  }
  const thinking = variables["enable_thinking"];
  return { variables, enableThinking: typeof thinking === "boolean" ? thinking : undefined };
}
