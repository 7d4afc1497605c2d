import { EventEmitter } from "node:events";
import { describe, expect, it } from "vitest";
import {
  type EditKey,
  type EditOutcome,
  KeyDecoder,
  LineEditor,
  type LineInputResult,
  MAX_EDIT_CHARACTERS,
  renderEdit,
  TerminalLineInput,
  type TerminalStreams,
} from "./chat-line-editor.js";
import { rawModeInput } from "./test-support.js";

/** Types `input` into a fresh editor, one read; returns the editor and what ended the edit. */
function typed(input: string | string[]) {
  const decoder = new KeyDecoder();
  const editor = new LineEditor();
  const outcomes: NonNullable<EditOutcome>[] = [];
  for (const chunk of Array.isArray(input) ? input : [input]) {
    const keys = decoder.feed(chunk);
    keys.forEach((key, i) => {
      const outcome = editor.apply(
        key,
        keys.slice(i + 1).some((k) => k.kind === "text" || k.kind === "paste"),
      );
      if (outcome) outcomes.push(outcome);
    });
  }
  return { editor, outcomes, text: editor.text };
}

describe("KeyDecoder", () => {
  it("turns cursor keys, controls and text into keys, CSI and SS3 alike", () => {
    const keys = new KeyDecoder().feed("ab\x1b[D\x1bOC\x1b[3~\x1b[1;5D\x01\x05\x7f\r");
    expect(keys.map((k) => (k.kind === "text" ? `text:${k.text}` : k.kind))).toEqual([
      "text:ab",
      "left",
      "right",
      "delete",
      "word-left",
      "home",
      "end",
      "backspace",
      "enter",
    ]);
  });

  it("completes an escape sequence and a UTF-16 pair split across reads; drops unknown sequences", () => {
    const decoder = new KeyDecoder();
    expect(decoder.feed("x\x1b[")).toEqual([{ kind: "text", text: "x" }]);
    expect(decoder.feed("A")).toEqual([{ kind: "up" }]);
    expect(decoder.feed("\x1b")).toEqual([]);
    expect(decoder.feed("[B")).toEqual([{ kind: "down" }]);
    expect(decoder.feed("\x1b[15~y")).toEqual([{ kind: "text", text: "y" }]); // F5: not a key of ours, not text either
  });

  it("a bracketed paste is one key with its newlines (CR, CR LF -> LF), however the reads split it, markers included", () => {
    const whole = "\x1b[200~line one\rline two\r\nline three\x1b[201~";
    for (let split = 1; split < whole.length; split++) {
      const decoder = new KeyDecoder();
      const keys = [...decoder.feed(whole.slice(0, split)), ...decoder.feed(whole.slice(split))];
      expect(keys, `split at ${split}`).toEqual([{ kind: "paste", text: "line one\nline two\nline three" }]);
    }
    // control keys inside a paste are text, not editing
    expect(new KeyDecoder().feed("\x1b[200~a\x03b\x1b[Dc\x1b[201~")).toEqual([{ kind: "paste", text: "a\x03b\x1b[Dc" }]);
  });

  it("a paste beyond MAX_EDIT_CHARACTERS comes out as its length, not a cut text", () => {
    const decoder = new KeyDecoder();
    const keys: EditKey[] = [...decoder.feed("\x1b[200~")];
    const block = "x".repeat(65_536);
    for (let i = 0; i < MAX_EDIT_CHARACTERS / block.length + 1; i++) keys.push(...decoder.feed(block));
    keys.push(...decoder.feed("\x1b[201~"));
    expect(keys).toEqual([{ kind: "paste", text: "", overflow: MAX_EDIT_CHARACTERS + block.length }]);
  });
});

