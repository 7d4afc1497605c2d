/**
 * Best effort for a schema that is not strict (`{ type: "json_schema", strict: false }`, OpenAI's default): what
 * constrained decoding cannot enforce exactly is relaxed instead of refused, the output is generated against the
 * relaxed schema (a superset where a keyword is dropped), and the finished output is validated against the whole
 * schema (validate.ts), the verdict reported with the result. A strict schema is refused by name as before.
 *
 * The relaxing asks the strict check itself (checkJsonSchema, the repetition budget) what it refuses, one keyword
 * at a time, and relaxes that keyword where it is: `oneOf` becomes `anyOf`, `allOf` is merged into its schema,
 * bounds, `pattern`, long `maxLength` and the keywords with no grammar (`uniqueItems`, `not`, `multipleOf`,
 * `if`, `patternProperties` with more than one pattern, ...) are dropped. A schema that is not a schema (a broken `$ref`, a wrong type) is
 * still refused.
 */
import { ConstraintError } from "./errors.js";
import { addSchemaRepetitions, type GrammarLimits, RepetitionBudget } from "./limits.js";
import { mergeConjuncts, normalizeJsonSchema, resolvePointer } from "./normalize.js";
import { checkJsonSchema } from "./schema.js";

/** One keyword relaxed: where (a JSON pointer into the normalized schema), which, and why it was not enforced. */
export interface RelaxedKeyword {
  path: string;
  keyword: string;
  reason: string;
}

export interface RelaxedSchema {
  /** the normalized schema (what the output is validated against) */
  normalized: unknown;
  /** what is compiled */
  relaxedSchema: unknown;
  relaxed: RelaxedKeyword[];
}

/** At most this many keywords are relaxed in one schema (then its last refusal stands). */
export const MAX_RELAXED_KEYWORDS = 1000;

type Schema = Record<string, unknown>;

function isObject(value: unknown): value is Schema {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

const BOUNDS = ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"];

/** Relaxes `keyword` of the schema at `path` in place; false when it is not there (the refusal then stands). */
function relaxKeyword(root: unknown, path: string, keyword: string): boolean {
  const node = resolvePointer(root, path);
  if (!isObject(node)) return false;
  if (BOUNDS.includes(keyword)) {
    for (const bound of BOUNDS) delete node[bound];
    return true;
  }
  if (!(keyword in node)) return false;
  switch (keyword) {
    case "oneOf":
      // every branch stays allowed; that exactly one matches is checked after
      if (node["anyOf"] === undefined) node["anyOf"] = node["oneOf"];
      delete node["oneOf"];
      return true;
    case "allOf": {
      // best effort: where the conjuncts disagree the first one's keyword stays
      if (!Array.isArray(node["allOf"])) node["allOf"] = [];
      const merged = mergeConjuncts(node, root as Schema, { inlines: MAX_RELAXED_KEYWORDS }, false)!;
      for (const key of Object.keys(node)) delete node[key];
      Object.assign(node, merged);
      return true;
    }
    case "if":
      delete node["if"];
      delete node["then"];
      delete node["else"];
      return true;
    default:
      delete node[keyword];
      return true;
  }
}

/**
 * `given` normalized, and relaxed until the strict check (and, with `limits`, the repetition budget) takes it.
 * Throws the check's ConstraintError when the schema is not a schema, or when a refusal cannot be relaxed.
 */
export function relaxJsonSchema(
  given: unknown,
  field: string,
  limits?: Pick<GrammarLimits, "maxRepetition" | "maxRepetitionSum">,
): RelaxedSchema {
  const normalized = normalizeJsonSchema(given);
  const relaxedSchema: unknown = structuredClone(normalized);
  const relaxed: RelaxedKeyword[] = [];
  for (;;) {
    try {
      const checked = checkJsonSchema(relaxedSchema, field);
      if (limits) addSchemaRepetitions(checked, field, new RepetitionBudget(limits));
      return { normalized, relaxedSchema: checked, relaxed };
    } catch (error) {
      if (!ConstraintError.isInstance(error)) throw error;
      const relaxable = error.code === "CONSTRAINT_UNSUPPORTED_KEYWORD" || error.code === "CONSTRAINT_TOO_COMPLEX";
      if (!relaxable || error.path === undefined || error.keyword === undefined || relaxed.length >= MAX_RELAXED_KEYWORDS) throw error;
      if (!relaxKeyword(relaxedSchema, error.path, error.keyword)) throw error;
      relaxed.push({ path: error.path, keyword: error.keyword, reason: error.message });
    }
  }
}
