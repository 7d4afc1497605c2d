import { describe, expect, it } from "vitest";
import { JsonNumber, JsonTextError, parseJsonKeepingNumbers, plainJson, pythonFloat, pythonJsonDumps } from "./python-json.js";

describe("pythonJsonDumps: JSON as Python's json.dumps(value, ensure_ascii=False) writes it", () => {
  it("separators, strings, and integers and floats as their literals say", () => {
    const value = parseJsonKeepingNumbers(
      '{"a":1,"b":[1.0,2.50,1e5,-0,1E-7,12345678901234567890],"c":"é\\n\\u0001\\"\\\\/","d":{},"e":[],"f":null,"g":true}',
    );
    expect(pythonJsonDumps(value)).toBe(
      '{"a": 1, "b": [1.0, 2.5, 100000.0, 0, 1e-07, 12345678901234567890], "c": "é\\n\\u0001\\"\\\\/", "d": {}, "e": [], "f": null, "g": true}',
    );
  });

  it("floats as Python's repr: fixed from 1e-4 to below 1e16, else with a two-digit exponent", () => {
    const cases: [string, string][] = [
      ["0.0001", "0.0001"],
      ["0.00001", "1e-05"],
      ["123456789012345.6", "123456789012345.6"],
      ["1e16", "1e+16"],
      ["1.5e300", "1.5e+300"],
      ["-2.0", "-2.0"],
      ["0.1", "0.1"],
      ["-0.0", "-0.0"],
      ["100.0", "100.0"],
    ];
    for (const [literal, repr] of cases) expect(pythonFloat(literal), literal).toBe(repr);
  });

  it("keeps duplicate keys' first position with the last value (as Python's dict), and plain numbers for a schema", () => {
    const value = parseJsonKeepingNumbers('{"x": 1, "y": 2, "x": 3.0}');
    expect(pythonJsonDumps(value)).toBe('{"x": 3.0, "y": 2}');
    expect(plainJson(value)).toEqual({ x: 3, y: 2 });
    expect((parseJsonKeepingNumbers("[1.50]") as JsonNumber[])[0]).toBeInstanceOf(JsonNumber);
  });

  it("refuses what is not JSON with the position, and nesting past its bound without a stack overflow", () => {
    for (const text of ["{", '{"a" 1}', "[1,]", "01", "1 2", '"\\x"', "nul"])
      expect(() => parseJsonKeepingNumbers(text), text).toThrow(JsonTextError);
    expect(() => parseJsonKeepingNumbers("[".repeat(100_000))).toThrow(/nested more than 512 levels/);
  });
});
