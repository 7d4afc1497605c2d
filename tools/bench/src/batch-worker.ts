/**
 * One engine, one file, one sequence count, one process: load, warm up, prefill `sequences` different
 * `prompt`-token prompts, then decode `gen` greedy tokens of every sequence. Reports the aggregate decode rate
 * over the steps in which every sequence decodes, the wall time per step and how much of it the engine's
 * forward took. Prints one JSON line. Run by batch-bench.ts, one engine at a time.
 *
 *   tsx src/batch-worker.ts <keepquant|llama.cpp|"llama.cpp haswell"> <file.gguf> '<options json>'
 *
 * keepquant: `sequences` concurrent `Engine.generate` calls; its scheduler batches them into one step.
 * llama.cpp: its raw C API as llama-server's parallel slots run it: one context with n_seq_max = sequences,
 * one llama_batch holding every prompt (prefill), then one batch per step holding one token per sequence,
 * greedy (argmax of each row's logits, read in place).
 */
import { performance } from "node:perf_hooks";
import { benchPrompt, prefillRows, stepRows } from "./sequences.js";
import { exitWithResult } from "./worker-exit.js";

export interface BatchWorkerOptions {
  threads: number;
  sequences: number;
  /** Prompt tokens per sequence. */
  prompt: number;
  /** Greedy tokens generated per sequence (the first comes from the prefill). */
  gen: number;
  vocab: number;
  /**
   * llama.cpp: the polling level of the persistent thread pool attached to its context (llama-server's and
   * llama-cli's `--poll`, default 50); -1 = no pool attached (ggml starts one for every graph).
   */
  poll?: number;
}

export interface BatchWorkerResult {
  engine: string;
  sequences: number;
  loadMs: number;
  /** Time to prefill all prompts (to every sequence's first token). */
  prefillMs: number;
  /** Steps measured (each one token of every sequence). */
  steps: number;
  tokensPerSecond: number;
  msPerStep: number;
  /** Of msPerStep: keepquant's forward (the native step, awaited), llama.cpp's llama_decode. */
  forwardMsPerStep: number;
  /** The first 8 generated tokens of sequence 0 (to check both engines decode the same sequences). */
  firstTokens: number[];
  peakRssBytes: number;
  detail: string;
}

/**
 * A worker's result from its measured decode window: `steps` steps in `windowMs`, `forwardMs` of it in the
 * engine's forward; the rates follow, with the process's peak RSS.
 */
function batchResult(
  o: BatchWorkerOptions,
  measured: { engine: string; loadMs: number; prefillMs: number; steps: number; windowMs: number; forwardMs: number },
  firstSequence: readonly number[],
  detail: string,
): BatchWorkerResult {
  const msPerStep = measured.windowMs / measured.steps;
  return {
    engine: measured.engine,
    sequences: o.sequences,
    loadMs: measured.loadMs,
    prefillMs: measured.prefillMs,
    steps: measured.steps,
    tokensPerSecond: (o.sequences * 1000) / msPerStep,
    msPerStep,
    forwardMsPerStep: measured.forwardMs / measured.steps,
    firstTokens: firstSequence.slice(0, 8),
    peakRssBytes: process.resourceUsage().maxRSS * 1024,
    detail,
  };
}

/** Per-sequence context: the prompt, the generated tokens and a margin. */
const contextPerSequence = (o: BatchWorkerOptions) => o.prompt + o.gen + 16;
const prompts = (o: BatchWorkerOptions) => Array.from({ length: o.sequences }, (_, s) => benchPrompt(o.prompt, o.vocab, s + 1));

async function keepquant(file: string, o: BatchWorkerOptions): Promise<BatchWorkerResult> {
  const { Engine } = await import("@keepquant/engine");
  const t0 = performance.now();
  const engine = await Engine.load(file, {
    threads: o.threads,
    kvCacheTokens: o.sequences * contextPerSequence(o),
    contextLength: contextPerSequence(o),
    maxSequences: o.sequences,
    maxBatchTokens: 512,
  });
  const loadMs = performance.now() - t0;
  const generate = async (ids: number[], maxTokens: number, onToken?: (count: number) => void): Promise<number[]> => {
    const tokens: number[] = [];
    for await (const event of engine.generate(ids, { maxTokens, temperature: 0, ignoreEog: true }))
      if (event.type === "token") {
        tokens.push(event.token);
        onToken?.(tokens.length);
      }
    return tokens;
  };
  await generate(benchPrompt(8, o.vocab, 99), 4); // warm-up
  // the window: from the moment every sequence has its first token (the prefills are behind) to the first
  // sequence's last token; the engine's step counter and forward time are read at both ends
  let started = 0;
  let start: { t: number; steps: number; forwardMs: number } | undefined;
  let end: typeof start;
  const snapshot = () => {
    const { steps, forwardMs } = engine.stats().counters;
    return { t: performance.now(), steps, forwardMs };
  };
  const t1 = performance.now();
  let prefillMs = 0;
  const all = await Promise.all(
    prompts(o).map((ids) =>
      generate(ids, o.gen, (count) => {
        if (count === 1 && ++started === o.sequences) {
          start = snapshot();
          prefillMs = start.t - t1;
        }
        if (count === o.gen && end === undefined) end = snapshot();
      }),
    ),
  );
  if (!start || !end || end.steps <= start.steps) throw new Error(`no decode window (${o.gen} tokens per sequence)`);
  const steps = end.steps - start.steps;
  const stats = engine.stats();
  const result = batchResult(
    o,
    { engine: "keepquant", loadMs, prefillMs, steps, windowMs: end.t - start.t, forwardMs: end.forwardMs - start.forwardMs },
    all[0]!,
    `${stats.providers.step}, decode tuning ${stats.tuning?.source ?? "off"}, ${stats.counters.preemptions} preemptions`,
  );
  engine.dispose();
  return result;
}