describe("LineEditor", () => {
  it("edits with the cursor keys: insert in the middle, Home/End, backspace, delete, word and line kills", () => {
    expect(typed("Hllo there\x1b[H\x1b[Ce\r").outcomes).toEqual([{ kind: "submit", text: "Hello there" }]);
    expect(typed("Hello there!!\x7f\x1b[D\x1b[D\x1b[3~\r").outcomes).toEqual([{ kind: "submit", text: "Hello ther!" }]);
    expect(typed("one two three\x17\x17four\r").outcomes).toEqual([{ kind: "submit", text: "one four" }]);
    expect(typed("keep\x01\x0bnew\x05!\x15again\r").outcomes).toEqual([{ kind: "submit", text: "again" }]);
  });

  it("history: up recalls earlier messages, down returns to the line being written", () => {
    const decoder = new KeyDecoder();
    const editor = new LineEditor();
    const submit = (input: string) => {
      let result: unknown;
      for (const key of decoder.feed(input)) result = editor.apply(key) ?? result;
      editor.reset();
      return result;
    };
    submit("first\r");
    submit("second\r");
    expect(submit("\x1b[A\r")).toEqual({ kind: "submit", text: "second" });
    expect(submit("\x1b[A\x1b[A\x1b[A\r")).toEqual({ kind: "submit", text: "first" });
    expect(submit("draft\x1b[A\x1b[A\x1b[B\x1b[B\r")).toEqual({ kind: "submit", text: "draft" });
    // a message repeated right after itself is kept once: history is first, second, first, draft
    expect(submit("\x1b[A\x1b[A\x1b[A\x1b[A\r")).toEqual({ kind: "submit", text: "first" });
  });

  it("a paste with newlines stays one message; Enter inside it or in the same read before more text is a newline", () => {
    expect(typed("\x1b[200~a\nb\x1b[201~\r").outcomes).toEqual([{ kind: "submit", text: "a\nb" }]);
    // a terminal without bracketed paste: the lines arrive in one read
    expect(typed("a\rb\r").outcomes).toEqual([{ kind: "submit", text: "a\nb" }]);
    // typed one key per read: each Enter submits
    expect(typed(["a", "\r", "b", "\r"]).outcomes).toEqual([
      { kind: "submit", text: "a" },
      { kind: "submit", text: "ab" },
    ]);
    // up and down move between the lines of a multi-line text before reaching history
    expect(typed("\x1b[200~abc\ndef\x1b[201~\x1b[AX\r").outcomes).toEqual([{ kind: "submit", text: "abcX\ndef" }]);
  });

  it("Ctrl-D ends on an empty line and deletes elsewhere; Ctrl-C interrupts; too much text is refused whole", () => {
    expect(typed("\x04").outcomes).toEqual([{ kind: "eof" }]);
    expect(typed("ab\x1b[D\x04\r").outcomes).toEqual([{ kind: "submit", text: "a" }]);
    expect(typed("ab\x03").outcomes).toEqual([{ kind: "interrupt" }]);
    const editor = new LineEditor();
    editor.apply({ kind: "text", text: "abc" });
    expect(editor.apply({ kind: "paste", text: "x".repeat(MAX_EDIT_CHARACTERS) })).toEqual({
      kind: "too-long",
      characters: MAX_EDIT_CHARACTERS + 3,
    });
    expect(editor.text).toBe("abc");
  });
});

