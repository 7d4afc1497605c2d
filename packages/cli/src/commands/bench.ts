import { runBenchmark, type BenchmarkProgress, type BenchmarkResult } from "@keepquant/engine/bench";
import { CliUsageError, defineCommand, toJson, write, type CommandIo } from "../command.js";
import { defaultModelInfo, defaultModelPath } from "@keepquant/default-model";
import { localModelFile } from "../hub-model.js";
import { resolveSpeculative } from "./engine-options.js";
import { decimalInteger, parseIntegerOption } from "./numeric-option.js";
import { parseThreadCount } from "./threads.js";

function parseSeqs(text: string | undefined): number[] {
  if (text === undefined) return [1];
  const counts = text.split(",").map(decimalInteger);
  if (counts.some((n) => !(n >= 1 && n <= 256))) {
    throw new CliUsageError(`--seqs ${JSON.stringify(text)}: expected comma-separated decimal integers in [1, 256], e.g. 1,4,8`);
  }
  return [...new Set(counts)].sort((a, b) => a - b);
}

const GB = 1e9;
/** `--tune`: tt-native's TUNE_FULL_BUDGET_MS (the CLI does not import the addon). */
const TUNE_FULL_BUDGET_MS = 5000;
const MiB = 2 ** 20;

/** A batchKernel / prefillKernel value as the table prints it (the block kernels or their register form). */
function kernelName(value: number | undefined): string {
  return value === 1 ? "registers" : "block";
}

/** The decode tuner's choice, one line per (role, type), and its notes. */
export function tuningRows(result: Pick<BenchmarkResult, "tuning">): [string, string][] {
  const t = result.tuning;
  if (!t) return [["decode tuning", "off"]];
  const rows: [string, string][] = [
    ["decode tuning", `${t.source}: ${t.reason}${t.measureMs > 0 ? ` (${t.measureMs.toFixed(0)} ms)` : ""}`],
  ];
  for (const c of t.choices) {
    const v = c.variant;
    const gain = c.defaultNs > 0 && c.chosenNs > 0 ? `, ${(c.defaultNs / c.chosenNs).toFixed(2)}x the default` : "";
    rows.push([
      `  ${c.role} ${c.type}`,
      `isa ${v.isa}, weightRows ${v.weightRows}, prefetch ${v.prefetch}, rowsPerTask ${v.rowsPerTask}, threads ${v.threads}` +
        `, batch kernel ${kernelName(v.batchKernel)}, prefill kernel ${kernelName(v.prefillKernel)}${gain}`,
    ]);
  }
  for (const note of t.notes) rows.push(["  note", note]);
  return rows;
}

/** The human table: one measurement per line, aligned. */
function table(result: BenchmarkResult): string[] {
  const rows: [string, string][] = [
    [
      "model",
      `${result.model.path} (${(result.model.fileBytes / MiB).toFixed(0)} MiB, ${result.model.layers} layers, vocab ${result.model.vocab})`,
    ],
    [
      "engine",
      `${result.engine.step}, numerics ${result.engine.numerics}${result.engine.threads ? `, ${result.engine.threads} threads` : ""}`,
    ],
    ["load", `${result.loadMs.toFixed(0)} ms`],
    ...tuningRows(result),
    [`prefill (${result.promptTokens} tokens)`, `${result.prefillTokensPerSecond.toFixed(1)} tok/s`],
    ["time to first token", `${result.timeToFirstTokenMs.toFixed(0)} ms`],
    [`decode (${result.genTokens} tokens)`, `${result.decodeTokensPerSecond.toFixed(1)} tok/s`],
  ];
  for (const c of result.concurrent.filter((c) => c.seqs > 1)) {
    rows.push([
      `decode, ${c.seqs} sequences`,
      `${c.aggregateTokensPerSecond.toFixed(1)} tok/s aggregate (${c.speedup.toFixed(2)}x one sequence)`,
    ]);
  }
  const spec = result.speculative;
  if (spec) {
    rows.push([
      `speculative mtp, k = ${spec.draftTokens}${spec.draftVocab === undefined ? "" : `, drafter head ${spec.draftVocab} ids`}`,
      `${spec.accepted}/${spec.drafted} drafts accepted (${(100 * spec.acceptanceRate).toFixed(0)}%), ${spec.tokensPerTargetStep.toFixed(2)} tokens per target step`,
    ]);
    rows.push(["acceptance by draft position", spec.acceptanceRateByPosition.map((r) => `${(100 * r).toFixed(0)}%`).join(" ")]);
  }
  rows.push(["peak RSS", `${(result.peakRssBytes / MiB).toFixed(0)} MiB`]);
  if (result.bandwidth) {
    rows.push(["memory read bandwidth", `${(result.bandwidth.bytesPerSecond / GB).toFixed(1)} GB/s (${result.bandwidth.threads} threads)`]);
    rows.push([
      "decode efficiency",
      `${(100 * result.decodeEfficiency!).toFixed(0)}% (${(result.model.weightBytesPerToken / MiB).toFixed(0)} MiB of weights per token x ${result.decodeTokensPerSecond.toFixed(1)} tok/s / bandwidth)`,
    ]);
  }
  const width = Math.max(...rows.map(([k]) => k.length));
  return [...rows.map(([k, v]) => `${k.padEnd(width)}  ${v}`), `medians of ${result.repeat} runs`];
}

