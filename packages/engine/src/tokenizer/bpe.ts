/**
 * Byte-level BPE over one pre-tokenizer word, as llama.cpp's BPE session does it: start from one
 * symbol per byte-level character, repeatedly merge the adjacent pair with the lowest merge rank
 * (ties: the leftmost pair), then look each symbol up in the vocabulary; a symbol that is not a
 * token falls back to its single-byte tokens.
 */

import { BYTE_TO_CHAR } from "./byte-unicode.js";

const utf8Encoder = new TextEncoder();

/** UTF-8 bytes of a well-formed `word` as byte-level characters (one per byte). */
export function toByteLevel(word: string): string {
  let out = "";
  for (let i = 0; i < word.length; i++) {
    let c = word.charCodeAt(i);
    if (c < 0x80) {
      out += BYTE_TO_CHAR[c]!;
    } else if (c < 0x800) {
      out += BYTE_TO_CHAR[0xc0 | (c >> 6)]! + BYTE_TO_CHAR[0x80 | (c & 0x3f)]!;
    } else if (c >= 0xd800 && c <= 0xdbff && i + 1 < word.length) {
      c = 0x10000 + ((c - 0xd800) << 10) + (word.charCodeAt(++i) - 0xdc00);
      out +=
        BYTE_TO_CHAR[0xf0 | (c >> 18)]! +
        BYTE_TO_CHAR[0x80 | ((c >> 12) & 0x3f)]! +
        BYTE_TO_CHAR[0x80 | ((c >> 6) & 0x3f)]! +
        BYTE_TO_CHAR[0x80 | (c & 0x3f)]!;
    } else {
      out += BYTE_TO_CHAR[0xe0 | (c >> 12)]! + BYTE_TO_CHAR[0x80 | ((c >> 6) & 0x3f)]! + BYTE_TO_CHAR[0x80 | (c & 0x3f)]!;
    }
  }
  return out;
}

/**
 * The merge queue: a binary min-heap of candidates, each one number `rank * n + left` (n = the word's
 * symbols), so the order is (rank, left) and a candidate costs 8 bytes. Candidates are not removed when
 * a merge changes their symbols; a popped candidate is checked instead (see BpeMerge.run).
 */
class CandidateHeap {
  private keys = new Float64Array(64);
  size = 0;

  push(key: number): void {
    if (this.size === this.keys.length) {
      const grown = new Float64Array(this.keys.length * 2);
      grown.set(this.keys);
      this.keys = grown;
    }
    const keys = this.keys;
    let i = this.size++;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      const above = keys[parent]!;
      if (above <= key) break;
      keys[i] = above;
      i = parent;
    }
    keys[i] = key;
  }

  pop(): number {
    const keys = this.keys;
    const top = keys[0]!;
    const last = --this.size;
    if (last === 0) return top;
    const key = keys[last]!;
    let i = 0;
    for (;;) {
      let child = 2 * i + 1;
      if (child >= last) break;
      if (child + 1 < last && keys[child + 1]! < keys[child]!) child++;
      if (keys[child]! >= key) break;
      keys[i] = keys[child]!;
      i = child;
    }
    keys[i] = key;
    return top;
  }
}

/** Words longer than this many characters skip the cache (long whitespace runs, base64 blobs). */
const CACHE_MAX_WORD_LENGTH = 256;
/** The word cache is cleared when it holds this many words, bounding its memory. */
const CACHE_MAX_ENTRIES = 65_536;

/**
 * Merge tables over token ids, usable when the vocabulary is closed: all 256 byte symbols are
 * tokens and every applicable merge's result is a token. Then every symbol is a token at all
 * times and merging ids is exactly merging texts, without building strings.
 */
interface IdTables {
  /** byte -> id of its byte-level symbol */
  byteIds: Int32Array;
  /** left id * vocabSize + right id -> rank */
  pairRank: Map<number, number>;
  /** rank -> id of the merged token */
  mergeResult: Int32Array;
  vocabSize: number;
}

function buildIdTables(tokenToId: ReadonlyMap<string, number>, merges: readonly string[], vocabSize: number): IdTables | undefined {
  const byteIds = new Int32Array(256);
  for (let b = 0; b < 256; b++) {
    const id = tokenToId.get(BYTE_TO_CHAR[b]!);
    if (id === undefined) return undefined;
    byteIds[b] = id;
  }
  const pairRank = new Map<number, number>();
  const mergeResult = new Int32Array(merges.length);
  for (let rank = 0; rank < merges.length; rank++) {
    const merge = merges[rank]!;
    const space = merge.indexOf(" ", 1);
    if (space < 0) continue; // unusable entry (llama.cpp keys it as ("", ""))
    const left = merge.slice(0, space);
    const right = merge.slice(space + 1);
    if (right.includes(" ")) continue; // never queried: symbols hold no spaces
    const leftId = tokenToId.get(left);
    const rightId = tokenToId.get(right);
    if (leftId === undefined || rightId === undefined) continue; // no symbol can ever be these texts
    const result = tokenToId.get(left + right);
    if (result === undefined) return undefined; // not closed: use the text path
    const key = leftId * vocabSize + rightId;
    if (!pairRank.has(key)) {
      pairRank.set(key, rank);
      mergeResult[rank] = result;
    }
  }
  return { byteIds, pairRank, mergeResult, vocabSize };
}

