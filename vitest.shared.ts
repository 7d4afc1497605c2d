/**
 * The vitest config every package and tool shares: the tests under src (`*.test.ts`), run with the
 * repository's temp guard (tools/repo-checks/src/temp-guard.ts: the run gets its own temp folder and fails
 * when a test leaves anything in it), 120 s per test and per hook. A vitest.config.ts passes only what it
 * does otherwise.
 */
import { fileURLToPath } from "node:url";
import { defineConfig } from "vitest/config";

const TEMP_GUARD = fileURLToPath(new URL("./tools/repo-checks/src/temp-guard.ts", import.meta.url));

export interface SharedVitestOptions {
  /** Run with the temp guard (default true). */
  tempGuard?: boolean;
  /** Per test, in ms (default 120 000). */
  testTimeout?: number;
  /** Per hook, in ms (default 120 000). */
  hookTimeout?: number;
}

export function sharedVitestConfig({ tempGuard = true, testTimeout = 120_000, hookTimeout = 120_000 }: SharedVitestOptions = {}) {
  return defineConfig({
    test: {
      include: ["src/**/*.test.ts"],
      ...(tempGuard ? { globalSetup: [TEMP_GUARD] } : {}),
      testTimeout,
      hookTimeout,
    },
  });
}
