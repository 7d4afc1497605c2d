/**
 * The engine benchmark behind `keepquant bench` (llama-bench's questions, on the Engine API): load
 * time, prefill and decode speed, time to first token, peak RSS, aggregate decode for concurrent
 * sequences, and how close decode comes to the machine's memory bandwidth. Library code: it reports
 * progress through a callback and returns numbers; the CLI prints.
 */
import fs from "node:fs";
import { readGgufModel } from "@keepquant/gguf";
import { Engine } from "../engine.js";
import type { DecodeTuning, EngineOptions, SpeculativeStats } from "../engine-types.js";
import { EngineOptionError } from "../errors.js";
import { loadTtNative } from "../model/native-module.js";

export interface BenchmarkOptions {
  /** GGUF file to load. */
  model: string;
  /** Prompt tokens per measured prefill (default 128). */
  promptTokens?: number;
  /** Generated tokens per decode measurement (default 64). */
  genTokens?: number;
  /** Concurrent-sequence counts for aggregate decode (default [1]). */
  seqs?: readonly number[];
  /** Repetitions of every measurement; medians are reported (default 3). */
  repeat?: number;
  /** Engine options (threads, numerics ...); KV capacity and sequence slots are sized from the run. */
  engine?: EngineOptions;
  /** Measure the memory read bandwidth (native addon) for decode efficiency (default true). */
  bandwidth?: boolean;
  onProgress?: (progress: BenchmarkProgress) => void;
}

export interface BenchmarkProgress {
  /** "load", "prefill", "decode", "concurrent", "bandwidth" */
  phase: string;
  /** Measurements done and total, over the whole run. */
  done: number;
  total: number;
  /** The last measurement, when one just finished. */
  detail?: string;
}

export interface ConcurrentResult {
  seqs: number;
  /** Tokens per second summed over the sequences, while all of them decode (median over repeats). */
  aggregateTokensPerSecond: number;
  /** aggregate / the 1-sequence decode rate of the same run. */
  speedup: number;
  runs: number[];
}

