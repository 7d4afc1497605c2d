/**
 * The tokenizer's work is bounded: the pre-tokenizer scanner and the BPE merge loop count their steps,
 * and those counts grow linearly (BPE: n log n) with the text, long runs of one character included;
 * `encodeAsync` gives the same ids as `encode` (and `decodeAsync` the same text as `decode`) in slices of bounded
 * work. Work is counted, never timed.
 */
import { describe, expect, it } from "vitest";
import { BYTE_TO_CHAR } from "./byte-unicode.js";
import { BpeMerge, BpeModel } from "./bpe.js";
import { TokenizerError } from "./errors.js";
import { PreTokenizerScanner, preTokenize, preTokenizeByPattern, toWellFormed } from "./pre-tokenize.js";
import { fixtureTokenizer, fixtureVocab, oracleGolden } from "./test-support.js";
import { TOKENIZER_SLICE_STEPS, Tokenizer } from "./tokenizer.js";

/** Deterministic 32-bit LCG in [0, 1). */
function lcg(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return state / 2 ** 32;
  };
}

/** Pieces that exercise every alternative of the pattern and every class of the collapsed text. */
const PIECES = [
  "a",
  "Z",
  "word",
  " ",
  "  ",
  "\n",
  "\r\n",
  "\t",
  "\v",
  "'",
  "'s",
  "'LL",
  "'re",
  "'d",
  "1",
  "42",
  "!",
  "{}",
  "é",
  "e\u0301",
  "\u0085",
  "\ufeff",
  "\u00a0",
  "\u3000",
  "\u2028",
  "\u180e",
  "😀",
  "中文",
  "٣",
  "𝔸",
  "\u20dd",
  ".",
  "-",
  "\f",
];

function randomText(random: () => number, pieces: number): string {
  let text = "";
  for (let i = 0; i < pieces; i++) text += PIECES[Math.floor(random() * PIECES.length)];
  return text;
}

/** Scanner steps to split `text` into words. */
function scanSteps(text: string): number {
  const scanner = new PreTokenizerScanner(text);
  while (scanner.next() >= 0);
  return scanner.steps;
}

/** The naive BPE: scan every adjacent pair for the lowest (rank, left) each round. Quadratic; the reference. */
function naiveBpe(word: string, ranks: ReadonlyMap<string, number>): string[] {
  const symbols = Array.from(new TextEncoder().encode(word), (byte) => BYTE_TO_CHAR[byte]!);
  for (;;) {
    let best = -1;
    let bestRank = Number.POSITIVE_INFINITY;
    for (let i = 0; i + 1 < symbols.length; i++) {
      const rank = ranks.get(`${symbols[i]} ${symbols[i + 1]}`);
      if (rank !== undefined && rank < bestRank) {
        bestRank = rank;
        best = i;
      }
    }
    if (best < 0) return symbols;
    symbols.splice(best, 2, symbols[best]! + symbols[best + 1]!);
  }
}

function fixtureBpe(): { bpe: BpeModel; ranks: Map<string, number>; textOf: (id: number) => string } {
  const vocab = fixtureVocab();
  const tokenToId = new Map(vocab.tokens.map((text, id) => [text, id] as const));
  const ranks = new Map<string, number>();
  vocab.merges.forEach((merge, rank) => {
    if (!ranks.has(merge)) ranks.set(merge, rank);
  });
  return { bpe: new BpeModel(tokenToId, vocab.merges, vocab.tokens.length), ranks, textOf: (id) => vocab.tokens[id]! };
}

describe("the pre-tokenizer scanner", () => {
  it("splits exactly as the pattern does (qwen35 and qwen2), on 20,000 random texts and the golden texts", () => {
    const random = lcg(35);
    const texts = [...oracleGolden().texts, ...Array.from({ length: 20_000 }, () => randomText(random, 1 + Math.floor(random() * 14)))];
    for (const text of texts) {
      const wellFormed = toWellFormed(text);
      for (const pre of ["qwen35", "qwen2"] as const) {
        expect(preTokenize(wellFormed, pre), `${pre} ${JSON.stringify(wellFormed)}`).toEqual(preTokenizeByPattern(wellFormed, pre));
      }
    }
  });

  it("gives the same words when resumed one step at a time", () => {
    const random = lcg(7);
    for (let t = 0; t < 500; t++) {
      const text = `${randomText(random, 20)}${" ".repeat(t % 7)}${"x".repeat(t % 5)}`;
      const scanner = new PreTokenizerScanner(text);
      const ends: number[] = [];
      for (let end = scanner.next(1); end !== -1; end = scanner.next(1)) if (end >= 0) ends.push(end);
      let start = 0;
      const words = ends.map((end) => {
        const word = text.slice(start, end);
        start = end;
        return word;
      });
      expect(words).toEqual(preTokenizeByPattern(text));
    }
  });

  it("is linear on long runs of one character and on mixed text: 2n characters take twice the steps of n", () => {
    const n = 1 << 16;
    for (const unit of [" ", "a", "\n", "!", "1", "é", "\u3000", " \n", "'s", "😀", "a b"]) {
      const once = scanSteps(unit.repeat(n));
      const twice = scanSteps(unit.repeat(2 * n));
      expect(twice / once, JSON.stringify(unit)).toBeGreaterThan(1.9);
      expect(twice / once, JSON.stringify(unit)).toBeLessThan(2.1);
      // and a bounded number of classifications per code point
      expect(once / [...unit.repeat(n)].length, JSON.stringify(unit)).toBeLessThanOrEqual(4);
    }
    const random = lcg(11);
    const mixed = randomText(random, 1 << 15);
    const ratio = scanSteps(mixed + mixed) / scanSteps(mixed);
    expect(ratio).toBeGreaterThan(1.9);
    expect(ratio).toBeLessThan(2.1);
  });
});

