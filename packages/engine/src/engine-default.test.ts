import { defaultModelInfo } from "@keepquant/default-model";
import { nativeStatus } from "@keepquant/tt-native";
import { describe, expect, it } from "vitest";
import { Engine } from "./engine.js";
import { EngineError } from "./errors.js";

describe("Engine.loadDefault", () => {
  it("loads the embedded default model from @keepquant/default-model, with its context_length as the context", async () => {
    const engine = await Engine.loadDefault({ provider: "ts", maxSequences: 1 });
    try {
      expect(engine.contextLength).toBe(4096);
      const result = await engine.generate([1, 2, 3], { maxTokens: 3, ignoreEog: true }).result;
      expect(result.tokens).toHaveLength(3);
      // the shipped default is the trained model (tools/train), not random weights
      expect(defaultModelInfo()).toMatchObject({ name: "keepquant-default-fortunes", synthetic: false });
    } finally {
      engine.dispose();
    }
  });

  it("contextLength refuses a longer prompt with ENGINE_PROMPT_TOO_LONG and stops a generation at the context", async () => {
    const engine = await Engine.loadDefault({ provider: "ts", maxSequences: 1, contextLength: 6 });
    try {
      let caught: unknown;
      try {
        engine.generate([1, 2, 3, 4, 5, 6]);
      } catch (error) {
        caught = error;
      }
      expect(EngineError.isInstance(caught) && caught.code).toBe("ENGINE_PROMPT_TOO_LONG");
      const result = await engine.generate([1, 2, 3], { maxTokens: 10, ignoreEog: true }).result;
      expect(result.tokens).toHaveLength(3);
      expect(result.stopReason).toBe("context");
    } finally {
      engine.dispose();
    }
  });

  const nativeMissing = nativeStatus().cpu.loaded ? undefined : "the native CPU arm is not built";
  it.skipIf(nativeMissing !== undefined)(
    `a thread count the native pool refuses is ENGINE_BAD_OPTION naming the range, never a fallback to TypeScript${nativeMissing ? ` (skipped: ${nativeMissing})` : ""}`,
    async () => {
      const error = await Engine.loadDefault({ threads: 100_000 }).catch((e: unknown) => e);
      expect(EngineError.isInstance(error) && error.code).toBe("ENGINE_BAD_OPTION");
      expect((error as EngineError).field).toBe("threads");
      expect((error as Error).message).toMatch(/expected an integer in \[1, \d+\]/);
    },
  );
});
