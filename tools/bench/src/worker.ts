/**
 * One engine, one file, one process: load, warm up, then a `prompt`-token prompt followed by `gen`
 * greedy tokens (time to first token = prefill, the rest = decode), optionally `seqs` concurrent
 * sequences, and the process's peak RSS. Prints one JSON line. Run by run.ts, one engine at a time.
 *
 *   tsx src/worker.ts <keepquant|node-llama-cpp|llama.cpp|"llama.cpp haswell"|bandwidth> <file.gguf> '<options json>'
 */
import { spawn } from "node:child_process";
import { performance } from "node:perf_hooks";
import { activeBytesPerToken } from "./active-bytes.js";
import { aggregateTokensPerSecond as aggregate, benchPrompt as prompt } from "./sequences.js";
import { exitWithResult } from "./worker-exit.js";

export interface WorkerOptions {
  threads: number;
  prompt: number;
  gen: number;
  /** Total context (tokens) given to every engine. */
  context: number;
  /** Concurrent sequences for the aggregate decode measurement (1 = skip). */
  seqs: number;
  /** Vocabulary size of the file (prompt ids are spread over it). */
  vocab: number;
  /** Tokens per forward pass for both engines (keepquant's maxBatchTokens, llama.cpp's n_ubatch). Default 512. */
  ubatch?: number;
  /** Busy processes (a spinning `node -e`) started before loading and stopped after: the contention row. */
  contention?: number;
}

export interface WorkerResult {
  engine: string;
  loadMs: number;
  prefillTokensPerSecond: number;
  timeToFirstTokenMs: number;
  decodeTokensPerSecond: number;
  /** Aggregate decode tokens/s with `seqs` concurrent sequences (when measured). */
  aggregateTokensPerSecond?: number;
  peakRssBytes: number;
  /** keepquant: what the decode tuner chose and why (engine.stats().tuning) */
  tuning?: unknown;
  /** Weight bytes resident (keepquant) / bandwidth (bandwidth worker). */
  weightBytesPerToken?: number;
  /** Weight bytes one decoded token actually reads (keepquant; active-bytes.ts: routed experts counted k of E). */
  activeBytesPerToken?: number;
  bandwidthBytesPerSecond?: number;
  detail: string;
}

/** From token timestamps of one generation started at `start`: TTFT and decode rate. */
function rates(
  start: number,
  times: number[],
  promptTokens: number,
): Pick<WorkerResult, "prefillTokensPerSecond" | "timeToFirstTokenMs" | "decodeTokensPerSecond"> {
  const ttft = times[0]! - start;
  const decodeMs = times.at(-1)! - times[0]!;
  return {
    timeToFirstTokenMs: ttft,
    prefillTokensPerSecond: (promptTokens / ttft) * 1000,
    decodeTokensPerSecond: ((times.length - 1) / decodeMs) * 1000,
  };
}

async function keepquant(file: string, o: WorkerOptions): Promise<WorkerResult> {
  const { Engine } = await import("@keepquant/engine");
  const t0 = performance.now();
  const engine = await Engine.load(file, {
    threads: o.threads,
    kvCacheTokens: o.context,
    contextLength: o.context,
    maxSequences: Math.max(1, o.seqs),
    maxBatchTokens: o.ubatch ?? 512,
  });
  const loadMs = performance.now() - t0;
  const vocab = engine.weights.vocab;
  const run = async (ids: number[], maxTokens: number): Promise<number[]> => {
    const times: number[] = [];
    for await (const event of engine.generate(ids, { maxTokens, temperature: 0, ignoreEog: true }))
      if (event.type === "token") times.push(performance.now());
    return times;
  };
  await run(prompt(8, vocab, 99), 4); // warm-up
  const start = performance.now();
  const times = await run(prompt(o.prompt, vocab), o.gen);
  const result: WorkerResult = {
    engine: "keepquant",
    loadMs,
    ...rates(start, times, o.prompt),
    peakRssBytes: 0,
    weightBytesPerToken: engine.stats().residentBytes.packed,
    activeBytesPerToken: (await activeBytesPerToken(file)).perToken,
    detail: `${engine.stats().providers.step}, decode tuning ${engine.stats().tuning?.source ?? "off"}`,
    tuning: engine.stats().tuning,
  };
  if (o.seqs > 1) {
    const stamps = await Promise.all(Array.from({ length: o.seqs }, (_, i) => run(prompt(8, vocab, i + 1), o.gen)));
    result.aggregateTokensPerSecond = aggregate(stamps);
  }
  result.peakRssBytes = process.resourceUsage().maxRSS * 1024;
  engine.dispose();
  return result;
}

