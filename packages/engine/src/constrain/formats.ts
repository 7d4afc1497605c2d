/**
 * `date`, `time` and `date-time` as grammar rules of our own, placed as patterns are (integer-ranges.ts): xgrammar
 * 0.1.27's own date accepts a 31st day in every month (`2020-02-31`, measured with the schema checker), which
 * validators reject. These are RFC 3339's forms as Python's jsonschema and Ajv's formats check them: a year from
 * 0001, each month's days (29 February in leap years only), hours 00-23, minutes and seconds 00-59 (no leap
 * second), an optional fraction of up to 9 digits (nanoseconds: a model does not write digits forever), and `Z` or a
 * numeric offset. Written with an upper-case `T` and `Z` (validators
 * also take lower case: a subset, so every output is valid).
 */

import { ANNOTATIONS } from "./normalize.js";

const LEAP_SUFFIX = '("0" [48] | [2468] [048] | [13579] [26])';
const YEAR = "(([0-9] [0-9] [0-9] [1-9]) | ([0-9] [0-9] [1-9] [0-9]) | ([0-9] [1-9] [0-9] [0-9]) | ([1-9] [0-9] [0-9] [0-9]))";
const LEAP_YEAR = `(([0-9] [0-9] ${LEAP_SUFFIX}) | (${LEAP_SUFFIX} "00"))`;
const DAY_31 = '(("0" [1-9]) | ([12] [0-9]) | ("3" [01]))';
const DAY_30 = '(("0" [1-9]) | ([12] [0-9]) | "30")';
const DAY_28 = '(("0" [1-9]) | ("1" [0-9]) | ("2" [0-8]))';
const DATE = `((${YEAR} "-" (("0" [13578]) | ("1" [02])) "-" ${DAY_31}) | (${YEAR} "-" (("0" [469]) | "11") "-" ${DAY_30}) | (${YEAR} "-02-" ${DAY_28}) | (${LEAP_YEAR} "-02-29"))`;
const TIME =
  '((([01] [0-9]) | ("2" [0-3])) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{1,9})? ("Z" | ([+-] (([01] [0-9]) | ("2" [0-3])) ":" [0-5] [0-9])))';

const BODIES: Readonly<Record<string, string>> = {
  date: DATE,
  time: TIME,
  "date-time": `${DATE} "T" ${TIME}`,
};

/** Keywords that may sit beside a placed format: its type and annotations. */
const BESIDE = new Set(["type", "format", ...ANNOTATIONS]);

/** The rule (named `name`) of a `{"type": "string", "format": F}` with a format of ours, quotes included; undefined otherwise. */
export function formatRule(name: string, node: Record<string, unknown>): string | undefined {
  const format = node["format"];
  if (typeof format !== "string" || node["type"] !== "string" || BODIES[format] === undefined) return undefined;
  if (!Object.keys(node).every((k) => BESIDE.has(k))) return undefined;
  return `${name} ::= "\\"" ${BODIES[format]} "\\""`;
}
