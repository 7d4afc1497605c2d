/**
 * JSON Schema `pattern` as grammar rules of our own. xgrammar 0.1.27's converter turns a pattern's `.` and negated
 * classes into any byte, quotes and control characters included, so its strings need not be JSON. Here an
 * ECMA-262 regular expression (the syntax JSON Schema names, read with the `u` flag's code-point semantics) is
 * parsed to a small tree and written as EBNF over the *JSON text* of the string: each character the expression
 * allows becomes the way Python's `json.dumps(..., ensure_ascii=False)` writes it (`\"`, `\\`, `\n`, `\u001f`, the
 * character itself otherwise), so every generated string is JSON whose value matches the pattern.
 *
 * A pattern is a search, not a whole match: an alternative not anchored by `^` may start after any text and one
 * not anchored by `$` may be followed by any. What the tree cannot express exactly is refused with the reason:
 * lookarounds, backreferences, word boundaries, Unicode property escapes and anchors inside the expression.
 */

import { ANNOTATIONS } from "./normalize.js";

/** One code point from a set of ranges (sorted, disjoint, inclusive). */
interface CharSet {
  kind: "set";
  ranges: [number, number][];
}
interface Sequence {
  kind: "seq";
  items: Node[];
}
interface Alternation {
  kind: "alt";
  items: Node[];
}
interface Repeat {
  kind: "rep";
  item: Node;
  min: number;
  /** undefined: no upper bound */
  max: number | undefined;
}
interface Anchor {
  kind: "start" | "end";
}
type Node = CharSet | Sequence | Alternation | Repeat | Anchor;

const MAX_CODE_POINT = 0x10ffff;

/** Why a pattern cannot be enforced exactly (its message says so in words a schema's author can act on). */
export class PatternRefusal extends Error {}

function normalizeRanges(ranges: [number, number][]): [number, number][] {
  const sorted = ranges.filter(([a, b]) => a <= b).sort((x, y) => x[0] - y[0]);
  const out: [number, number][] = [];
  for (const [a, b] of sorted) {
    const last = out.at(-1);
    if (last && a <= last[1] + 1) last[1] = Math.max(last[1], b);
    else out.push([a, b]);
  }
  return out;
}

export function complement(ranges: [number, number][]): [number, number][] {
  const out: [number, number][] = [];
  let next = 0;
  for (const [a, b] of normalizeRanges(ranges)) {
    if (a > next) out.push([next, a - 1]);
    next = b + 1;
  }
  if (next <= MAX_CODE_POINT) out.push([next, MAX_CODE_POINT]);
  return out;
}

const DIGIT: [number, number][] = [[0x30, 0x39]];
const WORD: [number, number][] = [
  [0x30, 0x39],
  [0x41, 0x5a],
  [0x5f, 0x5f],
  [0x61, 0x7a],
];
// ECMA-262 WhiteSpace and LineTerminator
const SPACE: [number, number][] = normalizeRanges([
  [0x09, 0x0d],
  [0x20, 0x20],
  [0xa0, 0xa0],
  [0x1680, 0x1680],
  [0x2000, 0x200a],
  [0x2028, 0x2029],
  [0x202f, 0x202f],
  [0x205f, 0x205f],
  [0x3000, 0x3000],
  [0xfeff, 0xfeff],
]);
const LINE_TERMINATORS: [number, number][] = [
  [0x0a, 0x0a],
  [0x0d, 0x0d],
  [0x2028, 0x2029],
];

const SYNTAX_CHARACTERS = new Set("^$\\.*+?()[]{}|/-");

/** A recursive-descent reader of one ECMA-262 pattern. */
class Reader {
  private at = 0;
  constructor(private readonly source: string) {}

  parse(): Node {
    const node = this.alternation();
    if (this.at < this.source.length) this.refuse(`unbalanced ")" at offset ${this.at}`);
    return node;
  }

  private refuse(why: string): never {
    throw new PatternRefusal(why);
  }

  private peek(offset = 0): string | undefined {
    return this.source[this.at + offset];
  }

  private alternation(): Node {
    const items: Node[] = [this.sequence()];
    while (this.peek() === "|") {
      this.at++;
      items.push(this.sequence());
    }
    return items.length === 1 ? items[0]! : { kind: "alt", items };
  }

