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

/** True when position a ranks below position b: lower logit, or equal logit and higher id. */
function worse(candidates: Candidates, a: number, b: number): boolean {
  const la = candidates.logits[a]!;
  const lb = candidates.logits[b]!;
  return la < lb || (la === lb && candidates.ids[a]! > candidates.ids[b]!);
}

/**
 * Positions of the best `k` candidates, best first (descending logit, ties by lowest id); NaN
 * logits are skipped. A size-k min-heap over one pass: O(n log k).
 */
function topPositions(candidates: Candidates, k: number): Int32Array {
  const n = candidates.logits.length;
  const heap = new Int32Array(Math.min(k, n));
  let size = 0;
  const siftDown = (start: number): void => {
    let i = start;
    for (;;) {
      const l = 2 * i + 1;
      const r = l + 1;
      let m = i;
      if (l < size && worse(candidates, heap[l]!, heap[m]!)) m = l;
      if (r < size && worse(candidates, heap[r]!, heap[m]!)) m = r;
      if (m === i) return;
      const t = heap[i]!;
      heap[i] = heap[m]!;
      heap[m] = t;
      i = m;
    }
  };
  const logits = candidates.logits;
  for (let pos = 0; pos < n; pos++) {
    const logit = logits[pos]!;
    if (Number.isNaN(logit)) continue;
    // Fast reject: strictly below the worst kept logit.
    if (size === heap.length && size > 0 && logit < logits[heap[0]!]!) continue;
    if (size < heap.length) {
      // sift up
      let i = size++;
      heap[i] = pos;
      while (i > 0) {
        const parent = (i - 1) >> 1;
        if (!worse(candidates, heap[i]!, heap[parent]!)) break;
        const t = heap[i]!;
        heap[i] = heap[parent]!;
        heap[parent] = t;
        i = parent;
      }
    } else if (size > 0 && worse(candidates, heap[0]!, pos)) {
      heap[0] = pos;
      siftDown(0);
    }
  }
  const out = heap.slice(0, size);
  out.sort((a, b) => (worse(candidates, a, b) ? 1 : worse(candidates, b, a) ? -1 : 0));
  return out;
}

/** Sorted copy (descending logit, ties by lowest id; NaN dropped). */
export function sortCandidates(candidates: Candidates): Candidates {
  if (candidates.sorted) return candidates;
  const order = topPositions(candidates, candidates.ids.length);
  return subset(candidates, order, order.length, true);
}

function maxLogit(candidates: Candidates): number {
  let max = -Infinity;
  for (const logit of candidates.logits) if (logit > max) max = logit;
  return max;
}

/** Keeps the k most likely, sorted (k <= 0: all, unchanged). At least `minKeep` survive. */
export function topK(candidates: Candidates, k: number, minKeep = 1): Candidates {
  const size = candidates.ids.length;
  if (k <= 0) return candidates;
  const keep = Math.min(Math.max(k, minKeep), size);
  if (candidates.sorted)
    return subset(
      candidates,
      Array.from({ length: keep }, (_, i) => i),
      keep,
      true,
    );
  const order = topPositions(candidates, keep);
  return subset(candidates, order, order.length, true);
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

/** Sorted-prefix sizes tried before topP switches to its histogram pass. */
const TOP_P_SORTED_TRIES = [64, 1024] as const;
/** Histogram buckets of topP's large-prefix pass. */
const TOP_P_BUCKETS = 4096;

/**
 * Nucleus: the smallest prefix of the sorted candidates whose probability reaches p
 * (p >= 1: all, unchanged). At least `minKeep` survive. Peaked distributions sort only their top
 * (up to 1024 tokens); flatter ones find the cut with a logit histogram and sort one bucket, and
 * return the kept set in candidate order (`sorted: false`).
 */
export function topP(candidates: Candidates, p: number, minKeep = 1): Candidates {
  const n = candidates.ids.length;
  if (p >= 1 || n === 0) return candidates;
  const logits = candidates.logits;
  const max = maxLogit(candidates);
  let total = 0;
  for (const logit of logits) if (!Number.isNaN(logit)) total += Math.exp(logit - max);
  const target = p * total;

  for (const tries of TOP_P_SORTED_TRIES) {
    const k = Math.min(tries, n);
    const order = candidates.sorted ? Int32Array.from({ length: k }, (_, i) => i) : topPositions(candidates, k);
    let cumulative = 0;
    for (let i = 0; i < order.length; i++) {
      cumulative += Math.exp(logits[order[i]!]! - max);
      if (cumulative >= target && i + 1 >= minKeep) return subset(candidates, order, i + 1, true);
    }
    if (k === n) return subset(candidates, order, order.length, true);
  }

  // Histogram pass: bucket b holds logits in [max - (b + 1) w, max - b w) (bucket 0 includes max).
  let min = Infinity;
  for (const logit of logits) if (logit < min && logit > -Infinity) min = logit;
  const width = Math.max((max - min) / TOP_P_BUCKETS, Number.MIN_VALUE);
  const bucketOf = (logit: number): number => Math.min(TOP_P_BUCKETS - 1, Math.floor((max - logit) / width));
  const mass = new Float64Array(TOP_P_BUCKETS);
  const count = new Int32Array(TOP_P_BUCKETS);
  for (const logit of logits) {
    if (Number.isNaN(logit) || logit === -Infinity) continue;
    const b = bucketOf(logit);
    mass[b] = mass[b]! + Math.exp(logit - max);
    count[b] = count[b]! + 1;
  }
  let before = 0;
  let keptBefore = 0;
  let cut = TOP_P_BUCKETS - 1;
  for (let b = 0; b < TOP_P_BUCKETS; b++) {
    if (before + mass[b]! >= target && keptBefore + count[b]! >= minKeep) {
      cut = b;
      break;
    }
    before += mass[b]!;
    keptBefore += count[b]!;
  }
  const kept: number[] = [];
  const boundary: number[] = [];
  for (let i = 0; i < n; i++) {
    const logit = logits[i]!;
    if (Number.isNaN(logit) || logit === -Infinity) continue;
    const b = bucketOf(logit);
    if (b < cut) kept.push(i);
    else if (b === cut) boundary.push(i);
  }
  boundary.sort((a, b) => (worse(candidates, a, b) ? 1 : worse(candidates, b, a) ? -1 : 0));
  let cumulative = before;
  for (const position of boundary) {
    kept.push(position);
    cumulative += Math.exp(logits[position]! - max);
    if (cumulative >= target && kept.length >= minKeep) break;
  }
  kept.sort((a, b) => a - b);
  return subset(candidates, kept, kept.length, false);
}

/** Keeps tokens whose probability is at least p times the top one's (p <= 0: all), in their order. */
export function minP(candidates: Candidates, p: number, minKeep = 1): Candidates {
  if (p <= 0 || candidates.ids.length === 0) return candidates;
  const threshold = maxLogit(candidates) + Math.log(p);
  const kept: number[] = [];
  for (let i = 0; i < candidates.logits.length; i++) if (candidates.logits[i]! >= threshold) kept.push(i);
  if (kept.length < minKeep) return topK(candidates, minKeep);
  return subset(candidates, kept, kept.length, candidates.sorted);
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
