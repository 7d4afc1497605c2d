/**
 * Numeric options are plain decimal in every command: `0x10`, `1e3`, `+8`, `""`, spaces and trailing
 * junk are usage errors naming the option and the value (`Number()` read `0x10` as 16). The commands run
 * in this process through runCli with a model path where nothing is, so an option value that got through
 * ends at MODEL_NOT_FOUND (or parity's SKIP) and nothing loads.
 */
import { describe, expect, it } from "vitest";
import { decimalInteger, parseIntegerOption, parseNumberOption } from "./numeric-option.js";
import { parsePromptIds } from "./run.js";
import { runCliCollecting } from "./test-support.js";

const NO_MODEL = "/nonexistent/keepquant-numeric-option-test.gguf";

/** Runs the CLI in this process; returns the exit code and what it printed. */
const cli = (...args: string[]) => runCliCollecting(args);

describe("parseIntegerOption / parseNumberOption", () => {
  it("reads plain decimal; the range check gets negative values", () => {
    expect(parseIntegerOption("n", "16", { min: 0 })).toBe(16);
    expect(parseIntegerOption("n", "007", { min: 0 })).toBe(7);
    expect(parseIntegerOption("n", "0", { min: 0 })).toBe(0);
    expect(parseIntegerOption("n", "-0", { min: 0 })).toBe(0);
    expect(parseIntegerOption("n", undefined, { min: 0 })).toBeUndefined();
    expect(parseNumberOption("x", "2.5", { min: 0 })).toBe(2.5);
    expect(parseNumberOption("x", ".5", { min: 0 })).toBe(0.5);
    expect(parseNumberOption("x", "10", { min: 0 })).toBe(10);
    expect(() => parseIntegerOption("n", "-1", { min: 0 })).toThrow('--n "-1": expected an integer >= 0');
    expect(() => parseNumberOption("x", "-0.5", { min: 0 })).toThrow('--x "-0.5": expected a number >= 0');
  });

  it("refuses hex, binary, octal, exponents, signs, spaces, junk, empty, Infinity and NaN, naming option and value", () => {
    for (const text of [
      "0x10",
      "0b1",
      "0o7",
      "1e3",
      "1E3",
      "+8",
      " 8",
      "8 ",
      "\t8",
      "8\n",
      "8abc",
      "",
      "Infinity",
      "NaN",
      "8.",
      "1_000",
      "٣",
    ]) {
      expect(() => parseIntegerOption("port", text, { min: 0, max: 65535 }), JSON.stringify(text)).toThrow(
        `--port ${JSON.stringify(text)}: not a decimal integer; expected an integer in [0, 65535]`,
      );
      expect(() => parseNumberOption("drain-timeout", text, { min: 0, rule: "a number of seconds" }), JSON.stringify(text)).toThrow(
        `--drain-timeout ${JSON.stringify(text)}: not a decimal number; expected a number of seconds`,
      );
    }
    // an integer option takes no fraction, not even .0
    expect(() => parseIntegerOption("max-tokens", "2.0", { min: 1 })).toThrow(
      '--max-tokens "2.0": not a decimal integer; expected an integer >= 1',
    );
  });

  it("ranges: bounds in the message, exclusive minimum, beyond exact integers, beyond a double", () => {
    expect(() => parseIntegerOption("port", "65536", { min: 0, max: 65535 })).toThrow('--port "65536": expected an integer in [0, 65535]');
    expect(() => parseIntegerOption("seed", "9007199254740993", { min: 0 })).toThrow('--seed "9007199254740993": expected an integer >= 0');
    expect(parseIntegerOption("seed", "9007199254740991", { min: 0 })).toBe(Number.MAX_SAFE_INTEGER);
    expect(() => parseNumberOption("top-p", "0", { min: 0, minExclusive: true, max: 1 })).toThrow(
      '--top-p "0": expected a number in (0, 1]',
    );
    expect(parseNumberOption("top-p", "1", { min: 0, minExclusive: true, max: 1 })).toBe(1);
    expect(() => parseNumberOption("t", "9".repeat(400), { min: 0 })).toThrow(/expected a number >= 0$/);
    expect(() => parseIntegerOption("draft-vocab", "0", { min: 1, rule: "a positive integer" })).toThrow(
      '--draft-vocab "0": expected a positive integer',
    );
  });

  it("decimalInteger: the integer or NaN (for checks with their own message, --threads)", () => {
    expect(decimalInteger("4")).toBe(4);
    expect(decimalInteger("-1")).toBe(-1);
    for (const text of ["0x4", "4 ", "", "4.0", "1e1", "+4", "99999999999999999999"]) expect(decimalInteger(text), text).toBeNaN();
  });
});

describe("lists of integers", () => {
  it("--prompt-ids: decimal token ids separated by commas, nothing else", () => {
    expect(parsePromptIds("1,2,3")).toEqual([1, 2, 3]);
    expect(parsePromptIds("0")).toEqual([0]);
    for (const text of ["", "1,,2", "1, 2", " 1", "0x1", "1e2", "-1", "1,x", "+1", "99999999999999999999"]) {
      expect(() => parsePromptIds(text), JSON.stringify(text)).toThrow(
        `--prompt-ids ${JSON.stringify(text)}: expected comma-separated token ids in decimal digits, e.g. 1,2,3`,
      );
    }
  });
});