  private sequence(): Sequence {
    const items: Node[] = [];
    while (this.at < this.source.length && this.peek() !== "|" && this.peek() !== ")") {
      const atom = this.atom();
      items.push(this.quantified(atom));
    }
    return { kind: "seq", items };
  }

  private quantified(atom: Node): Node {
    const c = this.peek();
    let min: number;
    let max: number | undefined;
    if (c === "*" || c === "+" || c === "?") {
      this.at++;
      [min, max] = c === "*" ? [0, undefined] : c === "+" ? [1, undefined] : [0, 1];
    } else if (c === "{") {
      const match = /^\{(\d+)(,(\d*))?\}/.exec(this.source.slice(this.at));
      if (!match) return atom; // a literal "{" (Annex B)
      this.at += match[0].length;
      min = Number(match[1]);
      max = match[2] === undefined ? min : match[3] === "" ? undefined : Number(match[3]);
      if (!Number.isSafeInteger(min) || (max !== undefined && (!Number.isSafeInteger(max) || max < min))) {
        this.refuse(`the quantifier ${match[0]} is out of order`);
      }
    } else {
      return atom;
    }
    if (atom.kind === "start" || atom.kind === "end") this.refuse("a quantifier after an anchor");
    if (this.peek() === "?") this.at++; // lazy: the same strings
    if (this.peek() === "*" || this.peek() === "+" || this.peek() === "?" || this.peek() === "{") {
      if (this.peek() !== "{" || /^\{\d+(,\d*)?\}/.test(this.source.slice(this.at))) this.refuse("a quantifier after a quantifier");
    }
    return { kind: "rep", item: atom, min, max };
  }

  private atom(): Node {
    const c = this.source.codePointAt(this.at)!;
    const ch = String.fromCodePoint(c);
    switch (ch) {
      case "^":
        this.at++;
        return { kind: "start" };
      case "$":
        this.at++;
        return { kind: "end" };
      case ".":
        this.at++;
        return { kind: "set", ranges: complement(LINE_TERMINATORS) };
      case "(":
        return this.group();
      case "[":
        return this.charClass();
      case "\\":
        return this.escape(false);
      case "*":
      case "+":
      case "?":
        return this.refuse(`nothing to repeat before "${ch}" at offset ${this.at}`);
      default:
        this.at += ch.length;
        return { kind: "set", ranges: [[c, c]] };
    }
  }

  private group(): Node {
    this.at++; // (
    if (this.peek() === "?") {
      const next = this.peek(1);
      if (next === ":") this.at += 2;
      else if (next === "=" || next === "!" || (next === "<" && (this.peek(2) === "=" || this.peek(2) === "!")))
        this.refuse("lookahead and lookbehind assertions are not enforced");
      else if (next === "<") {
        const close = this.source.indexOf(">", this.at);
        if (close < 0) this.refuse("an unterminated group name");
        this.at = close + 1;
      } else this.refuse(`the group "(?${next ?? ""}" is not ECMA-262 syntax that is enforced`);
    }
    const inner = this.alternation();
    if (this.peek() !== ")") this.refuse('an unterminated group (no ")")');
    this.at++;
    return inner;
  }

