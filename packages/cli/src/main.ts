import { parseArgs } from "node:util";
import { CliUsageError, write, type CliCommand, type CommandIo } from "./command.js";
import { COMMANDS } from "./commands/index.js";
import { reportError } from "./errors.js";

declare const __KEEPQUANT_VERSION__: string;
const VERSION = typeof __KEEPQUANT_VERSION__ === "string" ? __KEEPQUANT_VERSION__ : "0.0.0-dev";

function mainHelp(): string {
  const width = Math.max(...COMMANDS.map((c) => c.name.length));
  return [
    "usage: keepquant <command> [options]",
    "",
    "commands:",
    ...COMMANDS.map((c) => `  ${c.name.padEnd(width)}  ${c.summary}`),
    "",
    "keepquant <command> --help shows a command's options.",
  ].join("\n");
}

function commandHelp(command: CliCommand): string {
  return [
    `usage: keepquant ${command.usage}`,
    "",
    command.summary,
    "",
    "options:",
    ...command.help.map((h) => `  ${h}`),
    "  --help       show this help",
  ].join("\n");
}

/** A value that is a negative number (or -Infinity, -NaN ...): parseArgs would take it for an option. */
const NEGATIVE_NUMBER = /^-(\d|\.\d|Infinity$|NaN$)/i;

/**
 * `--threads -1` as `--threads=-1`: node:util parseArgs refuses a string option's value that starts
 * with a dash ("argument is ambiguous"), so a negative number never reached the option's range
 * check. Only a value that reads as a negative number is joined; `--prompt --json` stays an error.
 */
export function joinNegativeValues(args: readonly string[], options: CliCommand["options"]): string[] {
  const out: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    if (arg === "--") {
      out.push(...args.slice(i));
      break;
    }
    const next = args[i + 1];
    const name = arg.startsWith("--") && !arg.includes("=") ? arg.slice(2) : undefined;
    if (
      name !== undefined &&
      Object.hasOwn(options, name) &&
      options[name]!.type === "string" &&
      next !== undefined &&
      NEGATIVE_NUMBER.test(next)
    ) {
      out.push(`${arg}=${next}`);
      i++;
    } else {
      out.push(arg);
    }
  }
  return out;
}

/** Runs the CLI with `argv` (without node and script) and returns the exit code. */
export async function runCli(argv: string[], io: CommandIo): Promise<number> {
  const json = argv.includes("--json");
  let usageExitCode: number | undefined;
  try {
    const [name, ...rest] = argv;
    if (name === undefined || name === "--help" || name === "-h" || name === "help") {
      write(io.stdout, mainHelp());
      return name === undefined ? 2 : 0;
    }
    if (name === "--version" || name === "-v") {
      write(io.stdout, VERSION);
      return 0;
    }
    const entry = COMMANDS.find((c) => c.name === name);
    if (!entry) throw new CliUsageError(`unknown command "${name}" (commands: ${COMMANDS.map((c) => c.name).join(", ")})`);
    const command = await entry.load();
    usageExitCode = command.usageExitCode;
    if (rest.includes("--help") || rest.includes("-h")) {
      write(io.stdout, commandHelp(command));
      return 0;
    }
    let parsed: { values: Record<string, unknown>; positionals: string[] };
    try {
      parsed = parseArgs({
        args: joinNegativeValues(rest, command.options),
        allowPositionals: true,
        options: command.options,
        strict: true,
      });
    } catch (error) {
      throw new CliUsageError(`${(error as Error).message.split("\n")[0]} (usage: keepquant ${command.usage})`);
    }
    return await command.run(parsed.values as never, parsed.positionals, io);
  } catch (error) {
    return reportError(error, io, json, usageExitCode);
  }
}

/** The process entry: real streams, exit code, no stack traces for bad input. */
export async function main(): Promise<void> {
  const io: CommandIo = {
    stdout: process.stdout,
    stderr: process.stderr,
    env: process.env,
    interactive: Boolean(process.stdout.isTTY) && !process.env.CI,
  };
  process.on("uncaughtException", (error) => {
    process.exitCode = reportError(error, io, process.argv.includes("--json"));
  });
  process.exitCode = await runCli(process.argv.slice(2), io);
}
