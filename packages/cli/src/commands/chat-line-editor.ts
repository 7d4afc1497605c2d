/**
 * The line editor of `keepquant chat` on a terminal: raw input (so no 4,095-byte canonical-mode limit
 * and no kernel echo), cursor keys, history, bracketed paste as one multi-line message, and type-ahead
 * held while an answer streams. Three layers, each testable alone:
 *
 * - `KeyDecoder`: terminal input (text) -> keys; bracketed paste (ESC [200~ ... ESC [201~) comes out as
 *   one `paste` key with its text, however many reads it spans;
 * - `LineEditor`: the edit state (text, cursor, history) and what a key does to it;
 * - `renderEdit`: the escape sequence that redraws the prompt and the text (wrapped, multi-line) and
 *   puts the cursor where it belongs.
 *
 * `TerminalLineInput` ties them to a TTY. Nothing here writes anywhere but the stream it is given.
 */

/**
 * Most characters one message may hold in the editor (a paste beyond it is refused whole, with
 * CHAT_MESSAGE_TOO_LONG, never cut): 1 MiB of text, far beyond any context (a token is rarely under one
 * character), small enough that redrawing it per keystroke stays cheap.
 */
export const MAX_EDIT_CHARACTERS = 1_048_576;

export type EditKey =
  | { kind: "text"; text: string }
  | { kind: "paste"; text: string /** characters of a paste that exceeded MAX_EDIT_CHARACTERS (its text is then "") */; overflow?: number }
  | {
      kind:
        | "enter"
        | "backspace"
        | "delete"
        | "left"
        | "right"
        | "up"
        | "down"
        | "home"
        | "end"
        | "word-left"
        | "word-right"
        | "kill-line-start"
        | "kill-line-end"
        | "kill-word"
        | "interrupt"
        | "eof"
        | "redraw";
    };