  /** An escape after "\" (in a class when `inClass`); returns a set. */
  private escape(inClass: boolean): CharSet {
    this.at++; // backslash
    const c = this.peek();
    if (c === undefined) this.refuse("a pattern ending in a lone backslash");
    this.at++;
    const set = (ranges: [number, number][]): CharSet => ({ kind: "set", ranges: normalizeRanges(ranges) });
    const one = (code: number): CharSet => set([[code, code]]);
    switch (c) {
      case "d":
        return set(DIGIT);
      case "D":
        return set(complement(DIGIT));
      case "w":
        return set(WORD);
      case "W":
        return set(complement(WORD));
      case "s":
        return set(SPACE);
      case "S":
        return set(complement(SPACE));
      case "t":
        return one(0x09);
      case "n":
        return one(0x0a);
      case "v":
        return one(0x0b);
      case "f":
        return one(0x0c);
      case "r":
        return one(0x0d);
      case "0":
        if (/[0-9]/.test(this.peek() ?? "")) this.refuse("octal escapes are not enforced");
        return one(0);
      case "b":
        if (inClass) return one(0x08);
        return this.refuse("word boundaries (\\b) are not enforced");
      case "B":
        return this.refuse("word boundaries (\\B) are not enforced");
      case "c": {
        const letter = this.peek();
        if (letter === undefined || !/[A-Za-z]/.test(letter)) this.refuse("\\c must be followed by a letter");
        this.at++;
        return one(letter!.charCodeAt(0) % 32);
      }
      case "x": {
        const hex = /^[0-9A-Fa-f]{2}/.exec(this.source.slice(this.at));
        if (!hex) this.refuse("\\x must be followed by two hex digits");
        this.at += 2;
        return one(Number.parseInt(hex![0], 16));
      }
      case "u": {
        const braced = /^\{([0-9A-Fa-f]{1,6})\}/.exec(this.source.slice(this.at));
        if (braced) {
          const code = Number.parseInt(braced[1]!, 16);
          if (code > MAX_CODE_POINT) this.refuse(`\\u{${braced[1]}} is past the last code point`);
          this.at += braced[0].length;
          return one(code);
        }
        const hex = /^[0-9A-Fa-f]{4}/.exec(this.source.slice(this.at));
        if (!hex) this.refuse("\\u must be followed by four hex digits or {hex}");
        this.at += 4;
        let code = Number.parseInt(hex![0], 16);
        // a surrogate pair written as two escapes is one code point
        const low = /^\\u(d[c-f][0-9a-f]{2})/i.exec(this.source.slice(this.at));
        if (code >= 0xd800 && code <= 0xdbff && low) {
          code = 0x10000 + ((code - 0xd800) << 10) + (Number.parseInt(low[1]!, 16) - 0xdc00);
          this.at += 6;
        }
        return one(code);
      }
      case "p":
      case "P":
        return this.refuse(`Unicode property escapes (\\${c}{...}) are not enforced`);
      case "k":
        return this.refuse("backreferences are not enforced");
      default:
        if (/[1-9]/.test(c!)) return this.refuse("backreferences are not enforced");
        if (inClass && c === "-") return one(0x2d);
        if (SYNTAX_CHARACTERS.has(c!) || !/[A-Za-z0-9]/.test(c!)) {
          const code = this.source.codePointAt(this.at - 1)!;
          if (code > 0xffff) this.at++;
          return one(code);
        }
        // an identity escape of a letter (Annex B, without the u flag)
        return one(c!.charCodeAt(0));
    }
  }

  private charClass(): CharSet {
    this.at++; // [
    let negated = false;
    if (this.peek() === "^") {
      negated = true;
      this.at++;
    }
    const ranges: [number, number][] = [];
    /** one class atom: a single code point (for ranges) or a set (\d and the like) */
    const classAtom = (): { code?: number; set: [number, number][] } => {
      if (this.peek() === "\\") {
        const set = this.escape(true).ranges;
        const single = set.length === 1 && set[0]![0] === set[0]![1];
        return single ? { code: set[0]![0], set } : { set };
      }
      const code = this.source.codePointAt(this.at)!;
      this.at += code > 0xffff ? 2 : 1;
      return { code, set: [[code, code]] };
    };
    while (this.peek() !== "]") {
      if (this.at >= this.source.length) this.refuse('an unterminated character class (no "]")');
      const first = classAtom();
      if (this.peek() === "-" && this.peek(1) !== "]" && this.peek(1) !== undefined) {
        this.at++;
        const second = classAtom();
        if (first.code === undefined || second.code === undefined) this.refuse("a class range with a class escape at an end");
        if (first.code! > second.code!) this.refuse("a class range out of order");
        ranges.push([first.code!, second.code!]);
      } else {
        ranges.push(...first.set);
      }
    }
    this.at++; // ]
    const set = normalizeRanges(ranges);
    return { kind: "set", ranges: negated ? complement(set) : set };
  }
}

/** How one code point is written inside a JSON string (Python's json.dumps with ensure_ascii=False). */
const SHORT_ESCAPES: Readonly<Record<number, string>> = { 0x08: "\\b", 0x09: "\\t", 0x0a: "\\n", 0x0c: "\\f", 0x0d: "\\r" };

export function jsonEscapeOf(code: number): string {
  if (code === 0x22) return '\\"';
  if (code === 0x5c) return "\\\\";
  return SHORT_ESCAPES[code] ?? `\\u${code.toString(16).padStart(4, "0")}`;
}

/** An EBNF string literal of `text`. */
export function literal(text: string): string {
  return `"${text.replace(/\\/g, "\\\\").replace(/"/g, '\\"')}"`;
}

