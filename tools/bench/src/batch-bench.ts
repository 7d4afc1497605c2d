/**
 * Throughput against llama.cpp's batching (issue 42, Required 3): for 1, 4, 8 and 16 concurrent sequences,
 * keepquant (concurrent requests; its scheduler batches them into one step) and llama.cpp's raw C API
 * decoding the same sequences in one llama_batch per step (the CPU variant ggml picks for this CPU, weight
 * repacking on, a persistent thread pool polling at 50 as llama-server runs it; f16 KV, flash attention, the same
 * threads). Aggregate decode tok/s and wall time per step,
 * and the ratio. One process per measurement (batch-worker.ts); within each repeat the sequence counts run in
 * turn and the two engines alternate (the order flips every repeat); medians over the repeats. Prints a
 * markdown report with the CPU (`lscpu`) and the load average (nothing is written).
 *
 *   pnpm --filter @keepquant/bench bench:batch -- [--sequences 1,4,8,16] [--types Q4_K_M,Q8_0] [--repeat 3]
 *     [--threads 2] [--prompt 16] [--gen 48] [--poll 50 (-1: no pool)] [--haswell]
 */
import { execFileSync } from "node:child_process";
import os from "node:os";
import { readGguf } from "@keepquant/gguf";
import type { BatchWorkerOptions, BatchWorkerResult } from "./batch-worker.js";
import { ensureRealShape, REAL_SHAPE_TYPES, type RealShapeType } from "./real-shape.js";
import { type BatchCell, batchTable } from "./sequences.js";
import { flag, hasFlag, median, runWorker } from "./side-by-side.js";

const sequenceCounts = flag("sequences", "1,4,8,16").split(",").map(Number);
const types = flag("types", REAL_SHAPE_TYPES.join(",")).split(",") as RealShapeType[];
const repeat = Number(flag("repeat", "3"));
const threads = Number(flag("threads", "2"));
const promptTokens = Number(flag("prompt", "16"));
const gen = Number(flag("gen", "48"));
const poll = Number(flag("poll", "50"));
// --haswell adds llama.cpp pinned to the haswell variant with repacking off (the arithmetic keepquant reproduces)
const engines = ["keepquant", "llama.cpp", ...(hasFlag("haswell") ? ["llama.cpp haswell"] : [])];

const log = (line: string) => console.error(`[batch] ${line}`);
const load = () =>
  os
    .loadavg()
    .map((l) => l.toFixed(1))
    .join(" / ");
const cpu = (() => {
  try {
    return /^Model name:\s*(.*)$/m.exec(execFileSync("lscpu", { encoding: "utf8" }))?.[1]?.trim() ?? os.cpus()[0]?.model;
  } catch {
    return os.cpus()[0]?.model;
  }
})();
const files = await ensureRealShape(types, log);
const loadBefore = load();
const started = new Date();
log(`${cpu}, ${os.cpus().length} logical CPUs, ${threads} threads, load average (1 / 5 / 15 min) ${loadBefore}`);

const loads: number[] = [];
const report: string[] = [];
const details = new Map<string, string>();
for (const type of types) {
  const file = files[type];
  const vocab = ((await readGguf(file)).metadata.get("tokenizer.ggml.tokens")?.value as ArrayLike<unknown> | undefined)?.length ?? 0;
  const runs = new Map<string, (BatchWorkerResult & { load: number })[]>();
  for (let r = 0; r < repeat; r++) {
    for (const sequences of sequenceCounts) {
      const options: BatchWorkerOptions = { threads, sequences, prompt: promptTokens, gen, vocab, poll };
      for (const engine of r % 2 === 0 ? engines : [...engines].reverse()) {
        loads.push(os.loadavg()[0]!);
        const result = {
          ...runWorker<BatchWorkerResult, BatchWorkerOptions>(engine, file, options, "batch-worker.ts"),
          load: loads.at(-1)!,
        };
        const key = `${engine}/${sequences}`;
        runs.set(key, [...(runs.get(key) ?? []), result]);
        details.set(engine, result.detail);
        log(
          `${type} repeat ${r + 1}/${repeat}, ${sequences} sequences, ${engine} (load ${load()}): ${result.tokensPerSecond.toFixed(1)} tok/s, ` +
            `${result.msPerStep.toFixed(1)} ms/step (forward ${result.forwardMsPerStep.toFixed(1)}), prefill ${result.prefillMs.toFixed(0)} ms, ` +
            `first tokens ${result.firstTokens.join(",")}`,
        );
      }
    }
  }
  const cell = (engine: string, sequences: number): BatchCell => {
    const results = runs.get(`${engine}/${sequences}`)!;
    return {
      tokensPerSecond: median(results.map((x) => x.tokensPerSecond)),
      msPerStep: median(results.map((x) => x.msPerStep)),
      forwardMsPerStep: median(results.map((x) => x.forwardMsPerStep)),
    };
  };
  for (const llama of engines.slice(1)) {
    report.push(
      ...batchTable(
        type,
        sequenceCounts.map((sequences) => ({ sequences, keepquant: cell("keepquant", sequences), llama: cell(llama, sequences) })),
        llama,
      ),
      "",
    );
  }
  // the ratio within each repeat (the two measurements next to each other) and the 1-minute load before each
  const perRepeat = sequenceCounts.map((n) => {
    const ours = runs.get(`keepquant/${n}`)!;
    const theirs = runs.get(`llama.cpp/${n}`)!;
    return `${n}: ${ours.map((x, i) => `${(x.tokensPerSecond / theirs[i]!.tokensPerSecond).toFixed(2)}x (load ${x.load.toFixed(1)}, ${theirs[i]!.load.toFixed(1)})`).join(", ")}`;
  });
  report.push(`${type}: keepquant / llama.cpp in each repeat: ${perRepeat.join("; ")}.`, "");
  // batching must not change a sequence: sequence 0 (the same prompt at every count) against its tokens alone
  const consistent = engines.map((engine) => {
    const alone = runs.get(`${engine}/${sequenceCounts[0]}`)![0]!.firstTokens.join();
    const counts = sequenceCounts.map((n) => {
      const results = runs.get(`${engine}/${n}`)!;
      return `${n}: ${results.filter((x) => x.firstTokens.join() === alone).length}/${results.length}`;
    });
    return `${engine} ${counts.join(", ")}`;
  });
  report.push(
    `${type}: runs whose sequence 0 generated the same first 8 greedy tokens as at ${sequenceCounts[0]} sequence(s): ${consistent.join("; ")}.`,
    "",
  );
}
const when = started.toISOString().replace("T", " ").slice(0, 16);
console.log(
  [
    `Run of ${when} UTC: ${cpu} (\`lscpu\`), ${os.cpus().length} logical CPUs, ${threads} threads; load average (1 / 5 / 15 min) ` +
      `${loadBefore} before, ${load()} after, 1-minute load ${Math.min(...loads).toFixed(1)}-${Math.max(...loads).toFixed(1)} during. ` +
      `${promptTokens}-token prompts (a different one per sequence), ${gen} greedy tokens each; medians of ${repeat}.`,
    "",
    ...report,
    `Engines: ${[...details].map(([engine, detail]) => `${engine}: ${detail}`).join("; ")}.`,
  ].join("\n"),
);
