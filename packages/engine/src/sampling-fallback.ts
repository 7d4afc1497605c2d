/** Greedy argmax over one logits row: the first (lowest) id with the strictly largest logit, as llama.cpp. */
export function argmax(logits: Float32Array, offset = 0, length = logits.length - offset): number {
  let best = 0;
  let bestValue = -Infinity;
  for (let i = 0; i < length; i++) {
    const v = logits[offset + i]!;
    if (v > bestValue) {
      bestValue = v;
      best = i;
    }
  }
  return best;
}

import type { SamplingParams } from "./engine-types.js";
import { seededRandom } from "./testing/random-weights.js";

/** Picks the next token from one logits row given the tokens so far. */
export interface TokenSampler {
  sample(logits: Float32Array, history: readonly number[]): number;
}

/**
 * Minimal sampler used until the sampling module is wired: greedy when temperature is 0 (or
 * unset); otherwise penalties -> top-k -> temperature softmax -> top-p -> min-p -> seeded draw.
 */
export function createFallbackSampler(params: SamplingParams): TokenSampler {
  const temperature = params.temperature ?? 0;
  const hasPenalty =
    (params.repetitionPenalty ?? 1) !== 1 || (params.presencePenalty ?? 0) !== 0 || (params.frequencyPenalty ?? 0) !== 0;
  if (temperature <= 0 && !hasPenalty) return { sample: (logits) => argmax(logits) };
  const random = seededRandom(params.seed ?? 0xc0ffee);
  let work = new Float32Array(0);
  return {
    sample(logits, history) {
      if (work.length !== logits.length) work = new Float32Array(logits.length);
      work.set(logits);
      if (hasPenalty) {
        const lastN = params.penaltyLastN ?? 64;
        const counts = new Map<number, number>();
        for (let i = Math.max(0, history.length - lastN); i < history.length; i++) {
          const id = history[i]!;
          counts.set(id, (counts.get(id) ?? 0) + 1);
        }
        const rep = params.repetitionPenalty ?? 1;
        for (const [id, count] of counts) {
          let v = work[id]!;
          v = v <= 0 ? v * rep : v / rep;
          v -= count * (params.frequencyPenalty ?? 0) + (params.presencePenalty ?? 0);
          work[id] = v;
        }
      }
      if (temperature <= 0) return argmax(work);
      const topK = params.topK && params.topK > 0 ? Math.min(params.topK, work.length) : work.length;
      const ids = Array.from({ length: work.length }, (_, i) => i);
      ids.sort((a, b) => work[b]! - work[a]! || a - b);
      const candidates = ids.slice(0, topK);
      const max = work[candidates[0]!]!;
      let probs = candidates.map((id) => Math.exp((work[id]! - max) / temperature));
      let sum = probs.reduce((a, b) => a + b, 0);
      probs = probs.map((p) => p / sum);
      let keep = probs.length;
      const topP = params.topP ?? 1;
      if (topP < 1) {
        let cumulative = 0;
        for (let i = 0; i < probs.length; i++) {
          cumulative += probs[i]!;
          if (cumulative >= topP) {
            keep = i + 1;
            break;
          }
        }
      }
      const minP = params.minP ?? 0;
      if (minP > 0) {
        const threshold = probs[0]! * minP;
        let k = 0;
        while (k < keep && probs[k]! >= threshold) k++;
        keep = Math.max(1, k);
      }
      sum = 0;
      for (let i = 0; i < keep; i++) sum += probs[i]!;
      let r = random() * sum;
      for (let i = 0; i < keep; i++) {
        r -= probs[i]!;
        if (r <= 0) return candidates[i]!;
      }
      return candidates[keep - 1]!;
    },
  };
}