/** Code points written as themselves in JSON text: not a control character, `"`, `\` or a surrogate. */
const PLAIN: [number, number][] = [
  [0x20, 0x21],
  [0x23, 0x5b],
  [0x5d, 0xd7ff],
  [0xe000, MAX_CODE_POINT],
];

function intersect(a: [number, number][], b: [number, number][]): [number, number][] {
  const out: [number, number][] = [];
  for (const [x0, x1] of a)
    for (const [y0, y1] of b) if (Math.max(x0, y0) <= Math.min(x1, y1)) out.push([Math.max(x0, y0), Math.min(x1, y1)]);
  return normalizeRanges(out);
}

function utf8(code: number): number[] {
  if (code < 0x80) return [code];
  if (code < 0x800) return [0xc0 | (code >> 6), 0x80 | (code & 0x3f)];
  if (code < 0x10000) return [0xe0 | (code >> 12), 0x80 | ((code >> 6) & 0x3f), 0x80 | (code & 0x3f)];
  return [0xf0 | (code >> 18), 0x80 | ((code >> 12) & 0x3f), 0x80 | ((code >> 6) & 0x3f), 0x80 | (code & 0x3f)];
}

/**
 * The UTF-8 byte sequences of the code points in [low, high] (no surrogates), as runs of byte ranges: the range is
 * split at the encoding lengths, then wherever a continuation byte would not run over its whole span, so that each
 * piece is every combination of its byte ranges.
 */
function utf8Ranges(low: number, high: number, out: [number, number][][]): void {
  for (const limit of [0x7f, 0x7ff, 0xffff]) {
    if (low <= limit && high > limit) {
      utf8Ranges(low, limit, out);
      utf8Ranges(limit + 1, high, out);
      return;
    }
  }
  const length = utf8(low).length;
  for (let i = 1; i < length; i++) {
    const span = (1 << (6 * i)) - 1;
    if ((low & ~span) !== (high & ~span)) {
      if ((low & span) !== 0) {
        utf8Ranges(low, low | span, out);
        utf8Ranges((low | span) + 1, high, out);
        return;
      }
      if ((high & span) !== span) {
        utf8Ranges(low, (high & ~span) - 1, out);
        utf8Ranges(high & ~span, high, out);
        return;
      }
    }
  }
  const a = utf8(low);
  const b = utf8(high);
  out.push(a.map((byte, i) => [byte, b[i]!]));
}

const hex2 = (byte: number): string => `\\x${byte.toString(16).padStart(2, "0")}`;

/**
 * A class of bytes. xgrammar 0.1.27 matches a character class byte by byte when it has two elements or more (and
 * takes code points past U+00FF modulo 256), but a class of one element as the UTF-8 of that code point: one byte
 * is written twice to stay a byte.
 */
function byteClass(ranges: readonly [number, number][]): string {
  if (ranges.length === 1 && ranges[0]![0] === ranges[0]![1]) return `[${hex2(ranges[0]![0])}${hex2(ranges[0]![0])}]`;
  return `[${ranges.map(([a, b]) => (a === b ? hex2(a) : `${hex2(a)}-${hex2(b)}`)).join("")}]`;
}

/** The EBNF of one character of `ranges` as JSON text; undefined when no character can be written (surrogates only). */
export function setEbnf(ranges: [number, number][]): string | undefined {
  const alternatives: string[] = [];
  const plain = intersect(ranges, PLAIN);
  const ascii = intersect(plain, [[0, 0x7f]]);
  if (ascii.length > 0) alternatives.push(byteClass(ascii));
  const sequences: [number, number][][] = [];
  for (const [a, b] of intersect(plain, [[0x80, MAX_CODE_POINT]])) utf8Ranges(a, b, sequences);
  // sequences that differ only in their first byte share a rule body: grouped by the rest
  const byRest = new Map<string, [number, number][]>();
  for (const sequence of sequences) {
    const rest = sequence
      .slice(1)
      .map((range) => byteClass([range]))
      .join(" ");
    const firsts = byRest.get(rest) ?? [];
    firsts.push(sequence[0]!);
    byRest.set(rest, firsts);
  }
  for (const [rest, firsts] of byRest) alternatives.push(`${byteClass(normalizeRanges(firsts))} ${rest}`);
  for (const code of [0x22, 0x5c]) if (intersect(ranges, [[code, code]]).length > 0) alternatives.push(literal(jsonEscapeOf(code)));
  for (const [a, b] of intersect(ranges, [[0, 0x1f]])) for (let code = a; code <= b; code++) alternatives.push(literal(jsonEscapeOf(code)));
  if (alternatives.length === 0) return undefined;
  return alternatives.length === 1 ? alternatives[0]! : `(${alternatives.join(" | ")})`;
}

