/**
 * --threads of `serve` and `bench`, checked against the native pool's policy (tt-native's
 * nativeThreadsProblem: 1 .. 4x the logical cores, up to its hard limit with `force`), so a bad count
 * is a usage error naming the range instead of a native arm that does not load.
 */
import { CliUsageError } from "../command.js";
import { decimalInteger } from "./numeric-option.js";

type TtNative = typeof import("@keepquant/tt-native");

export interface ThreadCount {
  /** For the engine's `threads` option (within the default policy). */
  threads?: number;
  /** Above the default policy, allowed by `force`: the caller sizes the pool with `applyThreadCount`. */
  forced?: number;
}

/** Parses --threads; `force` allows up to the pool's hard limit (1024). */
export async function parseThreadCount(text: string | undefined, force = false): Promise<ThreadCount> {
  if (text === undefined) return {};
  const native = (await import("@keepquant/tt-native")) as TtNative;
  const value = decimalInteger(text);
  const problem = native.nativeThreadsProblem(value, { force });
  if (problem) throw new CliUsageError(`--threads ${JSON.stringify(text)}: ${problem}`);
  return native.nativeThreadsProblem(value) === undefined ? { threads: value } : { forced: value };
}

/** Sizes the native pool for a forced count (a no-op when the native arm did not load). */
export async function applyThreadCount(count: ThreadCount): Promise<void> {
  if (count.forced === undefined) return;
  const native = (await import("@keepquant/tt-native")) as TtNative;
  if (native.nativeAddon()) native.setNativeThreads(count.forced, { force: true });
}
