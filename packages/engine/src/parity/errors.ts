/** Typed errors of the parity gate. `code` is stable; `isInstance` works across package copies. */
const PARITY_ERROR_MARKER = Symbol.for("@keepquant/engine.parity-error");

export type ParityErrorCode =
  | "PARITY_BAD_GOLDENS"
  | "PARITY_GOLDENS_NOT_FOUND"
  | "PARITY_FIXTURE_MISMATCH"
  | "PARITY_UNKNOWN_FIXTURE"
  | "PARITY_NO_QUANTIZER";

export class ParityError extends Error {
  readonly [PARITY_ERROR_MARKER] = true;
  readonly code: ParityErrorCode;

  constructor(code: ParityErrorCode, message: string) {
    super(message);
    this.name = "ParityError";
    this.code = code;
  }

  static isInstance(value: unknown): value is ParityError {
    return typeof value === "object" && value !== null && (value as Record<symbol, unknown>)[PARITY_ERROR_MARKER] === true;
  }
}