/** A pattern parsed: the EBNF body (between the string's quotes) and what it tells of length and repetitions. */
export interface PatternGrammar {
  /** EBNF of the string's JSON text without its quotes */
  body: string;
  /** fewest and most characters of a string the body generates (most undefined: unbounded) */
  minLength: number;
  maxLength: number | undefined;
  /** the bounded repetition counts `{m,n}` (their upper bounds), for the repetition budget */
  repetitions: number[];
}

export const ANY_CHARACTER = setEbnf([[0, MAX_CODE_POINT]])!;

/** Most characters of a pattern. */
export const MAX_PATTERN_LENGTH = 4096;

/** Patterns read so far (the check, the repetition budget and the placement each ask): grammar or refusal. */
const readPatterns = new Map<string, PatternGrammar | PatternRefusal>();
const MAX_READ_PATTERNS = 256;

/** The EBNF of the JSON strings whose value matches `pattern`; throws PatternRefusal with the reason. */
export function patternGrammar(pattern: string): PatternGrammar {
  let read = readPatterns.get(pattern);
  if (read === undefined) {
    try {
      read = readPattern(pattern);
    } catch (error) {
      if (!(error instanceof PatternRefusal)) throw error;
      read = error;
    }
    readPatterns.set(pattern, read);
    if (readPatterns.size > MAX_READ_PATTERNS) readPatterns.delete(readPatterns.keys().next().value!);
  }
  if (read instanceof PatternRefusal) throw read;
  return { ...read, repetitions: [...read.repetitions] };
}

function readPattern(pattern: string): PatternGrammar {
  if (pattern.length > MAX_PATTERN_LENGTH)
    throw new PatternRefusal(`a pattern of ${pattern.length} characters (at most ${MAX_PATTERN_LENGTH})`);
  // read with or without the u flag (schemas are written for both)
  let valid: Error | undefined;
  for (const flags of ["u", ""]) {
    try {
      new RegExp(pattern, flags);
      valid = undefined;
      break;
    } catch (error) {
      valid ??= error as Error;
    }
  }
  if (valid !== undefined) throw new PatternRefusal(`not an ECMA-262 regular expression: ${valid.message}`);
  const tree = new Reader(pattern).parse();
  const repetitions: number[] = [];
  const topAlternatives = tree.kind === "alt" ? tree.items : [tree];
  let minLength = Number.POSITIVE_INFINITY;
  let maxLength: number | undefined = 0;
  const alternatives: string[] = [];
  for (const alternative of topAlternatives) {
    const items = alternative.kind === "seq" ? [...alternative.items] : [alternative];
    let anchoredStart = false;
    let anchoredEnd = false;
    while (items[0]?.kind === "start") {
      anchoredStart = true;
      items.shift();
    }
    while (items.at(-1)?.kind === "end") {
      anchoredEnd = true;
      items.pop();
    }
    const written = write({ kind: "seq", items }, repetitions);
    if (written === undefined) continue; // an alternative no string matches
    const length = lengths({ kind: "seq", items });
    const parts = [...(anchoredStart ? [] : [`${ANY_CHARACTER}*`]), written, ...(anchoredEnd ? [] : [`${ANY_CHARACTER}*`])];
    alternatives.push(parts.join(" "));
    minLength = Math.min(minLength, length.min);
    maxLength =
      maxLength === undefined || length.max === undefined || !anchoredStart || !anchoredEnd ? undefined : Math.max(maxLength, length.max);
  }
  if (alternatives.length === 0) throw new PatternRefusal("no string matches the pattern");
  return {
    body: alternatives.length === 1 ? alternatives[0]! : alternatives.map((a) => `(${a})`).join(" | "),
    minLength,
    maxLength,
    repetitions,
  };
}

