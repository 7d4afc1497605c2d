/** Test support of the commands (not exported from the package). */
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { EventEmitter } from "node:events";
import { existsSync } from "node:fs";
import { Writable } from "node:stream";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, expect } from "vitest";
import type { CommandIo } from "../command.js";
import { runCli } from "../main.js";

/** The built CLI (`pnpm --filter @keepquant/cli build`), for tests that spawn it. */
export const CLI_BIN = fileURLToPath(new URL("../../dist/keepquant.js", import.meta.url));

/** Spawns `node CLI_BIN <args>` with `env`, `input` on its stdin; returns the exit code and what it printed. */
export function spawnCli(
  args: readonly string[],
  env: NodeJS.ProcessEnv,
  input = "",
): { code: number | null; stdout: string; stderr: string } {
  const result = spawnSync(process.execPath, [CLI_BIN, ...args], { input, encoding: "utf8", env });
  return { code: result.status, stdout: result.stdout, stderr: result.stderr };
}

/**
 * `keepquant run`'s flags for a greedy run the way llama.cpp's goldens are made (F32 K/V, flash attention
 * off, no stop at end of generation), with the JSON document out.
 */
export const GOLDEN_RUN_FLAGS: readonly string[] = ["--kv-type", "f32", "--flash-attn", "off", "--ignore-eog", "--json"];

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

/** A spawned `keepquant serve` once it said ready: its URL, its stderr so far (a function: it grows) and its exit. */
export interface ServeProcess {
  child: ChildProcess;
  url: string;
  stderr: () => string;
  exit: Promise<number | null>;
}

/**
 * Spawns `node <bin> <args>` (a `serve ... --port 0` command line) with `env` and resolves once it prints its
 * URL and `ready:`; rejects with its stderr when it exits first.
 */
export function spawnServe(bin: string, args: readonly string[], env: NodeJS.ProcessEnv): Promise<ServeProcess> {
  const child = spawn(process.execPath, [bin, ...args], { env, stdio: ["ignore", "pipe", "pipe"] });
  let stderr = "";
  const exit = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
  return new Promise((resolve, reject) => {
    child.stderr.on("data", (chunk: Buffer) => {
      stderr += chunk.toString();
      const port = /listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(stderr)?.[1];
      if (port && stderr.includes("ready:")) resolve({ child, url: `http://127.0.0.1:${port}`, stderr: () => stderr, exit });
    });
    void exit.then((code) => reject(new Error(`serve exited with ${code}: ${stderr}`)));
  });
}

/** A `keepquant serve` child of a describe block: its URL and a greedy completion. */
export interface ServedCli {
  url(): string;
  /** POST /v1/completions at temperature 0 (the answer must be a 200); the completion's text */
  complete(prompt: string, maxTokens?: number, signal?: AbortSignal): Promise<string>;
}

/**
 * In the enclosing `describe`: spawns `keepquant serve <model()> --port 0 --threads 1 --max-seqs 4 --no-webui`
 * with `env` from its `beforeAll` (`model` is read then, after the file's own `beforeAll`) and kills it
 * in its `afterAll`.
 */
export function serveInDescribe(model: () => string, env: NodeJS.ProcessEnv): ServedCli {
  let child: ChildProcess | undefined;
  let url = "";
  beforeAll(async () => {
    const started = await spawnServe(CLI_BIN, ["serve", model(), "--port", "0", "--threads", "1", "--max-seqs", "4", "--no-webui"], env);
    child = started.child;
    url = started.url;
  });
  afterAll(() => {
    child?.kill("SIGKILL");
  });
  return {
    url: () => url,
    async complete(prompt, maxTokens = 12, signal) {
      const response = await fetch(`${url}/v1/completions`, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ prompt, max_tokens: maxTokens, temperature: 0 }),
        ...(signal ? { signal } : {}),
      });
      expect(response.status).toBe(200);
      return ((await response.json()) as { choices: { text: string }[] }).choices[0]!.text;
    },
  };
}

/** Throws unless the CLI is built (the tests that spawn it run `dist`). */
export function expectBuiltCli(): void {
  if (!existsSync(CLI_BIN)) throw new Error(`${CLI_BIN} is missing: run \`pnpm --filter @keepquant/cli build\` first`);
}
