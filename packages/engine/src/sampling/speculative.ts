/**
 * The speculative-sampling acceptance rule (Leviathan et al. 2023; Chen et al. 2023): a drafted
 * token x drawn from the drafter's distribution q is kept with probability min(1, p(x) / q(x)),
 * where p is the target's distribution at the same position; when it is rejected, the token is
 * drawn from the residual norm(max(0, p - q)). The kept or redrawn token is then distributed exactly
 * as p, whatever q is, so speculation does not change what sampling produces.
 */

/** A sparse distribution: `probabilities[i]` of token `ids[i]` (ids distinct, probabilities summing to 1). */
export interface TokenDistribution {
  readonly ids: Int32Array;
  readonly probabilities: Float32Array;
}

/** p(token) in `distribution` (0 when absent). */
export function probabilityOf(distribution: TokenDistribution, token: number): number {
  const { ids, probabilities } = distribution;
  for (let i = 0; i < ids.length; i++) if (ids[i] === token) return probabilities[i]!;
  return 0;
}

/** Draws from `distribution` with `uniform` in [0, 1). */
export function drawFrom(distribution: TokenDistribution, uniform: number): number {
  const { ids, probabilities } = distribution;
  if (ids.length === 0) throw new RangeError("cannot draw from an empty distribution");
  let cumulative = 0;
  for (let i = 0; i < ids.length; i++) {
    cumulative += probabilities[i]!;
    if (uniform < cumulative) return ids[i]!;
  }
  return ids[ids.length - 1]!; // rounding: the last one
}

export interface SpeculativeVerdict {
  /** the drafted token is kept */
  readonly accepted: boolean;
  /** the token at this position: the draft when accepted, else a draw from the residual */
  readonly token: number;
}

/**
 * Decides one drafted position: `target` is p, `draft` is q (the distribution `drafted` was drawn
 * from), `acceptUniform` and `residualUniform` are independent uniforms in [0, 1).
 */
export function speculativeAccept(
  target: TokenDistribution,
  draft: TokenDistribution,
  drafted: number,
  acceptUniform: number,
  residualUniform: number,
): SpeculativeVerdict {
  const p = probabilityOf(target, drafted);
  const q = probabilityOf(draft, drafted);
  if (q > 0 && acceptUniform < Math.min(1, p / q)) return { accepted: true, token: drafted };
  // residual max(0, p - q) over p's support (q adds nothing where p is 0)
  const ids = target.ids;
  const residual = new Float32Array(ids.length);
  let sum = 0;
  for (let i = 0; i < ids.length; i++) {
    const r = Math.max(0, target.probabilities[i]! - probabilityOf(draft, ids[i]!));
    residual[i] = r;
    sum += r;
  }
  if (!(sum > 0)) return { accepted: false, token: drawFrom(target, residualUniform) }; // p == q: rejection has probability 0
  for (let i = 0; i < residual.length; i++) residual[i] = residual[i]! / sum;
  return { accepted: false, token: drawFrom({ ids, probabilities: residual }, residualUniform) };
}
