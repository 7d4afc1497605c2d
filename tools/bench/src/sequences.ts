/**
 * What the side-by-side workers share about prompts and concurrent sequences (pure: no engine, no clock):
 * the benchmark prompts, the aggregate rate over the window in which every sequence decodes, the rows
 * of llama.cpp's multi-sequence batches, and the batching table (batch-bench.ts).
 */
import type { BatchRow } from "@keepquant/oracle";
import type { WorkerOptions } from "./worker.js";

/** The benchmark prompt: the same ids for every engine (`salt` makes the prompts of concurrent sequences differ). */
export function benchPrompt(length: number, vocab: number, salt = 0): number[] {
  return Array.from({ length }, (_, i) => (i * 7919 + 13 + salt * 104_729) % vocab);
}

/**
 * A side-by-side worker's options: `seqs` sequences of a `prompt`-token prompt and `gen` generated tokens, in a
 * context that holds them all with a margin of 16 tokens each (at least 2048).
 */
export function sideBySideOptions(o: { threads: number; prompt: number; gen: number; seqs: number; vocab: number }): WorkerOptions {
  return { ...o, context: Math.max(2048, o.seqs * (o.prompt + o.gen + 16)) };
}

/** tokens/s over the window where all `stamps` series (token times in ms, one series per sequence) are running. */
export function aggregateTokensPerSecond(stamps: readonly (readonly number[])[]): number {
  const start = Math.max(...stamps.map((t) => t[0] ?? Infinity));
  const end = Math.min(...stamps.map((t) => t.at(-1) ?? -Infinity));
  let tokens = 0;
  for (const times of stamps) for (const t of times) if (t > start && t <= end) tokens++;
  return end > start ? (tokens / (end - start)) * 1000 : 0;
}

/**
 * One batch holding every prompt, sequence `s` = `prompts[s]` at positions 0.., logits only on each prompt's
 * last row; `logitRows[s]` is that row's index in the batch (what llama_get_logits_ith takes).
 */
export function prefillRows(prompts: readonly (readonly number[])[]): { rows: BatchRow[]; logitRows: number[] } {
  const rows: BatchRow[] = [];
  const logitRows: number[] = [];
  prompts.forEach((prompt, seq) => {
    if (prompt.length === 0) throw new Error(`prompt of sequence ${seq} is empty`);
    prompt.forEach((token, pos) => rows.push({ token, pos, seq, logits: pos === prompt.length - 1 }));
    logitRows.push(rows.length - 1);
  });
  return { rows, logitRows };
}

/** One decode step: `tokens[s]` at `positions[s]` of sequence `s`, every row with logits (row index = sequence). */
export function stepRows(tokens: readonly number[], positions: readonly number[]): BatchRow[] {
  if (tokens.length !== positions.length) throw new Error(`${tokens.length} tokens for ${positions.length} positions`);
  return tokens.map((token, seq) => ({ token, pos: positions[seq]!, seq, logits: true }));
}

/** One (engine, sequences) cell of the batching table: medians over the repeats. */
export interface BatchCell {
  /** Aggregate decode tokens/s over the window in which every sequence decodes. */
  tokensPerSecond: number;
  /** Wall time of one step (one token of every sequence). */
  msPerStep: number;
  /** Of that: inside the engine's forward (keepquant: `counters.forwardMs`; llama.cpp: `llama_decode`). */
  forwardMsPerStep: number;
}

/** The batching table: one row per sequence count, keepquant and llama.cpp side by side, and the ratio. */
export function batchTable(
  file: string,
  rows: readonly { sequences: number; keepquant: BatchCell; llama: BatchCell }[],
  llamaName = "llama.cpp",
): string[] {
  const f = (v: number, digits = 1) => v.toFixed(digits);
  const out = [
    `| file | sequences | keepquant tok/s | keepquant ms/step (forward) | ${llamaName} tok/s | ${llamaName} ms/step (llama_decode) | keepquant / ${llamaName} |`,
    "|---|---:|---:|---:|---:|---:|---:|",
  ];
  for (const { sequences, keepquant: k, llama: l } of rows) {
    out.push(
      `| ${file} | ${sequences} | ${f(k.tokensPerSecond)} | ${f(k.msPerStep)} (${f(k.forwardMsPerStep)}) | ${f(l.tokensPerSecond)} | ` +
        `${f(l.msPerStep)} (${f(l.forwardMsPerStep)}) | **${(k.tokensPerSecond / l.tokensPerSecond).toFixed(2)}x** |`,
    );
  }
  return out;
}
