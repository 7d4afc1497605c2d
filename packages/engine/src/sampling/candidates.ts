/**
 * Logit filters with llama.cpp's semantics (llama_sampler_*), as pure functions: each takes a
 * candidate list and returns a new one, never touching its input.
 */

/** Candidate tokens: `logits[i]` belongs to token `ids[i]`. `sorted`: descending logit, ties by lowest id. */
export interface Candidates {
  readonly ids: Int32Array;
  readonly logits: Float32Array;
  readonly sorted: boolean;
}

/** Every token of a logits row, in id order. */
export function candidatesFromLogits(logits: Float32Array): Candidates {
  const ids = new Int32Array(logits.length);
  for (let i = 0; i < ids.length; i++) ids[i] = i;
  return { ids, logits: logits.slice(), sorted: false };
}

function subset(source: Candidates, order: ArrayLike<number>, count: number, sorted: boolean): Candidates {
  const ids = new Int32Array(count);
  const logits = new Float32Array(count);
  for (let i = 0; i < count; i++) {
    const k = order[i]!;
    ids[i] = source.ids[k]!;
    logits[i] = source.logits[k]!;
  }
  return { ids, logits, sorted };
}

/** Positions of `candidates` whose logit is >= threshold, sorted descending (ties: lowest id). */
function sortedPositionsAbove(candidates: Candidates, threshold: number): Int32Array {
  const { ids, logits } = candidates;
  const positions: number[] = [];
  for (let i = 0; i < logits.length; i++) if (logits[i]! >= threshold) positions.push(i);
  positions.sort((a, b) => logits[b]! - logits[a]! || ids[a]! - ids[b]!);
  return Int32Array.from(positions);
}

/** Sorted copy (descending logit, ties by lowest id). */
export function sortCandidates(candidates: Candidates): Candidates {
  if (candidates.sorted) return candidates;
  const order = sortedPositionsAbove(candidates, -Infinity);
  // -Infinity logits pass `>= -Infinity`; NaN never does, and is dropped.
  return subset(candidates, order, order.length, true);
}

function maxLogit(candidates: Candidates): number {
  let max = -Infinity;
  for (const logit of candidates.logits) if (logit > max) max = logit;
  return max;
}

/** Keeps the k most likely (k <= 0: all). At least `minKeep` survive. */
export function topK(candidates: Candidates, k: number, minKeep = 1): Candidates {
  const size = candidates.ids.length;
  if (k <= 0 || k >= size) return sortCandidates(candidates);
  const keep = Math.min(Math.max(k, minKeep), size);
  if (candidates.sorted) return subset(candidates, Array.from({ length: keep }, (_, i) => i), keep, true);
  // Threshold search: sort only the logits near the top.
  const max = maxLogit(candidates);
  for (let delta = 4; ; delta *= 2) {
    const threshold = delta > 1e30 ? -Infinity : max - delta;
    const order = sortedPositionsAbove(candidates, threshold);
    if (order.length >= keep || threshold === -Infinity) {
      return subset(candidates, order, Math.min(keep, order.length), true);
    }
  }
}

/** Softmax of the candidates' logits (in their order). */
export function softmax(candidates: Candidates): Float32Array {
  const max = maxLogit(candidates);
  const probabilities = new Float32Array(candidates.logits.length);
  let sum = 0;
  for (let i = 0; i < probabilities.length; i++) {
    const p = Math.exp(candidates.logits[i]! - max);
    probabilities[i] = p;
    sum += p;
  }
  for (let i = 0; i < probabilities.length; i++) probabilities[i] = probabilities[i]! / sum;
  return probabilities;
}

/**
 * Nucleus: the smallest prefix of the sorted candidates whose probability reaches p
 * (p >= 1: all). At least `minKeep` survive.
 */