/** `pinned`: the haswell CPU variant with repacking off (the arithmetic keepquant reproduces); else ggml's pick, repacking on. */
async function llamaCpp(file: string, o: BatchWorkerOptions, pinned: boolean): Promise<BatchWorkerResult> {
  const { loadLlamaOracle } = await import("@keepquant/oracle");
  const t0 = performance.now();
  const llama = loadLlamaOracle({ cpuVariant: pinned ? "pinned" : "best" });
  const model = llama.loadModel(file, { repack: !pinned });
  const ctx = model.createContext({
    nCtx: o.sequences * contextPerSequence(o),
    threads: o.threads,
    kvType: "f16",
    flashAttention: true,
    ubatch: 512,
    sequences: o.sequences,
    ...((o.poll ?? 50) >= 0 ? { threadPool: { poll: o.poll ?? 50 } } : {}),
  });
  const loadMs = performance.now() - t0;
  // warm-up: a short prompt and a few steps on sequence 0
  const warm = benchPrompt(8, o.vocab, 99);
  ctx.decodeRows(prefillRows([warm]).rows);
  let next = ctx.argmaxRow(warm.length - 1);
  for (let i = 0; i < 3; i++) {
    ctx.decodeRows(stepRows([next], [warm.length + i]));
    next = ctx.argmaxRow(0);
  }
  ctx.clear();

  const t1 = performance.now();
  const { rows, logitRows } = prefillRows(prompts(o));
  for (let first = 0; first < rows.length; first += 512) ctx.decodeRows(rows.slice(first, first + 512));
  // the logits rows are those of the last pass (every prompt ends in it when all prompts fit in 512 rows)
  const passStart = Math.floor((rows.length - 1) / 512) * 512;
  if (logitRows.some((r) => r < passStart)) throw new Error(`${o.sequences} x ${o.prompt} prompt tokens: keep them within 512 rows`);
  let tokens = logitRows.map((r) => ctx.argmaxRow(r - passStart));
  const prefillMs = performance.now() - t1;
  const generated: number[][] = tokens.map((t) => [t]);
  const positions = Array.from({ length: o.sequences }, () => o.prompt);
  let forwardMs = 0;
  const t2 = performance.now();
  for (let step = 1; step < o.gen; step++) {
    const batch = stepRows(tokens, positions);
    const t = performance.now();
    ctx.decodeRows(batch);
    forwardMs += performance.now() - t;
    tokens = tokens.map((_, s) => ctx.argmaxRow(s));
    tokens.forEach((token, s) => {
      generated[s]!.push(token);
      positions[s]!++;
    });
  }
  const steps = o.gen - 1;
  const result = batchResult(
    o,
    { engine: pinned ? "llama.cpp haswell" : "llama.cpp", loadMs, prefillMs, steps, windowMs: performance.now() - t2, forwardMs },
    generated[0]!,
    `raw C API, ${llama.cpuVariant()} CPU variant, repacking ${pinned ? "off" : "on"}, ${(o.poll ?? 50) >= 0 ? `a persistent thread pool (poll ${o.poll ?? 50})` : "a thread pool per graph"}, n_seq_max ${o.sequences}, one batch per step`,
  );
  ctx.free();
  model.free();
  return result;
}

const [engine, file, json] = process.argv.slice(2);
const options = JSON.parse(json ?? "{}") as BatchWorkerOptions;
process.on("SIGTERM", () => process.exit(1));
const work =
  engine === "keepquant"
    ? keepquant(file!, options)
    : engine === "llama.cpp" || engine === "llama.cpp haswell"
      ? llamaCpp(file!, options, engine === "llama.cpp haswell")
      : Promise.reject(new Error(`unknown engine ${engine}`));
exitWithResult(work);
