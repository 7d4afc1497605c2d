/**
 * The values of numeric options (`--port`, `--max-tokens`, `--drain-timeout` ...), one parser for every
 * command. A value is plain decimal: digits, an optional leading minus (so `-1` reaches the range check
 * and gets its message), and a fraction only where the option takes one. JavaScript's `Number()` also
 * reads `0x10`, `0b1`, `1e3`, `+5`, `" 5 "` and `""` (as 0): none of them is how a person writes a count
 * or a number of seconds, and `0x10` read as 16 is a silent misreading, so each is a usage error naming
 * the option and the value. Exponents are refused too: no count or duration here is large enough to need
 * one (sizes such as `--memory 12e9` have their own grammar, with units).
 */
import { CliUsageError } from "../command.js";

/** An integer as typed: decimal digits, optionally after a minus. */
const DECIMAL_INTEGER = /^-?\d+$/;
/** A number as typed: decimal digits with an optional fraction (`2`, `0.5`, `.5`), optionally after a minus. */
const DECIMAL_NUMBER = /^-?(?:\d+(?:\.\d+)?|\.\d+)$/;

/** The integer `text` writes in decimal digits (exact in a double), else NaN. For checks with their own range message (`--threads`). */
export function decimalInteger(text: string): number {
  if (!DECIMAL_INTEGER.test(text)) return Number.NaN;
  const value = Number(text);
  // + 0 turns -0 into 0
  return Number.isSafeInteger(value) ? value + 0 : Number.NaN;
}

export interface IntegerRange {
  min: number;
  /** Inclusive; default: the largest exact integer (Number.MAX_SAFE_INTEGER). */
  max?: number;
  /** The rule as the error states it, when the bounds do not say it all (default: "an integer in [min, max]" or "an integer >= min"). */
  rule?: string;
}

export interface NumberRange {
  min: number;
  /** Inclusive; default: none. */
  max?: number;
  /** True when `min` itself is refused: (0, 1]. */
  minExclusive?: boolean;
  /** The rule as the error states it (default: from the bounds, e.g. "a number in (0, 1]"). */
  rule?: string;
}

function integerRule(range: IntegerRange): string {
  return range.rule ?? (range.max === undefined ? `an integer >= ${range.min}` : `an integer in [${range.min}, ${range.max}]`);
}

function numberRule(range: NumberRange): string {
  if (range.rule !== undefined) return range.rule;
  if (range.max === undefined) return `a number ${range.minExclusive ? ">" : ">="} ${range.min}`;
  return `a number in ${range.minExclusive ? "(" : "["}${range.min}, ${range.max}]`;
}

function usage(name: string, text: string, problem: string): CliUsageError {
  return new CliUsageError(`--${name} ${JSON.stringify(text)}: ${problem}`);
}

/**
 * `--name N`: undefined when the option is absent; else an integer in decimal digits within `range`.
 * Throws CliUsageError `--name "text": not a decimal integer; expected <rule>` or `--name "text": expected <rule>`.
 */
export function parseIntegerOption(name: string, text: string | undefined, range: IntegerRange): number | undefined {
  if (text === undefined) return undefined;
  const rule = integerRule(range);
  if (!DECIMAL_INTEGER.test(text)) throw usage(name, text, `not a decimal integer; expected ${rule}`);
  const value = decimalInteger(text);
  if (!(value >= range.min && value <= (range.max ?? Number.MAX_SAFE_INTEGER))) throw usage(name, text, `expected ${rule}`);
  return value;
}

/**
 * `--name X`: undefined when the option is absent; else a decimal number (fraction allowed) within `range`.
 * Throws CliUsageError `--name "text": not a decimal number; expected <rule>` or `--name "text": expected <rule>`.
 */
export function parseNumberOption(name: string, text: string | undefined, range: NumberRange): number | undefined {
  if (text === undefined) return undefined;
  const rule = numberRule(range);
  if (!DECIMAL_NUMBER.test(text)) throw usage(name, text, `not a decimal number; expected ${rule}`);
  const value = Number(text) + 0;
  const aboveMin = range.minExclusive ? value > range.min : value >= range.min;
  if (!(Number.isFinite(value) && aboveMin && value <= (range.max ?? Number.POSITIVE_INFINITY)))
    throw usage(name, text, `expected ${rule}`);
  return value;
}