export function topP(candidates: Candidates, p: number, minKeep = 1): Candidates {
  if (p >= 1 || candidates.ids.length === 0) return candidates;
  // The total of exp(logit - max) over all candidates, then walk the sorted top until p is reached.
  const max = maxLogit(candidates);
  let total = 0;
  for (const logit of candidates.logits) total += Math.exp(logit - max);
  for (let delta = 8; ; delta *= 2) {
    const threshold = delta > 1e30 ? -Infinity : max - delta;
    const order = candidates.sorted
      ? Int32Array.from({ length: candidates.ids.length }, (_, i) => i)
      : sortedPositionsAbove(candidates, threshold);
    let cumulative = 0;
    for (let i = 0; i < order.length; i++) {
      cumulative += Math.exp(candidates.logits[order[i]!]! - max) / total;
      if (cumulative >= p && i + 1 >= minKeep) return subset(candidates, order, i + 1, true);
    }
    if (candidates.sorted || threshold === -Infinity) return subset(candidates, order, order.length, true);
  }
}

/** Keeps tokens whose probability is at least p times the top one's (p <= 0: all). */
export function minP(candidates: Candidates, p: number, minKeep = 1): Candidates {
  if (p <= 0 || candidates.ids.length === 0) return candidates;
  const threshold = maxLogit(candidates) + Math.log(p);
  const order = sortedPositionsAbove(candidates, threshold);
  if (order.length < minKeep) return topK(candidates, minKeep);
  return subset(candidates, order, order.length, true);
}

/** Divides logits by the temperature; temperature <= 0 keeps only the most likely token. */
export function applyTemperature(candidates: Candidates, temperature: number): Candidates {
  if (temperature <= 0) return topK(candidates, 1);
  const logits = candidates.logits.map((logit) => logit / temperature);
  return { ids: candidates.ids, logits, sorted: candidates.sorted };
}

/** Draws one token with probability softmax(logits), using `uniform` in [0, 1). */
export function sampleCandidates(candidates: Candidates, uniform: number): number {
  if (candidates.ids.length === 0) throw new RangeError("no candidates to sample from");
  const probabilities = softmax(candidates);
  let cumulative = 0;
  for (let i = 0; i < probabilities.length; i++) {
    cumulative += probabilities[i]!;
    if (uniform < cumulative) return candidates.ids[i]!;
  }
  return candidates.ids[probabilities.length - 1]!; // rounding: the last one
}

/** Index of the largest logit, ties to the lowest id (llama_sampler_greedy's linear scan). */
export function greedy(logits: Float32Array): number {
  let best = 0;
  let bestLogit = -Infinity;
  for (let i = 0; i < logits.length; i++) {
    if (logits[i]! > bestLogit) {
      bestLogit = logits[i]!;
      best = i;
    }
  }
  return best;
}

export interface PenaltyParams {
  /** Multiplicative repetition penalty (1 = off): positive logits divided, negative multiplied. */
  repeat: number;
  /** Subtracted once per occurrence in the window (0 = off). */
  frequency: number;
  /** Subtracted once if the token occurs in the window at all (0 = off). */
  presence: number;
  /** Window: the last N tokens of `history` (0 = off, -1 = all of it). */
  lastN: number;
}

/**
 * Repetition / frequency / presence penalties over the last `lastN` tokens (llama_sampler_penalties).
 * Returns a new logits row; the input is not modified.
 */
export function applyPenalties(logits: Float32Array, history: readonly number[], params: PenaltyParams): Float32Array {
  const out = logits.slice();
  const windowSize = params.lastN < 0 ? history.length : Math.min(params.lastN, history.length);
  if (windowSize === 0 || (params.repeat === 1 && params.frequency === 0 && params.presence === 0)) return out;
  const counts = new Map<number, number>();
  for (let i = history.length - windowSize; i < history.length; i++) {
    const id = history[i]!;
    counts.set(id, (counts.get(id) ?? 0) + 1);
  }
  for (const [id, count] of counts) {
    if (id < 0 || id >= out.length) continue;
    let logit = out[id]!;
    logit = logit <= 0 ? logit * params.repeat : logit / params.repeat;
    logit -= count * params.frequency + params.presence;
    out[id] = logit;
  }
  return out;
}
