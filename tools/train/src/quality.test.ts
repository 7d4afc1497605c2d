/**
 * The default model's quality bar, measured on the committed file with our Engine: at least 90% of
 * the words generated for the 24 held-out prompts (none of them in the training text: heldout.test.ts;
 * temperature 0.8, fixed seeds, 64 tokens) are in the system word list (/usr/share/dict/words,
 * Debian's `wamerican`; .ci/run installs it). The seen prompts (the first bar's) are scored and
 * reported beside it, and must not beat the held-out score by much: a wide gap would mean the bar
 * measures recall of the training text. The counts must be the ones docs/default-model/quality.json,
 * docs/DEFAULT-MODEL.md and the README give (after a change of the model: src/evaluate.ts, then the pages).
 */
import fs from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { Engine } from "@keepquant/engine";
import { readDefaultModelManifest } from "@keepquant/engine/parity";
import { HELDOUT_SET, MIN_ENGLISH_FRACTION, SEEN_SET, WORD_LIST, measureQuality, readWordList } from "./quality.js";
import { REPO_ROOT } from "./recipe.js";

const manifest = readDefaultModelManifest(path.join(REPO_ROOT, "goldens", "default-model", "manifest.json"));
const modelFile = path.join(REPO_ROOT, manifest.model.file);
const reason = !fs.existsSync(WORD_LIST)
  ? `${WORD_LIST} is absent (apt-get install wamerican)`
  : !fs.existsSync(modelFile)
    ? `the default model file ${manifest.model.file} is not there`
    : undefined;

const recorded = JSON.parse(fs.readFileSync(path.join(REPO_ROOT, "docs", "default-model", "quality.json"), "utf8")) as {
  heldOut: { englishWords: number; words: number };
  seen: { englishWords: number; words: number };
};

describe.skipIf(reason !== undefined)(`the default model writes English${reason ? ` (skipped: ${reason})` : ""}`, () => {
  it(`>= ${MIN_ENGLISH_FRACTION * 100}% of the words of ${HELDOUT_SET.prompts.length} held-out samples (temperature 0.8, 64 tokens) are in ${WORD_LIST}; docs/default-model/quality.json records these counts`, async () => {
    const engine = await Engine.load(modelFile);
    try {
      const list = readWordList();
      const heldOut = await measureQuality(engine, list, HELDOUT_SET);
      const seen = await measureQuality(engine, list, SEEN_SET);
      const line = (r: typeof heldOut): string =>
        `${r.englishWords}/${r.words} = ${(100 * r.fraction).toFixed(1)}% (${r.samples.length} prompts)`;
      console.log(`English words, held-out prompts: ${line(heldOut)}; seen prompts: ${line(seen)}`);
      expect(heldOut.samples).toHaveLength(HELDOUT_SET.prompts.length);
      expect(heldOut.words).toBeGreaterThan(20 * HELDOUT_SET.prompts.length);
      expect(heldOut.fraction).toBeGreaterThanOrEqual(MIN_ENGLISH_FRACTION);
      expect(seen.fraction - heldOut.fraction).toBeLessThan(0.05);
      // the documented numbers are this run's (evaluate.ts writes quality.json; the pages quote it)
      expect(recorded.heldOut).toMatchObject({ englishWords: heldOut.englishWords, words: heldOut.words });
      expect(recorded.seen).toMatchObject({ englishWords: seen.englishWords, words: seen.words });
      const percent = (100 * heldOut.fraction).toFixed(1);
      expect(fs.readFileSync(path.join(REPO_ROOT, "docs", "DEFAULT-MODEL.md"), "utf8")).toContain(
        `| held-out (${HELDOUT_SET.prompts.length}, the bar: >= 90%) | ${heldOut.englishWords} / ${heldOut.words} | **${percent}%** |`,
      );
      expect(fs.readFileSync(path.join(REPO_ROOT, "README.md"), "utf8")).toContain(`${percent}% of the words it samples`);
    } finally {
      engine.dispose();
    }
  });
});
