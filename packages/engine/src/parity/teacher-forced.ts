/**
 * Teacher forcing on the goldens: every prompt followed by the oracle's own continuation, evaluated
 * once, keeping at each generation step only our argmax and our logits at the step's stored top-K
 * ids. No live oracle is needed: the goldens hold llama.cpp's top-K logits of the same positions.
 *
 * Used to compare numerics modes against each other and against llama.cpp on equal footing (the
 * same inputs at every step), e.g. "are our bf16 logits closer to exact arithmetic than llama.cpp's
 * are?" (see docs/usage/parity.md).
 */
import type { Engine } from "../engine.js";
import { comparePrompt, summarize, type ParityNumerics, type ParityReport } from "./gate.js";
import type { ParityGoldens } from "./goldens.js";

/** One prompt's teacher-forced result: per step s, our argmax and our logits at `topIds[s]`. */
export interface TeacherForcedPrompt {
  argmax: number[];
  topLogits: Float32Array[];
}

/** Argmax with ties -> lowest id (the gate's greedy rule). */
export function argmaxToken(logits: Float32Array): number {
  let best = 0;
  for (let i = 1; i < logits.length; i++) if (logits[i]! > logits[best]!) best = i;
  return best;
}

/** Evaluates every golden prompt + oracle continuation on `engine` (one evaluate call per prompt). */
export async function teacherForced(goldens: ParityGoldens, engine: Pick<Engine, "evaluate">): Promise<TeacherForcedPrompt[]> {
  const out: TeacherForcedPrompt[] = [];
  for (const golden of goldens.prompts) {
    const steps = golden.tokens.length;
    const sequence = [...golden.ids, ...golden.tokens.slice(0, steps - 1)];
    const positions = Array.from({ length: steps }, (_, s) => golden.ids.length - 1 + s);
    const logits = await engine.evaluate(sequence, { positions });
    out.push({
      argmax: logits.map(argmaxToken),
      topLogits: logits.map((l, s) => Float32Array.from(golden.topIds[s]!, (id) => l[id]!)),
    });
  }
  return out;
}

/**
 * The gate's verdict from teacher-forced logits. Until the first step where our argmax differs from
 * the oracle's token our greedy prefix equals the oracle's, so that first divergence step, its
 * tokens and its gap are exactly those of a free greedy run (up to batch-vs-decode arithmetic order);
 * only the first divergence matters to the gate.
 */
export function teacherForcedGate(goldens: ParityGoldens, results: readonly TeacherForcedPrompt[], numerics: ParityNumerics): ParityReport {
  const prompts = goldens.prompts.map((golden, i) => comparePrompt(golden, i, { tokens: results[i]!.argmax }));
  return summarize(goldens.fixture, goldens.weightType, numerics, prompts);
}

/**
 * Per generation step (all prompts, in order): max over the stored top-K ids of |candidate - reference|.
 * `candidate` "oracle" means llama.cpp's stored logits from the goldens.
 */
export function topKDistances(
  goldens: ParityGoldens,
  reference: readonly TeacherForcedPrompt[],
  candidate: readonly TeacherForcedPrompt[] | "oracle",
): number[] {
  const distances: number[] = [];
  goldens.prompts.forEach((golden, p) => {
    for (let s = 0; s < golden.tokens.length; s++) {
      const ref = reference[p]!.topLogits[s]!;
      const other = candidate === "oracle" ? golden.topLogits[s]! : candidate[p]!.topLogits[s]!;
      let max = 0;
      for (let j = 0; j < ref.length; j++) {
        const d = Math.abs(other[j]! - ref[j]!);
        max = Number.isNaN(d) ? Number.POSITIVE_INFINITY : Math.max(max, d);
      }
      distances.push(max);
    }
  });
  return distances;
}

/** Median (upper median) and max of a non-empty list. */
export function medianAndMax(values: readonly number[]): { median: number; max: number } {
  const sorted = [...values].sort((a, b) => a - b);
  return { median: sorted[sorted.length >> 1]!, max: sorted[sorted.length - 1]! };
}
