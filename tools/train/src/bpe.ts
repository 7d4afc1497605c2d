/**
 * Byte-level BPE training (GPT-2 byte alphabet, qwen35 pre-tokenizer) and the Qwen3.5 special
 * tokens, shared by the fixture vocabulary (scripts/tokenizer/train-bpe.ts) and the default model's
 * vocabulary (tools/train).
 */
import { BYTE_TO_CHAR, preTokenize, TokenType } from "@keepquant/engine";

/** Words seen fewer times than this are ignored (keeps merges general). */
const MIN_WORD_COUNT = 1;

/** Qwen3.5's special tokens in their id order (qwen35.md section 11), with our token types. */
export const QWEN35_SPECIAL_TOKENS: ReadonlyArray<readonly [string, TokenType]> = [
  ["<|endoftext|>", TokenType.CONTROL],
  ["<|im_start|>", TokenType.CONTROL],
  ["<|im_end|>", TokenType.CONTROL],
  ["<|object_ref_start|>", TokenType.CONTROL],
  ["<|object_ref_end|>", TokenType.CONTROL],
  ["<|box_start|>", TokenType.CONTROL],
  ["<|box_end|>", TokenType.CONTROL],
  ["<|quad_start|>", TokenType.CONTROL],
  ["<|quad_end|>", TokenType.CONTROL],
  ["<|vision_start|>", TokenType.CONTROL],
  ["<|vision_end|>", TokenType.CONTROL],
  ["<|vision_pad|>", TokenType.CONTROL],
  ["<|image_pad|>", TokenType.CONTROL],
  ["<|video_pad|>", TokenType.CONTROL],
  ["<tool_call>", TokenType.USER_DEFINED],
  ["</tool_call>", TokenType.USER_DEFINED],
  // Not "special" in the Hugging Face config, so USER_DEFINED in the file; llama.cpp adds CONTROL by text.
  ["<|fim_prefix|>", TokenType.USER_DEFINED],
  ["<|fim_middle|>", TokenType.USER_DEFINED],
  ["<|fim_suffix|>", TokenType.USER_DEFINED],
  ["<|fim_pad|>", TokenType.USER_DEFINED],
  ["<|repo_name|>", TokenType.USER_DEFINED],
  ["<|file_sep|>", TokenType.USER_DEFINED],
  ["<tool_response>", TokenType.USER_DEFINED],
  ["</tool_response>", TokenType.USER_DEFINED],
  ["<think>", TokenType.USER_DEFINED],
  ["</think>", TokenType.USER_DEFINED],
];

export interface TrainedBpe {
  tokens: string[];
  merges: string[];
}

/**
 * Classic BPE training with incremental pair counts: words are the qwen35 pre-tokenizer's pieces;
 * ties between equally frequent pairs go to the lowest (left id, right id). Deterministic.
 */
export function trainBpe(texts: readonly string[], mergeCount: number): TrainedBpe {
  const encoder = new TextEncoder();
  const wordCounts = new Map<string, number>();
  for (const text of texts) {
    for (const word of preTokenize(text, "qwen35")) wordCounts.set(word, (wordCounts.get(word) ?? 0) + 1);
  }
  const tokens: string[] = [...BYTE_TO_CHAR];
  const words: { symbols: number[]; count: number }[] = [];
  for (const [word, count] of [...wordCounts].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0))) {
    if (count < MIN_WORD_COUNT) continue;
    words.push({ symbols: Array.from(encoder.encode(word)), count });
  }

  const KEY = 1 << 16; // ids stay below 65536
  const pairCounts = new Map<number, number>();
  const pairWords = new Map<number, Set<number>>();
  const addPairs = (index: number, sign: number): void => {
    const { symbols, count } = words[index]!;
    for (let i = 0; i + 1 < symbols.length; i++) {
      const key = symbols[i]! * KEY + symbols[i + 1]!;
      pairCounts.set(key, (pairCounts.get(key) ?? 0) + sign * count);
      if (sign > 0) {
        let set = pairWords.get(key);
        if (!set) {
          set = new Set();
          pairWords.set(key, set);
        }
        set.add(index);
      }
    }
  };
  for (let i = 0; i < words.length; i++) addPairs(i, 1);

  const merges: string[] = [];
  while (merges.length < mergeCount) {
    let bestKey = -1;
    let bestCount = 0;
    for (const [key, count] of pairCounts) {
      if (count > bestCount || (count === bestCount && count > 0 && key < bestKey)) {
        bestKey = key;
        bestCount = count;
      }
    }
    if (bestKey < 0 || bestCount < 2) break;
    const left = Math.floor(bestKey / KEY);
    const right = bestKey % KEY;
    const merged = tokens.length;
    tokens.push(tokens[left]! + tokens[right]!);
    merges.push(`${tokens[left]!} ${tokens[right]!}`);
    for (const index of pairWords.get(bestKey) ?? []) {
      const word = words[index]!;
      addPairs(index, -1);
      const out: number[] = [];
      const symbols = word.symbols;
      for (let i = 0; i < symbols.length; i++) {
        if (i + 1 < symbols.length && symbols[i] === left && symbols[i + 1] === right) {
          out.push(merged);
          i++;
        } else out.push(symbols[i]!);
      }
      word.symbols = out;
      addPairs(index, 1);
    }
    pairCounts.delete(bestKey);
    pairWords.delete(bestKey);
  }
  return { tokens, merges };
}

/** Byte tokens + merges followed by the special tokens: the full token list, types and special ids. */
export function withSpecialTokens(trained: TrainedBpe): {
  tokens: string[];
  tokenTypes: number[];
  specials: Record<string, number>;
} {
  const tokens = [...trained.tokens];
  const tokenTypes = tokens.map(() => TokenType.NORMAL as number);
  const specials: Record<string, number> = {};
  for (const [text, type] of QWEN35_SPECIAL_TOKENS) {
    const id = tokens.length;
    tokens.push(text);
    tokenTypes.push(type);
    if (text === "<|endoftext|>") specials["bos"] = id;
    if (text === "<|im_end|>") specials["eos"] = id;
    if (text === "<|vision_pad|>") specials["pad"] = id;
  }
  return { tokens, tokenTypes, specials };
}
