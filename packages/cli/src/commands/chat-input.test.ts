/**
 * Which reader `keepquant chat` uses: the line editor (raw mode: no canonical-mode cut of a long line)
 * whenever stdin is a terminal, drawn on the first terminal among stdout, stderr and the controlling
 * terminal. The real terminals are in chat-terminal.test.ts; here the streams are fakes.
 */
import { EventEmitter } from "node:events";
import { PassThrough } from "node:stream";
import { describe, expect, it } from "vitest";
import { chatInputIsTerminal, editorOutput, openChatInput } from "./chat-input.js";
import { rawModeInput } from "./test-support.js";

/** A fake terminal input: raw mode recorded, keys pushed by the test. */
function terminalInput() {
  return Object.assign(rawModeInput(), { isTTY: true });
}

/** A fake terminal output that keeps what is written. */
function terminalOutput() {
  const output = Object.assign(new EventEmitter(), {
    isTTY: true,
    columns: 100,
    written: "",
    write(chunk: string) {
      output.written += chunk;
      return true;
    },
  });
  return output;
}

/** A pipe or a file: not a terminal; keeps what is written. */
function fileOutput() {
  let written = "";
  const stream = new PassThrough();
  stream.on("data", (chunk: Buffer) => (written += chunk.toString()));
  return { stream, written: () => written };
}

describe("openChatInput", () => {
  it("stdin a terminal, stdout a file: the line editor in raw mode, drawn on stderr; a 6,000-character typed line arrives whole", async () => {
    const stdin = terminalInput();
    const stdout = fileOutput();
    const stderr = terminalOutput();
    const input = openChatInput(stdin as unknown as NodeJS.ReadableStream, {
      stdout: stdout.stream,
      stderr: stderr as unknown as NodeJS.WritableStream,
      openControllingTerminal: () => {
        throw new Error("stderr is a terminal: /dev/tty is not needed");
      },
    });
    try {
      expect(chatInputIsTerminal(stdin as unknown as NodeJS.ReadableStream)).toBe(true);
      expect(stdin.isRaw).toBe(true);
      const line = "x".repeat(6000);
      const read = input.read();
      // as a terminal delivers it: in reads of at most 4,095 bytes
      for (let i = 0; i < line.length; i += 4095) stdin.emit("data", Buffer.from(line.slice(i, i + 4095)));
      stdin.emit("data", Buffer.from("\r"));
      expect(await read).toEqual({ kind: "line", text: line });
      expect(stderr.written).toContain("> x");
      expect(stdout.written()).toBe("");
    } finally {
      input.close();
    }
    expect(stdin.isRaw).toBe(false);
  });

  it("stdin not a terminal: lines, whatever the outputs are", async () => {
    const stdin = new PassThrough();
    const stdout = terminalOutput();
    expect(chatInputIsTerminal(stdin)).toBe(false);
    const input = openChatInput(stdin, { stdout: stdout as unknown as NodeJS.WritableStream, stderr: fileOutput().stream });
    try {
      stdin.end("first\nsecond\n");
      expect(await input.read()).toEqual({ kind: "line", text: "first" });
      expect(await input.read()).toEqual({ kind: "line", text: "second" });
      expect(await input.read()).toEqual({ kind: "eof" });
      expect(stdout.written).toBe("");
    } finally {
      input.close();
    }
  });
});

describe("editorOutput", () => {
  it("stdout first, then stderr, then the controlling terminal, then nowhere (80 columns, writes dropped)", () => {
    const terminal = terminalOutput();
    const file = fileOutput().stream;
    const asStream = (stream: unknown) => stream as NodeJS.WritableStream;
    const controlling = terminalOutput();
    let opened = 0;
    const openControllingTerminal = () => {
      opened++;
      return { output: asStream(controlling) as never, release: () => {} };
    };
    expect(editorOutput({ stdout: asStream(terminal), stderr: file, openControllingTerminal }).output).toBe(terminal);
    expect(editorOutput({ stdout: file, stderr: asStream(terminal), openControllingTerminal }).output).toBe(terminal);
    expect(opened).toBe(0);
    expect(editorOutput({ stdout: file, stderr: file, openControllingTerminal }).output).toBe(controlling);
    expect(opened).toBe(1);
    const none = editorOutput({ stdout: file, stderr: file, openControllingTerminal: () => undefined });
    expect(none.output.columns).toBe(80);
    expect(none.output.write("dropped")).toBe(true);
    none.release();
  });
});
