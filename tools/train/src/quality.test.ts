/**
 * The default model's quality bar, measured on the committed file with our Engine: at least 90% of
 * the words generated for the 20 fixed prompts (temperature 0.8, fixed seeds, 64 tokens) are in the
 * system word list (/usr/share/dict/words, Debian's `wamerican`; .ci/run installs it).
 */
import fs from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { Engine } from "@keepquant/engine";
import { readDefaultModelManifest } from "@keepquant/engine/parity";
import { QUALITY_PROMPTS, WORD_LIST, measureQuality, readWordList } from "./quality.js";
import { REPO_ROOT } from "./recipe.js";

const manifest = readDefaultModelManifest(path.join(REPO_ROOT, "goldens", "default-model", "manifest.json"));
const modelFile = path.join(REPO_ROOT, manifest.model.file);
const reason = !fs.existsSync(WORD_LIST)
  ? `${WORD_LIST} is absent (apt-get install wamerican)`
  : !fs.existsSync(modelFile)
    ? `the default model file ${manifest.model.file} is not there`
    : undefined;

/** The bar of the issue: >= 90% English words. */
const MIN_ENGLISH_FRACTION = 0.9;

describe.skipIf(reason !== undefined)(`the default model writes English${reason ? ` (skipped: ${reason})` : ""}`, () => {
  it(`>= ${MIN_ENGLISH_FRACTION * 100}% of the words of 20 samples (temperature 0.8, 64 tokens) are in ${WORD_LIST}`, async () => {
    const engine = await Engine.load(modelFile);
    try {
      const report = await measureQuality(engine, readWordList());
      console.log(
        `English words: ${report.englishWords}/${report.words} = ${(100 * report.fraction).toFixed(1)}%; sample 0: ${JSON.stringify(report.samples[0]!.text)}`,
      );
      expect(report.samples).toHaveLength(QUALITY_PROMPTS.length);
      expect(report.words).toBeGreaterThan(20 * 20);
      expect(report.fraction).toBeGreaterThanOrEqual(MIN_ENGLISH_FRACTION);
    } finally {
      engine.dispose();
    }
  });
});
