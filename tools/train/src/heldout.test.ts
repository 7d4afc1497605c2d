/**
 * The held-out prompts of the quality bar are held out: not one of them occurs in the text the
 * default model was trained on (the training split as prepare.ts builds it, ChatML wrapping
 * included), nor anywhere in the fortune corpus (validation split too), nor among the chat prompts.
 * A prompt whose words never occur in the training text has no continuation there either.
 *
 * Needs the corpus the model was trained on: Debian's `fortunes` and `fortunes-min` installed
 * (.ci/run installs them) with the files docs/default-model/corpus.json records; skips otherwise.
 */
import fs from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { type Corpus, readCorpus, splitDocuments, trainingTexts } from "./corpus.js";
import { occurrences, wordSequence } from "./heldout.js";
import { HELDOUT_PROMPTS, SEEN_PROMPTS } from "./quality.js";
import { REPO_ROOT, readRecipe } from "./recipe.js";

const recipe = readRecipe();
const recorded = JSON.parse(fs.readFileSync(path.join(REPO_ROOT, "docs", "default-model", "corpus.json"), "utf8")) as { sha256: string };

function installedCorpus(): { corpus?: Corpus; reason?: string } {
  if (!fs.existsSync(recipe.corpus.directory))
    return { reason: `${recipe.corpus.directory} is absent (apt-get install ${recipe.corpus.packages.join(" ")})` };
  const corpus = readCorpus(recipe);
  if (corpus.sha256 !== recorded.sha256)
    return { reason: `the installed fortunes (corpus sha256 ${corpus.sha256}) are not the training corpus (${recorded.sha256})` };
  return { corpus };
}

const { corpus, reason } = installedCorpus();

describe("word sequences", () => {
  it("match across case, punctuation and line breaks, on word boundaries only", () => {
    const text = wordSequence("He said: BEFORE the\n\tmeeting began. Then before the meetings...");
    expect(occurrences(text, "Before the meeting began,")).toBe(1);
    expect(occurrences(text, "before the meeting")).toBe(1);
    expect(occurrences(text, "the meet")).toBe(0);
    expect(occurrences(text, "  ,, ")).toBe(0);
  });
});

describe.skipIf(corpus === undefined)(`the held-out prompts are not in the training text${reason ? ` (skipped: ${reason})` : ""}`, () => {
  const split = corpus ? splitDocuments(corpus.documents, recipe) : { train: [], validation: [] };
  const training = wordSequence(trainingTexts(split.train, recipe).join("\n"));
  const everything = wordSequence([...(corpus?.documents ?? []), ...recipe.corpus.chatPrompts].join("\n"));

  it(`none of the ${HELDOUT_PROMPTS.length} held-out prompts occurs in the training text, the whole corpus or the chat prompts`, () => {
    const found = HELDOUT_PROMPTS.map((p) => [p, occurrences(training, p), occurrences(everything, p)] as const).filter(
      ([, a, b]) => a + b > 0,
    );
    expect(found).toEqual([]);
    expect(new Set(HELDOUT_PROMPTS.map(wordSequence)).size).toBe(HELDOUT_PROMPTS.length);
    expect(HELDOUT_PROMPTS.filter((p) => SEEN_PROMPTS.includes(p))).toEqual([]);
  });

  it("the same search finds the seen prompts that the fortunes hold (it can fail)", () => {
    expect(occurrences(training, "Once upon a time")).toBeGreaterThan(0);
    expect(SEEN_PROMPTS.filter((p) => occurrences(training, p) > 0).length).toBeGreaterThan(5);
  });
});
