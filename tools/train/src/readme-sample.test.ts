/**
 * The README's sample is what the CLI prints: its command (`$ pnpm keepquant run ...`, run with the
 * built CLI and the embedded default model) gives exactly the block's text. Regenerate it with
 * `pnpm --filter @keepquant/train exec tsx src/readme-sample.ts --write`.
 */
import fs from "node:fs";
import { describe, expect, it } from "vitest";
import { README, ReadmeSampleError, findReadmeSample, runCli, splitCommand, withSampleOutput } from "./readme-sample.js";

describe("the README sample", () => {
  it("is what its command prints with the embedded default model (regenerate: pnpm --filter @keepquant/train exec tsx src/readme-sample.ts --write)", () => {
    const sample = findReadmeSample(fs.readFileSync(README, "utf8"));
    expect(sample.args[0]).toBe("run");
    expect(sample.output.length).toBeGreaterThan(0);
    expect(runCli(sample.args)).toBe(sample.output);
  });

  it("finds the block, splits quoted words, rewrites only the output, and names a missing block", () => {
    const text = ["# x", "```", '$ pnpm keepquant run --prompt "Once upon a time" --seed 4', "old", "lines", "```", "after"].join("\n");
    const sample = findReadmeSample(text, "R.md");
    expect(sample.args).toEqual(["run", "--prompt", "Once upon a time", "--seed", "4"]);
    expect(sample.output).toBe("old\nlines");
    expect(withSampleOutput(text, sample, "new")).toBe(text.replace("old\nlines", "new"));
    expect(splitCommand('a "b c" d')).toEqual(["a", "b c", "d"]);
    expect(() => findReadmeSample("no block here", "R.md")).toThrow(ReadmeSampleError);
    expect(() => findReadmeSample("```\n$ pnpm keepquant run\nunclosed", "R.md")).toThrow(/R\.md:2: the sample block is not closed/);
  });
});
