/** The training recipe (tools/train/recipe.json) and the tool's working folder. */
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import type { Qwen35Spec } from "@keepquant/gguf";

export const TRAIN_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
export const REPO_ROOT = path.resolve(TRAIN_DIR, "..", "..");
export const RECIPE_FILE = path.join(TRAIN_DIR, "recipe.json");
/** Corpus, vocabulary, token streams, checkpoints and model files (gitignored). KEEPQUANT_TRAIN_DIR overrides. */
export const WORK_DIR = process.env.KEEPQUANT_TRAIN_DIR ?? path.join(TRAIN_DIR, ".work");

/** The model's shape as the synthesizer spells it (the vocabulary comes from the trained tokenizer). */
export type ModelShape = Omit<
  Qwen35Spec,
  "vocab" | "tokenizer" | "seed" | "name" | "residualGain" | "extraMetadata" | "recurrentLayers"
> & {
  fullAttentionInterval: number;
  mtp: boolean;
};

export interface Recipe {
  name: string;
  seed: number;
  corpus: {
    packages: string[];
    directory: string;
    exclude: string[];
    validationFraction: number;
    chatFraction: number;
    chatPrompts: string[];
  };
  vocab: { size: number };
  model: ModelShape;
  training: Record<string, number>;
}

export function readRecipe(file = RECIPE_FILE): Recipe {
  return JSON.parse(fs.readFileSync(file, "utf8")) as Recipe;
}
