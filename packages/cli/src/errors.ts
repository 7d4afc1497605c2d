import { GgufError } from "@keepquant/gguf";
import { HubError } from "@keepquant/hub";
import { CliUsageError, toJson, write, type CommandIo } from "./command.js";
import { ModelFileError } from "./model-file.js";

export interface ErrorDocument {
  error: { code: string; message: string; offset: number | null; field?: string };
}

/** A stable code and message for any thrown value; never a stack trace. */
export function describeError(error: unknown): ErrorDocument["error"] {
  if (GgufError.isInstance(error)) {
    return {
      code: error.code,
      message: error.message,
      offset: error.offset ?? null,
      ...(error.field !== undefined ? { field: error.field } : {}),
    };
  }
  if (HubError.isInstance(error)) {
    return { code: error.code, message: error.message, offset: null, ...(error.field !== undefined ? { field: error.field } : {}) };
  }
  if (error instanceof CliUsageError) return { code: error.code, message: error.message, offset: null };
  if (error instanceof ModelFileError) return { code: error.code, message: error.message, offset: null, field: error.field };
  if (
    typeof error === "object" &&
    error !== null &&
    "code" in error &&
    typeof (error as { code: unknown }).code === "string" &&
    error instanceof Error
  ) {
    return { code: (error as Error & { code: string }).code, message: error.message, offset: null };
  }
  return { code: "INTERNAL", message: error instanceof Error ? error.message : String(error), offset: null };
}

/**
 * Prints `error: <code>: <message>` on stderr (and the JSON error document on stdout with
 * --json). Returns the exit code: `usageExitCode` (default 2) for usage errors, 1 otherwise.
 */
export function reportError(error: unknown, io: CommandIo, json: boolean, usageExitCode = 2): number {
  const described = describeError(error);
  write(io.stderr, `error: ${described.code}: ${described.message.replace(/\s*\n\s*/g, " ")}`);
  if (io.env.KEEPQUANT_DEBUG === "1" && error instanceof Error && error.stack) write(io.stderr, error.stack);
  if (json) write(io.stdout, toJson({ error: described } satisfies ErrorDocument));
  return error instanceof CliUsageError ? usageExitCode : 1;
}
