/**
 * The typed error of constrained decoding: a schema, grammar or tool choice the engine cannot turn
 * into a constraint it enforces. `field` names the request parameter (e.g. `constraint.schema`),
 * `path` the JSON pointer inside it, `keyword` the JSON Schema keyword that was refused.
 */
const CONSTRAINT_ERROR_MARKER = Symbol.for("@keepquant/engine.constraint-error");

export type ConstraintErrorCode =
  /** not a JSON Schema (wrong type of a keyword's value, a broken $ref, ...) */
  | "CONSTRAINT_BAD_SCHEMA"
  /** a JSON Schema keyword (or keyword value) the grammar engine cannot enforce */
  | "CONSTRAINT_UNSUPPORTED_KEYWORD"
  /** tool_choice names a tool that is not in `tools` */
  | "CONSTRAINT_UNKNOWN_TOOL"
  /** the constraint object itself is malformed (type, tools, choice, ebnf) */
  | "CONSTRAINT_BAD_SPEC"
  /** an EBNF grammar the grammar engine does not parse */
  | "CONSTRAINT_BAD_GRAMMAR"
  /** the grammar engine (xgrammar's WebAssembly build) could not be loaded */
  | "CONSTRAINT_ENGINE_UNAVAILABLE"
  /** a constraint needs the model's tokenizer */
  | "CONSTRAINT_NO_TOKENIZER"
  /**
   * the constraint's grammar is past a bound of the grammar engine (GrammarLimits): a string length bound
   * or the sum of them, found before compiling, or a compile that ran past its time or memory budget
   */
  | "CONSTRAINT_TOO_COMPLEX";

export interface ConstraintErrorDetails {
  /** the request parameter, e.g. "constraint.schema" or "constraint.tools[1].parameters" */
  field?: string;
  /** JSON pointer inside the schema ("" for its root) */
  path?: string;
  /** the refused JSON Schema keyword */
  keyword?: string;
  cause?: unknown;
}

export class ConstraintError extends Error {
  readonly [CONSTRAINT_ERROR_MARKER] = true;
  readonly code: ConstraintErrorCode;
  readonly field: string | undefined;
  readonly path: string | undefined;
  readonly keyword: string | undefined;

  constructor(code: ConstraintErrorCode, message: string, details: ConstraintErrorDetails = {}) {
    super(message, details.cause === undefined ? undefined : { cause: details.cause });
    this.name = "ConstraintError";
    this.code = code;
    this.field = details.field;
    this.path = details.path;
    this.keyword = details.keyword;
  }

  /** Works across duplicate copies of this package. */
  static isInstance(value: unknown): value is ConstraintError {
    return typeof value === "object" && value !== null && (value as Record<symbol, unknown>)[CONSTRAINT_ERROR_MARKER] === true;
  }
}
