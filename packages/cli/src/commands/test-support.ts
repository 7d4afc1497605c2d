/** Test support of the commands (not exported from the package). */
import { EventEmitter } from "node:events";
import { Writable } from "node:stream";
import type { CommandIo } from "../command.js";
import { runCli } from "../main.js";

/** Runs the CLI in this process, not interactive, with `env`; returns the exit code and what it printed. */
export async function runCliCollecting(
  args: string[],
  env: NodeJS.ProcessEnv = {},
): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = "";
  let stderr = "";
  const sink = (append: (text: string) => void) =>
    new Writable({
      write(chunk: Buffer, _encoding, done) {
        append(chunk.toString());
        done();
      },
    });
  const io: CommandIo = {
    stdout: sink((text) => (stdout += text)),
    stderr: sink((text) => (stderr += text)),
    env,
    interactive: false,
  };
  const code = await runCli(args, io);
  return { code, stdout, stderr };
}

/** A fake terminal's input: raw mode recorded in `isRaw`; the test pushes input with `emit("data", ...)`. */
export function rawModeInput() {
  const input = Object.assign(new EventEmitter(), {
    isRaw: false,
    setRawMode(mode: boolean) {
      input.isRaw = mode;
      return input;
    },
    resume: () => input,
    pause: () => input,
  });
  return input;
}
