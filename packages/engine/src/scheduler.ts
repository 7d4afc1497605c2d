import type { PagedKvCache } from "./kv/paged-kv.js";
import type { GdnStatePool } from "./kv/state-pool.js";
import type { PrefixCache } from "./kv/prefix-cache.js";

/** Scheduler view of one request: its tokens so far, progress, and the resources it holds. */
export interface ScheduledSequence {
  readonly id: number;
  /** prompt + generated tokens */
  readonly tokens: number[];
  /** tokens whose K/V and GDN state are computed */
  numComputed: number;
  blockTable: number[];
  stateSlot: number;
  finished: boolean;
  /** times this sequence was preempted (its work dropped, to be recomputed) */
  preemptions: number;
  /** prompt length (the prefix cache snapshots at the prompt's last full-block boundary) */
  readonly promptLength: number;
  /** prompt tokens served from the prefix cache */
  cachedTokens: number;
  /**
   * Further prompt lengths at which the prefix cache snapshots this sequence (rounded down to a
   * block; e.g. the end of a shared system prompt), besides the prompt's last full block.
   */
  readonly snapshotPoints?: readonly number[];
  /**
   * Speculative decoding: drafted tokens to verify after the last known token (appended to a chunk
   * that reaches the end of `tokens`, as far as the step's token budget allows).
   */
  readonly drafts?: readonly number[];
  /**
   * KV positions past the chunk and its drafts that the sequence writes before its next step (the
   * drafter's chain); their blocks are reserved with the chunk's.
   */
  readonly lookahead?: number;
  /**
   * Set when the sequence is admitted: the position its computation resumes from (a prefix-cache hit,
   * else 0) and, for a hit that stored it, the target's hidden state at the position before (the MTP
   * drafter's first input). Speculative decoding takes it (and clears it) at its next draft.
   */
  resumed?: { position: number; hidden: Float32Array | undefined } | undefined;
}

export interface ScheduledChunk<S extends ScheduledSequence = ScheduledSequence> {
  readonly sequence: S;
  readonly numTokens: number;
  /** true when the chunk reaches the last known token: the step samples a new token */
  readonly needsLogits: boolean;
  /** drafted tokens appended to the chunk (speculative decoding), `sequence.drafts[0 .. draftTokens)` */
  readonly draftTokens: number;
}

/**
 * vLLM-V1-style scheduler: one token budget per step; running sequences first (decodes and
 * continuing prefill chunks, in arrival order), then waiting sequences FCFS with chunked prefill.
 * When KV blocks run out, the most recently admitted running sequence is preempted by
 * recompute: its blocks and state slot go back to the pools and it re-enters the waiting queue
 * at the front with numComputed = 0.
 */
export class Scheduler<S extends ScheduledSequence = ScheduledSequence> {
  readonly waiting: S[] = [];
  readonly running: S[] = [];
  preemptionCount = 0;

  constructor(
    private readonly kv: PagedKvCache,
    private readonly states: GdnStatePool,
    private readonly maxBatchTokens: number,
    private readonly maxChunkTokens: number,
    private readonly prefixCache?: PrefixCache,
    /**
     * Speculative decoding: drafts are appended only while the step stays below this many rows
     * (llama.cpp's CPU flash attention switches to its tiled path at 64 query rows, which a plain
     * decode step of the same sequences would not take).
     */
    private readonly draftRowLimit = Number.POSITIVE_INFINITY,
    /** The MTP drafter runs: every prefix-cache entry carries the target's hidden state (none is made without it). */
    private readonly keepHidden = false,
  ) {}

  /** Where the prefix cache snapshots `sequence`: its extra points (block-aligned) and its last full block, ascending. */
  private boundaries(sequence: S, cache: PrefixCache): number[] {
    const last = cache.snapshotBoundary(sequence.promptLength);
    if (!sequence.snapshotPoints || sequence.snapshotPoints.length === 0) return last > 0 ? [last] : [];
    const points = new Set<number>();
    for (const point of sequence.snapshotPoints) {
      const aligned = cache.snapshotBoundary(point + 1);
      if (aligned > 0 && aligned < last) points.add(aligned);
    }
    if (last > 0) points.add(last);
    return [...points].sort((a, b) => a - b);
  }

  /** Tokens of the next chunk: cut at the next prefix-cache snapshot boundary when the chunk would cross it. */
  private chunkLength(sequence: S, budget: number): number {
    const remaining = sequence.tokens.length - sequence.numComputed;
    let n = Math.min(remaining, budget, this.maxChunkTokens);
    if (this.prefixCache) {
      const boundary = this.boundaries(sequence, this.prefixCache).find((b) => b > sequence.numComputed);
      if (boundary !== undefined && sequence.numComputed + n > boundary) n = boundary - sequence.numComputed;
    }
    return n;
  }

  /**
   * After a step: registers the prefix when the sequence just reached one of its snapshot boundaries.
   * `hidden`: the target's hidden state at the last computed position (kept when the drafter runs).
   */
  afterStep(sequence: S, hidden?: Float32Array): void {
    if (!this.prefixCache) return;
    if (this.boundaries(sequence, this.prefixCache).includes(sequence.numComputed)) {
      // without the hidden state a drafter could not resume from the entry: none is made
      if (this.keepHidden && !hidden) return;
      this.prefixCache.insert(sequence.tokens, sequence.numComputed, sequence.blockTable, sequence.stateSlot, hidden);
    }
  }

  add(sequence: S): void {
    this.waiting.push(sequence);
  }

  get hasWork(): boolean {
    return this.waiting.length > 0 || this.running.length > 0;
  }

