/** Test support (not exported from the package): the committed fixture vocabulary and oracle golden. */
import fs from "node:fs";
import { fileURLToPath } from "node:url";
import { Tokenizer } from "./tokenizer.js";
import { type TokenizerVocab, vocabFromJson } from "./vocab.js";

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
