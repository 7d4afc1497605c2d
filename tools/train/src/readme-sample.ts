/**
 * The README's sample: the fenced block under "## The default model" that starts with
 * `$ pnpm keepquant run ...` and holds what that command prints on stdout. readme-sample.test.ts
 * fails when the block differs from what the CLI prints today; this script rewrites it:
 *
 *   pnpm --filter @keepquant/train exec tsx src/readme-sample.ts --write
 *
 * (without --write it prints the block it would write). The command runs the built CLI
 * (`pnpm build` first) with the embedded default model, KEEPQUANT_* variables removed.
 */
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { REPO_ROOT } from "./recipe.js";

export const README = path.join(REPO_ROOT, "README.md");
const COMMAND_PREFIX = "$ pnpm keepquant ";

export class ReadmeSampleError extends Error {
  override name = "ReadmeSampleError";
}

export interface ReadmeSample {
  /** Arguments after `pnpm keepquant`. */
  args: string[];
  /** The command line as written (without "$ "). */
  command: string;
  /** The block's lines after the command line, joined by "\n". */
  output: string;
  /** 0-based line indices of the command line and of the closing fence. */
  commandLine: number;
  closingLine: number;
}

/** Splits a command line on spaces, keeping "double-quoted" words whole (no escapes). */
export function splitCommand(line: string): string[] {
  return [...line.matchAll(/"([^"]*)"|(\S+)/g)].map((m) => m[1] ?? m[2]!);
}

/** Finds the sample block in the README's text; names what is missing when it is not there. */
export function findReadmeSample(text: string, file = README): ReadmeSample {
  const lines = text.split("\n");
  const commandLine = lines.findIndex((l, i) => l.startsWith(COMMAND_PREFIX) && lines[i - 1]?.startsWith("```"));
  if (commandLine < 0) throw new ReadmeSampleError(`${file}: no fenced block starting with "${COMMAND_PREFIX}..."`);
  const closing = lines.findIndex((l, i) => i > commandLine && l.startsWith("```"));
  if (closing < 0) throw new ReadmeSampleError(`${file}:${commandLine + 1}: the sample block is not closed`);
  const command = lines[commandLine]!.slice(2);
  return {
    args: splitCommand(command).slice(2),
    command,
    output: lines.slice(commandLine + 1, closing).join("\n"),
    commandLine,
    closingLine: closing,
  };
}

/** The built CLI, found through @keepquant/cli's package.json `bin`. */
export function cliBin(): string {
  const manifest = createRequire(import.meta.url).resolve("@keepquant/cli/package.json");
  const bin = (JSON.parse(fs.readFileSync(manifest, "utf8")) as { bin: Record<string, string> }).bin["keepquant"]!;
  return path.join(path.dirname(manifest), bin);
}

/** What `keepquant <args>` prints on stdout, without its final newlines (a fenced block cannot end in blank lines). */
export function runCli(args: readonly string[]): string {
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("KEEPQUANT_")));
  const stdout = execFileSync(process.execPath, [cliBin(), ...args], { env, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
  return stdout.replace(/\n+$/, "");
}

/** The README's text with the sample block's output replaced by `output`. */
export function withSampleOutput(text: string, sample: ReadmeSample, output: string): string {
  const lines = text.split("\n");
  lines.splice(sample.commandLine + 1, sample.closingLine - sample.commandLine - 1, ...output.split("\n"));
  return lines.join("\n");
}

function main(): void {
  const text = fs.readFileSync(README, "utf8");
  const sample = findReadmeSample(text);
  const output = runCli(sample.args);
  if (!process.argv.includes("--write")) {
    process.stdout.write(`$ ${sample.command}\n${output}\n`);
    return;
  }
  fs.writeFileSync(README, withSampleOutput(text, sample, output));
  process.stdout.write(`${output === sample.output ? "unchanged" : "rewrote"} the sample of ${README}\n`);
}

if (process.argv[1] && path.resolve(process.argv[1]) === path.resolve(new URL(import.meta.url).pathname)) main();
