/**
 * The qwen35 pre-tokenizer: splits text into words before BPE.
 *
 * The pattern (tokenizer.json, with the case-insensitive contractions spelled out):
 *   (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}
 *   | ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *
 * llama.cpp does not run this pattern on the text itself: it "collapses" every code point >= 128
 * into one byte naming its class (letter, number, mark, punctuation, symbol, whitespace, other)
 * and runs an ASCII version of the pattern on that string. We do the same (`preTokenizeByPattern`
 * literally; `preTokenize`, a linear scanner, classifies each code point as it goes), which reproduces its
 * whitespace set (White_Space, so U+0085 is whitespace and U+FEFF is not, unlike JS `\s`) and its
 * handling of classes the pattern does not name. Code point classes come from the JS engine's
 * Unicode tables (`\p{...}` with the `u` flag); llama.cpp has its own tables, so code points
 * assigned in a newer Unicode version than llama.cpp's can classify differently.
 */

/** The qwen35 pattern as written for a Unicode-aware engine (JS with the `u` flag). */
export const QWEN35_PRETOKENIZER_PATTERN =
  "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/** qwen2: the same without \p{M}. */
export const QWEN2_PRETOKENIZER_PATTERN =
  "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

export type PreTokenizerName = "qwen35" | "qwen2";

export const SUPPORTED_PRE_TOKENIZERS: readonly PreTokenizerName[] = ["qwen35", "qwen2"];

// Class bytes of the collapsed text (llama.cpp's choice of representatives).
const CLASS_OTHER = 0xd0;
const CLASS_NUMBER = 0xd1;
const CLASS_LETTER = 0xd2;
const CLASS_PUNCTUATION = 0xd3;
const CLASS_MARK = 0xd4;
const CLASS_SYMBOL = 0xd5;
const CLASS_WHITESPACE = 0x0b; // vertical tab: matched by \s

const IS_WHITE_SPACE = /^\p{White_Space}$/u;
const IS_LETTER = /^\p{L}$/u;
const IS_NUMBER = /^\p{N}$/u;
const IS_MARK = /^\p{M}$/u;
const IS_PUNCTUATION = /^\p{P}$/u;
const IS_SYMBOL = /^\p{S}$/u;

/** Class byte per code point, filled lazily (0 = not yet computed). 1.1 MB once allocated. */
let classTable: Uint8Array | undefined;

/** The collapsed class of a code point >= 128 (exported for tests). */
export function codePointClass(cp: number): number {
  classTable ??= new Uint8Array(0x110000);
  let cls = classTable[cp]!;
  if (cls !== 0) return cls;
  const ch = String.fromCodePoint(cp);
  if (IS_WHITE_SPACE.test(ch)) cls = CLASS_WHITESPACE;
  else if (IS_LETTER.test(ch)) cls = CLASS_LETTER;
  else if (IS_NUMBER.test(ch)) cls = CLASS_NUMBER;
  else if (IS_MARK.test(ch)) cls = CLASS_MARK;
  else if (IS_PUNCTUATION.test(ch)) cls = CLASS_PUNCTUATION;
  else if (IS_SYMBOL.test(ch)) cls = CLASS_SYMBOL;
  else cls = CLASS_OTHER;
  classTable[cp] = cls;
  return cls;
}

// The patterns over collapsed text: \p{L} -> [\xD2A-Za-z], \p{N} -> [\xD10-9], \p{M} -> [\xD4].
const COLLAPSED_QWEN35 =
  /(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\xD2A-Za-z\xD10-9]?[\xD2A-Za-z\xD4]+|[\xD10-9]| ?[^\s\xD2A-Za-z\xD4\xD10-9]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+/g;
const COLLAPSED_QWEN2 =
  /(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\xD2A-Za-z\xD10-9]?[\xD2A-Za-z]+|[\xD10-9]| ?[^\s\xD2A-Za-z\xD10-9]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+/g;