const PASTE_START = "\x1b[200~";
/** ESC [ params final (CSI), ESC O final (SS3), or ESC and one character (Alt-key). */
// biome-ignore lint/suspicious/noControlCharactersInRegex: terminal escape sequences start with ESC
const ESCAPE_SEQUENCE = /^\x1b(?:\[([0-9;]*[~A-Za-z])|O([A-Za-z])|([^[O]))/;
/** The start of an escape sequence that a read split: a lone ESC, "ESC [", "ESC [1;", "ESC O". */
// biome-ignore lint/suspicious/noControlCharactersInRegex: terminal escape sequences start with ESC
const INCOMPLETE_ESCAPE = /^\x1b(\[[0-9;]*|O)?$/;
const PASTE_END = "\x1b[201~";

/** CSI sequences (ESC [ params final) this editor understands, by their text after ESC [. */
const CSI_KEYS: Readonly<Record<string, EditKey["kind"]>> = {
  A: "up",
  B: "down",
  C: "right",
  D: "left",
  H: "home",
  F: "end",
  "1~": "home",
  "7~": "home",
  "4~": "end",
  "8~": "end",
  "3~": "delete",
  "1;5C": "word-right",
  "1;5D": "word-left",
  "1;3C": "word-right",
  "1;3D": "word-left",
};

/** SS3 sequences (ESC O final), sent by terminals in application cursor mode. */
const SS3_KEYS: Readonly<Record<string, EditKey["kind"]>> = { A: "up", B: "down", C: "right", D: "left", H: "home", F: "end" };

/** Control characters with an editing meaning (others are ignored). */
const CONTROL_KEYS: Readonly<Record<string, EditKey["kind"]>> = {
  "\r": "enter",
  "\n": "enter",
  "\x7f": "backspace",
  "\b": "backspace",
  "\x01": "home", // Ctrl-A
  "\x05": "end", // Ctrl-E
  "\x02": "left", // Ctrl-B
  "\x06": "right", // Ctrl-F
  "\x10": "up", // Ctrl-P
  "\x0e": "down", // Ctrl-N
  "\x15": "kill-line-start", // Ctrl-U
  "\x0b": "kill-line-end", // Ctrl-K
  "\x17": "kill-word", // Ctrl-W
  "\x03": "interrupt", // Ctrl-C
  "\x04": "eof", // Ctrl-D
  "\x0c": "redraw", // Ctrl-L
};

/** Pasted text as a message holds it: CR LF and lone CR (what terminals send for a newline) become LF. */
function normalizePaste(text: string): string {
  return text.replace(/\r\n?/g, "\n");
}

/** Whether `text` could still grow into `marker` (a marker split across two reads). */
function partialSuffix(text: string, marker: string): number {
  for (let n = Math.min(marker.length - 1, text.length); n > 0; n--) if (marker.startsWith(text.slice(text.length - n))) return n;
  return 0;
}

/**
 * Terminal input -> keys. Keeps an escape sequence or a paste that a read split, and completes it with
 * the next read. A lone ESC at the end of a read waits for the next one; ESC followed by anything that
 * is not a known sequence is dropped with the sequence's text (unknown keys never become text).
 */
export class KeyDecoder {
  private pending = "";
  private paste: string[] | undefined;
  private pasteLength = 0;

  /** The keys of one read, in order. */
  feed(chunk: string): EditKey[] {
    const keys: EditKey[] = [];
    const input = this.pending + chunk;
    this.pending = "";
    let text = "";
    const flushText = (): void => {
      if (text !== "") keys.push({ kind: "text", text });
      text = "";
    };
    let i = 0;
    while (i < input.length) {
      if (this.paste) {
        const end = input.indexOf(PASTE_END, i);
        const stop = end < 0 ? input.length - partialSuffix(input.slice(i), PASTE_END) : end;
        this.addPaste(input.slice(i, stop));
        if (end < 0) {
          this.pending = input.slice(stop);
          return keys;
        }
        keys.push(this.finishPaste());
        i = end + PASTE_END.length;
        continue;
      }
      const c = input[i]!;
      if (c === "\x1b") {
        const rest = input.slice(i);
        if (rest.startsWith(PASTE_START)) {
          flushText();
          this.paste = [];
          this.pasteLength = 0;
          i += PASTE_START.length;
          continue;
        }
        const sequence = ESCAPE_SEQUENCE.exec(rest);
        if (!sequence) {
          // an incomplete sequence: wait for the rest (a lone ESC, "ESC [", "ESC [1;", ...)
          if (INCOMPLETE_ESCAPE.test(rest)) {
            flushText();
            this.pending = rest;
            return keys;
          }
          i += 1;
          continue;
        }
        flushText();
        const kind = sequence[1] !== undefined ? CSI_KEYS[sequence[1]] : sequence[2] !== undefined ? SS3_KEYS[sequence[2]] : undefined;
        // Alt-Enter (ESC CR) inserts a newline, as in many line editors
        if (sequence[3] === "\r") keys.push({ kind: "text", text: "\n" });
        else if (kind) keys.push({ kind } as EditKey);
        i += sequence[0].length;
        continue;
      }
      const control = CONTROL_KEYS[c];
      if (control) {
        flushText();
        keys.push({ kind: control } as EditKey);
        // CR LF from a terminal is one Enter
        i += c === "\r" && input[i + 1] === "\n" ? 2 : 1;
        continue;
      }
      if (c === "\t" || c >= " ") text += c;
      i += 1;
    }
    flushText();
    return keys;
  }

  /** Whether a paste has started and not ended yet. */
  get pasting(): boolean {
    return this.paste !== undefined;
  }

  private addPaste(text: string): void {
    if (text === "") return;
    this.pasteLength += text.length;
    if (this.pasteLength <= MAX_EDIT_CHARACTERS) this.paste!.push(text);
    else this.paste!.length = 0;
  }

  private finishPaste(): EditKey {
    const parts = this.paste!;
    const length = this.pasteLength;
    this.paste = undefined;
    this.pasteLength = 0;
    if (length > MAX_EDIT_CHARACTERS) return { kind: "paste", text: "", overflow: length };
    return { kind: "paste", text: normalizePaste(parts.join("")) };
  }
}

/** What a key did, when it ends the edit. */
export type EditOutcome =
  | { kind: "submit"; text: string }
  | { kind: "eof" }
  | { kind: "interrupt" }
  | { kind: "too-long"; characters: number }
  | undefined;

/** The edit state: the text as code points, the cursor (an index into them) and the session's history. */
export class LineEditor {
  chars: string[] = [];
  cursor = 0;
  private readonly history: string[] = [];
  /** Index into history while browsing it (history.length: the line being written). */
  private historyIndex = 0;
  /** The line being written, kept while browsing history. */
  private draft: string[] = [];

  get text(): string {
    return this.chars.join("");
  }

  /** Starts a new line (history browsing restarts at its end). */
  reset(): void {
    this.chars = [];
    this.cursor = 0;
    this.historyIndex = this.history.length;
    this.draft = [];
  }

  /**
   * Applies one key. `moreInput` says whether more input followed in the same read: an Enter that is
   * followed by more text in one read is a newline of a paste from a terminal without bracketed paste,
   * not a submit.
   */
  apply(key: EditKey, moreInput = false): EditOutcome {
    switch (key.kind) {
      case "text":
        return this.insert(key.text);
      case "paste":
        if (key.overflow !== undefined) return { kind: "too-long", characters: key.overflow };
        return this.insert(key.text);
      case "enter":
        if (moreInput) return this.insert("\n");
        return this.submit();
      case "backspace":
        if (this.cursor > 0) this.chars.splice(--this.cursor, 1);
        return undefined;
      case "delete":
        this.deleteUnderCursor();
        return undefined;
      case "left":
        this.cursor = Math.max(0, this.cursor - 1);
        return undefined;
      case "right":
        this.cursor = Math.min(this.chars.length, this.cursor + 1);
        return undefined;
      case "home":
        this.cursor = this.lineStart();
        return undefined;
      case "end":
        this.cursor = this.lineEnd();
        return undefined;
      case "word-left":
        this.cursor = this.wordStart();
        return undefined;
      case "word-right": {
        let at = this.cursor;
        while (at < this.chars.length && /\s/.test(this.chars[at]!)) at++;
        while (at < this.chars.length && !/\s/.test(this.chars[at]!)) at++;
        this.cursor = at;
        return undefined;
      }
      case "kill-line-start":
        this.deleteBackTo(this.lineStart());
        return undefined;
      case "kill-line-end":
        this.chars.splice(this.cursor, this.lineEnd() - this.cursor);
        return undefined;
      case "kill-word":
        this.deleteBackTo(this.wordStart());
        return undefined;
      case "up":
        return this.recall(-1);
      case "down":
        return this.recall(1);
      case "interrupt":
        return { kind: "interrupt" };
      case "eof":
        // Ctrl-D ends the session on an empty line; elsewhere it deletes the character under the cursor
        if (this.chars.length === 0) return { kind: "eof" };
        this.deleteUnderCursor();
        return undefined;
      case "redraw":
        return undefined;
    }
  }

  private insert(text: string): EditOutcome {
    const added = Array.from(text);
    if (this.chars.length + added.length > MAX_EDIT_CHARACTERS) return { kind: "too-long", characters: this.chars.length + added.length };
    // concat, not splice(...added): a large paste would be a million arguments
    this.chars = this.chars.slice(0, this.cursor).concat(added, this.chars.slice(this.cursor));
    this.cursor += added.length;
    return undefined;
  }

  private submit(): EditOutcome {
    const text = this.text;
    if (text.trim() !== "" && this.history[this.history.length - 1] !== text) this.history.push(text);
    return { kind: "submit", text };
  }

  /** Up (-1) or down (+1): within a multi-line text it moves between its lines first, then through history. */
  private recall(step: -1 | 1): EditOutcome {
    const start = this.lineStart();
    const end = this.lineEnd();
    if (step < 0 && start > 0) {
      const column = this.cursor - start;
      const previousStart = this.lineStart(start - 1);
      this.cursor = Math.min(previousStart + column, start - 1);
      return undefined;
    }
    if (step > 0 && end < this.chars.length) {
      const column = this.cursor - start;
      const nextEnd = this.lineEnd(end + 1);
      this.cursor = Math.min(end + 1 + column, nextEnd);
      return undefined;
    }
    const next = this.historyIndex + step;
    if (next < 0 || next > this.history.length) return undefined;
    if (this.historyIndex === this.history.length) this.draft = this.chars;
    this.historyIndex = next;
    this.chars = next === this.history.length ? this.draft : Array.from(this.history[next]!);
    this.cursor = this.chars.length;
    return undefined;
  }

  private lineStart(from = this.cursor): number {
    let at = from;
    while (at > 0 && this.chars[at - 1] !== "\n") at--;
    return at;
  }

  private lineEnd(from = this.cursor): number {
    let at = from;
    while (at < this.chars.length && this.chars[at] !== "\n") at++;
    return at;
  }

  /** Deletes from `start` to the cursor, which moves to `start`. */
  private deleteBackTo(start: number): void {
    this.chars.splice(start, this.cursor - start);
    this.cursor = start;
  }

  /** Deletes the character under the cursor (none at the end). */
  private deleteUnderCursor(): void {
    if (this.cursor < this.chars.length) this.chars.splice(this.cursor, 1);
  }

  private wordStart(): number {
    let at = this.cursor;
    while (at > 0 && /\s/.test(this.chars[at - 1]!)) at--;
    while (at > 0 && !/\s/.test(this.chars[at - 1]!)) at--;
    return at;
  }
}

/** Columns a code point takes on a terminal: 0 (combining), 2 (East Asian wide, emoji) or 1. */
export function columnsOf(char: string): number {
  const code = char.codePointAt(0)!;
  if ((code >= 0x0300 && code <= 0x036f) || (code >= 0x200b && code <= 0x200f) || (code >= 0xfe00 && code <= 0xfe0f)) return 0;
  if (
    (code >= 0x1100 && code <= 0x115f) ||
    (code >= 0x2e80 && code <= 0xa4cf && code !== 0x303f) ||
    (code >= 0xac00 && code <= 0xd7a3) ||
    (code >= 0xf900 && code <= 0xfaff) ||
    (code >= 0xfe30 && code <= 0xfe4f) ||
    (code >= 0xff00 && code <= 0xff60) ||
    (code >= 0xffe0 && code <= 0xffe6) ||
    (code >= 0x1f300 && code <= 0x1faff) ||
    (code >= 0x20000 && code <= 0x3fffd)
  )
    return 2;
  return 1;
}

/** What a character shows as, and its columns: a tab as one space (columns stay countable), other controls as ^X. */
function shownAs(char: string): { shown: string; columns: number } {
  if (char === "\t") return { shown: " ", columns: 1 };
  const code = char.codePointAt(0)!;
  if (code < 0x20 || code === 0x7f) return { shown: `^${String.fromCharCode(code ^ 0x40)}`, columns: 2 };
  return { shown: char, columns: columnsOf(char) };
}

export interface RenderedEdit {
  /** The bytes to write. */
  output: string;
  /** The cursor's row after writing, counted from the prompt's row (the next render moves up by it). */
  cursorRow: number;
}

/** The prompt of the first line, and of each further line of a multi-line message. */
export const PROMPT = "> ";
export const CONTINUATION_PROMPT = ". ";

/**
 * Redraws the edit area: back to the prompt's row (`previousCursorRow` rows up), clear to the end of
 * the screen, the prompt and the text (wrapped at `columns`, a newline starting a continuation line),
 * then the cursor to `cursor`. Wrapping is done here, not left to the terminal, so rows are known.
 */
export function renderEdit(chars: readonly string[], cursor: number, columns: number, previousCursorRow: number): RenderedEdit {
  const width = Math.max(columns, PROMPT.length + 2);
  let output = `${previousCursorRow > 0 ? `\x1b[${previousCursorRow}A` : ""}\r\x1b[J${PROMPT}`;
  let row = 0;
  let column = PROMPT.length;
  let cursorRow = 0;
  let cursorColumn = column;
  const parts: string[] = [output];
  for (let i = 0; i <= chars.length; i++) {
    if (i === cursor) {
      // a cursor just past a full row sits at the start of the next one
      if (column >= width) {
        parts.push("\r\n");
        row++;
        column = 0;
      }
      cursorRow = row;
      cursorColumn = column;
    }
    if (i === chars.length) break;
    const char = chars[i]!;
    if (char === "\n") {
      parts.push(`\r\n${CONTINUATION_PROMPT}`);
      row++;
      column = CONTINUATION_PROMPT.length;
      continue;
    }
    const { shown, columns: taken } = shownAs(char);
    if (column + taken > width) {
      parts.push("\r\n");
      row++;
      column = 0;
    }
    parts.push(shown);
    column += taken;
  }
  output = parts.join("");
  if (row > cursorRow) output += `\x1b[${row - cursorRow}A`;
  output += `\r${cursorColumn > 0 ? `\x1b[${cursorColumn}C` : ""}`;
  return { output, cursorRow };
}

/** A terminal's input and output as the line input uses them (a tty.ReadStream / WriteStream). */
export interface TerminalStreams {
  input: NodeJS.ReadableStream & { setRawMode(mode: boolean): unknown; isRaw?: boolean };
  output: NodeJS.WritableStream & { columns?: number; on(event: "resize", listener: () => void): unknown };
}

export type LineInputResult = { kind: "line"; text: string } | { kind: "eof" } | { kind: "interrupt" };

/**
 * The terminal side of `keepquant chat`: `read()` edits one message and resolves when it is submitted;
 * between reads (while an answer streams) keys are held, not echoed, and replayed into the next read
 * (type-ahead), except Ctrl-C, which calls `onInterrupt` (the running answer stops). Ctrl-C while
 * editing clears a non-empty line and ends the session on an empty one; Ctrl-D on an empty line ends it.
 */
export class TerminalLineInput {
  private readonly decoder = new KeyDecoder();
  private readonly editor = new LineEditor();
  /**
   * Keys not applied yet, per read (a read's boundary matters to Enter, see LineEditor.apply), and
   * whether they were typed ahead (read while no message was edited, or after a submit in one read).
   */
  private readonly held: { keys: EditKey[]; typedAhead: boolean }[] = [];
  private waiting: ((result: LineInputResult) => void) | undefined;
  private cursorRow = 0;
  private closed = false;
  private readonly onData = (chunk: Buffer | string): void => this.receive(typeof chunk === "string" ? chunk : this.utf8.write(chunk));
  private readonly onResize = (): void => {
    if (this.waiting) this.redraw();
  };
  private readonly utf8 = new Utf8Chunks();
  /** Called on Ctrl-C while no message is being edited. */
  onInterrupt: () => void = () => {};
  /** Called when a paste or the text grows beyond MAX_EDIT_CHARACTERS (the text is kept as it was). */
  onTooLong: (characters: number) => void = () => {};

  constructor(private readonly streams: TerminalStreams) {
    streams.input.setRawMode(true);
    // bracketed paste on: the terminal marks pasted text
    streams.output.write("\x1b[?2004h");
    streams.input.on("data", this.onData);
    streams.output.on("resize", this.onResize);
    streams.input.resume();
  }

  /** Whether a message is being edited (a `read()` is pending). */
  get editing(): boolean {
    return this.waiting !== undefined;
  }

  /** Edits one message (starting with whatever was typed ahead). */
  read(): Promise<LineInputResult> {
    if (this.closed) return Promise.resolve({ kind: "eof" });
    this.editor.reset();
    this.cursorRow = 0;
    return new Promise((resolve) => {
      this.waiting = resolve;
      this.redraw();
      this.drain();
    });
  }

  /** Restores the terminal (cooked mode, bracketed paste off). Idempotent. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.streams.input.removeListener("data", this.onData);
    (this.streams.output as unknown as NodeJS.EventEmitter).removeListener("resize", this.onResize);
    this.streams.output.write("\x1b[?2004l");
    this.streams.input.setRawMode(false);
    this.streams.input.pause();
    if (this.waiting) this.finish({ kind: "eof" });
  }

  private receive(chunk: string): void {
    const keys = this.decoder.feed(chunk);
    if (keys.length === 0) return;
    this.held.push({ keys, typedAhead: this.waiting === undefined });
    this.drain();
  }

  /**
   * Applies the held keys: while a message is edited, to the editor (up to a submit); between two reads
   * (an answer streams), Ctrl-C stops the answer and every other key stays held for the next read.
   */
  private drain(): void {
    if (this.closed) return;
    if (!this.waiting) {
      let interrupted = false;
      for (let i = 0; i < this.held.length; i++) {
        const held = this.held[i]!;
        const kept = held.keys.filter((key) => key.kind !== "interrupt");
        if (kept.length !== held.keys.length) interrupted = true;
        held.keys = kept;
      }
      if (interrupted) this.onInterrupt();
      return;
    }
    while (this.waiting !== undefined && this.held.length > 0) {
      const { keys, typedAhead } = this.held.shift()!;
      const rest = this.apply(keys, !typedAhead);
      if (rest.length > 0) {
        // keys typed after a submitted line, in the same read: the next read's type-ahead. Looked at
        // once the caller has acted on the line (a Ctrl-C among them then stops its answer).
        this.held.unshift({ keys: rest, typedAhead: true });
        setImmediate(() => this.drain());
        return;
      }
    }
    if (this.waiting !== undefined) this.redraw();
  }

  /**
   * Applies the keys of one read up to a submit; returns the keys after it. `pasteGuess`: an Enter
   * followed by more text in the read is a pasted newline (a terminal without bracketed paste). Only
   * for keys read while editing: keys typed ahead pile up in one read while the event loop is busy,
   * and there an Enter is an Enter.
   */
  private apply(keys: EditKey[], pasteGuess: boolean): EditKey[] {
    for (let i = 0; i < keys.length; i++) {
      const key = keys[i]!;
      const moreInput = pasteGuess && keys.slice(i + 1).some((next) => next.kind === "text" || next.kind === "paste");
      const outcome = this.editor.apply(key, moreInput);
      if (!outcome) continue;
      if (outcome.kind === "too-long") {
        // the message below the text as it is, then the text again on a fresh prompt
        this.leaveEditArea("");
        this.onTooLong(outcome.characters);
        continue;
      }
      if (outcome.kind === "interrupt" && this.editor.chars.length > 0) {
        // Ctrl-C on a non-empty line: drop the line, start again (as a shell does)
        this.leaveEditArea("^C");
        this.editor.reset();
        this.cursorRow = 0;
        continue;
      }
      this.leaveEditArea(outcome.kind === "interrupt" ? "^C" : "");
      this.finish(outcome.kind === "submit" ? { kind: "line", text: outcome.text } : { kind: outcome.kind });
      return keys.slice(i + 1);
    }
    return [];
  }

  /** Moves below the edit area (the text stays on screen) so that what follows starts on a new line. */
  private leaveEditArea(mark: string): void {
    // the whole text once more, with the cursor at its end
    const end = renderEdit(this.editor.chars, this.editor.chars.length, this.columns(), this.cursorRow);
    this.streams.output.write(`${end.output}${mark}\r\n`);
    this.cursorRow = 0;
  }

  private finish(result: LineInputResult): void {
    const resolve = this.waiting!;
    this.waiting = undefined;
    resolve(result);
  }

  private redraw(): void {
    const rendered = renderEdit(this.editor.chars, this.editor.cursor, this.columns(), this.cursorRow);
    this.cursorRow = rendered.cursorRow;
    this.streams.output.write(rendered.output);
  }

  private columns(): number {
    const columns = this.streams.output.columns;
    return columns !== undefined && columns > 0 ? columns : 80;
  }
}

/** A UTF-8 decoder for byte chunks that keeps a character split across two reads. */
class Utf8Chunks {
  private readonly decoder = new TextDecoder("utf-8");
  write(bytes: Uint8Array): string {
    return this.decoder.decode(bytes, { stream: true });
  }
}
