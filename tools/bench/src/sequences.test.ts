import { describe, expect, it } from "vitest";
import { aggregateTokensPerSecond, batchTable, benchPrompt, prefillRows, stepRows } from "./sequences.js";

describe("benchmark prompts and batches", () => {
  it("gives every sequence its own prompt inside the vocabulary", () => {
    const a = benchPrompt(16, 4096, 1);
    const b = benchPrompt(16, 4096, 2);
    expect(a).toHaveLength(16);
    expect(a).not.toEqual(b);
    expect([...a, ...b].every((t) => Number.isInteger(t) && t >= 0 && t < 4096)).toBe(true);
    expect(benchPrompt(3, 1000)).toEqual([13, 932, 851]);
  });

  it("counts the tokens after the last sequence starts and up to the first one's end", () => {
    // sequence 0 starts at 0 and ends at 40, sequence 1 starts at 10 and ends at 50: the window is (10, 40]
    const rate = aggregateTokensPerSecond([
      [0, 10, 20, 30, 40],
      [10, 20, 30, 40, 50],
    ]);
    expect(rate).toBeCloseTo((6 / 30) * 1000);
    expect(aggregateTokensPerSecond([[5], [5]])).toBe(0);
  });

  it("puts every prompt in one batch with logits on each prompt's last row", () => {
    const { rows, logitRows } = prefillRows([
      [7, 8, 9],
      [4, 5],
    ]);
    expect(rows).toEqual([
      { token: 7, pos: 0, seq: 0, logits: false },
      { token: 8, pos: 1, seq: 0, logits: false },
      { token: 9, pos: 2, seq: 0, logits: true },
      { token: 4, pos: 0, seq: 1, logits: false },
      { token: 5, pos: 1, seq: 1, logits: true },
    ]);
    expect(logitRows).toEqual([2, 4]);
    expect(() => prefillRows([[1], []])).toThrow(/sequence 1 is empty/);
  });

  it("makes a step of one token per sequence, row = sequence", () => {
    expect(stepRows([11, 22], [3, 5])).toEqual([
      { token: 11, pos: 3, seq: 0, logits: true },
      { token: 22, pos: 5, seq: 1, logits: true },
    ]);
    expect(() => stepRows([1, 2], [3])).toThrow(/2 tokens for 1 positions/);
  });

  it("formats one row per sequence count with the ratio", () => {
    const cell = (tokensPerSecond: number, msPerStep: number, forwardMsPerStep: number) => ({
      tokensPerSecond,
      msPerStep,
      forwardMsPerStep,
    });
    const lines = batchTable("Q4_K_M", [{ sequences: 8, keepquant: cell(120, 66.7, 60.1), llama: cell(80, 100, 95.04) }]);
    expect(lines[0]).toContain("keepquant / llama.cpp");
    expect(lines).toHaveLength(3);
    expect(lines[2]).toBe("| Q4_K_M | 8 | 120.0 | 66.7 (60.1) | 80.0 | 100.0 (95.0) | **1.50x** |");
  });
});
