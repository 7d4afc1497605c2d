/**
 * Typed errors of @keepquant/quant. Each carries a stable `code` and a `Symbol.for` marker so
 * `isInstance` works across duplicate copies of the package (a bundled CLI and an installed library).
 */
const MARKER = Symbol.for("keepquant.quant.error");

export type KeepQuantErrorCode =
  | "KEEPQUANT_UNSUPPORTED_GGML_TYPE"
  | "KEEPQUANT_UNREGISTERED_ENCODING"
  | "KEEPQUANT_INVALID_ARGUMENT"
  | "KEEPQUANT_INVALID_ENV";

export class KeepQuantError extends Error {
  readonly [MARKER] = true;
  readonly code: KeepQuantErrorCode;

  constructor(code: KeepQuantErrorCode, message: string) {
    super(message);
    this.name = new.target.name;
    this.code = code;
  }

  static isInstance(error: unknown): error is KeepQuantError {
    return typeof error === "object" && error !== null && (error as Record<symbol, unknown>)[MARKER] === true;
  }
}

/** A ggml type this package has no kernel for (dequantize or quantize), named by ggml's name. */
export class UnsupportedGgmlTypeError extends KeepQuantError {
  static readonly code = "KEEPQUANT_UNSUPPORTED_GGML_TYPE" as const;
  readonly typeName: string;
  readonly operation: string;

  constructor(typeName: string, operation: string, supported: readonly string[]) {
    super("KEEPQUANT_UNSUPPORTED_GGML_TYPE", `${operation}: ggml type ${typeName} is not supported (supported: ${supported.join(", ")})`);
    this.typeName = typeName;
    this.operation = operation;
  }

  static override isInstance(error: unknown): error is UnsupportedGgmlTypeError {
    return KeepQuantError.isInstance(error) && error.code === "KEEPQUANT_UNSUPPORTED_GGML_TYPE";
  }
}

/** An encoding outside the keep-quant contract's registered set (DESIGN.md message form). */
export class UnregisteredEncodingError extends KeepQuantError {
  static readonly code = "KEEPQUANT_UNREGISTERED_ENCODING" as const;
  readonly op: string;
  readonly encoding: string;
  readonly registered: readonly string[];

  constructor(op: string, encoding: string, registered: readonly string[]) {
    super(
      "KEEPQUANT_UNREGISTERED_ENCODING",
      `no kernel for op ${op}: ${encoding} is not a registered encoding (registered: ${registered.join(", ")})`,
    );
    this.op = op;
    this.encoding = encoding;
    this.registered = registered;
  }

  static override isInstance(error: unknown): error is UnregisteredEncodingError {
    return KeepQuantError.isInstance(error) && error.code === "KEEPQUANT_UNREGISTERED_ENCODING";
  }
}

/** A shape or argument that breaks a function's contract; `argument` names it (e.g. "weight.data"). */
export class QuantArgumentError extends KeepQuantError {
  static readonly code = "KEEPQUANT_INVALID_ARGUMENT" as const;
  readonly operation: string;
  readonly argument: string;

  constructor(operation: string, argument: string, detail: string) {
    super("KEEPQUANT_INVALID_ARGUMENT", `${operation}: invalid argument ${argument}: ${detail}`);
    this.operation = operation;
    this.argument = argument;
  }

  static override isInstance(error: unknown): error is QuantArgumentError {
    return KeepQuantError.isInstance(error) && error.code === "KEEPQUANT_INVALID_ARGUMENT";
  }
}

/** An environment variable with a value outside its documented set; names the variable and the value. */
export class InvalidEnvironmentError extends KeepQuantError {
  static readonly code = "KEEPQUANT_INVALID_ENV" as const;
  readonly variable: string;
  readonly value: string;

  constructor(variable: string, value: string, expected: string) {
    super("KEEPQUANT_INVALID_ENV", `${variable}=${JSON.stringify(value)} is invalid: expected ${expected}`);
    this.variable = variable;
    this.value = value;
  }

  static override isInstance(error: unknown): error is InvalidEnvironmentError {
    return KeepQuantError.isInstance(error) && error.code === "KEEPQUANT_INVALID_ENV";
  }
}
