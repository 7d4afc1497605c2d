/**
 * A short smoke run of the coverage-guided fuzz target (`pnpm fuzz`, fuzz/run.mjs): a fixed number
 * of inputs, not a time budget, so it is the same work on any machine. The long runs and their
 * numbers are in docs/SECURITY.md.
 */
import { spawnSync } from "node:child_process";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const root = fileURLToPath(new URL("..", import.meta.url));
const JAZZER_PLATFORMS = new Set(["linux-x64", "linux-arm64", "darwin-x64", "darwin-arm64", "win32-x64"]);
const platform = `${process.platform}-${process.arch}`;
const skip = JAZZER_PLATFORMS.has(platform) ? undefined : `Jazzer.js ships no libFuzzer binary for ${platform}`;
/**
 * Only a hung run reaches it (libFuzzer's own -timeout=10 already fails an input that hangs the
 * reader). Not vitest's 120 s default: a run is 10-30 s alone, and under CI's parallel turbo tasks on 2
 * shared cores the 1,000-input file-source run took more than 120 s in a Node 24 run of the suite
 * (2 December 2026): a vitest timeout, not a finding.
 */
const HUNG_RUN_MS = 900_000;
/**
 * libFuzzer's per-input hang limit for these runs, in seconds: an input that loops for ever still fails, but
 * one slow input on a loaded machine does not (with the default of 10, one input of a Node 24 run took longer
 * while three packages' suites shared the 2 cores, 8 December 2026: a timeout, not a finding).
 */
const INPUT_TIMEOUT_S = "120";

describe("fuzzing the GGUF reader (Jazzer.js, libFuzzer)", () => {
  it.skipIf(skip !== undefined)(
    `smoke: 3000 inputs, no crash, hang or untyped error${skip ? ` (skipped: ${skip})` : ""}`,
    () => {
      const result = spawnSync(process.execPath, [path.join(root, "fuzz", "run.mjs"), "--runs", "3000", "--timeout", INPUT_TIMEOUT_S], {
        cwd: root,
        encoding: "utf8",
        env: { ...process.env, PATH: `${path.join(root, "..", "..", "node_modules", ".bin")}${path.delimiter}${process.env.PATH}` },
      });
      expect(result.status, `${result.stdout}\n${result.stderr}`).toBe(0);
      const cases = Number(result.stdout.match(/^fuzz: (\d+) cases/m)?.[1]);
      expect(cases).toBeGreaterThanOrEqual(3000);
      expect(result.stdout).toMatch(/no finding$/m);
    },
    HUNG_RUN_MS,
  );

  it.skipIf(skip !== undefined)(
    `smoke, the chunked file path (--target file-source): 1000 inputs, fixed seed, no finding${skip ? ` (skipped: ${skip})` : ""}`,
    () => {
      const result = spawnSync(
        process.execPath,
        [path.join(root, "fuzz", "run.mjs"), "--target", "file-source", "--runs", "1000", "--seed", "1", "--timeout", INPUT_TIMEOUT_S],
        {
          cwd: root,
          encoding: "utf8",
          env: { ...process.env, PATH: `${path.join(root, "..", "..", "node_modules", ".bin")}${path.delimiter}${process.env.PATH}` },
        },
      );
      expect(result.status, `${result.stdout}\n${result.stderr}`).toBe(0);
      expect(result.stdout).toMatch(/^fuzz target: file-source$/m);
      expect(Number(result.stdout.match(/^fuzz: (\d+) cases/m)?.[1])).toBeGreaterThanOrEqual(1000);
      expect(result.stdout).toMatch(/no finding$/m);
    },
    HUNG_RUN_MS,
  );
});
