/**
 * JSON text as Python's `json.dumps(value, ensure_ascii=False)` writes it: separators `", "` and `": "`,
 * non-ASCII characters as they are, control characters as `\uXXXX` (but `\n`, `\r`, `\t`, `\b`, `\f`), integers
 * exactly as written (Python's are unbounded), and numbers with a fraction or an exponent as Python's
 * `repr(float)` (`1.0`, `1e-07`, `1e+16`). MaskBench's test instances are fed to the grammar in this form (the
 * published engines were measured on it). `parseJsonKeepingNumbers` keeps each number's literal, which
 * JSON.parse would lose (`1.0` and `1` are written differently).
 */

/** A JSON number as it was written. */
export class JsonNumber {
  constructor(readonly literal: string) {}
  get value(): number {
    return Number(this.literal);
  }
}

export class JsonTextError extends Error {
  override readonly name = "JsonTextError";
}

/** Deepest nesting parsed (deeper is a JsonTextError, never a stack overflow). */
export const MAX_JSON_TEXT_DEPTH = 512;

/** Python's repr of a float given as a JSON number literal with a fraction or an exponent. */
export function pythonFloat(literal: string): string {
  const value = Number(literal);
  if (!Number.isFinite(value)) return value > 0 ? "Infinity" : value < 0 ? "-Infinity" : "NaN";
  if (value === 0) return Object.is(value, -0) ? "-0.0" : "0.0";
  // shortest round-trip digits and the decimal exponent
  const [mantissa, exp] = value.toExponential().split("e") as [string, string];
  const exponent = Number(exp);
  const sign = mantissa.startsWith("-") ? "-" : "";
  const digits = mantissa.replace("-", "").replace(".", "");
  // repr uses fixed notation for exponents -4 .. 15, with at least one digit after the point
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) return `${sign}0.${"0".repeat(-exponent - 1)}${digits}`;
    const whole = digits.slice(0, exponent + 1).padEnd(exponent + 1, "0");
    return `${sign}${whole}.${digits.slice(exponent + 1) || "0"}`;
  }
  const head = digits.length > 1 ? `${digits[0]}.${digits.slice(1)}` : digits;
  return `${sign}${head}e${exponent < 0 ? "-" : "+"}${Math.abs(exponent).toString().padStart(2, "0")}`;
}

/** A string as Python writes it with ensure_ascii=False. */
function pythonString(value: string): string {
  let out = '"';
  for (const char of value) {
    const code = char.codePointAt(0)!;
    if (char === '"') out += '\\"';
    else if (char === "\\") out += "\\\\";
    else if (char === "\n") out += "\\n";
    else if (char === "\r") out += "\\r";
    else if (char === "\t") out += "\\t";
    else if (char === "\b") out += "\\b";
    else if (char === "\f") out += "\\f";
    else if (code < 0x20) out += `\\u${code.toString(16).padStart(4, "0")}`;
    else out += char;
  }
  return `${out}"`;
}

const NUMBER = /-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?/y;
const ESCAPE = /\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})/y;

/** Parses JSON `text`, numbers as JsonNumber (their literal kept); JsonTextError naming the position otherwise. */
export function parseJsonKeepingNumbers(text: string): unknown {
  let i = 0;
  const fail = (what: string): never => {
    throw new JsonTextError(`not JSON at character ${i}: ${what}`);
  };
  const space = (): void => {
    while (i < text.length && (text[i] === " " || text[i] === "\t" || text[i] === "\n" || text[i] === "\r")) i++;
  };
  const string = (): string => {
    if (text[i] !== '"') return fail("expected a string");
    let j = i + 1;
    for (;;) {
      if (j >= text.length) return fail("an unterminated string");
      const code = text.charCodeAt(j);
      if (code === 0x22) break;
      if (code < 0x20) return fail("a control character in a string");
      if (code === 0x5c) {
        ESCAPE.lastIndex = j;
        const sequence = ESCAPE.exec(text);
        if (!sequence) return fail("a malformed escape");
        j += sequence[0].length;
      } else j++;
    }
    const literal = text.slice(i, j + 1);
    i = j + 1;
    return JSON.parse(literal) as string;
  };
  const value = (depth: number): unknown => {
    if (depth > MAX_JSON_TEXT_DEPTH) fail(`nested more than ${MAX_JSON_TEXT_DEPTH} levels`);
    space();
    const c = text[i];
    if (c === "{") {
      i++;
      const object: Record<string, unknown> = {};
      space();
      if (text[i] === "}") {
        i++;
        return object;
      }
      for (;;) {
        space();
        const key = string();
        space();
        if (text[i++] !== ":") fail("expected ':'");
        Object.defineProperty(object, key, { value: value(depth + 1), enumerable: true, writable: true, configurable: true });
        space();
        if (text[i] === ",") i++;
        else if (text[i] === "}") {
          i++;
          return object;
        } else fail("expected ',' or '}'");
      }
    }
    if (c === "[") {
      i++;
      const array: unknown[] = [];
      space();
      if (text[i] === "]") {
        i++;
        return array;
      }
      for (;;) {
        array.push(value(depth + 1));
        space();
        if (text[i] === ",") i++;
        else if (text[i] === "]") {
          i++;
          return array;
        } else fail("expected ',' or ']'");
      }
    }
    if (c === '"') return string();
    for (const [word, result] of [
      ["true", true],
      ["false", false],
      ["null", null],
    ] as const) {
      if (text.startsWith(word, i)) {
        i += word.length;
        return result;
      }
    }
    NUMBER.lastIndex = i;
    const match = NUMBER.exec(text);
    if (!match) return fail("expected a value");
    i += match[0].length;
    return new JsonNumber(match[0]);
  };
  const result = value(1);
  space();
  if (i !== text.length) fail("text after the value");
  return result;
}

/** A parsed value with plain numbers (for a schema). */
export function plainJson(value: unknown): unknown {
  if (value instanceof JsonNumber) return value.value;
  if (Array.isArray(value)) return value.map(plainJson);
  if (typeof value === "object" && value !== null) {
    const out: Record<string, unknown> = {};
    for (const [key, child] of Object.entries(value))
      Object.defineProperty(out, key, { value: plainJson(child), enumerable: true, writable: true, configurable: true });
    return out;
  }
  return value;
}

/** `value` (numbers as JsonNumber or plain numbers) written as Python's json.dumps(value, ensure_ascii=False). */
export function pythonJsonDumps(value: unknown): string {
  if (value instanceof JsonNumber) {
    const literal = value.literal;
    return /[.eE]/.test(literal) ? pythonFloat(literal) : literal === "-0" ? "0" : literal;
  }
  if (typeof value === "number") return Number.isInteger(value) && Math.abs(value) < 2 ** 53 ? String(value) : pythonFloat(String(value));
  if (typeof value === "string") return pythonString(value);
  if (value === null || typeof value === "boolean") return String(value);
  if (Array.isArray(value)) return `[${value.map(pythonJsonDumps).join(", ")}]`;
  if (typeof value === "object") {
    return `{${Object.entries(value as Record<string, unknown>)
      .map(([key, child]) => `${pythonString(key)}: ${pythonJsonDumps(child)}`)
      .join(", ")}}`;
  }
  throw new JsonTextError(`not a JSON value: ${typeof value}`);
}
