/**
 * The qwen35moe speed benchmark (`pnpm --filter @keepquant/bench bench:moe`): keepquant, node-llama-cpp,
 * llama.cpp as an application runs it (best CPU variant, repacking on) and llama.cpp haswell (repacking
 * off) on the real-width, reduced-depth 35B-A3B file (moe-shape.ts), each engine in its own process,
 * alternating engine by engine and repeat by repeat, with the memory read bandwidth measured between
 * repeats. The decode bound is bandwidth / the bytes a token actually reads (active-bytes.ts: the routed
 * experts k of E, the shared expert, the router, attention/GDN weights, the head). Medians and the
 * issue-20 targets go to docs/benchmarks/engine.md between the bench:moe markers; `--no-write` only prints.
 *
 *   flock /work/bench.lock pnpm --filter @keepquant/bench bench:moe -- --repeat 3
 */
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { activeBytesPerToken } from "./active-bytes.js";
import { ensureMoeShape } from "./moe-shape.js";
import { REPO_ROOT } from "./real-shape.js";
import { flag, hasFlag, median, runWorker } from "./side-by-side.js";
import { sideBySideOptions } from "./sequences.js";
import type { WorkerResult } from "./worker.js";

const repeat = Number(flag("repeat", "3"));
const threads = Number(flag("threads", "2"));
const promptTokens = Number(flag("prompt", "128"));
const genTokens = Number(flag("gen", "32"));
const seqs = Number(flag("seqs", "8"));
const write = !hasFlag("no-write");
const ENGINES = ["keepquant", "node-llama-cpp", "llama.cpp", "llama.cpp haswell"] as const;
type EngineName = (typeof ENGINES)[number];

const tsx = path.join(REPO_ROOT, "node_modules", ".bin", "tsx");
const log = (line: string) => console.error(`[bench:moe] ${line}`);

const file = await ensureMoeShape(log);
const active = await activeBytesPerToken(file);
const options = sideBySideOptions({ threads, prompt: promptTokens, gen: genTokens, seqs, vocab: 248_320 });
const load = os.loadavg()[0]!;
const runs: Record<EngineName, WorkerResult[]> = { keepquant: [], "node-llama-cpp": [], "llama.cpp": [], "llama.cpp haswell": [] };
const bandwidths: number[] = [];
for (let r = 0; r < repeat; r++) {
  const order = r % 2 === 0 ? ENGINES : [...ENGINES].reverse();
  for (const engine of order) {
    log(`repeat ${r + 1}/${repeat}: ${engine}`);
    const result = runWorker(engine, file, engine === "keepquant" || engine === "node-llama-cpp" ? options : { ...options, seqs: 1 });
    runs[engine].push(result);
    log(`  prefill ${result.prefillTokensPerSecond.toFixed(1)} tok/s, decode ${result.decodeTokensPerSecond.toFixed(1)} tok/s`);
  }
  bandwidths.push(runWorker("bandwidth", file, options).bandwidthBytesPerSecond!);
}
const bandwidth = median(bandwidths);
const summary = Object.fromEntries(
  ENGINES.map((e) => {
    const agg = runs[e].map((x) => x.aggregateTokensPerSecond).filter((v): v is number => v !== undefined);
    return [
      e,
      {
        prefill: median(runs[e].map((x) => x.prefillTokensPerSecond)),
        decode: median(runs[e].map((x) => x.decodeTokensPerSecond)),
        aggregate: agg.length > 0 ? median(agg) : undefined,
        rss: median(runs[e].map((x) => x.peakRssBytes)),
        detail: runs[e][0]!.detail,
      },
    ];
  }),
) as Record<EngineName, { prefill: number; decode: number; aggregate: number | undefined; rss: number; detail: string }>;

const fmt = (v: number | undefined, digits = 1) => (v === undefined ? "-" : v.toFixed(digits));
const ours = summary.keepquant;
const best = summary["llama.cpp"];
const bound = bandwidth / active.perToken;
const targets: [string, number | undefined, boolean | undefined, string][] = [
  ["decode >= 1.3x llama.cpp (best variant)", ours.decode / best.decode, ours.decode / best.decode >= 1.3, "x"],
  ["decode >= 70% of the bound from the bytes a token reads", ours.decode / bound, ours.decode / bound >= 0.7, "%"],
  ["prefill (128 tokens) >= 1.2x llama.cpp (best variant)", ours.prefill / best.prefill, ours.prefill / best.prefill >= 1.2, "x"],
  [
    `${seqs} concurrent sequences >= 2.5x one`,
    ours.aggregate !== undefined ? ours.aggregate / ours.decode : undefined,
    ours.aggregate !== undefined ? ours.aggregate / ours.decode >= 2.5 : undefined,
    "x",
  ],
];
const when = new Date().toISOString().replace("T", " ").slice(0, 16);
const report = [
  `### qwen35moe run of ${when} UTC`,
  "",
  `Machine: ${os.cpus()[0]?.model ?? "unknown CPU"}, ${os.cpus().length} logical CPUs, load average before the run ${load.toFixed(1)}; ` +
    `memory read bandwidth ${(bandwidth / 1e9).toFixed(1)} GB/s (${threads} threads, median). File: ${path.basename(file)}; ` +
    `a token reads ${(active.perToken / 1e6).toFixed(1)} MB (routed experts ${(active.routedExperts / 1e6).toFixed(1)} MB, head ` +
    `${(active.head / 1e6).toFixed(1)} MB, the rest ${((active.perToken - active.routedExperts - active.head) / 1e6).toFixed(1)} MB): ` +
    `bound ${bound.toFixed(1)} tok/s. ${repeat} repeats, medians; prompt ${promptTokens}, ${genTokens} greedy tokens, ${threads} threads.`,
  "",
  `| engine | prefill tok/s | decode tok/s | decode / bound | ${seqs} sequences tok/s | peak RSS (MiB) |`,
  "|---|---:|---:|---:|---:|---:|",
  ...ENGINES.map((e) => {
    const s = summary[e];
    return `| ${e} (${s.detail}) | ${fmt(s.prefill)} | ${fmt(s.decode)} | ${fmt((100 * s.decode) / bound, 0)}% | ${fmt(s.aggregate)} | ${fmt(s.rss / 2 ** 20, 0)} |`;
  }),
  "",
  "| target (issue 20) | measured | met |",
  "|---|---:|---|",
  ...targets.map(
    ([what, v, met, unit]) =>
      `| ${what} | ${v === undefined ? "-" : unit === "%" ? `${(100 * v).toFixed(0)}%` : `${v.toFixed(2)}x`} | ${met === undefined ? "not measured" : met ? "yes" : "**no**"} |`,
  ),
];
console.log(report.join("\n"));
if (write) {
  const fragment = path.join(REPO_ROOT, "docs", "benchmarks", "engine.md");
  const text = fs.readFileSync(fragment, "utf8");
  const [open, close] = ["<!-- bench:moe -->", "<!-- /bench:moe -->"];
  const a = text.indexOf(open);
  const b = text.indexOf(close);
  if (a < 0 || b < a) throw new Error(`${fragment} has no ${open} ... ${close} section`);
  fs.writeFileSync(fragment, `${text.slice(0, a + open.length)}\n\n${report.join("\n")}\n\n${text.slice(b)}`);
  execFileSync(tsx, [path.join(REPO_ROOT, "tools", "repo-checks", "src", "write-docs.ts")], { cwd: REPO_ROOT, stdio: "inherit" });
  log(`wrote ${path.relative(REPO_ROOT, fragment)} and docs/BENCHMARKS.md`);
}
