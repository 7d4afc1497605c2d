/**
 * Tokenizer benchmark at Qwen3.5's vocabulary size: the fixture vocabulary grown to 248,320
 * tokens with random extra merges (every merge result a token, so still a valid BPE), written as
 * a vocab-only GGUF. Measures our load / first-encode / encode throughput and llama.cpp's on the
 * same file and text (in this process, through the oracle), and checks the tokens agree.
 *
 *   pnpm exec tsx scripts/tokenizer/bench-tokenizer.ts
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { Tokenizer, vocabFromJson } from "@keepquant/engine";
import { QWEN35_VOCAB_SIZE, growVocab, vocabOnlyGguf } from "@keepquant/engine/testing";
import { readGguf } from "@keepquant/gguf";
import { loadLlamaOracle, llamaUnavailableReason } from "@keepquant/oracle";
import { ROOT, collectCorpus } from "./corpus.js";

const ms = (start: bigint): number => Number(process.hrtime.bigint() - start) / 1e6;

async function main(): Promise<void> {
  const base = vocabFromJson(JSON.parse(fs.readFileSync(path.join(ROOT, "goldens/tokenizer/vocab.json"), "utf8")));
  const vocab = growVocab(base, QWEN35_VOCAB_SIZE);
  const folder = fs.mkdtempSync(path.join(os.tmpdir(), "keepquant-tokbench-"));
  const model = path.join(folder, "vocab-248k.gguf");
  fs.writeFileSync(model, vocabOnlyGguf(vocab));
  if (process.env["KEEPQUANT_TOKENIZER_BENCH_GGUF"]) fs.copyFileSync(model, process.env["KEEPQUANT_TOKENIZER_BENCH_GGUF"]);
  const text = collectCorpus().texts.join("\n");
  const megabytes = Buffer.byteLength(text) / 1e6;
  console.log(`vocab ${vocab.tokens.length} tokens, ${vocab.merges.length} merges; text ${megabytes.toFixed(2)} MB`);

  try {
    const file = await readGguf(model);
    let start = process.hrtime.bigint();
    const tok = Tokenizer.fromGguf(file);
    const constructMs = ms(start);
    start = process.hrtime.bigint();
    tok.encode("warm up the maps");
    const mapsMs = ms(start);
    start = process.hrtime.bigint();
    const ours = tok.encode(text, { addSpecial: false, parseSpecial: false });
    const coldMs = ms(start);
    start = process.hrtime.bigint();
    tok.encode(text, { addSpecial: false, parseSpecial: false });
    const warmMs = ms(start);
    console.log(`ours: construct ${constructMs.toFixed(1)} ms, maps on first encode ${mapsMs.toFixed(1)} ms`);
    console.log(
      `ours: encode ${(megabytes / (coldMs / 1000)).toFixed(2)} MB/s cold cache, ${(megabytes / (warmMs / 1000)).toFixed(2)} MB/s warm (${ours.length} tokens)`,
    );

    const reason = llamaUnavailableReason();
    if (reason) {
      console.log(`SKIP llama.cpp comparison: ${reason}`);
      return;
    }
    const llama = loadLlamaOracle();
    start = process.hrtime.bigint();
    const oracleModel = llama.loadModel(model, { vocabOnly: true });
    const loadMs = ms(start);
    start = process.hrtime.bigint();
    const theirs = oracleModel.tokenize(text, { addSpecial: false, parseSpecial: false });
    const theirMs = ms(start);
    oracleModel.free();
    console.log(`llama.cpp: vocab-only load ${loadMs.toFixed(1)} ms, encode ${(megabytes / (theirMs / 1000)).toFixed(2)} MB/s`);
    console.log(`ratio (ours / llama.cpp throughput): cold ${(theirMs / coldMs).toFixed(2)}x, warm ${(theirMs / warmMs).toFixed(2)}x`);
    let same = ours.length === theirs.length;
    for (let i = 0; same && i < ours.length; i++) same = ours[i] === theirs[i];
    console.log(`tokens identical to llama.cpp: ${same ? "yes" : "NO"}`);
    if (!same) process.exitCode = 1;
  } finally {
    fs.rmSync(folder, { recursive: true, force: true });
  }
}

await main();