/**
 * The BPE merge loop over n symbols in a linked list: the adjacent pair of lowest rank (the leftmost on
 * ties) merges first, until no adjacent pair has a rank. `rankOf(left, right)` is the rank of merging two
 * adjacent symbols or undefined, `merge(left, right, rank)` folds right into left.
 *
 * Every adjacent pair with a rank has a candidate in the queue; a popped candidate (rank, left) is taken
 * only when `left` still has a right neighbour and their rank is still `rank` (else it is stale). A taken
 * candidate is then the current pair of lowest (rank, left), which is what llama.cpp's queue merges.
 *
 * Resumable: `run(budget)` does at most about `budget` steps (a step is one candidate queued or taken off
 * the queue) and says whether it finished. A word of n symbols takes at most n - 1 merges and 3n - 3
 * candidates: O(n log n) work and 8 bytes a candidate whatever the word. When done, the symbols left are
 * 0, next[0], next[next[0]], ... until -1.
 */
export class BpeMerge {
  readonly next: Int32Array;
  private readonly prev: Int32Array;
  private readonly heap = new CandidateHeap();
  /** Steps done so far. */
  steps = 0;
  /** The next adjacent pair (queued - 1, queued) to queue at the start. */
  private queued = 1;

  constructor(
    private readonly n: number,
    private readonly rankOf: (left: number, right: number) => number | undefined,
    private readonly merge: (left: number, right: number, rank: number) => void,
  ) {
    this.next = new Int32Array(n);
    this.prev = new Int32Array(n);
    for (let i = 0; i < n; i++) {
      this.prev[i] = i - 1;
      this.next[i] = i + 1 < n ? i + 1 : -1;
    }
  }

  private tryAdd(left: number, right: number): void {
    this.steps++;
    if (left < 0 || right < 0) return;
    const rank = this.rankOf(left, right);
    if (rank === undefined) return;
    this.heap.push(rank * this.n + left);
  }

  /** Runs until done (true) or until `budget` more steps are done (false). */
  run(budget = Number.POSITIVE_INFINITY): boolean {
    const stop = this.steps + budget;
    while (this.queued < this.n) {
      if (this.steps >= stop) return false;
      this.tryAdd(this.queued - 1, this.queued);
      this.queued++;
    }
    const { heap, next, prev, n } = this;
    while (heap.size > 0) {
      if (this.steps >= stop) return false;
      this.steps++;
      const key = heap.pop();
      const left = key % n;
      const rank = (key - left) / n;
      const right = next[left]!;
      // stale: `left` was merged away (next -1) or its pair with its right neighbour has another rank now
      if (right < 0 || this.rankOf(left, right) !== rank) continue;
      this.merge(left, right, rank);
      const after = next[right]!;
      next[left] = after;
      if (after >= 0) prev[after] = left;
      next[right] = -1; // merged away: no right neighbour, so its candidates are stale
      this.tryAdd(prev[left]!, left);
      this.tryAdd(left, after);
    }
    return true;
  }
}

/**
 * A word being encoded: `run(out, budget)` merges, then appends the word's ids to `out`, doing at most
 * about `budget` steps a call; it returns true once every id is appended.
 */
export interface WordEncoding {
  readonly steps: number;
  run(out: number[], budget?: number): boolean;
}

export class BpeModel {
  private readonly cache = new Map<string, readonly number[]>();
  private readonly idTables: IdTables | undefined;
  /** "left right" -> rank (first occurrence wins, as llama.cpp's map emplace); only without id tables. */
  private readonly mergeRanks: Map<string, number> | undefined;

  /**
   * @param tokenToId byte-level text -> id
   * @param merges "left right", rank = index
   */
  constructor(
    private readonly tokenToId: ReadonlyMap<string, number>,
    merges: readonly string[],
    vocabSize: number,
  ) {
    this.idTables = buildIdTables(tokenToId, merges, vocabSize);
    if (!this.idTables) {
      const ranks = new Map<string, number>();
      for (let rank = 0; rank < merges.length; rank++) {
        const merge = merges[rank]!;
        if (merge.indexOf(" ", 1) < 0) continue;
        if (!ranks.has(merge)) ranks.set(merge, rank);
      }
      this.mergeRanks = ranks;
    }
  }