export const command = defineCommand({
  name: "bench",
  summary: "measure prefill, decode, time to first token, load time, peak RSS and decode efficiency (like llama-bench)",
  usage:
    "bench [model.gguf] [--prompt N] [--gen N] [--threads N] [--seqs 1,4,8] [--repeat R] [--numerics llama|bf16] [--speculative mtp [--draft-tokens K] [--draft-vocab N]] [--tune] [--json]",
  help: [
    "--prompt N            prompt tokens per prefill (default 128)",
    "--gen N               generated tokens per decode run (default 64)",
    "--threads N           threads of the native thread pool: 1 .. 4x the logical cores (default: all cores)",
    "--seqs LIST           also measure aggregate decode for that many concurrent sequences, e.g. 1,4,8",
    "--repeat R            repetitions of each measurement; medians are printed (default 3)",
    "--numerics MODE       llama (default) or bf16",
    "--speculative mtp     decode with speculative decoding (the model's MTP drafter block); acceptance is reported",
    "--draft-tokens K      tokens drafted per step with --speculative: 1 .. 8 (default 3)",
    "--draft-vocab N       cheaper drafter: its head scores token ids 0 .. N-1 only (default: the whole vocabulary)",
    "--tune                measure the decode variants again with a 5 s budget (default: the cached choice,",
    "                      else a 300 ms tuning at load) and cache the choice; KEEPQUANT_TUNE=off disables it",
    "--json                print one JSON document (every run, not only medians)",
    "without model.gguf: the embedded default model",
  ],
  options: {
    prompt: { type: "string" },
    gen: { type: "string" },
    threads: { type: "string" },
    seqs: { type: "string" },
    repeat: { type: "string" },
    numerics: { type: "string" },
    speculative: { type: "string" },
    "draft-tokens": { type: "string" },
    "draft-vocab": { type: "string" },
    json: { type: "boolean" },
    tune: { type: "boolean" },
  },
  async run(values, positionals, io: CommandIo): Promise<number> {
    if (positionals.length > 1) throw new CliUsageError(`expected at most one model file, got ${positionals.length}`);
    const promptTokens = parseIntegerOption("prompt", values.prompt, { min: 1, max: 65_536 }) ?? 128;
    const genTokens = parseIntegerOption("gen", values.gen, { min: 2, max: 65_536 }) ?? 64;
    const repeat = parseIntegerOption("repeat", values.repeat, { min: 1, max: 100 }) ?? 3;
    const { threads } = await parseThreadCount(values.threads);
    const seqs = parseSeqs(values.seqs);
    const numerics = values.numerics ?? "llama";
    if (numerics !== "llama" && numerics !== "bf16")
      throw new CliUsageError(`--numerics ${JSON.stringify(numerics)}: expected llama or bf16`);
    const json = values.json === true;
    const speculative = resolveSpeculative(values);

    let model: string;
    if (positionals.length === 0) {
      if (!json) write(io.stderr, `keepquant: no model given, benchmarking the embedded default model (${defaultModelInfo().name})`);
      model = await defaultModelPath();
    } else {
      model = await localModelFile(positionals[0]!, io);
    }

    let lastLine = 0;
    const onProgress = (p: BenchmarkProgress) => {
      const line = `bench [${p.done}/${p.total}] ${p.phase}${p.detail ? `: ${p.detail}` : ""}`;
      if (io.interactive) {
        io.stderr.write(`\r${line.padEnd(lastLine)}`);
        lastLine = line.length;
      } else if (p.detail) {
        write(io.stderr, line);
      }
    };
    const result = await runBenchmark({
      model,
      promptTokens,
      genTokens,
      repeat,
      seqs,
      engine: {
        numerics,
        ...(threads !== undefined ? { threads } : {}),
        ...(speculative ? { speculative } : {}),
        ...(values.tune === true ? { tune: { budgetMs: TUNE_FULL_BUDGET_MS, force: true } } : {}),
      },
      onProgress,
    });
    if (io.interactive && lastLine > 0) io.stderr.write(`\r${" ".repeat(lastLine)}\r`);
    if (json) write(io.stdout, toJson(result));
    else for (const line of table(result)) write(io.stdout, line);
    return 0;
  },
});
