/**
 * The bounds of the grammar engine (EngineOptions.grammarLimits): what keeps one schema, grammar or
 * request from holding the others. Two are checked before compiling, from the constraint itself (the
 * repetition counts below); the others bound a compile while it runs (its time and the WebAssembly
 * memory of its worker), and a compile past them is ended with its worker.
 *
 * Why repetitions: xgrammar (0.1.27) writes a JSON string with `maxLength: n` as n copies of a character
 * class, each a grammar position whose token masks the compile precomputes; past 256 copies it stops
 * copying and computes the masks inside such a string at every token instead. Measured on an AMD EPYC
 * (Zen 3, 2 busy cores) with an 8,192-token vocabulary: maxLength 16 compiles in 0.35 s and 256 in 1.25 s,
 * with masks of 0.1-0.3 ms; maxLength 300 to 32767 compile in 1.2-2.1 s but each mask inside the string
 * takes 20-400 ms (1.2 s at worst), which held every sequence batched with it. Distinct bounds add up:
 * 20 strings of maxLength 200..219 compiled in 42 s (20 of maxLength 200, one rule, in 2.4 s). An array's
 * `maxItems` repeats a reference to its item rule and costs little (maxItems 1000: 60 ms, masks 0.2 ms).
 */
import { EngineOptionError } from "../errors.js";
import { ConstraintError } from "./errors.js";
import { patternPlacement } from "./regex.js";

/** The bounds; every field is optional in EngineOptions.grammarLimits (the defaults below). */
export interface GrammarLimits {
  /**
   * A compile (a new schema, grammar or tool set) that runs longer than this on the grammar worker is
   * ended with its worker (CONSTRAINT_TOO_COMPLEX); the other sequences' matchers move to a new one.
   */
  compileTimeoutMs: number;
  /**
   * The longest repeated character a constraint may ask for: a JSON string's `maxLength`, `{m,n}` after
   * a character class or a string literal in an EBNF grammar.
   */
  maxRepetition: number;
  /**
   * The sum of the repetitions of a constraint (those above, and a string's `minLength` without a
   * `maxLength`), each distinct one counted once.
   */
  maxRepetitionSum: number;
  /** MiB of WebAssembly memory one grammar worker may grow to; a compile or matcher past it is refused. */
  memoryMiB: number;
  /**
   * Grammar workers (each a thread with its own copy of the vocabulary). A new grammar compiles on a
   * worker where no running sequence's matcher lives, when there is one, so that those sequences keep
   * their masks meanwhile; the matchers of a grammar live on the worker that compiled it.
   */
  workers: number;
}

export const DEFAULT_GRAMMAR_LIMITS: Readonly<GrammarLimits> = {
  // a compile runs off the JS thread and no running sequence waits on it: the budget frees the worker and bounds a client's wait
  compileTimeoutMs: 30_000,
  // xgrammar's repetition threshold: past it, masks inside the string are computed at every token
  maxRepetition: 256,
  // eight distinct strings of the longest bound
  maxRepetitionSum: 2048,
  // half of what xgrammar's WebAssembly build can address (2 GiB)
  memoryMiB: 1024,
  workers: 2,
};

/** The WebAssembly memory xgrammar's build can address at most (MiB). */
const XGRAMMAR_MAX_MEMORY_MIB = 2048;

/** EngineOptions.grammarLimits with the defaults filled in; ENGINE_BAD_OPTION names a bad field. */
export function resolveGrammarLimits(options: Partial<GrammarLimits> | undefined): GrammarLimits {
  if (options === undefined) return { ...DEFAULT_GRAMMAR_LIMITS };
  if (typeof options !== "object" || options === null) {
    throw new EngineOptionError("ENGINE_BAD_OPTION", `grammarLimits must be an object, got ${String(options)}`, { field: "grammarLimits" });
  }
  const limits = { ...DEFAULT_GRAMMAR_LIMITS };
  for (const [key, value] of Object.entries(options)) {
    if (value === undefined) continue;
    const field = `grammarLimits.${key}`;
    if (!(key in DEFAULT_GRAMMAR_LIMITS)) {
      throw new EngineOptionError(
        "ENGINE_BAD_OPTION",
        `${field} is not a grammar limit (${Object.keys(DEFAULT_GRAMMAR_LIMITS).join(", ")})`,
        { field },
      );
    }
    if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 1) {
      throw new EngineOptionError("ENGINE_BAD_OPTION", `${field} must be a positive integer, got ${String(value)}`, { field });
    }
    limits[key as keyof GrammarLimits] = value;
  }
  if (limits.memoryMiB > XGRAMMAR_MAX_MEMORY_MIB) {
    throw new EngineOptionError(
      "ENGINE_BAD_OPTION",
      `grammarLimits.memoryMiB must be at most ${XGRAMMAR_MAX_MEMORY_MIB} (what the grammar engine can address), got ${limits.memoryMiB}`,
      { field: "grammarLimits.memoryMiB" },
    );
  }
  return limits;
}

