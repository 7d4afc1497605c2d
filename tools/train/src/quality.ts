/**
 * The default model's quality bar: of the words it generates for 20 fixed prompts (temperature 0.8,
 * the engine's other sampling defaults, fixed seeds, 64 tokens each), the fraction that are English
 * words according to the system word list (/usr/share/dict/words from Debian's `wamerican`).
 *
 * A word is a run of ASCII letters with inner apostrophes ("don't", "dog's"); it counts as English
 * when the list holds it as written, in lower case, or (for an ALL-CAPS or Capitalized word) in
 * lower case. Digits, punctuation and special tokens are not words.
 */
import fs from "node:fs";
import type { Engine } from "@keepquant/engine";

export const WORD_LIST = "/usr/share/dict/words";

export const QUALITY_PROMPTS: readonly string[] = [
  "Once upon a time",
  "The best thing about life is",
  "A wise man once said",
  "Never trust a man who",
  "The secret of happiness",
  "In the beginning",
  "My mother always told me",
  "Love is",
  "The trouble with computers is",
  "If you want to be happy,",
  "There was an old man",
  "Today you will",
  "The only way to",
  "Money can't buy",
  "When I was young,",
  "The world is",
  "Every good story",
  "A friend is someone who",
  "You will meet",
  "Science is",
];

export const QUALITY_SAMPLING = { temperature: 0.8, maxTokens: 64, ignoreEog: true } as const;

/** Seed of prompt i (fixed). */
export function qualitySeed(index: number): number {
  return 1000 + index;
}

export function readWordList(file = WORD_LIST): Set<string> {
  return new Set(
    fs
      .readFileSync(file, "utf8")
      .split("\n")
      .filter((w) => w.length > 0),
  );
}

export function words(text: string): string[] {
  return text.match(/[A-Za-z]+(?:'[A-Za-z]+)*/g) ?? [];
}

export function isEnglishWord(word: string, list: ReadonlySet<string>): boolean {
  return list.has(word) || list.has(word.toLowerCase());
}

export interface QualitySample {
  prompt: string;
  seed: number;
  text: string;
  words: number;
  englishWords: number;
  /** Words the list does not hold. */
  unknown: string[];
}

export interface QualityReport {
  samples: QualitySample[];
  words: number;
  englishWords: number;
  fraction: number;
}

/** Generates the 20 samples with `engine` and scores them against `list`. */
export async function measureQuality(engine: Engine, list: ReadonlySet<string>): Promise<QualityReport> {
  const samples: QualitySample[] = [];
  for (const [index, prompt] of QUALITY_PROMPTS.entries()) {
    const seed = qualitySeed(index);
    const result = await engine.generate(prompt, { ...QUALITY_SAMPLING, seed }).result;
    const found = words(result.text);
    const unknown = found.filter((w) => !isEnglishWord(w, list));
    samples.push({ prompt, seed, text: result.text, words: found.length, englishWords: found.length - unknown.length, unknown });
  }
  const total = samples.reduce((a, s) => a + s.words, 0);
  const english = samples.reduce((a, s) => a + s.englishWords, 0);
  return { samples, words: total, englishWords: english, fraction: total === 0 ? 0 : english / total };
}
