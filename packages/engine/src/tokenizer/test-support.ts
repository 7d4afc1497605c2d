/** Test support (not exported from the package): the committed fixture vocabulary and oracle golden. */
import fs from "node:fs";
import { fileURLToPath } from "node:url";
import { Tokenizer } from "./tokenizer.js";
import { createRng } from "../sampling/rng.js";
import { TokenType, type TokenizerVocab, vocabFromJson } from "./vocab.js";

export const GOLDENS_DIR = fileURLToPath(new URL("../../../../goldens/tokenizer/", import.meta.url));
export const VOCAB_JSON_PATH = `${GOLDENS_DIR}vocab.json`;
export const ORACLE_GOLDEN_PATH = `${GOLDENS_DIR}oracle-tokens.json`;

let vocab: TokenizerVocab | undefined;

export function fixtureVocab(): TokenizerVocab {
  vocab ??= vocabFromJson(JSON.parse(fs.readFileSync(VOCAB_JSON_PATH, "utf8")));
  return vocab;
}

export function fixtureTokenizer(): Tokenizer {
  return Tokenizer.fromVocab(fixtureVocab());
}

export interface OracleGolden {
  format: string;
  oracle: { package: string; packageVersion: string; llamaVersion: string };
  vocabSha256: string;
  bos: number;
  eos: number;
  texts: string[];
  tokenize: { parseSpecial: boolean; addSpecial: boolean; tokens: number[][] }[];
  detokenize: { sequences: number[][]; results: { unparseSpecial: boolean; bytes: string[] }[] };
  pieces: { special: boolean; bytes: string[] }[];
}

export function oracleGolden(): OracleGolden {
  return JSON.parse(fs.readFileSync(ORACLE_GOLDEN_PATH, "utf8")) as OracleGolden;
}

/** Qwen3.5's vocabulary size. */
export const QWEN35_VOCAB_SIZE = 248_320;

/**
 * The fixture vocabulary grown to `size` tokens with random extra merges of existing tokens (each
 * result a new token, so still a valid BPE), biased to frequent pieces so many apply to text.
 */
export function growVocab(base: TokenizerVocab, size: number, seed = 248_320): TokenizerVocab {
  const rng = createRng(seed);
  const tokens = [...base.tokens];
  const tokenTypes = Array.from(base.tokenTypes ?? tokens.map(() => TokenType.NORMAL));
  const merges = [...base.merges];
  const existing = new Set(tokens);
  const normal = tokens.map((_, id) => id).filter((id) => tokenTypes[id] === TokenType.NORMAL);
  while (tokens.length < size) {
    const pickId = (): number => normal[Math.floor(normal.length * rng.next() ** 3)]!;
    const a = tokens[pickId()]!;
    const b = tokens[pickId()]!;
    const merged = a + b;
    if (existing.has(merged) || merged.length > 24) continue;
    existing.add(merged);
    normal.push(tokens.length);
    tokens.push(merged);
    tokenTypes.push(TokenType.NORMAL);
    merges.push(`${a} ${b}`);
  }
  return { ...base, tokens, tokenTypes, merges };
}
