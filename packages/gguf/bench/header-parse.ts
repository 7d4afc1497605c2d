/**
 * Header parse speed: keepquant's readGguf vs @huggingface/gguf on the same file, same run.
 * The file is a header-only (sparse) qwen35 0.8B layout with a 248,320-entry tokenizer: tokens,
 * token types and ~248k merges, like the real Qwen3.5 vocabulary.
 *
 *   pnpm --filter @keepquant/gguf bench            (KEEPQUANT_GGUF_BENCH_RUNS=<n> to change the timed runs)
 */
import { mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { gguf as hfGguf } from "@huggingface/gguf";
import { QWEN35_0_8B_SHAPE, defaultQwen35Tokenizer, getMetadata, gpt2ByteSymbols, readGguf, writeQwen35HeaderOnly } from "../src/index.js";

const VOCAB = 248_320;
const RUNS = Number(process.env.KEEPQUANT_GGUF_BENCH_RUNS ?? 15);

/** Deterministic byte-level BPE-looking vocabulary: byte symbols, merged pieces, a few specials. */
function vocabulary(): { tokens: string[]; merges: string[] } {
  const symbols = gpt2ByteSymbols();
  const letters = "abcdefghijklmnopqrstuvwxyzĠ".split("");
  const cjk = "的一是不了人我在有他这为之大来以个中上们".split("");
  let s = 12345;
  const rand = (n: number) => {
    s = (Math.imul(s, 1103515245) + 12345) >>> 0;
    return s % n;
  };
  const tokens = [...symbols];
  const seen = new Set(tokens);
  const merges: string[] = [];
  while (tokens.length < VOCAB - 3) {
    const len = 2 + rand(9);
    let piece = rand(3) === 0 ? "Ġ" : "";
    for (let i = piece.length; i < len; i++) piece += rand(20) === 0 ? cjk[rand(cjk.length)]! : letters[rand(letters.length)]!;
    if (seen.has(piece)) continue;
    seen.add(piece);
    tokens.push(piece);
    const cut = 1 + rand(piece.length - 1);
    merges.push(`${piece.slice(0, cut)} ${piece.slice(cut)}`);
  }
  tokens.push("<|endoftext|>", "<|im_start|>", "<|im_end|>");
  return { tokens, merges };
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "kq-gguf-bench-"));
  try {
    const path = join(dir, "qwen35-0.8b-header-only.gguf");
    const { tokens, merges } = vocabulary();
    const base = defaultQwen35Tokenizer(VOCAB);
    await writeQwen35HeaderOnly(path, {
      ...QWEN35_0_8B_SHAPE,
      tokenizer: { ...base, tokens, merges, tokenTypes: tokens.map((_, i) => (i >= VOCAB - 3 ? 3 : 1)) },
    });
    const parsed = await readGguf(path);
    const headerBytes = parsed.dataOffset;
    console.log(
      `file: ${statSync(path).size} bytes (sparse), header ${headerBytes} bytes, ${parsed.tensors.length} tensors, ` +
        `${(getMetadata(parsed, "tokenizer.ggml.tokens") as string[]).length} tokens, ${(getMetadata(parsed, "tokenizer.ggml.merges") as string[]).length} merges`,
    );

    const ours = async () => {
      const file = await readGguf(path);
      if (file.tensors.length !== parsed.tensors.length) throw new Error("keepquant parse mismatch");
    };
    const theirs = async () => {
      const file = await hfGguf(path, { allowLocalFile: true });
      if (file.tensorInfos.length !== parsed.tensors.length) throw new Error("@huggingface/gguf parse mismatch");
    };
    for (let i = 0; i < 3; i++) {
      await ours();
      await theirs();
    }
    const timesOurs: number[] = [];
    const timesTheirs: number[] = [];
    for (let i = 0; i < RUNS; i++) {
      // Interleaved so machine noise hits both alike.
      let t = performance.now();
      await ours();
      timesOurs.push(performance.now() - t);
      t = performance.now();
      await theirs();
      timesTheirs.push(performance.now() - t);
    }
    const a = median(timesOurs);
    const b = median(timesTheirs);
    console.log(`runs: ${RUNS} each, interleaved, after 3 warm-up runs each`);
    console.log(`keepquant readGguf        median ${a.toFixed(1)} ms  (min ${Math.min(...timesOurs).toFixed(1)})`);
    console.log(`@huggingface/gguf 0.4.6   median ${b.toFixed(1)} ms  (min ${Math.min(...timesTheirs).toFixed(1)})`);
    console.log(`ratio (huggingface / keepquant): ${(b / a).toFixed(2)}x  (target >= 2x)`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
