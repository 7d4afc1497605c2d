/**
 * Step 1 of the recipe: corpus -> vocabulary -> token streams, deterministic from recipe.json.
 *
 *   pnpm --filter @keepquant/train exec tsx src/prepare.ts
 *
 * Writes into the work folder (tools/train/.work, gitignored): corpus.json (packages, files, sha256),
 * vocab.json (keepquant-bpe-vocab/1: byte-level BPE on the training fortunes, Qwen3.5 specials,
 * the ChatML template), train.bin / val.bin (uint16 little-endian token ids; every document ends with
 * <|endoftext|>; a recipe-fixed fraction of training fortunes is wrapped as a ChatML answer to one of
 * the recipe's prompts so `chat` works) and dataset.json (counts and sha256 of the streams).
 */
import { createHash } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { CHATML_TEMPLATE, Tokenizer } from "@keepquant/engine";
import { trainBpe, QWEN35_SPECIAL_TOKENS, withSpecialTokens } from "./bpe.js";
import { readCorpus, splitDocuments, trainingTexts } from "./corpus.js";
import { WORK_DIR, readRecipe } from "./recipe.js";

function sha256(bytes: Uint8Array | string): string {
  return createHash("sha256").update(bytes).digest("hex");
}

function writeAtomic(file: string, data: string | Uint8Array): void {
  const temporary = `${file}.tmp-${process.pid}`;
  fs.writeFileSync(temporary, data);
  fs.renameSync(temporary, file);
}

function tokenStream(tokenizer: Tokenizer, texts: readonly string[], endOfText: number): Uint16Array {
  const ids: number[] = [];
  for (const text of texts) {
    for (const id of tokenizer.encode(text, { parseSpecial: true })) ids.push(id);
    ids.push(endOfText);
  }
  return Uint16Array.from(ids);
}

function main(): void {
  const recipe = readRecipe();
  fs.mkdirSync(WORK_DIR, { recursive: true });
  const started = performance.now();
  const corpus = readCorpus(recipe);
  const split = splitDocuments(corpus.documents, recipe);
  const texts = trainingTexts(split.train, recipe);
  console.log(
    `corpus: ${corpus.files.length} files, ${corpus.documents.length} fortunes (${split.train.length} train, ${split.validation.length} validation), sha256 ${corpus.sha256}`,
  );

  const mergeCount = recipe.vocab.size - 256 - QWEN35_SPECIAL_TOKENS.length;
  const trained = trainBpe([...split.train, ...recipe.corpus.chatPrompts], mergeCount);
  if (trained.merges.length !== mergeCount) throw new Error(`corpus too small: ${trained.merges.length} merges of ${mergeCount}`);
  const { tokens, tokenTypes, specials } = withSpecialTokens(trained);
  const vocab = {
    format: "keepquant-bpe-vocab/1",
    description: `Byte-level BPE (qwen35 pre-tokenizer) of the default model, trained by tools/train on the training split of Debian's ${recipe.corpus.packages.join(" + ")} (corpus sha256 ${corpus.sha256}).`,
    model: "gpt2",
    pre: "qwen35",
    addBos: false,
    addEos: false,
    specials,
    tokens,
    tokenTypes,
    merges: trained.merges,
    chatTemplate: CHATML_TEMPLATE,
  };
  const vocabJson = `${JSON.stringify(vocab)}\n`;
  writeAtomic(path.join(WORK_DIR, "vocab.json"), vocabJson);
  console.log(`vocab: ${tokens.length} tokens, ${trained.merges.length} merges, sha256 ${sha256(vocabJson)}`);

  const tokenizer = Tokenizer.fromJson(vocab);
  const endOfText = specials["bos"]!;
  const train = tokenStream(tokenizer, texts, endOfText);
  const validation = tokenStream(
    tokenizer,
    split.validation.map((d) => `${d}\n`),
    endOfText,
  );
  const trainBytes = new Uint8Array(train.buffer);
  const validationBytes = new Uint8Array(validation.buffer);
  writeAtomic(path.join(WORK_DIR, "train.bin"), trainBytes);
  writeAtomic(path.join(WORK_DIR, "val.bin"), validationBytes);
  const dataset = {
    vocabSize: tokens.length,
    endOfText,
    train: {
      documents: split.train.length,
      tokens: train.length,
      sha256: sha256(trainBytes),
      characters: texts.reduce((a, t) => a + t.length, 0),
    },
    validation: { documents: split.validation.length, tokens: validation.length, sha256: sha256(validationBytes) },
    vocabSha256: sha256(vocabJson),
  };
  writeAtomic(path.join(WORK_DIR, "corpus.json"), `${JSON.stringify({ ...corpus, documents: undefined }, null, 2)}\n`);
  writeAtomic(path.join(WORK_DIR, "dataset.json"), `${JSON.stringify(dataset, null, 2)}\n`);
  console.log(`tokens: train ${train.length}, validation ${validation.length} (${Math.round(performance.now() - started)} ms)`);
}

main();