/** Replaces lone surrogates by U+FFFD, as UTF-8 encoding (and so llama.cpp) sees them. */
export function toWellFormed(text: string): string {
  // Fast check: no surrogate at all.
  if (!/[\uD800-\uDFFF]/.test(text)) return text;
  return text.replace(/[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g, "\uFFFD");
}

/**
 * The pattern-based split (the collapsed text through the pattern as a JS regex): the reference the
 * scanner below is held to in tests. Splits well-formed text into words (substrings of `text`, in
 * order, covering it).
 */
export function preTokenizeByPattern(text: string, pre: PreTokenizerName = "qwen35"): string[] {
  if (text.length === 0) return [];
  const pattern = pre === "qwen2" ? COLLAPSED_QWEN2 : COLLAPSED_QWEN35;

  // Collapse: one char per code point. starts[k] = UTF-16 index of code point k (only when non-ASCII).
  let ascii = true;
  for (let i = 0; i < text.length; i++) {
    if (text.charCodeAt(i) >= 128) {
      ascii = false;
      break;
    }
  }
  let collapsed = text;
  let starts: Int32Array | undefined;
  if (!ascii) {
    let astral = false;
    for (let i = 0; i < text.length; i++) {
      const c = text.charCodeAt(i);
      if (c >= 0xd800 && c <= 0xdfff) {
        astral = true;
        break;
      }
    }
    // One collapsed char per code point; starts[k] = UTF-16 index of code point k (astral text only).
    const chars = new Uint16Array(text.length);
    let count = 0;
    const offsets = astral ? new Int32Array(text.length + 1) : undefined;
    for (let i = 0; i < text.length; ) {
      const cp = astral ? text.codePointAt(i)! : text.charCodeAt(i);
      if (offsets) offsets[count] = i;
      chars[count++] = cp < 128 ? cp : codePointClass(cp);
      i += cp > 0xffff ? 2 : 1;
    }
    if (offsets) {
      offsets[count] = text.length;
      starts = offsets;
    }
    collapsed = "";
    const CHUNK = 8192;
    for (let i = 0; i < count; i += CHUNK) {
      collapsed += String.fromCharCode(...chars.subarray(i, Math.min(i + CHUNK, count)));
    }
  }

  const words: string[] = [];
  const push = (from: number, to: number): void => {
    if (to <= from) return;
    words.push(starts ? text.slice(starts[from]!, starts[to]!) : text.slice(from, to));
  };
  pattern.lastIndex = 0;
  let last = 0;
  for (let match = pattern.exec(collapsed); match !== null; match = pattern.exec(collapsed)) {
    // Unmatched stretches become their own word (the pattern covers every class, so this is defensive).
    push(last, match.index);
    push(match.index, match.index + match[0].length);
    last = match.index + match[0].length;
  }
  push(last, collapsed.length);
  return words;
}

// The scanner: the same split as the pattern, in one left-to-right pass whose work is linear in the
// text (each code point is classified a bounded number of times, counted in `steps`). The regex engine
// gives no such bound we can count, and it cannot stop part-way through a text and resume.

const isLetterClass = (v: number): boolean => v === CLASS_LETTER || (v >= 0x41 && v <= 0x5a) || (v >= 0x61 && v <= 0x7a);
const isNumberClass = (v: number): boolean => v === CLASS_NUMBER || (v >= 0x30 && v <= 0x39);
/** \s of the collapsed text: \t \n \v \f \r and space (class bytes are never whitespace but 0x0b). */
const isSpaceClass = (v: number): boolean => v === 0x20 || (v >= 0x09 && v <= 0x0d);
const isNewline = (v: number): boolean => v === 0x0a || v === 0x0d;

/** The run a word's match is scanning (its end is where the run stops). */
enum Run {
  None,
  /** [\p{L}\p{M}]+ */
  Word,
  /** [^\s\p{L}\p{M}\p{N}]+, then the [\r\n]* after it */
  Other,
  Newlines,
  /** a whitespace run, its last newline tracked */
  Space,
}

/**
 * A resumable pre-tokenizer over one well-formed text: `next()` returns the end (UTF-16 index) of the
 * word starting at `position`, or -1 at the end of the text; with a budget it may return -2 (the word
 * is not finished: call again). `steps` counts code points classified: at most a few per code point.
 */
export class PreTokenizerScanner {
  /** UTF-16 index where the next word starts. */
  position = 0;
  /** Code points classified so far (the scanner's unit of work). */
  steps = 0;
  private readonly marksInWords: boolean;
  private run: Run = Run.None;
  /** Where the pending run has been scanned to, and the last newline seen in a Space run. */
  private scanned = 0;
  private lastNewline = -1;

  constructor(
    private readonly text: string,
    pre: PreTokenizerName = "qwen35",
  ) {
    this.marksInWords = pre === "qwen35";
  }

  /** The collapsed class of the code point at UTF-16 index i (ASCII stays itself); -1 past the end. */
  private classAt(i: number): number {
    if (i >= this.text.length) return -1;
    this.steps++;
    const c = this.text.charCodeAt(i);
    if (c < 128) return c;
    return codePointClass(c >= 0xd800 && c <= 0xdbff ? this.text.codePointAt(i)! : c);
  }

  /** UTF-16 width of the code point at i. */
  private width(i: number): number {
    const c = this.text.charCodeAt(i);
    return c >= 0xd800 && c <= 0xdbff && i + 1 < this.text.length ? 2 : 1;
  }

  private inWord(v: number): boolean {
    return isLetterClass(v) || (this.marksInWords && v === CLASS_MARK);
  }

  /** [^\s\p{L}\p{M}\p{N}] (qwen2: [^\s\p{L}\p{N}]). */
  private inOther(v: number): boolean {
    return v >= 0 && !isSpaceClass(v) && !isLetterClass(v) && !isNumberClass(v) && !(this.marksInWords && v === CLASS_MARK);
  }

  /**
   * Returns the end of the next word (and moves past it), -1 when the text is consumed, or -2 when
   * `budget` steps ran out inside a long word (call again to go on).
   */
  next(budget = Number.POSITIVE_INFINITY): number {
    const stop = this.steps + budget;
    if (this.run === Run.None) {
      if (this.position >= this.text.length) return -1;
      const end = this.begin(this.position);
      if (end >= 0) return this.finishWord(end);
    }
    // the pending run, one code point a step
    for (;;) {
      if (this.steps >= stop) return -2;
      const at = this.scanned;
      const v = this.classAt(at);
      switch (this.run) {
        case Run.Word:
          if (!this.inWord(v)) return this.finishWord(at);
          break;
        case Run.Other:
          if (this.inOther(v)) break;
          // the newlines after the run start here
          this.run = Run.Newlines;
          if (!isNewline(v)) return this.finishWord(at);
          break;
        case Run.Newlines:
          if (!isNewline(v)) return this.finishWord(at);
          break;
        case Run.Space: {
          if (v < 0 || !isSpaceClass(v)) return this.finishWord(this.spaceEnd(at));
          if (isNewline(v)) this.lastNewline = at;
          break;
        }
      }
      this.scanned = at + this.width(at);
    }
  }

  private finishWord(end: number): number {
    this.run = Run.None;
    this.position = end;
    return end;
  }

  /** Starts the pattern's match at i: its end when known at once, else -1 with the run to scan set. */
  private begin(i: number): number {
    const v = this.classAt(i);
    const afterFirst = i + this.width(i);
    // '[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]
    if (v === 0x27) {
      const second = this.classAt(afterFirst) | 0x20; // ASCII lower case (class bytes never land on a letter)
      if (second === 0x73 || second === 0x74 || second === 0x6d || second === 0x64) return afterFirst + 1;
      if (second === 0x72 || second === 0x76 || second === 0x6c) {
        const third = this.classAt(afterFirst + 1) | 0x20;
        if (third === (second === 0x6c ? 0x6c : 0x65)) return afterFirst + 2;
      }
    }
    // [^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+ : the optional prefix taken when a word follows it, else the word alone
    const optionalPrefix = !isNewline(v) && !isLetterClass(v) && !isNumberClass(v);
    if ((optionalPrefix && this.inWord(this.classAt(afterFirst))) || this.inWord(v)) return this.scan(Run.Word, afterFirst);
    // \p{N}
    if (isNumberClass(v)) return afterFirst;
    // ' ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*'
    if (v === 0x20 && this.inOther(this.classAt(afterFirst))) return this.scan(Run.Other, afterFirst);
    if (this.inOther(v)) return this.scan(Run.Other, afterFirst);
    // whitespace: \s*[\r\n]+ | \s+(?!\S) | \s+, decided at the end of the run
    this.lastNewline = isNewline(v) ? i : -1;
    return this.scan(Run.Space, afterFirst);
  }

  private scan(run: Run, from: number): number {
    this.run = run;
    this.scanned = from;
    return -1;
  }

  /** The end of a whitespace word starting at `position` whose run ends at `runEnd`. */
  private spaceEnd(runEnd: number): number {
    const i = this.position;
    // \s*[\r\n]+ : up to and including the run's last newline
    if (this.lastNewline >= 0) return this.lastNewline + 1;
    // \s+(?!\S) : the whole run at the end of the text, else all but its last code point (whitespace is BMP)
    if (runEnd >= this.text.length) return runEnd;
    if (runEnd - 1 > i) return runEnd - 1;
    // \s+
    return runEnd;
  }
}

/**
 * Splits well-formed text into pre-tokenizer words (substrings of `text`, in order, covering it), with
 * the scanner: the same words as `preTokenizeByPattern`, in time linear in the text.
 */
export function preTokenize(text: string, pre: PreTokenizerName = "qwen35"): string[] {
  const scanner = new PreTokenizerScanner(text, pre);
  const words: string[] = [];
  let start = 0;
  for (let end = scanner.next(); end >= 0; end = scanner.next()) {
    words.push(text.slice(start, end));
    start = end;
  }
  return words;
}
