/**
 * Typed errors of the residency planner. A `Symbol.for` marker makes `isInstance` work across
 * duplicate copies of the package (a bundled CLI and an installed library).
 */
const PLAN_ERROR_MARKER = Symbol.for("@keepquant/engine.plan-error");

export type PlanErrorCode =
  /** An input of the planner is out of range or of the wrong kind (the field says which). */
  | "PLAN_BAD_INPUT"
  /** The model does not fit the memory it would be loaded into (run/chat/serve on cpu). */
  | "PLAN_DOES_NOT_FIT";

export class PlanError extends Error {
  readonly [PLAN_ERROR_MARKER] = true;
  readonly code: PlanErrorCode;
  /** The input that was wrong (e.g. `contextLength`, `device`). */
  readonly field: string | undefined;

  constructor(code: PlanErrorCode, message: string, details: { field?: string } = {}) {
    super(message);
    this.name = "PlanError";
    this.code = code;
    this.field = details.field;
  }

  static isInstance(value: unknown): value is PlanError {
    return typeof value === "object" && value !== null && (value as Record<symbol, unknown>)[PLAN_ERROR_MARKER] === true;
  }
}