describe("BPE merges", () => {
  it("equal the naive lowest-rank-leftmost reference on random words", () => {
    const { bpe, ranks, textOf } = fixtureBpe();
    const random = lcg(3);
    const alphabet = ["a", "b", "e", "n", "t", "s", " ", "é", "中", "1", "=", "\n"];
    for (let t = 0; t < 400; t++) {
      const length = 1 + Math.floor(random() * 90);
      let word = "";
      for (let i = 0; i < length; i++) word += alphabet[Math.floor(random() * alphabet.length)];
      const ids: number[] = [];
      bpe.encodeWord(word, ids);
      expect(ids.map(textOf), JSON.stringify(word)).toEqual(naiveBpe(word, ranks));
    }
  });

  it("take O(n log n) steps on a 1 MB word of one repeated letter (and on spaces): 2n bytes take about twice the steps of n", () => {
    const { bpe } = fixtureBpe();
    const steps = (word: string): { steps: number; ids: number } => {
      const out: number[] = [];
      const encoding = bpe.beginWord(word);
      expect(encoding.run(out)).toBe(true);
      return { steps: encoding.steps, ids: out.length };
    };
    for (const unit of ["a", " ", "=", "é"]) {
      const n = (1 << 19) / new TextEncoder().encode(unit).length;
      const half = steps(unit.repeat(n));
      const full = steps(unit.repeat(2 * n)); // 1 MiB of bytes
      const ratio = full.steps / half.steps;
      expect(ratio, JSON.stringify(unit)).toBeGreaterThan(1.8);
      expect(ratio, JSON.stringify(unit)).toBeLessThan(2.2);
      // a step per candidate queued or taken, at most 3 candidates a byte, plus one step a token appended
      expect(full.steps, JSON.stringify(unit)).toBeLessThanOrEqual(6 * 2 * n * new TextEncoder().encode(unit).length + full.ids);
    }
  });

  it("stop after `budget` steps and resume to the same merges", () => {
    const merged = (budget: number): { symbols: string[]; calls: number } => {
      const symbols = Array.from("aaaaaaaaaaaab");
      const merge = new BpeMerge(
        symbols.length,
        // equal symbols up to 4 characters merge, shorter ones first
        (left, right) => (symbols[left]!.length < 4 && symbols[left] === symbols[right] ? symbols[left]!.length : undefined),
        (left, right) => {
          symbols[left] = symbols[left]! + symbols[right]!;
          symbols[right] = "";
        },
      );
      let calls = 1;
      while (!merge.run(budget)) calls++;
      return { symbols: symbols.filter((text) => text !== ""), calls };
    };
    const whole = merged(Number.POSITIVE_INFINITY);
    expect(whole).toEqual({ symbols: ["aaaa", "aaaa", "aaaa", "b"], calls: 1 });
    const stepwise = merged(1);
    expect(stepwise.symbols).toEqual(whole.symbols);
    expect(stepwise.calls).toBeGreaterThan(12);
  });
});

