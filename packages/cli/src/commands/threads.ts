import os from "node:os";
import { parseNumber } from "./run.js";

/** The most --threads without --force (per hardware thread), and with it. */
const THREADS_PER_HARDWARE_THREAD = 4;
const MAX_THREADS = 1024;

/**
 * Parses --threads: an integer in [1, 4x this machine's hardware threads] (1024 at most), or up to
 * 1024 with `force`; a usage error naming the range otherwise. `serve` and `bench` share it.
 */
export function parseThreadCount(text: string | undefined, force = false, hardwareThreads = os.availableParallelism()): number | undefined {
  const most = force ? MAX_THREADS : Math.min(MAX_THREADS, THREADS_PER_HARDWARE_THREAD * hardwareThreads);
  const reason = force
    ? "with --force"
    : `${THREADS_PER_HARDWARE_THREAD}x this machine's ${hardwareThreads} hardware threads; --force allows up to ${MAX_THREADS}`;
  return parseNumber("threads", text, (n) => Number.isInteger(n) && n >= 1 && n <= most, `an integer in [1, ${most}] (${reason})`);
}