async function nodeLlamaCpp(file: string, o: WorkerOptions): Promise<WorkerResult> {
  const { getLlama, LlamaLogLevel } = await import("node-llama-cpp");
  const t0 = performance.now();
  // its defaults, except: CPU only, and never download or build anything
  const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
  const model = await llama.loadModel({ modelPath: file });
  const context = await model.createContext({ contextSize: o.context, threads: o.threads });
  const loadMs = performance.now() - t0;
  const vocab = o.vocab;
  const run = async (sequence: ReturnType<typeof context.getSequence>, ids: number[], maxTokens: number): Promise<number[]> => {
    const times: number[] = [];
    const iterator = sequence.evaluate(ids as never, { temperature: 0 });
    for (let i = 0; i < maxTokens; i++) {
      const next = await iterator.next();
      if (next.done) break;
      times.push(performance.now());
    }
    await iterator.return?.(undefined as never);
    return times;
  };
  const sequence = context.getSequence();
  await run(sequence, prompt(8, vocab, 99), 4); // warm-up
  await sequence.clearHistory();
  const start = performance.now();
  const times = await run(sequence, prompt(o.prompt, vocab), o.gen);
  const result: WorkerResult = {
    engine: "node-llama-cpp",
    loadMs,
    ...rates(start, times, o.prompt),
    peakRssBytes: 0,
    detail: `node-llama-cpp ${llama.buildType} build, ${llama.cpuMathCores} math cores`,
  };
  sequence.dispose();
  if (o.seqs > 1) {
    await context.dispose();
    const many = await model.createContext({ contextSize: o.context, threads: o.threads, sequences: o.seqs });
    const sequences = Array.from({ length: o.seqs }, () => many.getSequence());
    const stamps = await Promise.all(sequences.map((s, i) => run(s, prompt(8, vocab, i + 1), o.gen)));
    result.aggregateTokensPerSecond = aggregate(stamps);
    await many.dispose();
  }
  result.peakRssBytes = process.resourceUsage().maxRSS * 1024;
  await model.dispose();
  return result;
}

/**
 * llama.cpp's raw C API. `pinned`: the haswell CPU variant with repacking off, the arithmetic keepquant
 * reproduces bit for bit (the fair kernel-for-kernel comparison); otherwise llama.cpp as an
 * application runs it: the CPU variant ggml picks for this CPU, weight repacking on.
 */
async function rawLlamaCpp(file: string, o: WorkerOptions, pinned = false): Promise<WorkerResult> {
  const { loadLlamaOracle } = await import("@keepquant/oracle");
  const t0 = performance.now();
  const llama = loadLlamaOracle({ cpuVariant: pinned ? "pinned" : "best" });
  const model = llama.loadModel(file, { repack: !pinned });
  const ctx = model.createContext({ nCtx: o.context, threads: o.threads, kvType: "f16", flashAttention: true, ubatch: o.ubatch ?? 512 });
  const loadMs = performance.now() - t0;
  const vocab = model.nVocab;
  const argmax = (logits: Float32Array): number => {
    let best = 0;
    for (let v = 1; v < logits.length; v++) if (logits[v]! > logits[best]!) best = v;
    return best;
  };
  const run = (ids: number[], maxTokens: number): number[] => {
    ctx.clear();
    const times: number[] = [];
    let logits = ctx.decode(ids, 0, false).at(-1)!;
    times.push(performance.now());
    for (let i = 1; i < maxTokens; i++) {
      logits = ctx.decode([argmax(logits)], ids.length + i - 1, false).at(-1)!;
      times.push(performance.now());
    }
    return times;
  };
  run(prompt(8, vocab, 99), 4); // warm-up
  const start = performance.now();
  const times = run(prompt(o.prompt, vocab), o.gen);
  const result: WorkerResult = {
    engine: pinned ? "llama.cpp haswell" : "llama.cpp",
    loadMs,
    ...rates(start, times, o.prompt),
    peakRssBytes: process.resourceUsage().maxRSS * 1024,
    detail: `raw C API, ${llama.cpuVariant()} CPU variant, repacking ${pinned ? "off (the arithmetic keepquant reproduces)" : "on"}`,
  };
  ctx.free();
  model.free();
  return result;
}

async function bandwidth(o: WorkerOptions): Promise<WorkerResult> {
  const native = await import("@keepquant/tt-native");
  native.setNativeThreads(o.threads);
  const { bytesPerSecond, threads } = native.measureReadBandwidth();
  return {
    engine: "bandwidth",
    loadMs: 0,
    prefillTokensPerSecond: 0,
    timeToFirstTokenMs: 0,
    decodeTokensPerSecond: 0,
    peakRssBytes: process.resourceUsage().maxRSS * 1024,
    bandwidthBytesPerSecond: bytesPerSecond,
    detail: `${threads} threads summing 512 MiB`,
  };
}

const [engine, file, json] = process.argv.slice(2);
const options = JSON.parse(json ?? "{}") as WorkerOptions;
// the contention row: busy processes competing for the cores (stopped, by their pids, when the worker exits)
const busy = Array.from({ length: options.contention ?? 0 }, () => spawn(process.execPath, ["-e", "for (;;) {}"], { stdio: "ignore" }));
const stopBusy = () => {
  for (const child of busy) child.kill("SIGKILL");
};
process.on("exit", stopBusy);
process.on("SIGTERM", () => process.exit(1));
const work =
  engine === "keepquant"
    ? keepquant(file!, options)
    : engine === "node-llama-cpp"
      ? nodeLlamaCpp(file!, options)
      : engine === "llama.cpp" || engine === "llama.cpp haswell"
        ? rawLlamaCpp(file!, options, engine === "llama.cpp haswell")
        : engine === "bandwidth"
          ? bandwidth(options)
          : Promise.reject(new Error(`unknown engine ${engine}`));
exitWithResult(work);
