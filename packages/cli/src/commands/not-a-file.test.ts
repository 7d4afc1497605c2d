/**
 * A model path that leads to no regular file: every command that takes a model file gives the same
 * error line (from a stat before any open) and exits 1; parity alone skips (77) a model where nothing is.
 *
 * - a directory or a FIFO: gguf's GGUF_NOT_A_FILE. Opening a FIFO blocks until a writer appears, so a
 *   regression hangs: the spawn timeout is only a guard that turns a hang into a failure (the assertions
 *   are on the output, never on timing);
 * - a loop of symbolic links: MODEL_SYMLINK_LOOP (it was MODEL_NOT_FOUND in run/serve/chat, GGUF_IO in inspect);
 * - nothing there, a dangling link, a path through a file: MODEL_NOT_FOUND (inspect said GGUF_IO);
 * - a file this user cannot read, a directory on the path it cannot search: MODEL_PERMISSION_DENIED. As
 *   root (who reads everything) the command runs as the user nobody.
 */
import { spawnSync } from "node:child_process";
import { chmodSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { expectBuiltCli, CLI_BIN } from "./test-support.js";

const bin = CLI_BIN;
const goldens = fileURLToPath(new URL("../../../../goldens/parity", import.meta.url));
const scratch = mkdtempSync(path.join(tmpdir(), "kq-not-a-file-"));
const directory = path.join(scratch, "a-directory.gguf");
const fifo = path.join(scratch, "a-fifo.gguf");
/** loop-a.gguf -> loop-b.gguf -> loop-a.gguf */
const loop = path.join(scratch, "loop-a.gguf");
const dangling = path.join(scratch, "dangling.gguf");
const missing = path.join(scratch, "missing.gguf");
const throughAFile = path.join(scratch, "a-file", "model.gguf");
/** Relative to the scratch folder, where the permission cases run. */
const unreadable = "unreadable.gguf";
const locked = path.join(scratch, "locked");
const inLocked = path.join("locked", "model.gguf");
/** The user that runs the permission cases: nobody when this is root (root reads every file), else this user. */
const NOBODY = 65534;
const asRoot = process.getuid?.() === 0;
const canDropToNobody = asRoot && spawnSync(process.execPath, ["-e", ""], { uid: NOBODY, gid: NOBODY, stdio: "ignore" }).status === 0;
const PERMISSION_SKIP = asRoot && !canDropToNobody ? "root cannot run a command as the user nobody here" : undefined;
/** A guard only: a command that blocks on the FIFO is killed and the test fails on its output. */
const HANG_GUARD_MS = 60_000;

beforeAll(() => {
  expectBuiltCli();
  mkdirSync(directory);
  const made = spawnSync("mkfifo", [fifo], { encoding: "utf8" });
  if (made.status !== 0) throw new Error(`mkfifo ${fifo} failed: ${made.stderr}`);
  symlinkSync("loop-b.gguf", loop);
  symlinkSync("loop-a.gguf", path.join(scratch, "loop-b.gguf"));
  symlinkSync("no-such-target.gguf", dangling);
  writeFileSync(path.join(scratch, "a-file"), "");
  writeFileSync(path.join(scratch, unreadable), "GGUF");
  chmodSync(path.join(scratch, unreadable), 0o000);
  mkdirSync(locked);
  writeFileSync(path.join(scratch, inLocked), "GGUF");
  chmodSync(locked, 0o000);
  // the user nobody looks into it (the permission cases run in it)
  chmodSync(scratch, 0o755);
});
afterAll(() => {
  chmodSync(locked, 0o700);
  rmSync(scratch, { recursive: true, force: true });
});

/**
 * `asNobody`: as the user nobody when this is root, in the scratch folder (it is entered before the user
 * changes, so the permission cases name paths relative to it: the temp folders above it stay private).
 */
function run(args: string[], options: { asNobody?: boolean } = {}) {
  const result = spawnSync(process.execPath, [bin, ...args], {
    ...(options.asNobody ? { cwd: scratch, ...(asRoot ? { uid: NOBODY, gid: NOBODY } : {}) } : {}),
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

describe("a model path that leads to no file: the same error line in every command", () => {
  const LOOP_LINE = `error: MODEL_SYMLINK_LOOP: ${loop} is a loop of symbolic links (ELOOP): following them never reaches a file (or takes more links than the system follows)`;
  for (const [name, args] of COMMANDS) {
    it(`${name} on a loop of symbolic links: MODEL_SYMLINK_LOOP naming the path, exit 1`, () => {
      const r = run(args(loop));
      expect(r.stderr.trimEnd().split("\n"), r.stderr).toEqual([LOOP_LINE]);
      expect(r.stdout).toBe("");
      expect(r.code).toBe(1);
    });
  }

  it("--json carries the loop's code, with the path as the field", () => {
    const r = run(["inspect", loop, "--json"]);
    expect(JSON.parse(r.stdout).error).toEqual({
      code: "MODEL_SYMLINK_LOOP",
      message: LOOP_LINE.slice("error: MODEL_SYMLINK_LOOP: ".length),
      offset: null,
      field: loop,
    });
  });

  for (const [name, args] of COMMANDS) {
    it(`${name} where nothing is: MODEL_NOT_FOUND (parity: SKIP, 77)`, () => {
      const r = run(args(missing));
      if (name === "parity") {
        expect(r.stdout).toBe(`SKIP: model file not found: ${missing}\n`);
        expect(r.code).toBe(77);
        return;
      }
      expect(r.stderr.trimEnd().split("\n"), r.stderr).toEqual([`error: MODEL_NOT_FOUND: model file not found: ${missing}`]);
      expect(r.code).toBe(1);
    });
  }

  for (const [name, args] of COMMANDS.filter(([name]) => name === "inspect" || name === "run")) {
    it(`${name} on a dangling link or a path through a file: MODEL_NOT_FOUND saying why`, () => {
      const link = run(args(dangling));
      expect(link.stderr.trimEnd().split("\n")).toEqual([
        `error: MODEL_NOT_FOUND: model file not found: ${dangling} (a symbolic link to no-such-target.gguf, which does not exist)`,
      ]);
      expect(link.code).toBe(1);
      const notDirectory = run(args(throughAFile));
      expect(notDirectory.stderr.trimEnd().split("\n")).toEqual([
        `error: MODEL_NOT_FOUND: model file not found: ${throughAFile} (a part of the path before the file name is not a directory)`,
      ]);
      expect(notDirectory.code).toBe(1);
    });
  }

  describe.skipIf(PERMISSION_SKIP !== undefined)(`permissions${PERMISSION_SKIP ? ` (skipped: ${PERMISSION_SKIP})` : ""}`, () => {
    for (const [name, args] of COMMANDS) {
      it(`${name} on a file it cannot read, and in a directory it cannot search: MODEL_PERMISSION_DENIED, exit 1`, () => {
        const file = run(args(unreadable), { asNobody: true });
        expect(file.stderr.trimEnd().split("\n"), file.stderr).toEqual([
          `error: MODEL_PERMISSION_DENIED: ${unreadable}: permission denied (EACCES): this user cannot read the file`,
        ]);
        expect(file.code).toBe(1);
        const directory = run(args(inLocked), { asNobody: true });
        expect(directory.stderr.trimEnd().split("\n"), directory.stderr).toEqual([
          `error: MODEL_PERMISSION_DENIED: ${inLocked}: permission denied (EACCES): this user cannot search a directory on the path`,
        ]);
        expect(directory.code).toBe(1);
      });
    }
  });
});
