import type { PagedKvCache } from "./paged-kv.js";
import type { GdnStatePool } from "./state-pool.js";

/**
 * Prefix cache for the hybrid model. Attention layers could reuse any full KV block, but the GDN
 * layers need their recurrent and conv state at the hit point, so an entry exists only where a
 * state snapshot was taken. The rule implemented here: when a sequence's prefill reaches the last
 * full-block boundary of its prompt (the scheduler cuts the chunk there), the KV blocks up to that
 * boundary and a copy of the GDN state are registered under the hash of those tokens. A new
 * request hits the longest registered prefix (a multiple of the block size, at least one prompt
 * token left to compute): its blocks are shared (reference counted, never written again) and the
 * snapshot is copied into its state slot. Entries are evicted LRU when snapshots or KV blocks
 * run out.
 */
interface PrefixEntry {
  readonly key: number;
  readonly tokens: readonly number[];
  readonly blocks: readonly number[];
  readonly snapshot: number;
  /**
   * Speculative decoding with the MTP drafter: the target's post-norm hidden state at the prefix's
   * last position, which the drafter's first row after the prefix pairs with (its K/V for the prefix's
   * positions is in the shared blocks, written by the drafter of the sequence that made the entry).
   */
  readonly hidden: Float32Array | undefined;
  lastUsed: number;
}

/** A prefix-cache hit: tokens served, and the target's hidden state at the last of them (when stored). */
export interface PrefixHit {
  readonly length: number;
  readonly hidden: Float32Array | undefined;
}

export interface PrefixCacheStats {
  lookups: number;
  hits: number;
  hitTokens: number;
  lookupTokens: number;
  entries: number;
  evictions: number;
}

/** 53-bit hash of token ids (two FNV-1a style lanes); collisions are checked against the stored tokens. */
function extendHash(hash: number, tokens: readonly number[], from: number, to: number): number {
  let h1 = (hash % 0x100000000) >>> 0;
  let h2 = Math.floor(hash / 0x100000000) >>> 0;
  for (let i = from; i < to; i++) {
    const t = tokens[i]! >>> 0;
    h1 = Math.imul(h1 ^ t, 0x01000193) >>> 0;
    h2 = Math.imul(h2 ^ (t + 0x9e3779b9), 0x5bd1e995) >>> 0;
    h2 = (h2 ^ (h2 >>> 15)) >>> 0;
  }
  return (h2 & 0x1fffff) * 0x100000000 + h1;
}

export class PrefixCache {
  private readonly entries = new Map<number, PrefixEntry>();
  private clock = 0;
  readonly stats: PrefixCacheStats = { lookups: 0, hits: 0, hitTokens: 0, lookupTokens: 0, entries: 0, evictions: 0 };

  constructor(
    private readonly kv: PagedKvCache,
    private readonly states: GdnStatePool,
    /** Snapshot store: one slot per entry. */
    private readonly snapshots: GdnStatePool,
  ) {}

  get size(): number {
    return this.entries.size;
  }

  /** The boundary (tokens) at which a prompt of `promptLength` tokens is snapshotted, or 0. */
  snapshotBoundary(promptLength: number): number {
    const bs = this.kv.blockSize;
    return Math.floor((promptLength - 1) / bs) * bs;
  }

  /**
   * Finds the longest cached prefix of `tokens` (leaving at least one prompt token to compute),
   * shares its blocks with `blockTable` and copies its state into `slot`.
   */
  acquire(tokens: readonly number[], promptLength: number, blockTable: number[], slot: number): PrefixHit {
    this.stats.lookups++;
    this.stats.lookupTokens += promptLength;
    const bs = this.kv.blockSize;
    const maxBoundary = this.snapshotBoundary(promptLength);
    const hashes = this.blockHashes(tokens, maxBoundary);
    for (let k = hashes.length - 1; k >= 0; k--) {
      const entry = this.entries.get(hashes[k]!);
      if (!entry) continue;
      const length = (k + 1) * bs;
      if (entry.tokens.length !== length) continue;
      let same = true;
      for (let i = 0; i < length && same; i++) same = entry.tokens[i] === tokens[i];
      if (!same) continue;
      for (const block of entry.blocks) {
        this.kv.pool.retain(block);
        blockTable.push(block);
      }
      this.copyState(this.snapshots, entry.snapshot, this.states, slot);
      entry.lastUsed = ++this.clock;
      this.stats.hits++;
      this.stats.hitTokens += length;
      return { length, hidden: entry.hidden };
    }
    return { length: 0, hidden: undefined };
  }

  /**
   * Registers the first `length` tokens (a block multiple) of a sequence whose state in `slot` is at
   * that point; `hidden` (copied) is the target's hidden state at position `length - 1`, when kept.
   */
  insert(tokens: readonly number[], length: number, blockTable: readonly number[], slot: number, hidden?: Float32Array): void {
    const bs = this.kv.blockSize;
    if (length <= 0 || length % bs !== 0) return;
    const key = this.blockHashes(tokens, length)[length / bs - 1]!;
    const existing = this.entries.get(key);
    if (existing) {
      existing.lastUsed = ++this.clock;
      return;
    }
    let snapshot = this.snapshots.pool.allocate();
    if (snapshot < 0) {
      this.evictOne();
      snapshot = this.snapshots.pool.allocate();
      if (snapshot < 0) return;
    }
    const blocks = blockTable.slice(0, length / bs);
    for (const block of blocks) this.kv.pool.retain(block);
    this.copyState(this.states, slot, this.snapshots, snapshot);
    this.entries.set(key, { key, tokens: tokens.slice(0, length), blocks, snapshot, hidden: hidden?.slice(), lastUsed: ++this.clock });
    this.stats.entries = this.entries.size;
  }

  /** Chained hash after each full block up to `length` tokens. */
  private blockHashes(tokens: readonly number[], length: number): number[] {
    const bs = this.kv.blockSize;
    const hashes: number[] = [];
    let hash = 0;
    for (let b = bs; b <= length; b += bs) {
      hash = extendHash(hash, tokens, b - bs, b);
      hashes.push(hash);
    }
    return hashes;
  }

  /** Evicts the least recently used entry; false when the cache is empty. */
  evictOne(): boolean {
    let victim: PrefixEntry | undefined;
    for (const entry of this.entries.values()) if (!victim || entry.lastUsed < victim.lastUsed) victim = entry;
    if (!victim) return false;
    this.entries.delete(victim.key);
    for (const block of victim.blocks) this.kv.pool.release(block);
    this.snapshots.release(victim.snapshot);
    this.stats.evictions++;
    this.stats.entries = this.entries.size;
    return true;
  }

  clear(): void {
    while (this.evictOne());
  }

  private copyState(from: GdnStatePool, fromSlot: number, to: GdnStatePool, toSlot: number): void {
    for (let l = 0; l < from.numLayers; l++) {
      to.conv[l]!.set(from.conv[l]!.subarray(fromSlot * from.convStride, (fromSlot + 1) * from.convStride), toSlot * to.convStride);
      to.ssm[l]!.set(from.ssm[l]!.subarray(fromSlot * from.ssmStride, (fromSlot + 1) * from.ssmStride), toSlot * to.ssmStride);
    }
  }
}
