/**
 * Long prompts side by side: keepquant and llama.cpp's raw C API (the CPU variant ggml picks, repacking on;
 * f16 KV, flash attention, n_ubatch 512 = keepquant's step budget; the same threads) on the real 0.8B shape.
 * Per prompt length: prefill tok/s and time to first token, then decode tok/s after that prompt. Engines
 * alternate within each repeat (the order flips every repeat), one process per measurement (worker.ts);
 * medians over the repeats. Prints a markdown table (nothing is written).
 *
 *   pnpm --filter @keepquant/bench bench:long-prompt -- [--lengths 128,4096,16384] [--types Q4_K_M] [--repeat 3]
 *     [--threads 2] [--gen 32] [--engines keepquant,llama.cpp]
 */
import os from "node:os";
import { readGguf } from "@keepquant/gguf";
import { ensureRealShape, REAL_SHAPE_TYPES, type RealShapeType } from "./real-shape.js";
import { flag, median, runWorker } from "./side-by-side.js";
import type { WorkerResult } from "./worker.js";

const lengths = flag("lengths", "128,4096,16384").split(",").map(Number);
const types = flag("types", REAL_SHAPE_TYPES.join(",")).split(",") as RealShapeType[];
const repeat = Number(flag("repeat", "3"));
const threads = Number(flag("threads", "2"));
const gen = Number(flag("gen", "32"));
const engines = flag("engines", "keepquant,llama.cpp").split(",");

const log = (line: string) => console.error(`[long-prompt] ${line}`);
const files = await ensureRealShape(types, log);
const load = () => os.loadavg()[0]!.toFixed(1);
log(`${os.cpus()[0]?.model ?? "unknown CPU"}, ${os.cpus().length} cores, ${threads} threads, load average ${load()}`);
const rows: string[] = [];
for (const type of types) {
  const file = files[type];
  const vocab = ((await readGguf(file)).metadata.get("tokenizer.ggml.tokens")?.value as ArrayLike<unknown> | undefined)?.length ?? 0;
  const runs: Record<string, Record<number, WorkerResult[]>> = {};
  for (const engine of engines) runs[engine] = Object.fromEntries(lengths.map((n) => [n, []]));
  for (let r = 0; r < repeat; r++) {
    for (const n of lengths) {
      const order = r % 2 === 0 ? engines : [...engines].reverse();
      for (const engine of order) {
        const options = { threads, prompt: n, gen, context: n + gen + 16, seqs: 1, vocab, ubatch: 512 };
        const result = runWorker(engine, file, options);
        runs[engine]![n]!.push(result);
        log(
          `${type} ${engine} ${n} tokens (repeat ${r + 1}/${repeat}, load ${load()}): prefill ${result.prefillTokensPerSecond.toFixed(1)} tok/s, ` +
            `TTFT ${(result.timeToFirstTokenMs / 1000).toFixed(2)} s, decode ${result.decodeTokensPerSecond.toFixed(1)} tok/s`,
        );
      }
    }
  }
  const m = (engine: string, n: number, key: "prefillTokensPerSecond" | "timeToFirstTokenMs" | "decodeTokensPerSecond") =>
    median(runs[engine]![n]!.map((x) => x[key]));
  const base = lengths[0]!;
  for (const n of lengths) {
    const cells = [type, String(n)];
    for (const engine of engines) {
      cells.push(
        m(engine, n, "prefillTokensPerSecond").toFixed(1),
        (m(engine, n, "timeToFirstTokenMs") / 1000).toFixed(2),
        m(engine, n, "decodeTokensPerSecond").toFixed(1),
      );
    }
    const kq = engines[0]!;
    cells.push(
      `${((m(kq, n, "prefillTokensPerSecond") / m(kq, base, "prefillTokensPerSecond")) * 100).toFixed(0)}%`,
      `${(m(kq, n, "decodeTokensPerSecond") / m(kq, base, "decodeTokensPerSecond")).toFixed(2)}x`,
    );
    for (const other of engines.slice(1)) {
      cells.push(
        `${(m(kq, n, "prefillTokensPerSecond") / m(other, n, "prefillTokensPerSecond")).toFixed(2)}x`,
        `${(m(kq, n, "decodeTokensPerSecond") / m(other, n, "decodeTokensPerSecond")).toFixed(2)}x`,
      );
    }
    rows.push(`| ${cells.join(" | ")} |`);
  }
}
const kq = engines[0]!;
const header = [
  "file",
  "prompt tokens",
  ...engines.flatMap((e) => [`${e} prefill tok/s`, `${e} TTFT s`, `${e} decode tok/s after`]),
  `${kq} prefill vs ${lengths[0]} tokens`,
  `${kq} decode vs after ${lengths[0]}`,
  ...engines.slice(1).flatMap((e) => [`prefill vs ${e}`, `decode vs ${e}`]),
];
console.log(`| ${header.join(" | ")} |`);
console.log(`|${header.map((_, i) => (i < 2 ? "---" : "---:")).join("|")}|`);
for (const row of rows) console.log(row);
console.log(`\n${os.cpus()[0]?.model ?? "unknown CPU"}, ${threads} threads, medians of ${repeat}, load average after ${load()}`);
