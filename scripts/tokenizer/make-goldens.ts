/**
 * Asks llama.cpp (the oracle: libllama from @node-llama-cpp/linux-x64, vocab_only load of a
 * tensor-less qwen35 GGUF carrying goldens/tokenizer/vocab.json) to tokenize and detokenize a
 * deterministic set of strings, and records its answers in goldens/tokenizer/oracle-tokens.json.
 *
 *   pnpm exec tsx scripts/tokenizer/make-goldens.ts
 *
 * The engine test compares our tokenizer to this golden (and to the live oracle when present).
 */
import { createHash } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { createRng, vocabFromJson } from "@keepquant/engine";
import { vocabOnlyGguf } from "@keepquant/engine/testing";
import { ORACLE_PACKAGE, ORACLE_VERSION, runOracle } from "@keepquant/oracle";
import { ROOT, collectCorpus } from "./corpus.js";
import { tokenizerTestStrings } from "./test-strings.js";

const VOCAB = path.join(ROOT, "goldens", "tokenizer", "vocab.json");
const OUTPUT = path.join(ROOT, "goldens", "tokenizer", "oracle-tokens.json");
const STRING_COUNT = 1500;
const RANDOM_SEQUENCES = 400;

async function main(): Promise<void> {
  const vocabText = fs.readFileSync(VOCAB, "utf8");
  const vocab = vocabFromJson(JSON.parse(vocabText));
  const folder = fs.mkdtempSync(path.join(os.tmpdir(), "keepquant-tok-"));
  const model = path.join(folder, "vocab.gguf");
  fs.writeFileSync(model, vocabOnlyGguf(vocab));
  try {
    // Corpus lines of moderate length (the golden stores the strings themselves).
    const lines = collectCorpus()
      .texts.flatMap((text) => text.split("\n"))
      .filter((line) => line.trim().length > 0 && line.length <= 160);
    const texts = tokenizerTestStrings(STRING_COUNT, lines);

    const info = await runOracle({ kind: "info", model });
    const tokenize = [];
    for (const [parseSpecial, addSpecial] of [
      [true, true],
      [false, false],
    ] as const) {
      const { tokens } = await runOracle({ kind: "tokenize", model, texts, parseSpecial, addSpecial });
      tokenize.push({ parseSpecial, addSpecial, tokens });
    }

    // Detokenize: the token sequences above plus random id sequences (which split characters).
    const rng = createRng(7);
    const sequences: number[][] = tokenize.flatMap((group) => group.tokens.filter((_, i) => i % 10 === 0));
    for (let i = 0; i < RANDOM_SEQUENCES; i++) {
      const length = 1 + rng.nextInt(12);
      sequences.push(Array.from({ length }, () => rng.nextInt(vocab.tokens.length)));
    }
    const detokenize = [];
    for (const unparseSpecial of [true, false]) {
      const { texts: bytes } = await runOracle({ kind: "detokenize", model, sequences, unparseSpecial });
      detokenize.push({ unparseSpecial, bytes });
    }

    const allIds = Array.from({ length: vocab.tokens.length }, (_, i) => i);
    const pieces = [];
    for (const special of [true, false]) {
      const { pieces: bytes } = await runOracle({ kind: "pieces", model, tokens: allIds, special });
      pieces.push({ special, bytes });
    }

    const golden = {
      format: "keepquant-tokenizer-oracle/1",
      description: "llama.cpp's answers for goldens/tokenizer/vocab.json, by scripts/tokenizer/make-goldens.ts",
      oracle: { package: ORACLE_PACKAGE, packageVersion: ORACLE_VERSION, llamaVersion: info.version },
      vocabSha256: createHash("sha256").update(vocabText).digest("hex"),
      eos: info.eos,
      bos: info.bos,
      texts,
      tokenize,
      detokenize: { sequences, results: detokenize },
      pieces,
    };
    fs.writeFileSync(OUTPUT, `${JSON.stringify(golden)}\n`);
    const cases = tokenize.reduce((n, group) => n + group.tokens.length, 0);
    console.log(
      `wrote ${path.relative(ROOT, OUTPUT)}: ${cases} tokenizations, ${sequences.length * 2} detokenizations, oracle ${info.version}`,
    );
  } finally {
    fs.rmSync(folder, { recursive: true, force: true });
  }
}

await main();
