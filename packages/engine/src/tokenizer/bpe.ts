/**
 * Byte-level BPE over one pre-tokenizer word, as llama.cpp's BPE session does it: start from one
 * symbol per byte-level character, repeatedly merge the adjacent pair with the lowest merge rank
 * (ties: the leftmost pair), then look each symbol up in the vocabulary; a symbol that is not a
 * token falls back to its single-byte tokens.
 */

import { BYTE_TO_CHAR } from "./byte-unicode.js";

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
  /** left text + right text when queued; a stale entry no longer matches. */
  text: string;
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

export class BpeModel {
  private readonly cache = new Map<string, readonly number[]>();

  /**
   * @param tokenToId byte-level text -> id
   * @param mergeRanks "left right" -> rank (first occurrence wins, as llama.cpp's map emplace)
   */
  constructor(
    private readonly tokenToId: ReadonlyMap<string, number>,
    private readonly mergeRanks: ReadonlyMap<string, number>,
  ) {}

  /** Token ids of one pre-tokenizer word (plain text; converted to byte-level here), appended to `out`. */
  encodeWord(word: string, out: number[]): void {
    if (word.length <= CACHE_MAX_WORD_LENGTH) {
      const cached = this.cache.get(word);
      if (cached) {
        for (const id of cached) out.push(id);
        return;
      }
    }
    const ids = this.bpe(toByteLevel(word));
    if (word.length <= CACHE_MAX_WORD_LENGTH) {
      if (this.cache.size >= CACHE_MAX_ENTRIES) this.cache.clear();
      this.cache.set(word, ids);
    }
    for (const id of ids) out.push(id);
  }

  private bpe(word: string): number[] {
    // Symbols: one per character (code point) of the byte-level word.
    const texts: string[] = [];
    for (const ch of word) texts.push(ch);
    const n = texts.length;
    const next = new Int32Array(n);
    const prev = new Int32Array(n);
    for (let i = 0; i < n; i++) {
      prev[i] = i - 1;
      next[i] = i + 1 < n ? i + 1 : -1;
    }
    const heap = new BigramHeap();
    const tryAdd = (left: number, right: number): void => {
      if (left < 0 || right < 0) return;
      const rank = this.mergeRanks.get(`${texts[left]!} ${texts[right]!}`);
      if (rank === undefined) return;
      heap.push({ left, right, rank, text: texts[left]! + texts[right]! });
    };
    for (let i = 1; i < n; i++) tryAdd(i - 1, i);

    while (heap.size > 0) {
      const bigram = heap.pop()!;
      const leftText = texts[bigram.left]!;
      const rightText = texts[bigram.right]!;
      if (leftText.length === 0 || rightText.length === 0) continue;
      if (leftText + rightText !== bigram.text) continue; // stale
      texts[bigram.left] = bigram.text;
      texts[bigram.right] = "";
      const after = next[bigram.right]!;
      next[bigram.left] = after;
      if (after >= 0) prev[after] = bigram.left;
      tryAdd(prev[bigram.left]!, bigram.left);
      tryAdd(bigram.left, after);
    }

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