/** Every numeric option of every command, with a value it accepts. */
const NUMERIC_OPTIONS: { command: string; option: string; valid: string; args?: string[] }[] = [
  ...[
    "port:0",
    "ctx:16",
    "max-seqs:8",
    "kv-tokens:16",
    "max-queue:8",
    "prefix-cache:8",
    "drain-timeout:2.5",
    "thinking-budget:8",
    "threads:1",
  ].map((entry) => ({ command: "serve", option: entry.split(":")[0]!, valid: entry.split(":")[1]! })),
  ...["run", "chat"].flatMap((command) =>
    ["max-tokens:8", "temperature:.5", "top-k:8", "top-p:0.5", "seed:8", "thinking-budget:8", "threads:1", "ctx:16"].map((entry) => ({
      command,
      option: entry.split(":")[0]!,
      valid: entry.split(":")[1]!,
    })),
  ),
  ...["prompt:8", "gen:8", "repeat:1", "threads:1", "seqs:1,4"].map((entry) => ({
    command: "bench",
    option: entry.split(":")[0]!,
    valid: entry.split(":")[1]!,
  })),
  ...["ctx:16", "seqs:8", "batch-tokens:8"].map((entry) => ({
    command: "plan",
    option: entry.split(":")[0]!,
    valid: entry.split(":")[1]!,
  })),
  ...["serve", "run", "chat"].flatMap((command) =>
    ["grammar-max-repetition:64", "grammar-compile-timeout:2.5"].map((entry) => ({
      command,
      option: entry.split(":")[0]!,
      valid: entry.split(":")[1]!,
    })),
  ),
  ...["serve", "run", "chat", "bench", "plan", "parity"].flatMap((command) =>
    (command === "plan" ? ["draft-tokens:3"] : ["draft-tokens:3", "draft-vocab:8"]).map((entry) => ({
      command,
      option: entry.split(":")[0]!,
      valid: entry.split(":")[1]!,
      args: ["--speculative", "mtp"],
    })),
  ),
  ...["threads:1", "ctx:16"].map((entry) => ({ command: "parity", option: entry.split(":")[0]!, valid: entry.split(":")[1]! })),
];

/** The arguments a command needs before its options are read. */
function commandLine(command: string, option: string, value: string, extra: string[] = []): string[] {
  const required = command === "run" ? ["--prompt", "hi"] : command === "parity" ? ["--goldens", "/nonexistent-goldens"] : [];
  return [command, NO_MODEL, ...required, ...extra, `--${option}=${value}`];
}

describe("numeric options of serve, run, chat, bench, plan and parity", () => {
  const BAD = ["0x10", "1e3", "", " 8", "8 ", "+8", "8abc", "0b1"];
  for (const { command, option, valid, args } of NUMERIC_OPTIONS) {
    it(`${command} --${option}: ${BAD.map((b) => JSON.stringify(b)).join(", ")} are usage errors naming the option and the value; ${valid} is taken`, async () => {
      for (const bad of BAD) {
        const r = await cli(...commandLine(command, option, bad, args));
        expect(r.stderr, `${command} --${option}=${JSON.stringify(bad)}`).toMatch(
          new RegExp(`^error: USAGE: --${option} ${JSON.stringify(bad).replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}: .+\n$`),
        );
        expect(r.code).toBe(command === "plan" ? 1 : 2);
      }
      // a good value gets through to the model path
      const ok = await cli(...commandLine(command, option, valid, args));
      expect(ok.stderr, `${command} --${option}=${valid}`).not.toMatch(/USAGE/);
      if (command === "parity") expect(ok.stdout).toMatch(/^SKIP: model file not found/);
      else expect(ok.stderr).toMatch(/^error: MODEL_NOT_FOUND: /m);
    });
  }

  it("serve --drain-timeout 0x10 (the report: taken as 16 s) is refused", async () => {
    const r = await cli("serve", NO_MODEL, "--drain-timeout", "0x10");
    expect(r.stderr).toBe(
      `error: USAGE: --drain-timeout "0x10": not a decimal number; expected a number of seconds in [0, 2147483.647] (Node's timer maximum, 2^31 - 1 ms)\n`,
    );
    expect(r.code).toBe(2);
  });

  it("KEEPQUANT_NATIVE_THREADS is read by the same digits-only rule", async () => {
    const { code, stderr } = await runCliCollecting(["run", NO_MODEL, "--prompt", "hi"], { KEEPQUANT_NATIVE_THREADS: "0x2" });
    expect(code).toBe(2);
    expect(stderr).toMatch(/^error: USAGE: KEEPQUANT_NATIVE_THREADS="0x2": expected an integer in \[1, \d+\] .*, got not an integer\n$/);
  });
});
