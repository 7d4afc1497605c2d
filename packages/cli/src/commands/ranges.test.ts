/**
 * Numeric flags reach their range checks: a negative number is the flag's value (not an option the
 * parser calls "ambiguous"), and a duration beyond Node's timer maximum is a usage error naming the
 * range (a 1e9 s drain used to overflow the timer and drain after 1 ms; 1e9 is not decimal digits
 * either now: numeric-option.test.ts).
 */
import { spawnSync } from "node:child_process";
import { beforeAll, describe, expect, it } from "vitest";
import { joinNegativeValues } from "../main.js";
import { expectBuiltCli, CLI_BIN } from "./test-support.js";

const bin = CLI_BIN;

beforeAll(() => {
  expectBuiltCli();
});

function run(...args: string[]) {
  const result = spawnSync(process.execPath, [bin, ...args], {
    encoding: "utf8",
    env: { ...process.env, KEEPQUANT_DEBUG: "", CI: "1" },
    stdio: ["ignore", "pipe", "pipe"],
    timeout: 60_000,
  });
  return { code: result.status, stdout: result.stdout, stderr: result.stderr };
}

const DRAIN_RANGE = "expected a number of seconds in [0, 2147483.647] (Node's timer maximum, 2^31 - 1 ms)";

describe("range checks of numeric flags", () => {
  for (const [args, line] of [
    [["serve", "--drain-timeout", "1e9"], `error: USAGE: --drain-timeout "1e9": not a decimal number; ${DRAIN_RANGE}`],
    [["serve", "--drain-timeout", "0x10"], `error: USAGE: --drain-timeout "0x10": not a decimal number; ${DRAIN_RANGE}`],
    [["serve", "--drain-timeout", "2147484"], `error: USAGE: --drain-timeout "2147484": ${DRAIN_RANGE}`],
    [["serve", "--drain-timeout", "Infinity"], `error: USAGE: --drain-timeout "Infinity": not a decimal number; ${DRAIN_RANGE}`],
    [["serve", "--drain-timeout", "-1"], `error: USAGE: --drain-timeout "-1": ${DRAIN_RANGE}`],
    [["run", "--prompt", "hi", "--max-tokens", "-5"], 'error: USAGE: --max-tokens "-5": expected an integer >= 1'],
    [["chat", "--max-tokens", "-5"], 'error: USAGE: --max-tokens "-5": expected an integer >= 1'],
    [["run", "--prompt", "hi", "--temperature", "-0.5"], 'error: USAGE: --temperature "-0.5": expected a number >= 0'],
    [["plan", "--ctx", "-3"], 'error: USAGE: --ctx "-3": expected an integer >= 1'],
    [["serve", "--port", "-1"], 'error: USAGE: --port "-1": expected an integer in [0, 65535]'],
  ] as const) {
    it(`${args.join(" ")}: exit 2 and the range`, () => {
      const r = run(...args);
      expect(r.stderr.trimEnd()).toBe(line);
      expect(r.code).toBe(args[0] === "plan" ? 1 : 2);
    });
  }

  for (const args of [["run", "--prompt", "hi"], ["serve"], ["bench"]]) {
    it(`${args[0]} --threads -1 prints the thread range and the value, not the parser's 'ambiguous'`, () => {
      const r = run(...args, "--threads", "-1");
      expect(r.code).toBe(2);
      expect(r.stderr).toMatch(/^error: USAGE: --threads "-1": expected an integer in \[1, \d+\] .*, got -1\n$/);
      expect(r.stderr).not.toMatch(/ambiguous/);
    });
  }

  it("a value that is an option name stays the parser's error", () => {
    const r = run("run", "--prompt", "--json");
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/ambiguous/);
  });
});

describe("joinNegativeValues", () => {
  const options = { threads: { type: "string" }, json: { type: "boolean" } } as const;
  it("joins a string option and a negative number; leaves booleans, options, positionals and `--` alone", () => {
    expect(joinNegativeValues(["--threads", "-1", "m.gguf"], options)).toEqual(["--threads=-1", "m.gguf"]);
    expect(joinNegativeValues(["--threads", "-.5"], options)).toEqual(["--threads=-.5"]);
    expect(joinNegativeValues(["--threads", "-Infinity"], options)).toEqual(["--threads=-Infinity"]);
    expect(joinNegativeValues(["--json", "-1"], options)).toEqual(["--json", "-1"]);
    expect(joinNegativeValues(["--threads", "--json"], options)).toEqual(["--threads", "--json"]);
    expect(joinNegativeValues(["--threads", "-x"], options)).toEqual(["--threads", "-x"]);
    expect(joinNegativeValues(["--", "--threads", "-1"], options)).toEqual(["--", "--threads", "-1"]);
    expect(joinNegativeValues(["--threads=-1"], options)).toEqual(["--threads=-1"]);
  });
});