/** EBNF of a node (undefined: matches no string); anchors left inside are refused. */
function write(node: Node, repetitions: number[]): string | undefined {
  switch (node.kind) {
    case "start":
    case "end":
      throw new PatternRefusal(
        `an anchor ("${node.kind === "start" ? "^" : "$"}") inside the expression, not at the start or end of an alternative`,
      );
    case "set":
      return setEbnf(node.ranges);
    case "seq": {
      const parts: string[] = [];
      for (const item of node.items) {
        const part = write(item, repetitions);
        if (part === undefined) return undefined;
        parts.push(part);
      }
      return parts.length === 0 ? '""' : parts.length === 1 ? parts[0]! : `(${parts.join(" ")})`;
    }
    case "alt": {
      const parts = node.items.map((item) => write(item, repetitions)).filter((p): p is string => p !== undefined);
      if (parts.length === 0) return undefined;
      return parts.length === 1 ? parts[0]! : `(${parts.join(" | ")})`;
    }
    case "rep": {
      const inner = write(node.item, repetitions);
      if (inner === undefined) return node.min === 0 ? '""' : undefined;
      if (node.max === 0) return '""';
      if (node.min === 0 && node.max === undefined) return `${inner}*`;
      if (node.min === 1 && node.max === undefined) return `${inner}+`;
      if (node.min === 0 && node.max === 1) return `${inner}?`;
      repetitions.push(node.max ?? node.min);
      return `${inner}{${node.min},${node.max ?? ""}}`;
    }
  }
}

/** Fewest and most characters a node matches (anchors none). */
function lengths(node: Node): { min: number; max: number | undefined } {
  switch (node.kind) {
    case "start":
    case "end":
      return { min: 0, max: 0 };
    case "set":
      return { min: 1, max: 1 };
    case "seq": {
      let min = 0;
      let max: number | undefined = 0;
      for (const item of node.items) {
        const l = lengths(item);
        min += l.min;
        max = max === undefined || l.max === undefined ? undefined : max + l.max;
      }
      return { min, max };
    }
    case "alt": {
      const all = node.items.map(lengths);
      return {
        min: Math.min(...all.map((l) => l.min)),
        max: all.some((l) => l.max === undefined) ? undefined : Math.max(...all.map((l) => l.max!)),
      };
    }
    case "rep": {
      const l = lengths(node.item);
      return {
        min: l.min * node.min,
        max: node.max === undefined ? (l.max === 0 ? 0 : undefined) : l.max === undefined ? undefined : l.max * node.max,
      };
    }
  }
}

/** Keywords that may sit beside `pattern` on a placed string (annotations, `type`, and length bounds the pattern already keeps). */
const BESIDE_PATTERN = new Set(["type", "pattern", "minLength", "maxLength", ...ANNOTATIONS]);

/**
 * The placed form of a string schema with a `pattern`: `{ grammar }` when it is enforced exactly (its rule is
 * `name ::= "\"" body "\""`), `{ problem }` (why not, for the refusal) otherwise. undefined when `node` has no pattern.
 */
export function patternPlacement(node: Record<string, unknown>): { grammar: PatternGrammar } | { problem: string } | undefined {
  const pattern = node["pattern"];
  if (pattern === undefined) return undefined;
  if (typeof pattern !== "string") return { problem: "pattern must be a string" };
  if (node["type"] !== "string") return { problem: 'a pattern is enforced on a schema of "type": "string"' };
  const other = Object.keys(node).find((k) => !BESIDE_PATTERN.has(k));
  if (other !== undefined) return { problem: `a pattern is enforced with annotations beside it, not with "${other}"` };
  let grammar: PatternGrammar;
  try {
    grammar = patternGrammar(pattern);
  } catch (error) {
    if (error instanceof PatternRefusal) return { problem: error.message };
    throw error;
  }
  // length bounds are kept when every string the pattern allows meets them already
  const minLength = typeof node["minLength"] === "number" ? node["minLength"] : 0;
  const maxLength = typeof node["maxLength"] === "number" ? node["maxLength"] : undefined;
  if (grammar.minLength < minLength || (maxLength !== undefined && (grammar.maxLength === undefined || grammar.maxLength > maxLength))) {
    return {
      problem: `a pattern is enforced with minLength/maxLength only when every string it matches already meets them (this one matches ${grammar.minLength} to ${grammar.maxLength ?? "any number of"} characters)`,
    };
  }
  return { grammar };
}

/** The rule (named `name`) of the JSON strings a placed pattern allows, quotes included. */
export function patternRule(name: string, grammar: PatternGrammar): string {
  return `${name} ::= "\\"" (${grammar.body}) "\\""`;
}