/** One repetition of a constraint: `count` copies, `key` the same for repetitions the grammar engine compiles once. */
interface Repetition {
  count: number;
  key: string;
  /** the request parameter ("constraint.schema", "constraint.tools[0].parameters", "constraint.ebnf") */
  field: string;
  /** what it is, for messages: `maxLength 300 at /properties/notes`, `{0,5000} after [a-z] on line 3` */
  what: string;
  /** the JSON pointer of the schema holding it, and its keyword */
  path?: string;
  keyword?: string;
  /** counted in the sum only (a string's minLength without a maxLength: a lower bound, the rest is free) */
  sumOnly?: boolean;
}

/** Sums the repetitions of one constraint against GrammarLimits; throws CONSTRAINT_TOO_COMPLEX past a bound. */
export class RepetitionBudget {
  private readonly seen = new Map<string, Repetition>();
  private sum = 0;

  constructor(private readonly limits: Pick<GrammarLimits, "maxRepetition" | "maxRepetitionSum">) {}

  add(repetition: Repetition): void {
    const { count, field, what } = repetition;
    const details = {
      field,
      ...(repetition.path === undefined ? {} : { path: repetition.path }),
      ...(repetition.keyword === undefined ? {} : { keyword: repetition.keyword }),
    };
    if (count > this.limits.maxRepetition && repetition.sumOnly !== true) {
      throw new ConstraintError(
        "CONSTRAINT_TOO_COMPLEX",
        `${field}: ${what} is above ${this.limits.maxRepetition}, the longest repetition the grammar engine compiles (grammarLimits.maxRepetition): past it, the masks inside it are computed anew at every token (tens to hundreds of ms each). Lower it, or drop the bound (an unbounded string or repetition costs little)`,
        details,
      );
    }
    if (count === 0 || this.seen.has(repetition.key)) return;
    this.seen.set(repetition.key, repetition);
    this.sum += count;
    if (this.sum > this.limits.maxRepetitionSum) {
      const largest = [...this.seen.values()].sort((a, b) => b.count - a.count);
      const named = largest
        .slice(0, 3)
        .map((r) => r.what)
        .join(", ");
      const more = largest.length > 3 ? ` and ${largest.length - 3} more` : "";
      throw new ConstraintError(
        "CONSTRAINT_TOO_COMPLEX",
        `${field}: its length bounds add up to ${this.sum} repeated characters (${named}${more}; each distinct bound counts once), above ${this.limits.maxRepetitionSum} (grammarLimits.maxRepetitionSum), and the compile grows with them. Use fewer distinct bounds or shorter ones`,
        details,
      );
    }
  }
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** A JSON pointer segment (RFC 6901 escaping). */
function pointer(path: string, segment: string | number): string {
  return `${path}/${String(segment).replace(/~/g, "~0").replace(/\//g, "~1")}`;
}

/**
 * Adds the string length bounds of `schema` (already checked by checkJsonSchema) to `budget`: a string
 * with `maxLength: n` is n repeated characters, one with only `minLength: n` is n in the sum (its masks
 * past 256 characters are slow too, 200 ms on that vocabulary, but a lower bound alone is accepted: its
 * sequence sits its steps out while its masks come, the others go on).
 */
export function addSchemaRepetitions(schema: unknown, field: string, budget: RepetitionBudget): void {
  // a placed pattern's rule repeats what its quantifiers say (its length bounds add nothing: regex.ts); false when
  // the pattern is not placed
  const addPattern = (
    placed: ReturnType<typeof patternPlacement>,
    pattern: unknown,
    whose: string,
    keyword: string,
    path: string,
  ): boolean => {
    if (placed === undefined || !("grammar" in placed)) return false;
    const what = (n: number) => `a repetition of ${n} in ${whose} at ${path === "" ? "the root" : path}`;
    placed.grammar.repetitions.forEach((n, i) =>
      budget.add({ count: n, key: `pattern${JSON.stringify(pattern)}#${i}`, field, what: what(n), path, keyword }),
    );
    return true;
  };
  const stack: { value: unknown; path: string }[] = [{ value: schema, path: "" }];
  while (stack.length > 0) {
    const { value, path } = stack.pop()!;
    if (!isObject(value)) continue;
    const minLength = typeof value["minLength"] === "number" ? value["minLength"] : 0;
    const maxLength = typeof value["maxLength"] === "number" ? value["maxLength"] : undefined;
    const keyword = maxLength === undefined ? "minLength" : "maxLength";
    const count = maxLength ?? minLength;
    // length bounds apply to strings (a schema without `type` may be one)
    const type = value["type"];
    const string = type === undefined || type === "string" || (Array.isArray(type) && type.includes("string"));
    const at = path === "" ? "the root" : path;
    if (!addPattern(patternPlacement(value), value["pattern"], "the pattern", "pattern", path) && count > 0 && string) {
      budget.add({
        count,
        key: `string{${minLength},${maxLength ?? ""}}`,
        field,
        what: `${keyword} ${count} at ${at}`,
        path,
        keyword,
        ...(maxLength === undefined ? { sumOnly: true } : {}),
      });
    }
    const patterns = value["patternProperties"];
    if (isObject(patterns)) {
      // the keys' pattern (open-objects.ts places it as a string's) repeats what its quantifiers say, as a value's
      for (const [key, child] of Object.entries(patterns)) {
        stack.push({ value: child, path: pointer(pointer(path, "patternProperties"), key) });
        addPattern(patternPlacement({ type: "string", pattern: key }), key, "the keys' pattern", "patternProperties", path);
      }
    }
    for (const keyword of ["properties", "$defs", "definitions"]) {
      const children = value[keyword];
      if (isObject(children))
        for (const [name, child] of Object.entries(children)) stack.push({ value: child, path: pointer(pointer(path, keyword), name) });
    }
    for (const keyword of ["additionalProperties", "items"]) {
      if (value[keyword] !== undefined) stack.push({ value: value[keyword], path: pointer(path, keyword) });
    }
    for (const keyword of ["prefixItems", "anyOf", "allOf"]) {
      const children = value[keyword];
      if (Array.isArray(children)) children.forEach((child, i) => stack.push({ value: child, path: pointer(pointer(path, keyword), i) }));
    }
  }
}

/** `{m}`, `{m,}` or `{m,n}` (xgrammar's EBNF repetition), at a position. */
const EBNF_REPEAT = /\{\s*(\d+)\s*(,\s*(\d*)\s*)?\}/y;

/**
 * Adds the repetitions `{m,n}` of single characters in an EBNF grammar (after a character class or a
 * string literal) to `budget`. A repetition of a rule or a group is not counted (it repeats a reference,
 * as a JSON array does); the compile budget bounds what this estimate misses.
 */
export function addEbnfRepetitions(ebnf: string, field: string, budget: RepetitionBudget): void {
  let line = 1;
  /** the terminal just before (the text of a character class or string literal), undefined after anything else */
  let terminal: string | undefined;
  for (let i = 0; i < ebnf.length; ) {
    const c = ebnf[i]!;
    if (c === "\n") {
      line++;
      i++;
    } else if (c === " " || c === "\t" || c === "\r") {
      i++;
    } else if (c === "#") {
      while (i < ebnf.length && ebnf[i] !== "\n") i++;
    } else if (c === '"' || c === "'" || c === "[") {
      const close = c === "[" ? "]" : c;
      const start = i++;
      while (i < ebnf.length && ebnf[i] !== close) i += ebnf[i] === "\\" ? 2 : 1;
      i++;
      terminal = ebnf.slice(start, i);
    } else if (c === "{") {
      EBNF_REPEAT.lastIndex = i;
      const match = EBNF_REPEAT.exec(ebnf);
      if (match && terminal !== undefined) {
        const count = Number(match[3] === undefined || match[3] === "" ? match[1] : match[3]);
        const shown = terminal.length > 24 ? `${terminal.slice(0, 21)}...` : terminal;
        budget.add({ count, key: `${terminal}${match[0]}`, field, what: `the repetition ${match[0]} of ${shown} on line ${line}` });
      }
      terminal = undefined;
      i = match ? i + match[0].length : i + 1;
    } else {
      terminal = undefined;
      i++;
    }
  }
}
