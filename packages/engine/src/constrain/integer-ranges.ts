/**
 * Exact integer bounds. The grammar engine's JSON Schema converter (xgrammar 0.1.27) does not enforce `minimum` /
 * `maximum` exactly (measured with the schema checker: `[0, 120]` accepts 121, `maximum: -3` accepts -1). So every
 * `{"type": "integer"}` with bounds is replaced, before the converter sees it, by a placeholder constant; the
 * converter writes the placeholder as a string literal, which is then replaced in its EBNF by a rule of our own
 * that accepts exactly the integers of the range (in JSON's syntax: no leading zeros, no `+`).
 *
 * A range [a, b] of non-negative integers splits by digit count; a range of same-length numbers by its first
 * differing digit (the lower end's branch, the digits strictly between, the upper end's branch), recursively.
 * Negative integers are `-` and a range of magnitudes. Bounds are BigInts, exact at any size.
 */

import { formatRule } from "./formats.js";
import { ANNOTATIONS, mapSubschemas } from "./normalize.js";
import { patternPlacement, patternRule } from "./regex.js";

type Schema = Record<string, unknown>;

function isObject(value: unknown): value is Schema {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** Rules being written: each sub-range gets a rule of its own (`${name}_${n}`). */
interface RuleSink {
  name: string;
  rules: string[];
}

function newRule(sink: RuleSink, alternatives: readonly string[]): string {
  const ref = `${sink.name}_${sink.rules.length}`;
  sink.rules.push(`${ref} ::= ${alternatives.map((alt) => `(${alt})`).join(" | ")}`);
  return ref;
}

/**
 * An EBNF expression for the digit strings of length `x.length` in [x, y] (same length, x <= y): the common
 * prefix, then a rule of the lower end's branch, the digits strictly between (followed by any digits) and the
 * upper end's branch, recursively. Sub-ranges are rules of their own (a trie of rules): xgrammar 0.1.27
 * mismatched the same ranges written as flat alternatives that repeat their prefixes (it accepted
 * 987654321987655 for [123456789, 987654321987654]).
 */
function sameLength(x: string, y: string, sink: RuleSink): string {
  let common = 0;
  while (common < x.length && x[common] === y[common]) common++;
  const prefix = common > 0 ? `${JSON.stringify(x.slice(0, common))} ` : "";
  if (common === x.length) return x.length === 0 ? '""' : JSON.stringify(x);
  const dx = Number(x[common]);
  const dy = Number(y[common]);
  const restX = x.slice(common + 1);
  const restY = y.slice(common + 1);
  const n = restX.length;
  const any = " [0-9]".repeat(n);
  // the lower end's branch is whole (so in the run of digits between) when the rest of x is zeros; the upper's when y's is nines
  const lowWhole = /^0*$/.test(restX);
  const highWhole = /^9*$/.test(restY);
  const lowDigit = lowWhole ? dx : dx + 1;
  const highDigit = highWhole ? dy : dy - 1;
  const alternatives: string[] = [];
  if (!lowWhole) alternatives.push(`"${dx}" ${sameLength(restX, "9".repeat(n), sink)}`);
  if (lowDigit <= highDigit) alternatives.push(`${lowDigit === highDigit ? `"${lowDigit}"` : `[${lowDigit}-${highDigit}]`}${any}`);
  if (!highWhole) alternatives.push(`"${dy}" ${sameLength("0".repeat(n), restY, sink)}`);
  return `${prefix}${alternatives.length === 1 ? alternatives[0] : newRule(sink, alternatives)}`;
}

/** EBNF alternatives for the non-negative integers in [a, b] (b undefined: no upper bound), in JSON's syntax. */
function nonNegative(a: bigint, b: bigint | undefined, sink: RuleSink): string[] {
  const out: string[] = [];
  if (b !== undefined && a > b) return out;
  if (a === 0n) {
    out.push('"0"');
    a = 1n;
    if (b !== undefined && b < 1n) return out;
  }
  const lowLength = a.toString().length;
  const highLength = b === undefined ? undefined : b.toString().length;
  const last = highLength ?? lowLength;
  for (let length = lowLength; length <= last; length++) {
    const from = length === lowLength ? a.toString() : `1${"0".repeat(length - 1)}`;
    const to = highLength !== undefined && length === highLength ? b!.toString() : "9".repeat(length);
    out.push(sameLength(from, to, sink));
  }
  // no upper bound: every longer number
  if (b === undefined) out.push(`[1-9]${" [0-9]".repeat(lowLength)} ${digits(0, Math.max(4, NUMBER_DIGITS.integer - 1 - lowLength))}`);
  return out;
}

/** The name a range's rules carry until the grammar worker names them (`kq_int_range_N`). */
export const RANGE_NAME = "%RANGE%";

/**
 * The EBNF rules of the integers in [low, high] (either undefined: unbounded), the first named `name`; an empty
 * range is an internal error (the caller places non-empty ones). The sign is factored out (`"-" magnitudes | non-negatives`, each its own
 * rule): xgrammar 0.1.27 accepted 9999999999 for the int32 range written as one flat list of signed alternatives,
 * while each half alone was exact.
 */
export function integerRangeRules(name: string, low: bigint | undefined, high: bigint | undefined): string {
  const sink: RuleSink = { name, rules: [] };
  const top: string[] = [];
  if (low === undefined || low < 0n) {
    const magnitudes = nonNegative(high === undefined || high >= 0n ? 1n : -high, low === undefined ? undefined : -low, sink);
    if (magnitudes.length > 0) top.push(`"-" ${newRule(sink, magnitudes)}`);
  }
  if (high === undefined || high >= 0n) {
    const values = nonNegative(low === undefined || low < 0n ? 0n : low, high, sink);
    if (values.length > 0) top.push(newRule(sink, values));
  }
  if (top.length === 0) throw new RangeError(`internal: the integer range [${low}, ${high}] is empty`);
  return [`${name} ::= ${top.map((alt) => `(${alt})`).join(" | ")}`, ...sink.rules].join("\n");
}

/** An integer bound of a schema as a BigInt (`minimum` rounds up, `maximum` down; exclusive ones step past). */
function bound(schema: Schema, side: "low" | "high"): bigint | undefined {
  const inclusive = schema[side === "low" ? "minimum" : "maximum"];
  const exclusive = schema[side === "low" ? "exclusiveMinimum" : "exclusiveMaximum"];
  let result: bigint | undefined;
  const tighten = (value: bigint): void => {
    if (result === undefined || (side === "low" ? value > result : value < result)) result = value;
  };
  if (typeof inclusive === "number" && Number.isFinite(inclusive))
    tighten(BigInt(side === "low" ? Math.ceil(inclusive) : Math.floor(inclusive)));
  if (typeof exclusive === "number" && Number.isFinite(exclusive)) {
    const whole = Number.isInteger(exclusive);
    if (side === "low") tighten(BigInt(whole ? exclusive + 1 : Math.ceil(exclusive)));
    else tighten(BigInt(whole ? exclusive - 1 : Math.floor(exclusive)));
  }
  return result;
}

const BOUNDS = ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"] as const;
/** Keywords that may sit beside a bounded integer and change nothing about its values. */
const BESIDE = new Set(["type", ...BOUNDS, ...ANNOTATIONS]);

/** Placeholders of one grammar: their prefix (absent from the schemas' text) and the rules found so far. */
export interface RangePlaces {
  prefix: string;
  /** placeholder text (as the converter writes the constant) -> EBNF rules of the range (named RANGE_NAME) */
  rules: Record<string, string>;
}

/** Placeholders for the schemas whose JSON text is `text` (the prefix occurs nowhere in it). */
export function rangePlaces(text: string): RangePlaces {
  let prefix = "kqintrange";
  while (text.includes(prefix)) prefix += "q";
  return { prefix, rules: {} };
}

/** Most digits of an integer bound placed (longer ones make rules quadratic in their length). */
export const MAX_RANGE_DIGITS = 40;

/**
 * Digits a generated JSON number may have where the schema sets no bound that needs more: an integer part of
 * 20 (every int64 and uint64), a fraction of 20 (Python's repr of a double needs at most 17 significant ones)
 * and an exponent of 3 (a double's). A model cannot write digits forever.
 */
export const NUMBER_DIGITS = Object.freeze({ integer: 20, fraction: 20, exponent: 3 });
/** `n` to `m` digits, EBNF. */
const digits = (n: number, m: number): string => `[0-9]{${n},${m}}`;
const FRACTION_DIGITS = digits(1, NUMBER_DIGITS.fraction);
const EXPONENT = `([eE] [+-]? ${digits(1, NUMBER_DIGITS.exponent)})?`;

/** JSON numbers >= 0 (no sign; `-0` left out) and <= 0 (`0`, or a sign), exactly. */
const NON_NEGATIVE_NUMBER = `("0" | [1-9] ${digits(0, NUMBER_DIGITS.integer - 1)}) ("." ${FRACTION_DIGITS})? ${EXPONENT}`;
const NUMBER_RULES: Readonly<Record<string, string>> = {
  nonNegative: `${RANGE_NAME} ::= ${NON_NEGATIVE_NUMBER}`,
  nonPositive: `${RANGE_NAME} ::= ("-" ${NON_NEGATIVE_NUMBER}) | ("0" ("." "0"{1,${NUMBER_DIGITS.fraction}})? ${EXPONENT})`,
};

/** Which exact range rule a bounded number schema gets, or undefined when its bounds are not enforced exactly. */
function numberRule(node: Schema): string | undefined {
  if (!Object.keys(node).every((k) => BESIDE.has(k)) || !BOUNDS.some((k) => node[k] !== undefined)) return undefined;
  if (BOUNDS.some((k) => node[k] !== undefined && (typeof node[k] !== "number" || !Number.isFinite(node[k] as number)))) return undefined;
  if (node["type"] === "integer") {
    const low = bound(node, "low");
    const high = bound(node, "high");
    const digits = (v: bigint | undefined): number => (v === undefined ? 0 : v.toString().replace("-", "").length);
    if (digits(low) > MAX_RANGE_DIGITS || digits(high) > MAX_RANGE_DIGITS) return undefined;
    if (low !== undefined && high !== undefined && low > high) return undefined;
    return integerRangeRules(RANGE_NAME, low, high);
  }
  if (node["type"] === "number") {
    const only = (keyword: string): boolean => BOUNDS.every((k) => (k === keyword ? node[k] === 0 : node[k] === undefined));
    if (only("minimum")) return NUMBER_RULES["nonNegative"];
    if (only("maximum")) return NUMBER_RULES["nonPositive"];
    const low = numberBound(node, "low");
    const high = numberBound(node, "high");
    if (low === null || high === null) return undefined;
    const digits = (b: NumberBound | undefined): number => (b === undefined ? 0 : b.value.toString().replace("-", "").length);
    if (digits(low) > MAX_RANGE_DIGITS || digits(high) > MAX_RANGE_DIGITS) return undefined;
    if (
      low !== undefined &&
      high !== undefined &&
      (low.value > high.value || (low.value === high.value && (low.exclusive || high.exclusive)))
    )
      return undefined;
    return numberRangeRules(RANGE_NAME, low, high);
  }
  return undefined;
}

/** A bound of a number range: an integer, and whether the bound itself is left out. */
interface NumberBound {
  value: bigint;
  exclusive: boolean;
}

/**
 * A number schema's bound on one side when every bound it has is a whole number (null when one is not: decimal
 * bounds are not placed), the tighter of the inclusive and exclusive one (exclusive when they are equal).
 */
function numberBound(node: Schema, side: "low" | "high"): NumberBound | undefined | null {
  const inclusive = node[side === "low" ? "minimum" : "maximum"];
  const exclusive = node[side === "low" ? "exclusiveMinimum" : "exclusiveMaximum"];
  let result: NumberBound | undefined;
  for (const [value, isExclusive] of [
    [inclusive, false],
    [exclusive, true],
  ] as const) {
    if (value === undefined) continue;
    if (typeof value !== "number" || !Number.isInteger(value)) return null;
    const candidate = { value: BigInt(value), exclusive: isExclusive };
    const tighter =
      result === undefined ||
      (side === "low" ? candidate.value > result.value : candidate.value < result.value) ||
      (candidate.value === result.value && isExclusive);
    if (tighter) result = candidate;
  }
  return result;
}

/** Fraction digits: any, only zeros, or at least one that is not zero. */
const ANY_FRACTION = `("." ${FRACTION_DIGITS})?`;
const ZERO_FRACTION = `("." "0"{1,${NUMBER_DIGITS.fraction}})?`;
const NONZERO_FRACTION = `"." ${digits(0, NUMBER_DIGITS.fraction - 1)} [1-9] ${digits(0, NUMBER_DIGITS.fraction - 1)}`;

/**
 * EBNF alternatives of the numbers y >= 0 (no sign) between whole-number bounds, written without an exponent: the
 * integer part decides, but at the bounds the fraction does (y <= 7 takes 7 and 7.00, not 7.5; y > 3 takes 3.5,
 * not 3.0).
 */
function magnitudeRange(low: NumberBound, high: NumberBound | undefined, sink: RuleSink): string[] {
  const out: string[] = [];
  // integer parts that take any fraction: (low, high) strictly, and low itself when inclusive
  const first = low.exclusive ? low.value + 1n : low.value;
  const last = high === undefined ? undefined : high.value - 1n;
  if (last === undefined || first <= last) {
    const parts = nonNegative(first, last, sink);
    if (parts.length > 0) out.push(`${newRule(sink, parts)} ${ANY_FRACTION}`);
  }
  if (low.exclusive && (high === undefined || low.value < high.value))
    out.push(`${JSON.stringify(low.value.toString())} ${NONZERO_FRACTION}`);
  if (high !== undefined && !high.exclusive && high.value >= first) out.push(`${JSON.stringify(high.value.toString())} ${ZERO_FRACTION}`);
  return out;
}

/**
 * The EBNF rules of the JSON numbers between whole-number bounds (either undefined: unbounded), written without an
 * exponent (a subset: every number it allows is in the range), the first named `name`. Below zero it is `-` and
 * the range of magnitudes, its bounds swapped.
 */
function numberRangeRules(name: string, low: NumberBound | undefined, high: NumberBound | undefined): string {
  const sink: RuleSink = { name, rules: [] };
  const top: string[] = [];
  if (low === undefined || low.value < 0n) {
    // magnitudes of the negatives: above -high (or above 0, excluded), up to -low
    const from: NumberBound =
      high === undefined || high.value >= 0n ? { value: 0n, exclusive: true } : { value: -high.value, exclusive: high.exclusive };
    const to = low === undefined ? undefined : { value: -low.value, exclusive: low.exclusive };
    const magnitudes = magnitudeRange(from, to, sink);
    if (magnitudes.length > 0) top.push(`"-" ${newRule(sink, magnitudes)}`);
  }
  if (high === undefined || high.value >= 0n) {
    const from: NumberBound = low === undefined || low.value < 0n ? { value: 0n, exclusive: false } : low;
    const values = magnitudeRange(from, high, sink);
    if (values.length > 0) top.push(newRule(sink, values));
  }
  if (top.length === 0) throw new RangeError(`internal: the number range is empty`);
  return [`${name} ::= ${top.map((alt) => `(${alt})`).join(" | ")}`, ...sink.rules].join("\n");
}

/**
 * Whether the bounds of `node` (a schema with `minimum`, `maximum`, `exclusiveMinimum` or `exclusiveMaximum`) are
 * enforced exactly: an `integer` with finite bounds of at most MAX_RANGE_DIGITS digits and nothing else that
 * constrains beside them, or a `number` with `minimum: 0` or `maximum: 0` alone. checkJsonSchema refuses the others.
 */
export function boundsEnforced(node: Schema): boolean {
  return numberRule(node) !== undefined;
}

/**
 * `schema` with each schema whose bounds are enforced (`boundsEnforced`), each string whose `pattern` is
 * (regex.ts) and each date or time format (formats.ts) replaced by a placeholder constant, whose
 * rules join `places.rules` (the grammar worker puts them in for the placeholder in the converter's EBNF).
 * `schema` is not changed.
 */
export function placeIntegerRanges(schema: unknown, places: RangePlaces): unknown {
  const place = (node: unknown): unknown => {
    if (Array.isArray(node)) return node.map(place);
    if (!isObject(node)) return node;
    const pattern = patternPlacement(node);
    const rule =
      pattern !== undefined && "grammar" in pattern
        ? patternRule(RANGE_NAME, pattern.grammar)
        : (formatRule(RANGE_NAME, node) ?? numberRule(node));
    if (rule !== undefined) {
      const marker = `${places.prefix}${Object.keys(places.rules).length}x`;
      places.rules[JSON.stringify(JSON.stringify(marker))] = rule;
      return { const: marker };
    }
    return mapSubschemas(node, place);
  };
  return place(schema);
}