export interface BenchmarkResult {
  model: { path: string; fileBytes: number; weightBytesPerToken: number; vocab: number; layers: number };
  engine: { numerics: string; step: string; threads: number | undefined; providers: Record<string, string> };
  /** What the native decode tuner chose and why (engine.stats().tuning; undefined without it). */
  tuning: DecodeTuning | undefined;
  promptTokens: number;
  genTokens: number;
  repeat: number;
  loadMs: number;
  /** Prompt tokens per second of one prefill ubatch (median). */
  prefillTokensPerSecond: number;
  /** Submission to first generated token for a `promptTokens` prompt (median). */
  timeToFirstTokenMs: number;
  /** Generated tokens after the first, per second (median). */
  decodeTokensPerSecond: number;
  concurrent: ConcurrentResult[];
  /** Peak resident set size of this process up to the end of the measurements (before the bandwidth probe). */
  peakRssBytes: number;
  bandwidth: { bytesPerSecond: number; threads: number } | undefined;
  /** weight bytes read per token x decode tok/s / bandwidth (undefined without a bandwidth). */
  decodeEfficiency: number | undefined;
  runs: { prefill: number[]; ttft: number[]; decode: number[] };
  /** Speculative decoding counters over the whole benchmark (undefined when it is off). */
  speculative: SpeculativeStats | undefined;
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

function positiveInteger(value: number, field: string, max: number): number {
  if (!Number.isInteger(value) || value < 1 || value > max) {
    throw new EngineOptionError("ENGINE_BAD_OPTION", `${field} must be an integer in [1, ${max}], got ${value}`, { field });
  }
  return value;
}

/** Deterministic prompt ids spread over the vocabulary (the same for every engine compared). */
export function benchmarkPrompt(length: number, vocab: number, salt = 0): number[] {
  return Array.from({ length }, (_, i) => (i * 7919 + 13 + salt * 104_729) % vocab);
}

export async function runBenchmark(options: BenchmarkOptions): Promise<BenchmarkResult> {
  const promptTokens = positiveInteger(options.promptTokens ?? 128, "promptTokens", 65_536);
  const genTokens = positiveInteger(options.genTokens ?? 64, "genTokens", 65_536);
  const repeat = positiveInteger(options.repeat ?? 3, "repeat", 1000);
  const seqs = [...new Set(options.seqs ?? [1])].sort((a, b) => a - b);
  for (const s of seqs) positiveInteger(s, "seqs", 256);
  const maxSeqs = Math.max(1, ...seqs);
  const perSequence = promptTokens + genTokens + 8;
  const total = 1 + 3 * repeat + seqs.filter((s) => s > 1).length * repeat + (options.bandwidth === false ? 0 : 1);
  let done = 0;
  const progress = (phase: string, detail?: string) => options.onProgress?.({ phase, done, total, ...(detail ? { detail } : {}) });

  progress("load");
  const t0 = performance.now();
  const engine = await Engine.load(options.model, {
    ...options.engine,
    kvCacheTokens: Math.max(options.engine?.kvCacheTokens ?? 0, maxSeqs * perSequence),
    maxSequences: Math.max(options.engine?.maxSequences ?? 0, maxSeqs),
    maxBatchTokens: options.engine?.maxBatchTokens ?? Math.max(512, Math.min(promptTokens, 4096)),
  });
  const loadMs = performance.now() - t0;
  done++;
  progress("load", `${loadMs.toFixed(0)} ms`);
  try {
    const stats = engine.stats();
    const vocab = engine.weights.vocab;
    const prompt = benchmarkPrompt(promptTokens, vocab);
    const runs = { prefill: [] as number[], ttft: [] as number[], decode: [] as number[] };
    for (let r = 0; r < repeat; r++) {
      progress("prefill");
      const p0 = performance.now();
      await engine.evaluate(prompt, { positions: [promptTokens - 1] });
      runs.prefill.push((promptTokens / (performance.now() - p0)) * 1000);
      done++;
      progress("prefill", `${runs.prefill.at(-1)!.toFixed(1)} tok/s`);

      progress("decode");
      const result = await engine.generateToEnd(prompt, { maxTokens: genTokens, temperature: 0, ignoreEog: true });
      runs.ttft.push(result.stats.timeToFirstTokenMs);
      done++;
      runs.decode.push(result.stats.decodeTokensPerSecond);
      done++;
      progress("decode", `${runs.decode.at(-1)!.toFixed(1)} tok/s`);
    }
    const decode = median(runs.decode);
    const concurrent: ConcurrentResult[] = [];
    for (const s of seqs) {
      if (s === 1) {
        concurrent.push({ seqs: 1, aggregateTokensPerSecond: decode, speedup: 1, runs: [...runs.decode] });
        continue;
      }
      const rates: number[] = [];
      for (let r = 0; r < repeat; r++) {
        progress("concurrent", `${s} sequences`);
        rates.push(await aggregateDecode(engine, s, promptTokens, genTokens, vocab));
        done++;
        progress("concurrent", `${s} sequences: ${rates.at(-1)!.toFixed(1)} tok/s`);
      }
      const aggregate = median(rates);
      concurrent.push({ seqs: s, aggregateTokensPerSecond: aggregate, speedup: aggregate / decode, runs: rates });
    }
    // before the bandwidth probe, whose buffer is not the engine's
    const peakRssBytes = process.resourceUsage().maxRSS * 1024;
    let bandwidth: BenchmarkResult["bandwidth"];
    if (options.bandwidth !== false) {
      progress("bandwidth");
      bandwidth = await measureBandwidth();
      done++;
      progress("bandwidth", bandwidth ? `${(bandwidth.bytesPerSecond / 1e9).toFixed(1)} GB/s` : "unavailable");
    }
    const weightBytesPerToken = await bytesReadPerToken(options.model, stats.residentBytes.packed, engine.weights.config);
    const speculative = engine.stats().speculative;
    return {
      model: {
        path: options.model,
        fileBytes: fs.statSync(options.model).size,
        weightBytesPerToken,
        vocab,
        layers: engine.weights.config.nLayer,
      },
      engine: {
        numerics: stats.numerics,
        step: stats.providers.step ?? "unknown",
        threads: options.engine?.threads,
        providers: stats.providers,
      },
      tuning: stats.tuning,
      promptTokens,
      genTokens,
      repeat,
      loadMs,
      prefillTokensPerSecond: median(runs.prefill),
      timeToFirstTokenMs: median(runs.ttft),
      decodeTokensPerSecond: decode,
      concurrent,
      peakRssBytes,
      bandwidth,
      decodeEfficiency: bandwidth ? (weightBytesPerToken * decode) / bandwidth.bytesPerSecond : undefined,
      runs,
      speculative,
    };
  } finally {
    engine.dispose();
  }
}

/**
 * `seqs` generations at once (short distinct prompts so decode dominates): tokens per second summed
 * over all sequences in the window where every one of them is decoding (after the last first token,
 * before the first finish).
 */
async function aggregateDecode(engine: Engine, seqs: number, promptTokens: number, genTokens: number, vocab: number): Promise<number> {
  const stamps: number[][] = Array.from({ length: seqs }, () => []);
  const short = Math.min(promptTokens, 8);
  await Promise.all(
    stamps.map(async (times, i) => {
      const stream = engine.generate(benchmarkPrompt(short, vocab, i + 1), { maxTokens: genTokens, temperature: 0, ignoreEog: true });
      for await (const event of stream) if (event.type === "token") times.push(performance.now());
    }),
  );
  const start = Math.max(...stamps.map((t) => t[0] ?? Infinity));
  const end = Math.min(...stamps.map((t) => t.at(-1) ?? -Infinity));
  let tokens = 0;
  for (const times of stamps) for (const t of times) if (t > start && t <= end) tokens++;
  return end > start ? (tokens / (end - start)) * 1000 : 0;
}

async function measureBandwidth(): Promise<BenchmarkResult["bandwidth"]> {
  try {
    const { native } = await loadTtNative();
    if (!native) return undefined;
    const { bytesPerSecond, threads } = native.measureReadBandwidth();
    return { bytesPerSecond, threads };
  } catch {
    return undefined;
  }
}

/**
 * Weight bytes one decoded token reads: the resident weights, except that a qwen35moe token reads
 * `expert_used_count` of `expert_count` experts of each routed-expert tensor (`*_exps`).
 */
async function bytesReadPerToken(
  file: string,
  resident: number,
  config: { moe?: { expertCount: number; expertUsedCount: number } },
): Promise<number> {
  const moe = config.moe;
  if (!moe) return resident;
  const experts = (await readGgufModel(file)).tensors.filter((t) => /_exps\.weight$/.test(t.name)).reduce((a, t) => a + t.byteLength, 0);
  return resident - experts * (1 - moe.expertUsedCount / moe.expertCount);
}
