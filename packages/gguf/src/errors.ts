/**
 * Typed errors. Every error carries a stable `code` (part of the public API: tools match on it),
 * and, where known, the file `offset` and the `field` that was wrong.
 */
const GGUF_ERROR_MARKER = Symbol.for("@keepquant/gguf.error");

export type GgufErrorCode =
  | "GGUF_IO"
  | "GGUF_NOT_A_FILE"
  | "GGUF_TRUNCATED"
  | "GGUF_BAD_MAGIC"
  | "GGUF_UNSUPPORTED_VERSION"
  | "GGUF_BAD_VALUE_TYPE"
  | "GGUF_BAD_VALUE"
  | "GGUF_LIMIT_EXCEEDED"
  | "GGUF_DUPLICATE_KEY"
  | "GGUF_DUPLICATE_TENSOR"
  | "GGUF_BAD_ALIGNMENT"
  | "GGUF_BAD_TENSOR_TYPE"
  | "GGUF_BAD_TENSOR_SHAPE"
  | "GGUF_PARTIAL_BLOCK"
  | "GGUF_MISALIGNED_TENSOR"
  | "GGUF_TENSOR_OUT_OF_BOUNDS"
  | "GGUF_OVERLAPPING_TENSORS"
  | "GGUF_WRITE_INVALID"
  | "GGUF_BAD_SPLIT"
  | "QWEN35_WRONG_ARCHITECTURE"
  | "QWEN35_MISSING_KEY"
  | "QWEN35_BAD_KEY_TYPE"
  | "QWEN35_BAD_VALUE"
  | "QWEN35_PLAN_REFUSED"
  | "CLIP_NOT_A_PROJECTOR"
  | "CLIP_NO_VISION_ENCODER"
  | "CLIP_UNKNOWN_PROJECTOR"
  | "CLIP_MISSING_KEY"
  | "CLIP_BAD_KEY_TYPE"
  | "CLIP_BAD_VALUE"
  | "CLIP_PLAN_REFUSED"
  | "CLIP_LANGUAGE_MISMATCH";

export interface GgufErrorDetails {
  /** Absolute file (or buffer) offset of the offending bytes, when known. */
  offset?: number;
  /** The field, key or tensor name that was wrong. */
  field?: string;
  cause?: unknown;
}

export class GgufError extends Error {
  readonly [GGUF_ERROR_MARKER] = true;
  readonly code: GgufErrorCode;
  readonly offset: number | undefined;
  readonly field: string | undefined;

  constructor(code: GgufErrorCode, message: string, details: GgufErrorDetails = {}) {
    super(message, details.cause === undefined ? undefined : { cause: details.cause });
    this.name = "GgufError";
    this.code = code;
    this.offset = details.offset;
    this.field = details.field;
  }

  /** Works across duplicate copies of this package (a bundled CLI and an installed library). */
  static isInstance(value: unknown): value is GgufError {
    return typeof value === "object" && value !== null && (value as Record<symbol, unknown>)[GGUF_ERROR_MARKER] === true;
  }
}

/** The bytes are not a valid GGUF file (structure, types, values). */
export class GgufFormatError extends GgufError {
  constructor(code: GgufErrorCode, message: string, details?: GgufErrorDetails) {
    super(code, message, details);
    this.name = "GgufFormatError";
  }
}

/** A named parse limit was exceeded (see GGUF_LIMITS for each limit and its reason). */
export class GgufLimitError extends GgufError {
  readonly limit: string;
  readonly value: number;
  readonly maximum: number;
  constructor(limit: string, value: number, maximum: number, details?: GgufErrorDetails) {
    super("GGUF_LIMIT_EXCEEDED", `${limit} ${value} exceeds the maximum allowed (${maximum})${where(details)}`, details);
    this.name = "GgufLimitError";
    this.limit = limit;
    this.value = value;
    this.maximum = maximum;
  }
}

/** Tensor placement or geometry is invalid (bounds, alignment, overlap, partial blocks). */
export class GgufTensorError extends GgufError {
  constructor(code: GgufErrorCode, message: string, details?: GgufErrorDetails) {
    super(code, message, details);
    this.name = "GgufTensorError";
  }
}

/** The file could not be opened or read. */
export class GgufIoError extends GgufError {
  constructor(message: string, details?: GgufErrorDetails) {
    super("GGUF_IO", message, details);
    this.name = "GgufIoError";
  }
}

/** What a path that is not a regular file is, in the words of GgufNotAFileError's message. */
export type NonRegularFileKind =
  | "a directory"
  | "a FIFO (named pipe)"
  | "a character device"
  | "a block device"
  | "a socket"
  | "not a regular file";

/**
 * The path names a directory, FIFO, device or socket: refused from a stat, before any open that
 * could block (opening a FIFO waits for a writer). `field` is the path.
 */
export class GgufNotAFileError extends GgufError {
  readonly path: string;
  readonly kind: NonRegularFileKind;
  constructor(path: string, kind: NonRegularFileKind) {
    super("GGUF_NOT_A_FILE", `${path} is ${kind === "not a regular file" ? "not a regular file" : `${kind}, not a regular file`}`, {
      field: path,
    });
    this.name = "GgufNotAFileError";
    this.path = path;
    this.kind = kind;
  }
}

/** The writer was given input that cannot be encoded. */
export class GgufWriteError extends GgufError {
  constructor(message: string, details?: GgufErrorDetails) {
    super("GGUF_WRITE_INVALID", message, details);
    this.name = "GgufWriteError";
  }
}

/** qwen35 hyperparameters are missing, mistyped or inconsistent. */
export class Qwen35ConfigError extends GgufError {
  constructor(code: GgufErrorCode, message: string, details?: GgufErrorDetails) {
    super(code, message, details);
    this.name = "Qwen35ConfigError";
  }
}

/**
 * A vision projector (an `mmproj` GGUF, `general.architecture = "clip"`) is not one we can load: not a
 * projector, no vision encoder, another projector type, a bad key, refused tensors, or a width that does
 * not match the language model. `field` names the key or tensor.
 */
export class ClipProjectorError extends GgufError {
  constructor(code: GgufErrorCode, message: string, details?: GgufErrorDetails) {
    super(code, message, details);
    this.name = "ClipProjectorError";
  }
}

/** " at offset N (field)" suffix used in messages. */
export function where(details: GgufErrorDetails | undefined): string {
  if (!details) return "";
  const parts: string[] = [];
  if (details.field !== undefined) parts.push(`in ${details.field}`);
  if (details.offset !== undefined) parts.push(`at offset ${details.offset}`);
  return parts.length > 0 ? ` (${parts.join(" ")})` : "";
}
