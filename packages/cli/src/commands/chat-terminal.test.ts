/**
 * `keepquant chat` on a real terminal: the CLI runs under a pseudo-terminal made by util-linux
 * `script -qfec CMD /dev/null`, and the tests type into it. Why `script` and not node-pty: node-pty
 * 1.1.0 ships prebuilt binaries for macOS and Windows only, so on Linux its install runs node-gyp (a
 * compiler, Python, and Node's headers downloaded from nodejs.org: not there offline); `script` is in
 * bsdutils, an essential package on every Debian, so it works on a fresh clone under .ci/run with
 * nothing to build. Every wait is for a marker in the output, with a timeout that only ends a hung
 * session; nothing is timed.
 */
import { type ChildProcessWithoutNullStreams, spawn, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { expectBuiltCli, CLI_BIN } from "./test-support.js";

const bin = CLI_BIN;
const scriptMissing = spawnSync("script", ["--version"], { encoding: "utf8" }).status !== 0;
const SKIP = scriptMissing ? "util-linux `script` is not on the PATH (Debian: apt-get install bsdutils)" : undefined;
/** Only a hung session reaches it. */
const HUNG = 240_000;

/** Files the CLI's redirected stdout and stderr go to. */
const scratch = mkdtempSync(path.join(tmpdir(), "kq-chat-terminal-"));

beforeAll(() => {
  expectBuiltCli();
});
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

const quote = (word: string) => `'${word.replace(/'/g, "'\\''")}'`;
const ENV = { ...process.env, KEEPQUANT_DEBUG: "", CI: "", TERM: "xterm" };

/** The terminal's text: escape sequences and carriage returns removed. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: terminal escape sequences start with ESC
const plain = (raw: string) => raw.replace(/\x1b\[[0-9;?]*[A-Za-z~]/g, "").replace(/\r/g, "");

const STATS = /stats: [^\r\n]*\r?\n/g;
/** The editor's prompt, drawn after an answer (and at the start). */
const PROMPT_DRAWN = "\x1b[J> ";

class TerminalSession {
  raw = "";
  readonly exited: Promise<number | null>;
  private readonly child: ChildProcessWithoutNullStreams;

  /** `redirect`: where the CLI's stdout (and stderr) go instead of the terminal: files. */
  constructor(args: string[], redirect: { stdout?: string; stderr?: string } = {}) {
    // a fixed window size (the pty `script` makes has none), then the CLI itself
    const redirects = `${redirect.stdout ? ` > ${quote(redirect.stdout)}` : ""}${redirect.stderr ? ` 2> ${quote(redirect.stderr)}` : ""}`;
    const command = `stty cols 100 rows 40 2>/dev/null; exec ${[process.execPath, bin, ...args].map(quote).join(" ")}${redirects}`;
    this.child = spawn("script", ["-qfec", command, "/dev/null"], { env: ENV });
    this.child.stdout.setEncoding("utf8");
    this.child.stderr.setEncoding("utf8");
    this.child.stdout.on("data", (text: string) => (this.raw += text));
    this.child.stderr.on("data", (text: string) => (this.raw += text));
    this.exited = new Promise((resolve) => this.child.on("exit", (code) => resolve(code)));
    sessions.add(this);
  }

  type(text: string): void {
    this.child.stdin.write(text);
  }

  /** Waits until `test` holds for the output (or for whatever `test` reads); fails only a hung session. */
  async until(what: string, test: (raw: string) => boolean): Promise<void> {
    const started = Date.now();
    while (!test(this.raw)) {
      if (this.child.exitCode !== null)
        throw new Error(`the session ended (exit ${this.child.exitCode}) before ${what}:\n${plain(this.raw)}`);
      if (Date.now() - started > HUNG) throw new Error(`no ${what} after ${HUNG / 1000} s:\n${plain(this.raw)}`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }

  /** Waits for the `n`th stats line and the prompt drawn after it. */
  async answered(n: number): Promise<void> {
    await this.until(n === 0 ? "the first prompt" : `answer ${n} and the prompt after it`, (raw) => {
      const stats = [...raw.matchAll(STATS)];
      return stats.length >= n && raw.indexOf(PROMPT_DRAWN, n === 0 ? 0 : stats[n - 1]!.index) >= 0;
    });
  }

  statsLines(): string[] {
    return [...plain(this.raw).matchAll(/^stats: .*$/gm)].map((m) => m[0]);
  }

  kill(): void {
    if (this.child.exitCode === null) this.child.kill("SIGKILL");
  }
}

const sessions = new Set<TerminalSession>();
afterEach(() => {
  for (const session of sessions) session.kill();
  sessions.clear();
});

/** The same conversation through a pipe (one message per line): the reference answers and stats. */
function piped(input: string, ...args: string[]) {
  const result = spawnSync(process.execPath, [bin, "chat", "--stats", ...args], {
    input,
    encoding: "utf8",
    env: { ...ENV, CI: "1" },
    maxBuffer: 64 * 1024 * 1024,
  });
  expect(result.status, result.stderr).toBe(0);
  return { stdout: result.stdout, stats: result.stderr.split("\n").filter((line) => line.startsWith("stats: ")), stderr: result.stderr };
}

/**
 * The answers a session printed, as the pipe prints them on stdout: the terminal's lines without the
 * model notice, the editor's lines (prompt "> ", continuation ". ") and the stats lines.
 */
function answersOf(session: TerminalSession): string {
  const kept = plain(session.raw)
    .split("\n")
    .filter((line) => !/^(keepquant: |> |\. |stats: )/.test(line) && line !== ">");
  return kept.join("\n");
}

describe.skipIf(SKIP !== undefined)(
  `keepquant chat on a terminal (a pty from util-linux script)${SKIP ? ` (skipped: ${SKIP})` : ""}`,
  () => {
    it("edits with the arrow keys and Home/End, recalls history with up; answers as the pipe does; Ctrl-D exits 0", async () => {
      const session = new TerminalSession(["chat", "--stats", "--max-tokens", "6"]);
      await session.answered(0);
      // "Hllo there" -> Home, Right, "e" -> "Hello there"; End, "!", "?", Backspace -> "Hello there!"
      session.type("Hllo there");
      session.type("\x1b[H");
      session.type("\x1b[C");
      session.type("e");
      session.type("\x1b[F!?\x7f");
      session.type("\r");
      await session.answered(1);
      // the previous message again: up, Enter
      session.type("\x1b[A");
      session.type("\r");
      await session.answered(2);
      session.type("\x04");
      expect(await session.exited).toBe(0);

      const reference = piped("Hello there!\nHello there!\n", "--max-tokens", "6");
      expect(session.statsLines()).toEqual(reference.stats);
      expect(reference.stats[0]).toMatch(/^stats: message 12 characters, 1 lines;/);
      expect(answersOf(session)).toBe(reference.stdout);
      // nothing of the canonical mode's echo: no ^[[D in the output
      expect(session.raw).not.toContain("^[[");
    });

    it("a 20,000-character bracketed paste is one message, all of it: answered as through the pipe, or CHAT_MESSAGE_TOO_LONG as through the pipe", async () => {
      const words = ["the", "world", "is", "a", "good", "day", "to", "be", "happy", "and", "you", "will", "find", "love"];
      let long = "";
      for (let i = 0; long.length < 20_000; i++) long += `${words[(i * 7 + (i >> 3)) % words.length]} `;
      long = `${long.slice(0, 19_999)}.`;
      expect(long.length).toBe(20_000);

      // --ctx 8192: the message (about 4,800 tokens) fits and is answered
      const session = new TerminalSession(["chat", "--stats", "--max-tokens", "6", "--ctx", "8192"]);
      await session.answered(0);
      session.type(`\x1b[200~${long}\x1b[201~`);
      session.type("\r");
      await session.answered(1);
      session.type("\x04");
      expect(await session.exited).toBe(0);
      const reference = piped(`${long}\n`, "--max-tokens", "6", "--ctx", "8192");
      expect(reference.stats).toHaveLength(1);
      expect(reference.stats[0]).toMatch(/^stats: message 20000 characters, 1 lines; prompt \d{4} tokens;/);
      expect(session.statsLines()).toEqual(reference.stats);
      // the answer follows the (wrapped) message's echo and ends at the stats line
      expect(plain(session.raw)).toContain(`\n${reference.stdout}${reference.stats[0]}\n`);

      // the model's own context (4096): too long, refused with the whole message's token count, and the session goes on
      const tooLong = new TerminalSession(["chat", "--stats", "--max-tokens", "6"]);
      await tooLong.answered(0);
      tooLong.type(`\x1b[200~${long}\x1b[201~\r`);
      await tooLong.until("the error", (raw) => /CHAT_MESSAGE_TOO_LONG[^\n]*\n/.test(raw));
      tooLong.type("\x04");
      expect(await tooLong.exited).toBe(0);
      const refused = spawnSync(process.execPath, [bin, "chat", "--max-tokens", "6"], { input: `${long}\n`, encoding: "utf8", env: ENV });
      const error = refused.stderr.split("\n").find((line) => line.startsWith("error: CHAT_MESSAGE_TOO_LONG"));
      expect(error).toMatch(/prompt of \d{4} tokens, longer than the context \(4096 tokens\)/);
      expect(plain(tooLong.raw).split("\n")).toContain(error);
    });

    it("a multi-line paste is one turn with its newlines", async () => {
      const session = new TerminalSession(["chat", "--stats", "--max-tokens", "6"]);
      await session.answered(0);
      session.type("\x1b[200~first line\rsecond line\r\nthird line\x1b[201~");
      session.type("\r");
      await session.answered(1);
      session.type("\x04");
      expect(await session.exited).toBe(0);
      const stats = session.statsLines();
      expect(stats).toHaveLength(1);
      expect(stats[0]).toMatch(/^stats: message 33 characters, 3 lines;/);
      // the screen shows the message's lines with the continuation prompt
      expect(plain(session.raw)).toContain("> first line\n. second line\n. third line\n");
    });

    it("keys typed during an answer are not echoed into it and become the next line's input; Ctrl-C stops the answer; Ctrl-C on an empty line exits 130", async () => {
      // a long answer (up to 4,000 tokens, end-of-generation ignored): it is still streaming when the keys arrive
      const session = new TerminalSession(["chat", "--stats", "--max-tokens", "4000", "--ignore-eog"]);
      await session.answered(0);
      session.type("Tell me a story\r");
      // the answer has started: output after the submitted line
      await session.until("the answer's first text", (raw) => /Tell me a story[^\n]*\n[^\n]*[A-Za-z]/.test(plain(raw)));
      session.type("Second question?");
      session.type("\x03");
      await session.answered(1);
      const first = session.statsLines()[0]!;
      expect(first).toMatch(/^stats: message 15 characters, 1 lines; prompt \d+ tokens; answer \d+ tokens \(stopped\)$/);
      const answer = Number(first.match(/answer (\d+) tokens/)![1]);
      expect(answer).toBeLessThan(4000);
      // the answer's text (up to its stats line) holds none of the keys typed meanwhile
      const text = plain(session.raw);
      const answerText = text.slice(text.indexOf("Tell me a story"), text.indexOf("stats: "));
      expect(answerText).not.toContain("Second");
      // the next prompt holds them, and Enter sends them
      await session.until(
        "the typed-ahead text at the prompt",
        (raw) => raw.lastIndexOf("> Second question?") > raw.lastIndexOf("stats: "),
      );
      // Enter and at once Ctrl-C (one read): the message is sent and its answer stopped
      session.type("\r\x03");
      await session.answered(2);
      expect(session.statsLines()[1]).toMatch(/^stats: message 16 characters, 1 lines; prompt \d+ tokens; answer \d+ tokens \(stopped\)$/);
      session.type("\x03");
      expect(await session.exited).toBe(130);
    });

    it("stdout not a terminal: a typed 6,000-character line arrives whole (no 4,095-byte canonical cut), the editor drawn on stderr", async () => {
      // typed, not pasted: no bracketed-paste marks, as a terminal without bracketed paste (or a user) sends it
      const long = typedLine(6_000);
      const answers = path.join(scratch, "answers-stdout.txt");
      const session = new TerminalSession(["chat", "--stats", "--max-tokens", "6"], { stdout: answers });
      // the prompt on the terminal: the line editor, drawn on stderr, has the terminal in raw mode
      await session.answered(0);
      session.type(long);
      session.type("\r");
      await session.answered(1);
      session.type("\x04");
      expect(await session.exited).toBe(0);

      const reference = piped(`${long}\n`, "--max-tokens", "6");
      expect(reference.stats).toEqual([expect.stringMatching(/^stats: message 6000 characters, 1 lines;/)]);
      expect(session.statsLines()).toEqual(reference.stats);
      // the answers went to stdout (the file), as through the pipe
      expect(readFileSync(answers, "utf8")).toBe(reference.stdout);
    });

    it("stdout and stderr not terminals: the editor draws on the controlling terminal (/dev/tty), a long typed line arrives whole", async () => {
      const long = typedLine(6_000);
      const answers = path.join(scratch, "answers-both.txt");
      const log = path.join(scratch, "log-both.txt");
      const session = new TerminalSession(["chat", "--stats", "--max-tokens", "6"], { stdout: answers, stderr: log });
      const statsLines = () =>
        existsSync(log)
          ? readFileSync(log, "utf8")
              .split("\n")
              .filter((line) => line.startsWith("stats: "))
          : [];
      await session.until("the editor's prompt on /dev/tty", (raw) => raw.includes(PROMPT_DRAWN));
      session.type(long);
      session.type("\r");
      await session.until("the stats line in the log", () => statsLines().length === 1);
      // the editor's echo of the whole line on the terminal
      expect(plain(session.raw).replace(/\n/g, "")).toContain(long);
      session.type("\x04");
      expect(await session.exited).toBe(0);

      const reference = piped(`${long}\n`, "--max-tokens", "6");
      expect(statsLines()).toEqual(reference.stats);
      expect(reference.stats[0]).toMatch(/^stats: message 6000 characters, 1 lines;/);
      expect(readFileSync(answers, "utf8")).toBe(reference.stdout);
    });
  },
);

/** `length` characters of words and spaces ending with ".", as a person types them (no control characters). */
function typedLine(length: number): string {
  const words = ["a", "quiet", "river", "runs", "past", "the", "old", "mill", "and", "sings", "to", "everyone"];
  let text = "";
  for (let i = 0; text.length < length; i++) text += `${words[(i * 5 + (i >> 2)) % words.length]} `;
  return `${text.slice(0, length - 1)}.`;
}
