/**
 * The finished output of a relaxed (best-effort) schema checked against the whole schema with Ajv (JSON Schema
 * 2020-12, the normalized schema: relax.ts), so that an output that breaks its schema is never returned without
 * saying so. Validators are compiled once per schema (the most recent ones kept).
 */
import { Ajv } from "ajv";
import { Ajv2019 } from "ajv/dist/2019.js";
import { Ajv2020, type ValidateFunction } from "ajv/dist/2020.js";
import addFormatsModule from "ajv-formats";
import type { RelaxedKeyword } from "./relax.js";

/** What the output's check found (GenerationResult.schemaCheck). */
export interface SchemaCheck {
  /** whether the output is one JSON document valid for the whole schema */
  valid: boolean;
  /** why not: the validator's messages (at most 10), or that the output is not JSON */
  errors: string[];
  /** the keywords that generation could not enforce and that were relaxed */
  relaxed: RelaxedKeyword[];
}

// ajv-formats is CommonJS: its function is the module (and its `default`)
const addFormats = ((addFormatsModule as unknown as { default?: unknown }).default ?? addFormatsModule) as (
  ajv: Ajv | Ajv2019 | Ajv2020,
) => void;

const AJV_OPTIONS = { strict: false, allErrors: false, validateSchema: false, allowUnionTypes: true, unicodeRegExp: false } as const;

type Draft = "07" | "2019-09" | "2020-12";

const MAX_VALIDATORS = 64;
const MAX_ERRORS = 10;
/** compiled validators by draft and schema text, least recently used first (a compile costs milliseconds) */
const validators = new Map<string, ValidateFunction | Error>();

/** `schema` compiled by Ajv under `draft` (cached); the Error when Ajv cannot compile it. `$schema` is not read. */
function compiled(schema: unknown, draft: Draft): ValidateFunction | Error {
  const key = `${draft} ${JSON.stringify(schema)}`;
  const hit = validators.get(key);
  if (hit !== undefined) {
    validators.delete(key);
    validators.set(key, hit);
    return hit;
  }
  let made: ValidateFunction | Error;
  try {
    const ajv = draft === "2020-12" ? new Ajv2020(AJV_OPTIONS) : draft === "2019-09" ? new Ajv2019(AJV_OPTIONS) : new Ajv(AJV_OPTIONS);
    addFormats(ajv);
    const { $schema: _draft, ...rest } = (typeof schema === "object" && schema !== null ? schema : {}) as Record<string, unknown>;
    made = ajv.compile(typeof schema === "boolean" ? (schema ? {} : { not: {} }) : rest);
  } catch (error) {
    made = error instanceof Error ? error : new Error(String(error));
  }
  validators.set(key, made);
  while (validators.size > MAX_VALIDATORS) validators.delete(validators.keys().next().value!);
  return made;
}

/**
 * A validator of a schema as it is written (before normalizing), read by the draft its `$schema` names: draft-07
 * rules for drafts 4 to 7 and none named, 2019-09 and 2020-12 for theirs. Throws when Ajv cannot compile it.
 */
export function rawValidator(schema: Record<string, unknown>): ValidateFunction {
  const named = typeof schema["$schema"] === "string" ? schema["$schema"] : "";
  const made = compiled(schema, /2020-12/.test(named) ? "2020-12" : /2019-09/.test(named) ? "2019-09" : "07");
  if (made instanceof Error) throw made;
  return made;
}

/** Checks `text` (one JSON document) against `schema` (normalized). */
export function checkOutput(text: string, schema: unknown, relaxed: RelaxedKeyword[]): SchemaCheck {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    return { valid: false, errors: [`the output is not one JSON document: ${(error as Error).message}`], relaxed };
  }
  // the normalized schema is read as 2020-12 whatever draft it names
  const validate = compiled(schema, "2020-12");
  if (validate instanceof Error)
    return { valid: false, errors: [`the schema could not be compiled for the check: ${validate.message}`], relaxed };
  if (validate(value)) return { valid: true, errors: [], relaxed };
  const errors = (validate.errors ?? [])
    .slice(0, MAX_ERRORS)
    .map((e) => `${e.instancePath === "" ? "the output" : e.instancePath} ${e.message ?? "is invalid"}`);
  return { valid: false, errors: errors.length > 0 ? errors : ["the output is invalid"], relaxed };
}