describe("encodeAsync", () => {
  const tokenizer = fixtureTokenizer();

  it("gives encode's ids on every golden text, with and without special parsing, in slices as small as 1 step", async () => {
    for (const text of oracleGolden().texts) {
      for (const parseSpecial of [false, true]) {
        const ids = tokenizer.encode(text, { parseSpecial });
        expect(await tokenizer.encodeAsync(text, { parseSpecial, sliceSteps: 7 })).toEqual(ids);
      }
    }
    const short = oracleGolden().texts[0]!;
    expect(await tokenizer.encodeAsync(short, { sliceSteps: 1 })).toEqual(tokenizer.encode(short));
  });

  it("yields between slices of bounded work on a long text (1 MB of spaces; 1 MB of mixed text with special tokens)", async () => {
    const random = lcg(5);
    let mixed = "";
    while (mixed.length < 1 << 20) mixed += `${randomText(random, 8)}<think>`;
    for (const [name, text] of [
      ["spaces", " ".repeat(1 << 20)],
      ["mixed", mixed],
    ] as const) {
      const slices: number[] = [];
      let last = 0;
      let turns = 0;
      const turn = setInterval(() => turns++, 0);
      const ids = await tokenizer.encodeAsync(text, {
        onSlice: (steps) => {
          slices.push(steps - last);
          last = steps;
        },
      });
      clearInterval(turn);
      expect(ids, name).toEqual(tokenizer.encode(text));
      expect(slices.length, name).toBeGreaterThan(8);
      // each slice stops at the budget, past it by at most one indivisible unit (a 64 Ki-unit window or chunk)
      expect(Math.max(...slices), name).toBeLessThanOrEqual(TOKENIZER_SLICE_STEPS + (1 << 16) + 64);
      // the event loop turned while the encode ran: timers fired between its slices
      expect(turns, name).toBeGreaterThan(0);
    }
  });

  it("stops at an aborted signal and refuses a bad slice size", async () => {
    const controller = new AbortController();
    controller.abort("stop");
    await expect(tokenizer.encodeAsync("some text", { signal: controller.signal })).rejects.toBe("stop");
    await expect(tokenizer.encodeAsync("x", { sliceSteps: 0 })).rejects.toSatisfy(
      (error: unknown) => TokenizerError.isInstance(error) && error.code === "TOKENIZER_BAD_OPTION" && error.field === "sliceSteps",
    );
  });
});

describe("decodeAsync", () => {
  const tokenizer = fixtureTokenizer();

  it("gives decode's text on every golden text (special tokens, removeSpecial, a character split across slices), in slices as small as 1 id", async () => {
    for (const text of oracleGolden().texts) {
      const ids = tokenizer.encode(text, { parseSpecial: true });
      for (const options of [{}, { special: true }, { special: true, removeSpecial: true }]) {
        for (const sliceSteps of [1, 3, 1 << 16]) {
          expect(await tokenizer.decodeAsync(ids, { ...options, sliceSteps })).toBe(tokenizer.decode(ids, options));
        }
      }
    }
  });

  it("yields between slices on a long id list, stops at an aborted signal and refuses a bad slice size", async () => {
    const ids = tokenizer.encode(" hello world, 中文 émoji 😀".repeat(20_000));
    // an immediate queued before the decode runs between two of its slices (each slice ends by yielding to the loop)
    let turns = 0;
    let decoding = true;
    const tick = (): void => {
      turns++;
      if (decoding) setImmediate(tick);
    };
    setImmediate(tick);
    const text = await tokenizer.decodeAsync(ids, { sliceSteps: 1024 });
    decoding = false;
    expect(text).toBe(tokenizer.decode(ids));
    expect(turns).toBeGreaterThan(0);
    const controller = new AbortController();
    controller.abort("stop");
    await expect(tokenizer.decodeAsync(ids, { signal: controller.signal })).rejects.toBe("stop");
    await expect(tokenizer.decodeAsync(ids, { sliceSteps: 0 })).rejects.toSatisfy(
      (error: unknown) => TokenizerError.isInstance(error) && error.code === "TOKENIZER_BAD_OPTION" && error.field === "sliceSteps",
    );
  });
});

describe("maxTokenBytes", () => {
  it("bounds the token count from below: no golden text has fewer than ceil(bytes / maxTokenBytes) tokens", () => {
    const tokenizer = fixtureTokenizer();
    const most = tokenizer.maxTokenBytes;
    expect(most).toBeDefined();
    // it is attained: some token stands for exactly that many bytes
    const lengths = Array.from({ length: tokenizer.vocabSize }, (_, id) => tokenizer.tokenToPiece(id, { special: true }).length);
    expect(Math.max(...lengths)).toBe(most);
    for (const text of [...oracleGolden().texts, " ".repeat(10_000), "=".repeat(4_000)]) {
      for (const parseSpecial of [false, true]) {
        const bytes = Buffer.byteLength(text);
        expect(tokenizer.encode(text, { parseSpecial, addSpecial: false }).length).toBeGreaterThanOrEqual(Math.ceil(bytes / most!));
      }
    }
  });

  it("is undefined when the vocabulary is not closed (BPE can drop bytes there)", () => {
    const vocab = fixtureVocab();
    // drop one byte symbol: the merges then run on texts, and that byte cannot be spelled
    const tokens = vocab.tokens.map((text) => (text === BYTE_TO_CHAR[0xe9] ? "[dropped]" : text));
    const open = Tokenizer.fromVocab({ ...vocab, tokens });
    expect(open.mergesOnIds).toBe(false);
    expect(open.maxTokenBytes).toBeUndefined();
  });
});
