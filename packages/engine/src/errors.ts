/**
 * Typed errors of @keepquant/engine. Each carries a stable `code` and a `Symbol.for` marker so
 * `isInstance` works across duplicate copies of the package (a bundled CLI and an installed library).
 */
const ENGINE_ERROR_MARKER = Symbol.for("@keepquant/engine.error");

export type EngineErrorCode =
  | "ENGINE_LOAD_REFUSED"
  | "ENGINE_UNSUPPORTED_TYPE"
  | "ENGINE_BAD_MODEL"
  | "ENGINE_BAD_OPTION"
  | "ENGINE_BAD_REQUEST"
  | "ENGINE_CAPACITY"
  | "ENGINE_PROMPT_TOO_LONG"
  | "ENGINE_NO_DEFAULT_MODEL"
  | "ENGINE_DISPOSED"
  | "ENGINE_ABORTED"
  | "ENGINE_NO_TOKENIZER"
  | "ENGINE_BAD_IMAGE";

export interface EngineErrorDetails {
  /** The option, request field, tensor or key that was wrong. */
  field?: string;
  cause?: unknown;
}

export class EngineError extends Error {
  readonly [ENGINE_ERROR_MARKER] = true;
  readonly code: EngineErrorCode;
  readonly field: string | undefined;

  constructor(code: EngineErrorCode, message: string, details: EngineErrorDetails = {}) {
    super(message, details.cause === undefined ? undefined : { cause: details.cause });
    this.name = new.target.name;
    this.code = code;
    this.field = details.field;
  }

  /** Works across duplicate copies of this package. */
  static isInstance(value: unknown): value is EngineError {
    return typeof value === "object" && value !== null && (value as Record<symbol, unknown>)[ENGINE_ERROR_MARKER] === true;
  }
}

/** The file cannot be run: refused tensors, unsupported weight types, inconsistent shapes. Raised before any compute. */
export class EngineLoadError extends EngineError {}

/** An option or request parameter is invalid. */
export class EngineOptionError extends EngineError {}

/** A request was aborted through its AbortSignal or by dispose(). */
export class EngineAbortError extends EngineError {
  constructor(message = "generation aborted") {
    super("ENGINE_ABORTED", message);
  }
}

/** Why an image was refused (see {@link ImageError}). */
export type ImageErrorReason =
  | "empty"
  | "corrupt"
  | "unsupported-format"
  | "zero-size"
  | "too-large"
  | "decompression-bomb"
  | "animated"
  | "cmyk"
  | "bit-depth"
  | "decoder-unavailable";

/**
 * An image input was refused before (or while) decoding it: `reason` says which rule, and the message
 * names the value and the limit (`declared 30000x30000 = 900000000 pixels exceeds maximum allowed (50000000)`).
 */
export class ImageError extends EngineError {
  readonly reason: ImageErrorReason;

  constructor(reason: ImageErrorReason, message: string, details: EngineErrorDetails = {}) {
    super("ENGINE_BAD_IMAGE", message, { field: details.field ?? "image", cause: details.cause });
    this.reason = reason;
  }
}