  /** Returns every block and the state slot of `sequence` to the pools. */
  releaseResources(sequence: S): void {
    for (const block of sequence.blockTable) this.kv.pool.release(block);
    sequence.blockTable = [];
    if (sequence.stateSlot >= 0) this.states.release(sequence.stateSlot);
    sequence.stateSlot = -1;
  }

  /** Removes a sequence (finished or aborted) from the queues and frees what it holds. */
  remove(sequence: S): void {
    sequence.finished = true;
    const r = this.running.indexOf(sequence);
    if (r >= 0) this.running.splice(r, 1);
    const w = this.waiting.indexOf(sequence);
    if (w >= 0) this.waiting.splice(w, 1);
    this.releaseResources(sequence);
  }

  private ensureBlocks(sequence: S, upTo: number): boolean {
    const need = this.kv.blocksFor(upTo) - sequence.blockTable.length;
    if (need <= 0) return true;
    // cached prefixes give their blocks back before anyone is preempted
    while (this.kv.pool.freeCount < need && this.prefixCache?.evictOne());
    if (this.kv.pool.freeCount < need) return false;
    for (let i = 0; i < need; i++) sequence.blockTable.push(this.kv.pool.allocate());
    return true;
  }

  private preempt(sequence: S): void {
    const r = this.running.indexOf(sequence);
    if (r >= 0) this.running.splice(r, 1);
    this.releaseResources(sequence);
    sequence.numComputed = 0;
    sequence.cachedTokens = 0;
    sequence.preemptions++;
    this.preemptionCount++;
    this.waiting.unshift(sequence);
  }

  /** Drafts appended to a chunk of `n` tokens: only when it reaches the last known token, within `room` rows (with the chunk). */
  private draftsFor(sequence: S, n: number, room: number): number {
    if (!sequence.drafts || sequence.numComputed + n !== sequence.tokens.length) return 0;
    return Math.max(0, Math.min(sequence.drafts.length, room - n));
  }

  /**
   * Gives back the blocks of `sequence` past the first `positions` positions (speculative
   * decoding's rollback of rejected positions).
   */
  truncateBlocks(sequence: S, positions: number): void {
    const keep = this.kv.blocksFor(positions);
    while (sequence.blockTable.length > keep) this.kv.pool.release(sequence.blockTable.pop()!);
  }

  /** Picks the chunks of the next step; a running sequence that would sample and is `held` sits it out. */
  schedule(held?: (sequence: S) => boolean): ScheduledChunk<S>[] {
    const chunks: ScheduledChunk<S>[] = [];
    let budget = this.maxBatchTokens;
    const scheduled = new Set<S>();
    // running: decodes and continuing prefills in arrival order
    for (let i = 0; i < this.running.length && budget > 0; ) {
      const sequence = this.running[i]!;
      const n = this.chunkLength(sequence, budget);
      // `held`: a sequence that cannot sample now (its constraint's mask waits on the grammar worker) skips the step
      if (n <= 0 || (held && sequence.numComputed + n === sequence.tokens.length && held(sequence))) {
        i++;
        continue;
      }
      const drafts = this.draftsFor(sequence, n, Math.min(budget, this.draftRowLimit - (this.maxBatchTokens - budget)));
      const upTo = sequence.numComputed + n + drafts + (sequence.lookahead ?? 0);
      let ok = this.ensureBlocks(sequence, upTo);
      while (!ok) {
        // preempt the most recently admitted running sequence that is not yet scheduled
        let victim: S | undefined;
        for (let j = this.running.length - 1; j >= 0; j--) {
          const candidate = this.running[j]!;
          if (!scheduled.has(candidate)) {
            victim = candidate;
            break;
          }
        }
        if (!victim) break;
        this.preempt(victim);
        if (victim === sequence) break;
        ok = this.ensureBlocks(sequence, upTo);
      }
      if (!ok || !this.running.includes(sequence)) {
        if (this.running.includes(sequence)) i++;
        continue;
      }
      chunks.push({ sequence, numTokens: n, needsLogits: sequence.numComputed + n === sequence.tokens.length, draftTokens: drafts });
      scheduled.add(sequence);
      budget -= n + drafts;
      i++;
    }
    // waiting: admit FCFS while budget, a state slot and blocks are available
    while (budget > 0 && this.waiting.length > 0) {
      const sequence = this.waiting[0]!;
      if (this.states.pool.freeCount === 0) break;
      sequence.stateSlot = this.states.allocate();
      let hidden: Float32Array | undefined;
      if (sequence.numComputed === 0 && this.prefixCache && sequence.blockTable.length === 0) {
        const hit = this.prefixCache.acquire(sequence.tokens, sequence.promptLength, sequence.blockTable, sequence.stateSlot);
        sequence.numComputed = hit.length;
        sequence.cachedTokens = hit.length;
        hidden = hit.hidden;
      }
      const n = this.chunkLength(sequence, budget);
      if (!this.ensureBlocks(sequence, sequence.numComputed + n + (sequence.lookahead ?? 0))) {
        // not now: give back what was taken (the next attempt repeats the lookup)
        this.releaseResources(sequence);
        sequence.numComputed = 0;
        sequence.cachedTokens = 0;
        break;
      }
      sequence.resumed = { position: sequence.numComputed, hidden };
      this.waiting.shift();
      this.running.push(sequence);
      chunks.push({ sequence, numTokens: n, needsLogits: sequence.numComputed + n === sequence.tokens.length, draftTokens: 0 });
      scheduled.add(sequence);
      budget -= n;
    }
    return chunks;
  }
}
