import { describe, expect, it } from "vitest";
import { boundsEnforced, integerRangeRules, placeIntegerRanges, rangePlaces } from "./integer-ranges.js";

/** The rules as one JavaScript regular expression (rules are referenced after they are defined, except the first). */
function rulesRegex(text: string): RegExp {
  const rules = new Map<string, string>();
  for (const line of text.split("\n")) {
    const [name, body] = line.split(" ::= ") as [string, string];
    rules.set(name, body);
  }
  const expand = (body: string): string =>
    body
      .replace(/"([^"]*)"/g, (_, s: string) => s.replace(/[-+.]/g, "\\$&"))
      .replace(/[A-Za-z_][A-Za-z0-9_]*/g, (ref) => (rules.has(ref) ? `(?:${expand(rules.get(ref)!)})` : ref))
      .replace(/ /g, "");
  const first = [...rules.keys()][0]!;
  return new RegExp(`^(?:${expand(rules.get(first)!)})$`);
}

/** A small deterministic generator (xorshift). */
function random(seed: number): () => number {
  let x = seed;
  return () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) / 2 ** 32;
  };
}

describe("integerRangeRules: the integers of a range, exactly, in JSON's syntax", () => {
  it("every integer near the bounds and across the range is matched iff it is inside, for random ranges", () => {
    const next = random(2026);
    const pick = (digits: number): bigint => BigInt(Math.floor(next() * 10 ** digits)) * (next() < 0.3 ? -1n : 1n);
    for (let r = 0; r < 300; r++) {
      let low: bigint | undefined = pick(1 + Math.floor(next() * 8));
      let high: bigint | undefined = pick(1 + Math.floor(next() * 8));
      if (low > high) [low, high] = [high, low];
      const open = next();
      if (open < 0.15) low = undefined;
      else if (open < 0.3) high = undefined;
      const regex = rulesRegex(integerRangeRules("r", low, high));
      const probes = new Set<bigint>([0n, 1n, -1n, 9n, 10n, 99n, 100n, -10n, 1000000000n]);
      for (const b of [low, high]) if (b !== undefined) for (const d of [-11n, -10n, -1n, 0n, 1n, 9n, 10n, 11n]) probes.add(b + d);
      for (let i = 0; i < 20; i++) probes.add(pick(1 + Math.floor(next() * 9)));
      for (const value of probes) {
        const inside = (low === undefined || value >= low) && (high === undefined || value <= high);
        expect(regex.test(value.toString()), `[${low}, ${high}] ${value}`).toBe(inside);
      }
      // never a leading zero, a plus sign or -0
      for (const text of ["00", "01", "+1", "-0", "1.0", ""]) expect(regex.test(text), `[${low}, ${high}] ${text}`).toBe(false);
    }
  });

  it("bounds past 2^53 are exact (BigInt), and int64's range is written in full", () => {
    const regex = rulesRegex(integerRangeRules("r", -(2n ** 63n), 2n ** 63n - 1n));
    expect(regex.test("9223372036854775807")).toBe(true);
    expect(regex.test("9223372036854775808")).toBe(false);
    expect(regex.test("-9223372036854775808")).toBe(true);
    expect(regex.test("-9223372036854775809")).toBe(false);
  });

  it("an empty range is an internal error (the caller places only non-empty ones)", () => {
    expect(() => integerRangeRules("r", 5n, 4n)).toThrow(/empty/);
  });
});

describe("placeIntegerRanges and boundsEnforced", () => {
  it("places integers with bounds (and annotations) and numbers with minimum 0 or maximum 0; leaves data alone", () => {
    const schema = {
      type: "object",
      properties: {
        age: { type: "integer", minimum: 0, maximum: 120, description: "years" },
        ratio: { type: "number", minimum: 0 },
        note: { type: "string", default: { type: "integer", minimum: 1 } },
        tags: { enum: [{ type: "integer", minimum: 1 }] },
      },
    };
    const places = rangePlaces(JSON.stringify(schema));
    const placed = placeIntegerRanges(schema, places) as { properties: Record<string, unknown> };
    expect(placed.properties["age"]).toEqual({ const: `${places.prefix}0x` });
    expect(placed.properties["ratio"]).toEqual({ const: `${places.prefix}1x` });
    expect(placed.properties["note"]).toEqual(schema.properties.note);
    expect(placed.properties["tags"]).toEqual(schema.properties.tags);
    expect(Object.keys(places.rules)).toEqual([JSON.stringify(`"${places.prefix}0x"`), JSON.stringify(`"${places.prefix}1x"`)]);
    // the placeholder prefix occurs nowhere in the schemas
    expect(rangePlaces(JSON.stringify({ const: "kqintrange" })).prefix).toBe("kqintrangeq");
  });

  it("bounds it cannot enforce exactly are not placed (the check refuses them)", () => {
    expect(boundsEnforced({ type: "integer", minimum: 1, maximum: 9 })).toBe(true);
    expect(boundsEnforced({ type: "integer", minimum: 1, enum: [1, 2] })).toBe(false);
    expect(boundsEnforced({ type: "integer", minimum: -1e300 })).toBe(false);
    expect(boundsEnforced({ type: "integer", minimum: 5, maximum: 4 })).toBe(false);
    expect(boundsEnforced({ type: "number", minimum: 0.5 })).toBe(false);
    expect(boundsEnforced({ type: "number", maximum: 0.75, minimum: 0 })).toBe(false);
    // whole-number bounds on a number are placed (exact: checker.test.ts)
    expect(boundsEnforced({ type: "number", minimum: 0, maximum: 1 })).toBe(true);
    expect(boundsEnforced({ type: "number", exclusiveMinimum: 0 })).toBe(true);
    expect(boundsEnforced({ type: "number", maximum: 0 })).toBe(true);
  });
});
