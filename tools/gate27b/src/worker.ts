/**
 * One engine, one process (the gate never has both engines resident): load the file, warm up
 * (one short prompt: every weight page is touched once), then greedy-decode each prompt. Prints one
 * JSON line (`GateWorkerResult`). Run by gate.ts:
 *
 *   tsx src/worker.ts <keepquant|llama.cpp> <file.gguf> '<GateWorkerOptions json>'
 */
import { performance } from "node:perf_hooks";
import { exitWithResult } from "../../bench/src/worker-exit.js";

export interface GateWorkerOptions {
  threads: number;
  /** KV capacity / context in tokens. */
  context: number;
  kvType: "f16" | "f32";
  flashAttention: boolean;
  nTokens: number;
  prompts: number[][];
  /** The warm-up prompt (not one of the prompts; 2 tokens are generated). */
  warmup: number[];
  /** Top-K logits kept per step (llama.cpp only: the parity gate's goldens). */
  topK: number;
}

export interface GatePromptRun {
  tokens: number[];
  /** From the call to the first token: prefill of the prompt plus one sample. */
  timeToFirstTokenMs: number;
  /** From the first token to the last (nTokens - 1 decode steps). */
  decodeMs: number;
  /** llama.cpp only: per step, the full logit vector's top-K (ids by descending logit, ties -> lower id). */
  topIds?: number[][];
  topLogits?: number[][];
}

export interface GateWorkerResult {
  engine: "keepquant" | "llama.cpp";
  loadMs: number;
  /** The warm-up prompt (4 tokens, 2 generated) right after load: first touch of every weight page. */
  warmupMs: number;
  runs: GatePromptRun[];
  peakRssBytes: number;
  detail: string;
}

/**
 * The warm-up prompt, then every prompt in order, timed: `run(ids, maxTokens)` gives a prompt's tokens
 * and the time each came out (the first includes the prompt's prefill).
 */
async function timedRuns<T>(
  o: GateWorkerOptions,
  run: (ids: number[], maxTokens: number) => Promise<{ tokens: number[]; times: number[]; extra: T }>,
): Promise<{ warmupMs: number; runs: (GatePromptRun & { extra: T })[] }> {
  const w0 = performance.now();
  await run(o.warmup, 2);
  const warmupMs = performance.now() - w0;
  const runs: (GatePromptRun & { extra: T })[] = [];
  for (const prompt of o.prompts) {
    const start = performance.now();
    const { tokens, times, extra } = await run(prompt, o.nTokens);
    runs.push({ tokens, timeToFirstTokenMs: times[0]! - start, decodeMs: times.at(-1)! - times[0]!, extra });
  }
  return { warmupMs, runs };
}

async function keepquant(file: string, o: GateWorkerOptions): Promise<GateWorkerResult> {
  const { Engine } = await import("@keepquant/engine");
  const t0 = performance.now();
  const engine = await Engine.load(file, {
    threads: o.threads,
    kvCacheTokens: o.context,
    maxSequences: 1,
    kvType: o.kvType,
    flashAttention: o.flashAttention,
  });
  const loadMs = performance.now() - t0;
  const { warmupMs, runs } = await timedRuns(o, async (ids, maxTokens) => {
    const tokens: number[] = [];
    const times: number[] = [];
    for await (const event of engine.generate(ids, { maxTokens, temperature: 0, stopAtEog: false })) {
      if (event.type === "token" && event.token >= 0) {
        tokens.push(event.token);
        times.push(performance.now());
      }
    }
    return { tokens, times, extra: undefined };
  });
  const stats = engine.stats();
  const result: GateWorkerResult = {
    engine: "keepquant",
    loadMs,
    warmupMs,
    runs: runs.map(({ extra: _, ...run }) => run),
    peakRssBytes: process.resourceUsage().maxRSS * 1024,
    detail: `step ${stats.providers.step}; kv ${stats.kv.kvType}; ${JSON.stringify(stats.providers)}; ${stats.diagnostics.join(" | ")}`,
  };
  engine.dispose();
  return result;
}

async function llamaCpp(file: string, o: GateWorkerOptions): Promise<GateWorkerResult> {
  const { loadLlamaOracle } = await import("@keepquant/oracle");
  const { greedy } = await import("@keepquant/engine");
  const { topK: topKLogits } = await import("@keepquant/engine/parity");
  const t0 = performance.now();
  // The pinned haswell CPU variant (what our kernels match), weight repacking off (decode equals
  // batched prefill), mmap'd weights.
  const llama = loadLlamaOracle({ cpuVariant: "pinned" });
  const model = llama.loadModel(file, { repack: false, useMmap: true });
  const ctx = model.createContext({ nCtx: o.context, threads: o.threads, kvType: o.kvType, flashAttention: o.flashAttention });
  const loadMs = performance.now() - t0;
  const { warmupMs, runs: timed } = await timedRuns(o, async (ids, maxTokens) => {
    ctx.clear();
    const tokens: number[] = [];
    const times: number[] = [];
    const kept: Float32Array[] = [];
    let logits = ctx.decode(ids, 0, false).at(-1)!;
    for (let s = 0; s < maxTokens; s++) {
      if (s > 0) logits = ctx.decode([tokens.at(-1)!], ids.length + s - 1, false).at(-1)!;
      tokens.push(greedy(logits));
      times.push(performance.now());
      kept.push(logits.slice());
    }
    return { tokens, times, extra: kept };
  });
  const runs = timed.map(({ extra: logits, ...run }) => {
    // The top-K of every step, taken after the timed run.
    const tops = logits.map((l) => topKLogits(l, o.topK));
    return { ...run, topIds: tops.map((t) => Array.from(t.ids)), topLogits: tops.map((t) => Array.from(t.logits)) };
  });
  const result: GateWorkerResult = {
    engine: "llama.cpp",
    loadMs,
    warmupMs,
    runs,
    peakRssBytes: process.resourceUsage().maxRSS * 1024,
    detail: `llama.cpp ${llama.version()} raw C API, ${llama.cpuVariant()} CPU variant, repacking off, mmap`,
  };
  ctx.free();
  model.free();
  return result;
}

const [engine, file, json] = process.argv.slice(2);
const options = JSON.parse(json ?? "{}") as GateWorkerOptions;
const work =
  engine === "keepquant"
    ? keepquant(file!, options)
    : engine === "llama.cpp"
      ? llamaCpp(file!, options)
      : Promise.reject(new Error(`unknown engine ${engine}`));
exitWithResult(work);
