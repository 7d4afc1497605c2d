/**
 * What the side-by-side benchmarks (run.ts: the dense real shape; moe-bench.ts: the MoE shape) share: their
 * command-line flags, one worker process per engine and measurement (worker.ts, so that two engines are never
 * resident at once), and the median of the repeats.
 */
import { spawnSync } from "node:child_process";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { REPO_ROOT } from "./real-shape.js";
import type { WorkerOptions, WorkerResult } from "./worker.js";

const args = process.argv.slice(2);

/** The value after `--name` on the command line, else `fallback`. */
export function flag(name: string, fallback: string): string {
  const i = args.indexOf(`--${name}`);
  return i >= 0 && args[i + 1] ? args[i + 1]! : fallback;
}

/** True when `--name` is on the command line. */
export function hasFlag(name: string): boolean {
  return args.includes(`--${name}`);
}

const here = path.dirname(fileURLToPath(import.meta.url));
const tsx = path.join(REPO_ROOT, "node_modules", ".bin", "tsx");

/**
 * Runs one measurement of `engine` on `file` in its own process (`script`: worker.ts, or batch-worker.ts for
 * the batching rows) and returns its JSON line.
 */
export function runWorker<Result = WorkerResult, Options extends object = WorkerOptions>(
  engine: string,
  file: string,
  options: Options,
  script = "worker.ts",
): Result {
  const result = spawnSync(tsx, [path.join(here, script), engine, file, JSON.stringify(options)], {
    cwd: path.join(here, ".."),
    encoding: "utf8",
    timeout: 1_800_000,
    env: { ...process.env, NODE_LLAMA_CPP_SKIP_DOWNLOAD: "true" },
  });
  const line = result.stdout.trim().split("\n").at(-1) ?? "";
  if (result.status !== 0 || !line.startsWith("{")) {
    // a crash after the result line was written (at exit) is told apart from one during the measurement
    const when = line.startsWith("{") ? "after writing its result" : "before writing a result";
    const how = result.signal ? `signal ${result.signal}` : `exit ${result.status}`;
    throw new Error(
      `${engine} on ${path.basename(file)} failed (${how}, ${when}): ${result.stderr.trim().split("\n").slice(-5).join(" | ")}`,
    );
  }
  return JSON.parse(line) as Result;
}

export function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}
