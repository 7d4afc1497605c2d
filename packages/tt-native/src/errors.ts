/** Typed errors of @keepquant/tt-native (stable `code` strings). */
export type NativeErrorCode = "KEEPQUANT_NATIVE_UNAVAILABLE" | "KEEPQUANT_NATIVE_ISA" | "KEEPQUANT_NATIVE_ARGUMENT";

export class NativeError extends Error {
  readonly code: NativeErrorCode;
  constructor(code: NativeErrorCode, message: string) {
    super(message);
    this.name = new.target.name;
    this.code = code;
  }
}

/** The CPU-native arm did not load; `reasons` lists every attempt's failure. */
export class NativeUnavailableError extends NativeError {
  readonly reasons: readonly string[];
  constructor(operation: string, reasons: readonly string[]) {
    super("KEEPQUANT_NATIVE_UNAVAILABLE", `${operation}: the CPU-native arm is not loaded (${reasons.join("; ")})`);
    this.reasons = reasons;
  }
}

/** An ISA level that is unknown or that this CPU/binary cannot run. */
export class NativeIsaError extends NativeError {
  readonly level: string;
  constructor(level: string, reason: string) {
    super("KEEPQUANT_NATIVE_ISA", `cannot select ISA level "${level}": ${reason}`);
    this.level = level;
  }
}

/** A bad argument to a native call; `argument` names it. */
export class NativeArgumentError extends NativeError {
  readonly operation: string;
  readonly argument: string;
  constructor(operation: string, argument: string, detail: string) {
    super("KEEPQUANT_NATIVE_ARGUMENT", `${operation}: invalid argument ${argument}: ${detail}`);
    this.operation = operation;
    this.argument = argument;
  }
}
