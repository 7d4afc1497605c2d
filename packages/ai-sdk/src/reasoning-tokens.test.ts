import { describe, expect, it } from "vitest";
import { ReasoningCounter } from "./reasoning-tokens.js";

function count(reasoning: boolean, tokens: readonly string[]): number {
  const counter = new ReasoningCounter(reasoning);
  for (const token of tokens) counter.push(token);
  return counter.tokens;
}

describe("ReasoningCounter", () => {
  it("a prompt that opened <think>: every token up to the one that completes </think>", () => {
    expect(count(true, ["I", " think", "</", "think", ">", "\n\n", "Yes", "."])).toBe(5);
    expect(count(true, ["all", " reasoning"])).toBe(2);
    expect(count(true, ["</think>", "answer"])).toBe(1);
  });

  it("an output that opens <think> itself (after whitespace, the tag split over tokens) counts from its start", () => {
    expect(count(false, ["\n", "<", "think", ">", "hm", "</think>", "Yes"])).toBe(6);
    expect(count(false, ["<think>", "a", "</thi", "nk>", "b", "c"])).toBe(4);
  });

  it("an output that does not open <think> has no reasoning tokens, even when it writes </think> later", () => {
    expect(count(false, ["Hello", " <think>", "</think>"])).toBe(0);
    expect(count(false, ["<th", "ink about it"])).toBe(0);
    expect(count(false, [])).toBe(0);
  });
});
