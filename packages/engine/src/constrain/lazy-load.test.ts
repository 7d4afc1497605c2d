/** The grammar engine is loaded by the first constrained request, never by an engine without constraints. */
import { describe, expect, it } from "vitest";
import { Engine } from "../engine.js";
import { grammarEngineRequested } from "./xgrammar.js";

describe("the grammar engine is loaded lazily", () => {
  it("not by loading, generating, a thinking budget or a refused schema; by the first constrained request", async () => {
    const engine = await Engine.loadDefault({ maxSequences: 1 });
    try {
      await engine.generateToEnd("Hello", { maxTokens: 4 });
      await engine.generateToEnd("<think>\n", { maxTokens: 4, reasoning: true, thinkingBudget: 1 });
      expect(() => engine.generate("x", { constraint: { type: "json_schema", schema: { not: {} } } })).toThrow(/"not"/);
      expect(grammarEngineRequested()).toBe(false);
      const result = await engine.generateToEnd("Hello", { constraint: { type: "grammar", ebnf: 'root ::= "hi"' } });
      expect(result.text).toBe("hi");
      expect(grammarEngineRequested()).toBe(true);
    } finally {
      engine.dispose();
    }
  });
});
