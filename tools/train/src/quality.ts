/**
 * The default model's quality bar: of the words it generates for fixed prompts (temperature 0.8,
 * the engine's other sampling defaults, fixed seeds, 64 tokens each), the fraction that are English
 * words according to the system word list (/usr/share/dict/words from Debian's `wamerican`).
 *
 * The bar is measured on HELDOUT_PROMPTS: prompts written for this check, none of which occurs in
 * the training text (heldout.test.ts proves it against the corpus), so the model cannot have learnt
 * how they go on. SEEN_PROMPTS (the first bar's 20 prompts; several are openings the fortunes hold,
 * "Once upon a time" eight times) are scored too, for comparison, not as the bar.
 *
 * A word is a run of ASCII letters with inner apostrophes ("don't", "dog's"); it counts as English
 * when the list holds it as written, in lower case, or (for an ALL-CAPS or Capitalized word) in
 * lower case. Digits, punctuation and special tokens are not words.
 */
import fs from "node:fs";
import type { Engine } from "@keepquant/engine";

export const WORD_LIST = "/usr/share/dict/words";

/**
 * The held-out prompts, fixed before the model they measure was trained (and not chosen by its
 * results): everyday openings in present-day American English, none of them in the training text.
 */
export const HELDOUT_PROMPTS: readonly string[] = [
  "The train to the coast was late",
  "When the kettle started to sing",
  "She opened the letter from her brother",
  "Our new teacher told the class",
  "The old bridge over the river",
  "After the storm the village",
  "Nobody in the office could explain",
  "The recipe for a good soup",
  "His bicycle had a flat tire",
  "The children ran down to the beach",
  "On the first day of spring",
  "The garden behind the library",
  "My grandfather kept a small boat",
  "The best way to learn a language",
  "At the end of the long summer",
  "The doctor looked at the chart and",
  "Every morning the baker",
  "The mayor of the little town",
  "A cat sat by the open window",
  "Before the meeting began,",
  "The museum was closed on Mondays",
  "In the quiet hour before dawn",
  "The farmer counted his sheep",
  "Two strangers met on a bus",
];

/** The first quality bar's prompts: fortune-like openings, several of which the training text holds. */
export const SEEN_PROMPTS: readonly string[] = [
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

/** The bar of the issue: at least 90% of the words generated for the held-out prompts are English. */
export const MIN_ENGLISH_FRACTION = 0.9;

export interface PromptSet {
  name: "held-out" | "seen";
  prompts: readonly string[];
  /** Seed of prompt 0; prompt i samples with firstSeed + i. */
  firstSeed: number;
}

export const HELDOUT_SET: PromptSet = { name: "held-out", prompts: HELDOUT_PROMPTS, firstSeed: 2000 };
export const SEEN_SET: PromptSet = { name: "seen", prompts: SEEN_PROMPTS, firstSeed: 1000 };

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
  set: PromptSet["name"];
  samples: QualitySample[];
  words: number;
  englishWords: number;
  fraction: number;
}

/** Generates one sample per prompt of `set` with `engine` and scores them against `list`. */
export async function measureQuality(engine: Engine, list: ReadonlySet<string>, set: PromptSet = HELDOUT_SET): Promise<QualityReport> {
  const samples: QualitySample[] = [];
  for (const [index, prompt] of set.prompts.entries()) {
    const seed = set.firstSeed + index;
    const result = await engine.generate(prompt, { ...QUALITY_SAMPLING, seed }).result;
    const found = words(result.text);
    const unknown = found.filter((w) => !isEnglishWord(w, list));
    samples.push({ prompt, seed, text: result.text, words: found.length, englishWords: found.length - unknown.length, unknown });
  }
  const total = samples.reduce((a, s) => a + s.words, 0);
  const english = samples.reduce((a, s) => a + s.englishWords, 0);
  return { set: set.name, samples, words: total, englishWords: english, fraction: total === 0 ? 0 : english / total };
}
