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

/** Bigram candidate in the merge queue. */
interface Bigram {
  left: number;
  right: number;
  rank: number;
  /** What the two symbols were when queued (text or token id); a stale entry no longer matches. */
  leftKey: string | number;
  rightKey: string | number;
}

/** Binary min-heap on (rank, left). */
class BigramHeap {
  private readonly items: Bigram[] = [];

  get size(): number {
    return this.items.length;
  }

  private static less(a: Bigram, b: Bigram): boolean {
    return a.rank < b.rank || (a.rank === b.rank && a.left < b.left);
  }

  push(item: Bigram): void {
    const items = this.items;
    items.push(item);
    let i = items.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!BigramHeap.less(items[i]!, items[parent]!)) break;
      [items[i], items[parent]] = [items[parent]!, items[i]!];
      i = parent;
    }
  }

  pop(): Bigram | undefined {
    const items = this.items;
    const top = items[0];
    const last = items.pop();
    if (items.length > 0 && last !== undefined) {
      items[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < items.length && BigramHeap.less(items[l]!, items[m]!)) m = l;
        if (r < items.length && BigramHeap.less(items[r]!, items[m]!)) m = r;
        if (m === i) break;
        [items[i], items[m]] = [items[m]!, items[i]!];
        i = m;
      }
    }
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
 * ties) merges first, until no adjacent pair has a rank. `keyOf(i)` is symbol i's current key (a token id
 * or a text; a symbol merged away gets one no queued pair has), `rankOf(left, right)` the rank of merging
 * two adjacent symbols or undefined, `merge(left, right, rank)` folds right into left. Returns `next`: the
 * symbols left are 0, next[0], next[next[0]], ... until -1.
 */
function mergeBpe(
  n: number,
  keyOf: (i: number) => string | number,
  rankOf: (left: number, right: number) => number | undefined,
  merge: (left: number, right: number, rank: number) => void,
): Int32Array {
  const next = new Int32Array(n);
  const prev = new Int32Array(n);
  for (let i = 0; i < n; i++) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  const heap = new BigramHeap();
  const tryAdd = (left: number, right: number): void => {
    if (left < 0 || right < 0) return;
    const rank = rankOf(left, right);
    if (rank === undefined) return;
    heap.push({ left, right, rank, leftKey: keyOf(left), rightKey: keyOf(right) });
  };
  for (let i = 1; i < n; i++) tryAdd(i - 1, i);
  while (heap.size > 0) {
    const bigram = heap.pop()!;
    if (keyOf(bigram.left) !== bigram.leftKey || keyOf(bigram.right) !== bigram.rightKey) continue; // stale
    merge(bigram.left, bigram.right, bigram.rank);
    const after = next[bigram.right]!;
    next[bigram.left] = after;
    if (after >= 0) prev[after] = bigram.left;
    tryAdd(prev[bigram.left]!, bigram.left);
    tryAdd(bigram.left, after);
  }
  return next;
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
    if (word.length <= CACHE_MAX_WORD_LENGTH) {
      const cached = this.cache.get(word);
      if (cached) {
        for (const id of cached) out.push(id);
        return;
      }
    }
    const ids = this.idTables ? this.bpeIds(this.idTables, word) : this.bpeTexts(toByteLevel(word));
    if (word.length <= CACHE_MAX_WORD_LENGTH) {
      if (this.cache.size >= CACHE_MAX_ENTRIES) this.cache.clear();
      this.cache.set(word, ids);
    }
    for (const id of ids) out.push(id);
  }

  private bpeIds(tables: IdTables, word: string): number[] {
    const bytes = utf8Encoder.encode(word);
    const n = bytes.length;
    const symbols = new Int32Array(n); // token id, -1 once merged away
    for (let i = 0; i < n; i++) symbols[i] = tables.byteIds[bytes[i]!]!;
    const { pairRank, mergeResult, vocabSize } = tables;
    const next = mergeBpe(
      n,
      (i) => symbols[i]!,
      (left, right) => pairRank.get(symbols[left]! * vocabSize + symbols[right]!),
      (left, right, rank) => {
        symbols[left] = mergeResult[rank]!;
        symbols[right] = -1;
      },
    );
    const ids: number[] = [];
    for (let i = 0; i >= 0 && i < n; i = next[i]!) ids.push(symbols[i]!);
    return ids;
  }

  private bpeTexts(word: string): number[] {
    const ranks = this.mergeRanks!;
    // Symbols: one per character (code point) of the byte-level word.
    const texts: string[] = [];
    for (const ch of word) texts.push(ch);
    const n = texts.length;
    const next = mergeBpe(
      n,
      (i) => texts[i]!,
      (left, right) => ranks.get(`${texts[left]!} ${texts[right]!}`),
      (left, right) => {
        texts[left] = texts[left]! + texts[right]!; // "" once merged away
        texts[right] = "";
      },
    );

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
