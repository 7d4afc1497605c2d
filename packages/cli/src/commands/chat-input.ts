/**
 * Where `keepquant chat` reads its messages: the line editor on a terminal, lines otherwise.
 */
import readline from "node:readline";
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
 * Lines from a pipe or a file (no limit on a line's length; Ctrl-C is SIGINT: it stops an answer, and
 * ends the session with 130 between answers).
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

  constructor(streams: TerminalStreams) {
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
  }
}

function isTerminal(stream: unknown): boolean {
  return (stream as { isTTY?: boolean }).isTTY === true;
}

/** The line editor when stdin and stdout are both a terminal, else lines (a pipe, a file, output redirected). */
export function openChatInput(stdin: NodeJS.ReadableStream, stdout: NodeJS.WritableStream): ChatInput {
  if (isTerminal(stdin) && isTerminal(stdout)) {
    return new TerminalInput({ input: stdin as TerminalStreams["input"], output: stdout as TerminalStreams["output"] });
  }
  return new PipedInput(stdin);
}

/** Whether `openChatInput` would use the line editor (the prompt is then the editor's). */
export function chatInputIsTerminal(stdin: NodeJS.ReadableStream, stdout: NodeJS.WritableStream): boolean {
  return isTerminal(stdin) && isTerminal(stdout);
}
