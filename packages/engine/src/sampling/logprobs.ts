/** Log-probabilities of the model's distribution (log-softmax of the raw logits row, before sampling). */

export interface TokenLogprob {
  token: number;
  logprob: number;
}

export interface SampledLogprobs {
  /** log p(chosen) */
  logprob: number;
  /** the `top` most likely tokens, most likely first (ties: lower id first) */
  top: TokenLogprob[];
}

/** Most alternatives a caller may ask for (OpenAI's top_logprobs limit). */
export const MAX_TOP_LOGPROBS = 20;

/** log-softmax of `logits` at `chosen`, and its `top` most likely tokens. */
export function logprobsOf(logits: Float32Array, chosen: number, top: number): SampledLogprobs {
  const n = logits.length;
  let max = Number.NEGATIVE_INFINITY;
  for (let i = 0; i < n; i++) if (logits[i]! > max) max = logits[i]!;
  let sum = 0;
  for (let i = 0; i < n; i++) sum += Math.exp(logits[i]! - max);
  const logZ = max + Math.log(sum);
  const k = Math.max(0, Math.min(top, MAX_TOP_LOGPROBS, n));
  // insertion into a short sorted list: k <= 20
  const best: number[] = [];
  for (let i = 0; i < n && k > 0; i++) {
    const value = logits[i]!;
    if (best.length === k && value <= logits[best[k - 1]!]!) continue;
    let at = best.length;
    while (at > 0 && logits[best[at - 1]!]! < value) at--;
    best.splice(at, 0, i);
    if (best.length > k) best.pop();
  }
  return {
    logprob: logits[chosen]! - logZ,
    top: best.map((token) => ({ token, logprob: logits[token]! - logZ })),
  };
}