describe("renderEdit", () => {
  /** What a terminal of `columns` shows after the output: rows of text and the cursor (a tiny VT model). */
  function screen(output: string, columns: number) {
    const rows: string[][] = [[]];
    let row = 0;
    let column = 0;
    for (let i = 0; i < output.length; i++) {
      const rest = output.slice(i);
      // biome-ignore lint/suspicious/noControlCharactersInRegex: terminal escape sequences start with ESC
      const csi = /^\x1b\[(\d*)([A-Za-z])/.exec(rest);
      if (csi) {
        const n = Number(csi[1] || "1");
        if (csi[2] === "A") row = Math.max(0, row - n);
        if (csi[2] === "C") column = Math.min(columns - 1, column + n);
        if (csi[2] === "J") {
          rows[row]!.length = column;
          rows.length = row + 1;
        }
        i += csi[0].length - 1;
        continue;
      }
      const c = output[i]!;
      if (c === "\r") column = 0;
      else if (c === "\n") {
        row++;
        rows[row] ??= [];
      } else {
        if (column >= columns) throw new Error(`wrote past column ${columns} (the renderer wraps itself)`);
        rows[row]![column++] = c;
      }
    }
    return { rows: rows.map((r) => Array.from(r, (c) => c ?? " ").join("")), row, column };
  }

  it("wraps long text at the terminal's width, continues lines after a newline and puts the cursor on its character", () => {
    const chars = Array.from("0123456789abcdefghij\nxyz");
    const first = renderEdit(chars, 5, 10, 0);
    const shown = screen(first.output, 10);
    expect(shown.rows).toEqual(["> 01234567", "89abcdefgh", "ij", ". xyz"]);
    expect([shown.row, shown.column]).toEqual([0, 7]); // on "5"
    expect(first.cursorRow).toBe(0);
    const atEnd = renderEdit(chars, chars.length, 10, 0);
    expect(atEnd.cursorRow).toBe(3);
    // a redraw from that cursor row goes back up first and clears what was there
    const again = screen(atEnd.output + renderEdit(Array.from("short"), 2, 10, atEnd.cursorRow).output, 10);
    expect(again.rows).toEqual(["> short"]);
    expect([again.row, again.column]).toEqual([0, 4]);
  });

  it("a cursor right after a full row sits at the start of the next row; wide characters take two columns", () => {
    const full = renderEdit(Array.from("12345678"), 8, 10, 0);
    expect(full.cursorRow).toBe(1);
    expect(screen(full.output, 10).rows).toEqual(["> 12345678", ""]);
    const wide = screen(renderEdit(Array.from("日本語です"), 5, 10, 0).output, 10);
    expect(wide.rows).toEqual(["> 日本語で", "す"]);
  });
});

/** A fake terminal: raw mode recorded, input pushed by the test, output collected. */
function fakeTerminal() {
  const input = rawModeInput();
  let written = "";
  const output = Object.assign(new EventEmitter(), {
    columns: 80,
    write(chunk: string) {
      written += chunk;
      return true;
    },
  });
  return {
    streams: { input, output } as unknown as TerminalStreams,
    input,
    type: (text: string) => input.emit("data", Buffer.from(text, "utf8")),
    written: () => written,
  };
}

describe("TerminalLineInput", () => {
  it("raw mode and bracketed paste on while open, off after close; a message per read", async () => {
    const terminal = fakeTerminal();
    const line = new TerminalLineInput(terminal.streams);
    expect(terminal.input.isRaw).toBe(true);
    expect(terminal.written()).toContain("\x1b[?2004h");
    const first = line.read();
    terminal.type("héllo\r");
    expect(await first).toEqual({ kind: "line", text: "héllo" });
    line.close();
    expect(terminal.input.isRaw).toBe(false);
    expect(terminal.written().endsWith("\x1b[?2004l")).toBe(true);
    expect(await line.read()).toEqual({ kind: "eof" });
  });

  it("holds keys typed between reads (not echoed), replays them into the next read; Ctrl-C between reads interrupts", async () => {
    const terminal = fakeTerminal();
    const line = new TerminalLineInput(terminal.streams);
    let interrupts = 0;
    line.onInterrupt = () => interrupts++;
    const first = line.read();
    terminal.type("one\r");
    expect(await first).toEqual({ kind: "line", text: "one" });
    const before = terminal.written();
    terminal.type("tw");
    terminal.type("o");
    terminal.type("\x03");
    expect(interrupts).toBe(1);
    expect(terminal.written()).toBe(before); // nothing echoed while the answer streams
    const second = line.read();
    expect(terminal.written().slice(before.length)).toContain("> two");
    terminal.type("\r");
    expect(await second).toEqual({ kind: "line", text: "two" });
    // a whole line typed ahead is submitted by the next read at once; what follows it waits for the one
    // after, even in the same read (typed ahead, an Enter is an Enter)
    terminal.type("three\rfour");
    expect(await line.read()).toEqual({ kind: "line", text: "three" });
    const fourth = line.read();
    terminal.type("\r");
    expect(await fourth).toEqual({ kind: "line", text: "four" });
    line.close();
  });

  it("keys after a submitted line in the same read wait for the caller: a Ctrl-C among them reaches onInterrupt", async () => {
    const terminal = fakeTerminal();
    const line = new TerminalLineInput(terminal.streams);
    const seen: string[] = [];
    line.onInterrupt = () => seen.push("interrupt");
    const first = line.read();
    terminal.type("a\r");
    terminal.type("b\x03");
    expect(await first).toEqual({ kind: "line", text: "a" });
    expect(seen).toEqual(["interrupt"]);
    const next = line.read();
    terminal.type("\r");
    expect(await next).toEqual({ kind: "line", text: "b" });
    line.close();
  });

  it("Ctrl-C clears a non-empty line and ends an empty one; Ctrl-D on an empty line is the end", async () => {
    const terminal = fakeTerminal();
    const line = new TerminalLineInput(terminal.streams);
    const results: LineInputResult[] = [];
    const first = line.read();
    terminal.type("draft");
    terminal.type("\x03");
    terminal.type("\x03");
    results.push(await first);
    const second = line.read();
    terminal.type("\x04");
    results.push(await second);
    expect(results).toEqual([{ kind: "interrupt" }, { kind: "eof" }]);
    // the dropped line stays on screen, marked
    // biome-ignore lint/suspicious/noControlCharactersInRegex: terminal escape sequences start with ESC
    expect(terminal.written().replace(/\x1b\[[0-9;?]*[A-Za-z]|\r/g, "")).toContain("> draft^C\n");
    line.close();
  });
});
