/** The parity gate's view of our Engine: greedy tokens from ids, plus teacher-forced logits for diagnostics. */
import type { Engine } from "../engine.js";
import type { ParityRunner } from "./gate.js";

/** The Engine options that match the oracle settings of the goldens (F32 K/V, no flash attention). */
export const PARITY_ENGINE_OPTIONS = { kvType: "f32", flashAttention: false } as const;

export function engineParityRunner(engine: Pick<Engine, "generate" | "evaluate">, options: { withLogits?: boolean } = {}): ParityRunner {
  return {
    async greedy(promptIds, nTokens) {
      const result = await engine.generate(promptIds, { maxTokens: nTokens, temperature: 0, stopAtEog: false }).result;
      if (!options.withLogits) return { tokens: result.tokens };
      // Our logits at every generation step, teacher-forced on our own continuation.
      const sequence = [...promptIds, ...result.tokens.slice(0, nTokens - 1)];
      const positions = Array.from({ length: Math.min(nTokens, result.tokens.length) }, (_, s) => promptIds.length - 1 + s);
      const logits = await engine.evaluate(sequence, { positions });
      return { tokens: result.tokens, logits };
    },
  };
}
