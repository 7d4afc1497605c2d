/**
 * Where `keepquant chat` reads its messages: the line editor when stdin is a terminal (whatever stdout
 * is), lines otherwise. The editor is the only reader of a terminal: it puts the terminal in raw mode, so
 * no line is cut by the kernel's canonical mode (a canonical line holds 4,095 bytes, N_TTY_BUF_SIZE less
 * its newline). Reading a terminal with readline would keep that limit whenever stdout is not a terminal
 * too (`keepquant chat | tee log`): readline only goes raw when its output is one.
 */
import fs from "node:fs";
import readline from "node:readline";
import { Writable } from "node:stream";
import tty from "node:tty";
import { TerminalLineInput, type LineInputResult, type TerminalStreams } from "./chat-line-editor.js";

export interface ChatInput {
  /** The next message; `eof` ends the session, `interrupt` (Ctrl-C on an empty line) ends it with 130. */
  read(): Promise<LineInputResult>;
  /** Called on Ctrl-C while an answer streams (between two reads). */
  onInterrupt: () => void;
  /** Called when a message grows beyond what the editor holds (terminal only). */
  onTooLong: (characters: number) => void;
  close(): void;
}

/**
 * Lines from a pipe or a file, never a terminal (no limit on a line's length; Ctrl-C is SIGINT: it stops
 * an answer, and ends the session with 130 between answers).
 */
class PipedInput implements ChatInput {
  private readonly lines: AsyncIterator<string>;
  private readonly rl: readline.Interface;
  private busy = false;
  onInterrupt: () => void = () => {};
  onTooLong: (characters: number) => void = () => {};
  private readonly onSigint = (): void => {
    if (this.busy) this.onInterrupt();
    else process.exit(130);
  };

  constructor(input: NodeJS.ReadableStream) {
    this.rl = readline.createInterface({ input, terminal: false });
    this.lines = this.rl[Symbol.asyncIterator]();
    process.on("SIGINT", this.onSigint);
  }

  async read(): Promise<LineInputResult> {
    this.busy = false;
    const next = await this.lines.next();
    this.busy = true;
    return next.done ? { kind: "eof" } : { kind: "line", text: next.value };
  }

  close(): void {
    process.removeListener("SIGINT", this.onSigint);
    this.rl.close();
  }
}

class TerminalInput implements ChatInput {
  private readonly terminal: TerminalLineInput;
  private readonly restore = (): void => this.terminal.close();
  /** A SIGINT from outside (kill -INT; Ctrl-C itself is a key in raw mode) acts as Ctrl-C on an empty line. */
  private readonly onSigint = (): void => {
    if (this.terminal.editing) process.exit(130);
    else this.terminal.onInterrupt();
  };

  constructor(
    streams: TerminalStreams,
    private readonly releaseOutput: () => void,
  ) {
    this.terminal = new TerminalLineInput(streams);
    // the terminal goes back to cooked mode however the process exits
    process.on("exit", this.restore);
    process.on("SIGINT", this.onSigint);
  }

  get onInterrupt(): () => void {
    return this.terminal.onInterrupt;
  }
  set onInterrupt(handler: () => void) {
    this.terminal.onInterrupt = handler;
  }
  get onTooLong(): (characters: number) => void {
    return this.terminal.onTooLong;
  }
  set onTooLong(handler: (characters: number) => void) {
    this.terminal.onTooLong = handler;
  }

  read(): Promise<LineInputResult> {
    return this.terminal.read();
  }

  close(): void {
    process.removeListener("exit", this.restore);
    process.removeListener("SIGINT", this.onSigint);
    this.terminal.close();
    this.releaseOutput();
  }
}

function isTerminal(stream: unknown): boolean {
  return (stream as { isTTY?: boolean }).isTTY === true;
}

/** Where the line editor draws, and what to close after it. */
export interface EditorOutput {
  output: TerminalStreams["output"];
  release: () => void;
}

/** The controlling terminal (/dev/tty) for writing, or undefined when the process has none (setsid, a daemon). */
function openControllingTerminal(): EditorOutput | undefined {
  let fd: number;
  try {
    fd = fs.openSync("/dev/tty", "w");
  } catch {
    return undefined;
  }
  if (!tty.isatty(fd)) {
    fs.closeSync(fd);
    return undefined;
  }
  const stream = new tty.WriteStream(fd);
  // Node refreshes the size of stdout and stderr on SIGWINCH, not of a stream opened here
  const onResize = (): void => {
    stream.columns = stream.getWindowSize()[0];
    stream.emit("resize");
  };
  process.on("SIGWINCH", onResize);
  return {
    output: stream,
    release: () => {
      process.removeListener("SIGWINCH", onResize);
      stream.destroy();
    },
  };
}

/** A terminal without one to draw on: typing is not echoed, but every line arrives whole. */
function nowhere(): EditorOutput {
  const output = Object.assign(new Writable({ write: (_chunk, _encoding, done) => done() }), { columns: 80 });
  return { output, release: () => output.destroy() };
}

/** The streams chat writes to. */
export interface ChatOutputs {
  stdout: NodeJS.WritableStream;
  stderr: NodeJS.WritableStream;
  /** Opens the controlling terminal for writing (default: /dev/tty); undefined when there is none. */
  openControllingTerminal?: () => EditorOutput | undefined;
}

/**
 * The terminal the line editor draws on when stdin is a terminal: stdout when it is one, else stderr
 * (`keepquant chat > answers.txt`), else the controlling terminal (`keepquant chat > out 2> log`), else none.
 */
export function editorOutput(outputs: ChatOutputs): EditorOutput {
  for (const stream of [outputs.stdout, outputs.stderr]) {
    if (isTerminal(stream)) return { output: stream as TerminalStreams["output"], release: () => {} };
  }
  return (outputs.openControllingTerminal ?? openControllingTerminal)() ?? nowhere();
}

/** The line editor when stdin is a terminal (drawn where `editorOutput` says), else lines. */
export function openChatInput(stdin: NodeJS.ReadableStream, outputs: ChatOutputs): ChatInput {
  if (chatInputIsTerminal(stdin)) {
    const { output, release } = editorOutput(outputs);
    return new TerminalInput({ input: stdin as TerminalStreams["input"], output }, release);
  }
  return new PipedInput(stdin);
}

/** Whether `openChatInput` uses the line editor (the prompt is then the editor's). */
export function chatInputIsTerminal(stdin: NodeJS.ReadableStream): boolean {
  return isTerminal(stdin);
}
