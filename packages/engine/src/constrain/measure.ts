/**
 * The grammar work of a constrained sequence, measured alone (benchmarks): the tokens of an output
 * replayed through a fresh guide, timing what the engine does per token on the JS thread (the
 * rules of the next position, the mask over a logits row of the vocabulary, the advance).
 */
import type { ConstraintSpec } from "../engine-types.js";
import type { Tokenizer } from "../tokenizer/tokenizer.js";
import { GuidedDecoding, planGuide } from "./index.js";

export interface GuidedStepTimes {
  /** tokens replayed (up to the first the constraint refuses) */
  tokens: number;
  /** total ms computing the next position's rules (the grammar engine's bitmask) */
  prepareMs: number;
  /** total ms masking a logits row and advancing the matcher */
  applyMs: number;
}

export async function measureGuidedSteps(tokenizer: Tokenizer, spec: ConstraintSpec, tokens: readonly number[]): Promise<GuidedStepTimes> {
  const guided = new GuidedDecoding(tokenizer);
  const plan = planGuide({ constraint: spec })!;
  const guide = await guided.guide(plan);
  const row = new Float32Array(tokenizer.vocabSize);
  let prepareMs = 0;
  let applyMs = 0;
  let replayed = 0;
  try {
    for (const token of tokens) {
      const t0 = performance.now();
      await guide.prepare();
      const t1 = performance.now();
      guide.apply(row);
      const ok = guide.advance(token);
      const t2 = performance.now();
      prepareMs += t1 - t0;
      applyMs += t2 - t1;
      if (!ok) break;
      replayed++;
    }
  } finally {
    guide.dispose();
    await guided.dispose();
  }
  return { tokens: replayed, prepareMs, applyMs };
}
