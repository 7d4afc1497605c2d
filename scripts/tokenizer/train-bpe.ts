/**
 * Trains the fixture vocabulary: a real byte-level BPE (qwen35 pre-tokenizer, GPT-2 byte alphabet)
 * on the README / licence / markdown text of the packages installed under node_modules, plus the
 * Qwen3.5 special tokens with their token types. Writes goldens/tokenizer/vocab.json.
 *
 *   pnpm exec tsx scripts/tokenizer/train-bpe.ts [--check]
 *
 * Deterministic: corpus files are sorted by "<package>@<version>/<file>", duplicates (same bytes)
 * dropped; ties between equally frequent pairs go to the lowest (left id, right id). The corpus
 * manifest (files and sha256) is stored in the JSON; with --check the script retrains and fails
 * when the result differs from the committed file (e.g. after a dependency change).
 */
import { createHash } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { QWEN_STYLE_TEMPLATE } from "@keepquant/engine";
import { QWEN35_SPECIAL_TOKENS as SPECIAL_TOKENS, trainBpe as train, withSpecialTokens } from "@keepquant/train/bpe";
import { ROOT, collectCorpus } from "./corpus.js";

const OUTPUT = path.join(ROOT, "goldens", "tokenizer", "vocab.json");
/** Total vocabulary size: 256 bytes + merges + specials. */
const VOCAB_SIZE = 4096;

function main(): void {
  const check = process.argv.includes("--check");
  const { files, texts } = collectCorpus();
  const mergeCount = VOCAB_SIZE - 256 - SPECIAL_TOKENS.length;
  const { tokens, merges } = train(texts, mergeCount);
  if (merges.length !== mergeCount) {
    throw new Error(`corpus too small: ${merges.length} merges of ${mergeCount}`);
  }
  const { tokens: allTokens, tokenTypes, specials } = withSpecialTokens({ tokens, merges });
  const corpusSha256 = createHash("sha256")
    .update(files.map((f) => `${f.sha256}  ${f.file}\n`).join(""))
    .digest("hex");
  const vocab = {
    format: "keepquant-bpe-vocab/1",
    description:
      "Fixture byte-level BPE (qwen35 pre-tokenizer) trained by scripts/tokenizer/train-bpe.ts on node_modules README/licence text. Synthetic, for tests.",
    model: "gpt2",
    pre: "qwen35",
    addBos: false,
    addEos: false,
    specials,
    tokens: allTokens,
    tokenTypes,
    merges,
    chatTemplate: QWEN_STYLE_TEMPLATE,
    corpus: { sha256: corpusSha256, files },
  };
  const json = `${JSON.stringify(vocab)}\n`;
  if (check) {
    const committed = fs.readFileSync(OUTPUT, "utf8");
    if (committed !== json) {
      console.error(`MISMATCH: retrained vocabulary differs from ${path.relative(ROOT, OUTPUT)}`);
      process.exit(1);
    }
    console.log(`OK: ${path.relative(ROOT, OUTPUT)} reproduces (${allTokens.length} tokens, ${merges.length} merges)`);
    return;
  }
  fs.mkdirSync(path.dirname(OUTPUT), { recursive: true });
  fs.writeFileSync(OUTPUT, json);
  console.log(
    `wrote ${path.relative(ROOT, OUTPUT)}: ${allTokens.length} tokens, ${merges.length} merges, ${files.length} corpus files, ${json.length} bytes`,
  );
}

main();
