/**
 * A sampler for one sequence: penalties -> top-k -> top-p -> min-p -> temperature -> draw, the
 * order of llama.cpp's default chain, with a seeded RNG so a run can be reproduced.
 */
import {
  type Candidates,
  applyPenalties,
  applyTemperature,
  candidatesFromLogits,
  greedy,
  minP,
  sampleCandidates,
  softmax,
  topK,
  topP,
} from "./candidates.js";
import type { TokenDistribution } from "./speculative.js";
import { type ResolvedSamplingParams, type SamplingParams, resolveSamplingParams } from "./params.js";
import { type Rng, createRng } from "./rng.js";

/** Faster kernels a sampler may use in place of its own code, each giving the same result. */
export interface SamplerKernels {
  /** `greedy`'s index (the lowest of the largest value, NaN never taken; 0 when none is above -Infinity). */
  argmax?: ((logits: Float32Array) => number) | undefined;
}

export class Sampler {
  readonly params: Readonly<ResolvedSamplingParams>;
  private readonly rng: Rng;
  private readonly argmaxKernel: (logits: Float32Array) => number;

  constructor(params: SamplingParams = {}, kernels: SamplerKernels = {}) {
    this.params = resolveSamplingParams(params);
    this.rng = createRng(this.params.seed);
    this.argmaxKernel = kernels.argmax ?? greedy;
  }

  /** The greedy pick of a logits row as it is (no penalties): the lowest id of the largest logit. */
  argmax(logits: Float32Array): number {
    return this.argmaxKernel(logits);
  }

  /**
   * The distribution `sample` draws from (after penalties, top-k, top-p, min-p and temperature), as
   * token ids and probabilities; greedy parameters give the single most likely token.
   */
  distribution(logits: Float32Array, history: readonly number[] = []): TokenDistribution {
    const penalized = this.penalize(logits, history);
    if (this.params.temperature <= 0) return { ids: Int32Array.of(this.argmaxKernel(penalized)), probabilities: Float32Array.of(1) };
    const candidates = this.candidates(penalized);
    return { ids: candidates.ids, probabilities: softmax(candidates) };
  }

  /** A uniform in [0, 1) from this sequence's generator (speculative acceptance draws). */
  uniform(): number {
    return this.rng.next();
  }

  /**
   * Picks the next token from a logits row. `history` is the sequence so far (prompt and
   * generated tokens); the penalties look at its last `penaltyLastN` entries.
   */
  sample(logits: Float32Array, history: readonly number[] = []): number {
    const penalized = this.penalize(logits, history);
    if (this.params.temperature <= 0) return this.argmaxKernel(penalized);
    return sampleCandidates(this.candidates(penalized), this.rng.next());
  }

  /** The logits after the penalties. Nothing after this modifies its input, so without penalties the caller's row is used as is. */
  private penalize(logits: Float32Array, history: readonly number[]): Float32Array {
    const p = this.params;
    const penaltiesOn = p.penaltyLastN !== 0 && (p.repeatPenalty !== 1 || p.frequencyPenalty !== 0 || p.presencePenalty !== 0);
    return penaltiesOn
      ? applyPenalties(logits, history, {
          repeat: p.repeatPenalty,
          frequency: p.frequencyPenalty,
          presence: p.presencePenalty,
          lastN: p.penaltyLastN,
        })
      : logits;
  }

  /** The candidates of penalized logits that top-k, top-p and min-p keep, at the temperature. */
  private candidates(penalized: Float32Array): Candidates {
    const p = this.params;
    let candidates = candidatesFromLogits(penalized);
    candidates = topK(candidates, p.topK);
    candidates = topP(candidates, p.topP);
    candidates = minP(candidates, p.minP);
    return applyTemperature(candidates, p.temperature);
  }
}

export type StopReason = "eog" | "max_tokens" | "stop_string" | "abort" | "context";

/**
 * Why generation stops after `token` became the `generated`-th new token, or undefined to go on.
 * (Stop strings are the StopStringMatcher's business.)
 */
export function stopReasonFor(
  token: number,
  generated: number,
  params: Pick<ResolvedSamplingParams, "maxTokens" | "ignoreEog">,
  eogIds: ReadonlySet<number>,
): StopReason | undefined {
  if (!params.ignoreEog && eogIds.has(token)) return "eog";
  if (generated >= params.maxTokens) return "max_tokens";
  return undefined;
}
