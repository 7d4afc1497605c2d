/**
 * Errors the HTTP layer returns, in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}`
 * with the matching status. Nothing else reaches a client: an unexpected failure is a 500 with a
 * generic message (never a stack trace).
 */

export type ApiErrorType =
  | "invalid_request_error"
  | "authentication_error"
  | "not_found_error"
  | "rate_limit_error"
  | "unavailable_error"
  | "server_error";

const MARKER = Symbol.for("keepquant.server.ApiError");

export class ApiError extends Error {
  readonly [MARKER] = true;
  override readonly name = "ApiError";

  constructor(
    readonly status: number,
    readonly type: ApiErrorType,
    message: string,
    readonly param: string | null = null,
    readonly code: string | null = null,
    /** Extra response headers (Retry-After, WWW-Authenticate). */
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
  }

  static isInstance(value: unknown): value is ApiError {
    return typeof value === "object" && value !== null && (value as Record<symbol, unknown>)[MARKER] === true;
  }

  toJSON(): { error: { message: string; type: ApiErrorType; param: string | null; code: string | null } } {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }
}

/** 400 naming the request field. */
export function invalidRequest(param: string | null, message: string, code: string | null = "invalid_value"): ApiError {
  return new ApiError(400, "invalid_request_error", message, param, code);
}