  /** True when merging runs on token ids (closed vocabulary); false: on texts. */
  get usesIdMerges(): boolean {
    return this.idTables !== undefined;
  }

  /** Token ids of one pre-tokenizer word (plain text), appended to `out`. */
  encodeWord(word: string, out: number[]): void {
    this.beginWord(word).run(out);
  }

  /** Appends a word's ids when they are cached (true), without building an encoding. */
  appendCached(word: string, out: number[]): boolean {
    if (word.length > CACHE_MAX_WORD_LENGTH) return false;
    const cached = this.cache.get(word);
    if (!cached) return false;
    for (let i = 0; i < cached.length; i++) out.push(cached[i]!);
    return true;
  }

  /** Starts encoding one word; the caller runs it (in slices, if it likes). Cached words take one step. */
  beginWord(word: string): WordEncoding {
    const cacheable = word.length <= CACHE_MAX_WORD_LENGTH;
    if (cacheable) {
      const cached = this.cache.get(word);
      if (cached) return cachedWord(cached);
    }
    const build = this.idTables ? this.bpeIds(this.idTables, word) : this.bpeTexts(toByteLevel(word));
    const { merge } = build;
    let emitted = 0; // steps spent appending ids
    let from = -1; // out.length when appending began
    return {
      get steps() {
        return merge.steps + emitted;
      },
      run: (out, budget = Number.POSITIVE_INFINITY) => {
        if (!merge.run(budget)) return false;
        if (from < 0) from = out.length;
        const done = build.emit(out, budget);
        emitted = out.length - from + (done ? 1 : 0);
        if (done && cacheable) {
          if (this.cache.size >= CACHE_MAX_ENTRIES) this.cache.clear();
          this.cache.set(word, out.slice(from));
        }
        return done;
      },
    };
  }

  private bpeIds(tables: IdTables, word: string): { merge: BpeMerge; emit: (out: number[], budget: number) => boolean } {
    const bytes = utf8Encoder.encode(word);
    const n = bytes.length;
    const symbols = new Int32Array(n); // token id, -1 once merged away
    for (let i = 0; i < n; i++) symbols[i] = tables.byteIds[bytes[i]!]!;
    const { pairRank, mergeResult, vocabSize } = tables;
    const merge = new BpeMerge(
      n,
      (left, right) => pairRank.get(symbols[left]! * vocabSize + symbols[right]!),
      (left, right, rank) => {
        symbols[left] = mergeResult[rank]!;
        symbols[right] = -1;
      },
    );
    let cursor = n > 0 ? 0 : -1;
    const emit = (out: number[], budget: number): boolean => {
      const next = merge.next;
      for (let count = 0; cursor >= 0 && count < budget; count++, cursor = next[cursor]!) out.push(symbols[cursor]!);
      return cursor < 0;
    };
    return { merge, emit };
  }

  private bpeTexts(word: string): { merge: BpeMerge; emit: (out: number[], budget: number) => boolean } {
    const ranks = this.mergeRanks!;
    // Symbols: one per character (code point) of the byte-level word.
    const texts: string[] = [];
    for (const ch of word) texts.push(ch);
    const n = texts.length;
    const merge = new BpeMerge(
      n,
      (left, right) => ranks.get(`${texts[left]!} ${texts[right]!}`),
      (left, right) => {
        texts[left] = texts[left]! + texts[right]!; // "" once merged away
        texts[right] = "";
      },
    );
    // short of budget or not, the fallback per byte makes this one pass (the text path serves test vocabularies)
    return {
      merge,
      emit: (out) => {
        for (const id of this.textIds(texts, merge.next)) out.push(id);
        return true;
      },
    };
  }

  private textIds(texts: readonly string[], next: Int32Array): number[] {
    const n = texts.length;
    const ids: number[] = [];
    for (let i = 0; i >= 0 && i < n; i = next[i]!) {
      const text = texts[i]!;
      if (text.length === 0) continue;
      const id = this.tokenToId.get(text);
      if (id !== undefined) {
        ids.push(id);
        continue;
      }
      // Fallback as llama.cpp: each UTF-8 byte of the symbol's text looked up as a one-byte
      // string. Only ASCII bytes can be one-byte tokens; other bytes are dropped.
      for (let k = 0; k < text.length; k++) {
        const code = text.charCodeAt(k);
        if (code < 0x80) {
          const byteId = this.tokenToId.get(text[k]!);
          if (byteId !== undefined) ids.push(byteId);
        }
      }
    }
    return ids;
  }
}

function cachedWord(ids: readonly number[]): WordEncoding {
  return {
    steps: 1,
    run: (out) => {
      for (const id of ids) out.push(id);
      return true;
    },
  };
}
