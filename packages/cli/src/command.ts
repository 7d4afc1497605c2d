import type { parseArgs, ParseArgsConfig } from "node:util";

/** Where a command writes. Tests and the bin pass process streams; nothing else prints. */
export interface CommandIo {
  stdout: NodeJS.WritableStream;
  stderr: NodeJS.WritableStream;
  env: NodeJS.ProcessEnv;
  /** True when stdout is a terminal and not in CI: progress may redraw lines. */
  interactive: boolean;
}

type OptionSpecs = NonNullable<ParseArgsConfig["options"]>;
type ParsedValues<O extends OptionSpecs> = ReturnType<typeof parseArgs<{ options: O; allowPositionals: true; strict: true }>>["values"];

/** One CLI command: typed options (node:util parseArgs), positionals, and a run function returning the exit code. */
export interface CliCommand<O extends OptionSpecs = OptionSpecs> {
  name: string;
  summary: string;
  /** Usage line(s) after `keepquant `, e.g. `inspect <file.gguf> [--json]`. */
  usage: string;
  /** Option help lines, `--json  print one JSON document`. */
  help: string[];
  options: O;
  /** Exit code for a bad command line (default 2); `plan` uses 1 so that 3 alone means "does not fit". */
  usageExitCode?: number;
  run(values: ParsedValues<O>, positionals: string[], io: CommandIo): Promise<number>;
}

/** Keeps the option types of a command literal. */
export function defineCommand<O extends OptionSpecs>(command: CliCommand<O>): CliCommand<O> {
  return command;
}

/** Bad command line (unknown option, missing argument): exit code 2. */
export class CliUsageError extends Error {
  readonly code = "USAGE";
  constructor(message: string) {
    super(message);
    this.name = "CliUsageError";
  }
}

/** Serialises values JSON cannot hold: bigint as a number when exact, else a string. */
export function toJson(value: unknown, indent = 2): string {
  return JSON.stringify(
    value,
    (_key, v: unknown) => {
      if (typeof v === "bigint")
        return v >= BigInt(Number.MIN_SAFE_INTEGER) && v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v.toString();
      if (typeof v === "number" && !Number.isFinite(v)) return String(v);
      return v;
    },
    indent,
  );
}

export function write(stream: NodeJS.WritableStream, text: string): void {
  stream.write(text.endsWith("\n") ? text : `${text}\n`);
}
