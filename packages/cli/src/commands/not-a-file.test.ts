/**
 * A model path that is a directory or a FIFO: every command that takes a model file gives the
 * same error line (gguf's GGUF_NOT_A_FILE, from a stat before any open) and exits 1. Opening a
 * FIFO blocks until a writer appears, so a regression hangs: the spawn timeout is only a guard that
 * turns a hang into a failure (the assertions are on the output, never on timing).
 */
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const bin = fileURLToPath(new URL("../../dist/keepquant.js", import.meta.url));
const goldens = fileURLToPath(new URL("../../../../goldens/parity", import.meta.url));
const scratch = mkdtempSync(path.join(tmpdir(), "kq-not-a-file-"));
const directory = path.join(scratch, "a-directory.gguf");
const fifo = path.join(scratch, "a-fifo.gguf");
/** A guard only: a command that blocks on the FIFO is killed and the test fails on its output. */
const HANG_GUARD_MS = 60_000;

beforeAll(() => {
  if (!existsSync(bin)) throw new Error(`${bin} is missing: run \`pnpm --filter @keepquant/cli build\` first`);
  mkdirSync(directory);
  const made = spawnSync("mkfifo", [fifo], { encoding: "utf8" });
  if (made.status !== 0) throw new Error(`mkfifo ${fifo} failed: ${made.stderr}`);
});
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

function run(args: string[]) {
  const result = spawnSync(process.execPath, [bin, ...args], {
    encoding: "utf8",
    env: { ...process.env, KEEPQUANT_DEBUG: "", CI: "1" },
    stdio: ["ignore", "pipe", "pipe"],
    timeout: HANG_GUARD_MS,
    killSignal: "SIGKILL",
  });
  return { code: result.status, signal: result.signal, stdout: result.stdout, stderr: result.stderr };
}

const COMMANDS: [string, (model: string) => string[]][] = [
  ["inspect", (model) => ["inspect", model]],
  ["plan", (model) => ["plan", model]],
  ["run", (model) => ["run", model, "--prompt", "hi", "--max-tokens", "1"]],
  ["chat", (model) => ["chat", model]],
  ["bench", (model) => ["bench", model, "--repeat", "1"]],
  ["serve", (model) => ["serve", model, "--port", "0"]],
  ["parity", (model) => ["parity", model, "--goldens", goldens]],
];

describe("a model path that is not a regular file", () => {
  for (const [kind, file, what] of [
    ["a directory", directory, "a directory"],
    ["a FIFO", fifo, "a FIFO (named pipe)"],
  ] as const) {
    for (const [name, args] of COMMANDS) {
      it(`${name} on ${kind}: error: GGUF_NOT_A_FILE naming the path, exit 1, nothing hangs`, () => {
        const r = run(args(file));
        expect(r.signal, `${name} did not finish (killed by the guard): ${r.stderr}`).toBeNull();
        expect(r.stderr.trimEnd().split("\n"), r.stderr).toEqual([`error: GGUF_NOT_A_FILE: ${file} is ${what}, not a regular file`]);
        expect(r.code).toBe(1);
      });
    }
  }

  it("--json carries the same code, with the path as the field", () => {
    const r = run(["inspect", fifo, "--json"]);
    expect(r.signal).toBeNull();
    expect(JSON.parse(r.stdout).error).toEqual({
      code: "GGUF_NOT_A_FILE",
      message: `${fifo} is a FIFO (named pipe), not a regular file`,
      offset: null,
      field: fifo,
    });
  });
});
