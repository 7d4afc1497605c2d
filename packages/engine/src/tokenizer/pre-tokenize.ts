/**
 * The qwen35 pre-tokenizer: splits text into words before BPE.
 *
 * The pattern (tokenizer.json, with the case-insensitive contractions spelled out):
 *   (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}
 *   | ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *
 * llama.cpp does not run this pattern on the text itself: it "collapses" every code point >= 128
 * into one byte naming its class (letter, number, mark, punctuation, symbol, whitespace, other)
 * and runs an ASCII version of the pattern on that string. We do the same, which reproduces its
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
 * Splits well-formed text into pre-tokenizer words (substrings of `text`, in order, covering it).
 */
export function preTokenize(text: string, pre: PreTokenizerName = "qwen35"): string[] {
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
