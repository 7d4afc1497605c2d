/**
 * A vitest globalSetup every package uses: the run gets its own temp folder (TMPDIR, so os.tmpdir()
 * in the tests and in the processes they start points there), and the run fails when a test left
 * anything in it. Every test removes what it creates. The run also gets its own cache folder
 * (XDG_CACHE_HOME: where an engine load keeps the native decode tuner's choice), removed at the end.
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

/** Caches tools keep in the temp folder for themselves (tsx's compile cache, `tsx-<uid>`): not a test's leftovers. */
const TOOL_CACHES = /^tsx-\d+$/;

export default function setup(): () => void {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), "kq-test-run-"));
  const cache = fs.mkdtempSync(path.join(os.tmpdir(), "kq-test-cache-"));
  const previous = process.env.TMPDIR;
  process.env.TMPDIR = root;
  const previousCache = process.env.XDG_CACHE_HOME;
  process.env.XDG_CACHE_HOME = cache;
  return () => {
    if (previous === undefined) delete process.env.TMPDIR;
    else process.env.TMPDIR = previous;
    if (previousCache === undefined) delete process.env.XDG_CACHE_HOME;
    else process.env.XDG_CACHE_HOME = previousCache;
    fs.rmSync(cache, { recursive: true, force: true });
    const left = fs.readdirSync(root).filter((name) => !TOOL_CACHES.test(name));
    fs.rmSync(root, { recursive: true, force: true });
    if (left.length > 0) {
      // vitest reports an error thrown here but keeps its exit code: set a failing one as well
      process.exitCode = 1;
      throw new Error(
        `the tests left ${left.length} entr${left.length === 1 ? "y" : "ies"} in the temp folder: ${left.join(", ")} (every test removes what it creates)`,
      );
    }
  };
}
