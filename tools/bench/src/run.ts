/**
 * The development benchmark (`pnpm bench`): keepquant, node-llama-cpp (what a TypeScript user would
 * pick, with its defaults), llama.cpp's raw C API (as an application runs it, and pinned to the haswell
 * variant without repacking: the arithmetic keepquant reproduces) on the same real-shape files, the same threads
 * and context, each engine in its own process, alternating engine by engine and repeat by repeat so
 * machine noise hits all of them. Medians and ratios go to docs/benchmarks/engine.md with a chart
 * (docs/benchmarks/engine-speed.svg); `--no-write` only prints.
 *
 *   pnpm bench                                   # everything (all packages' benchmarks)
 *   pnpm --filter @keepquant/bench bench:dev -- --repeat 5 --types Q4_K_M
 */
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { readGguf } from "@keepquant/gguf";
import { drawChart } from "./chart.js";
import { ensureRealShape, REAL_SHAPE_TYPES, REPO_ROOT, type RealShapeType } from "./real-shape.js";
import { flag, hasFlag, median, runWorker } from "./side-by-side.js";
import { sideBySideOptions } from "./sequences.js";
import type { WorkerOptions, WorkerResult } from "./worker.js";

const repeat = Number(flag("repeat", "3"));
const threads = Number(flag("threads", "2"));
const promptTokens = Number(flag("prompt", "128"));
const genTokens = Number(flag("gen", "64"));
const seqs = Number(flag("seqs", "8"));
const types = flag("types", REAL_SHAPE_TYPES.join(",")).split(",") as RealShapeType[];
const write = !hasFlag("no-write");
// decode-only rows: thread counts (1, --threads, and every core when there are more) and the contention row
const threadRows = [...new Set(flag("thread-rows", [1, threads, os.cpus().length].join(",")).split(",").map(Number))].filter(
  (t) => Number.isInteger(t) && t > 0,
);
const contention = Number(flag("contention", "1"));
const SIDE_ENGINES = ["keepquant", "llama.cpp", "node-llama-cpp"] as const;
type SideEngine = (typeof SIDE_ENGINES)[number];
const ENGINES = ["keepquant", "node-llama-cpp", "llama.cpp", "llama.cpp haswell"] as const;
type EngineName = (typeof ENGINES)[number];

const tsx = path.join(REPO_ROOT, "node_modules", ".bin", "tsx");

interface Summary {
  loadMs: number;
  prefill: number;
  ttft: number;
  decode: number;
  aggregate: number | undefined;
  rss: number;
  weightBytesPerToken: number | undefined;
  detail: string;
  runs: WorkerResult[];
}

function summarize(runs: WorkerResult[]): Summary {
  const agg = runs.map((r) => r.aggregateTokensPerSecond).filter((v): v is number => v !== undefined);
  return {
    loadMs: median(runs.map((r) => r.loadMs)),
    prefill: median(runs.map((r) => r.prefillTokensPerSecond)),
    ttft: median(runs.map((r) => r.timeToFirstTokenMs)),
    decode: median(runs.map((r) => r.decodeTokensPerSecond)),
    aggregate: agg.length > 0 ? median(agg) : undefined,
    rss: median(runs.map((r) => r.peakRssBytes)),
    weightBytesPerToken: runs[0]!.weightBytesPerToken,
    detail: runs[0]!.detail,
    runs,
  };
}

const log = (line: string) => console.error(`[bench] ${line}`);
const files = await ensureRealShape(types, log);
const cpu = os.cpus()[0]?.model ?? "unknown CPU";
const flags =
  fs
    .readFileSync("/proc/cpuinfo", "utf8")
    .match(/^flags\s*:\s*(.*)$/m)?.[1]
    ?.split(/\s+/) ?? [];
const isa = flags.includes("avx512_vnni") ? "AVX-512 VNNI" : flags.includes("avx2") ? "AVX2" : "baseline";
const requireHere = createRequire(import.meta.url);
/** A dependency's version from its package.json (found upward from its entry point: some export only "."). */
const packageVersion = (name: string): string => {
  try {
    const entry = (() => {
      try {
        return requireHere.resolve(name);
      } catch {
        return fileURLToPath(import.meta.resolve(name));
      }
    })();
    let dir = path.dirname(entry);
    while (!fs.existsSync(path.join(dir, "package.json")) && path.dirname(dir) !== dir) dir = path.dirname(dir);
    return (JSON.parse(fs.readFileSync(path.join(dir, "package.json"), "utf8")) as { version: string }).version;
  } catch {
    return "?";
  }
};
const versions = {
  node: process.version,
  "node-llama-cpp": packageVersion("node-llama-cpp"),
  "@node-llama-cpp/linux-x64": packageVersion("@node-llama-cpp/linux-x64"),
};

const results: Record<string, Record<EngineName, Summary>> = {};
/** decode tok/s per file, engine and row ("threads=1", "contention", ...) */
const sideRuns: Record<string, Record<string, Record<SideEngine, number[]>>> = {};
const bandwidths: number[] = [];
const perThreadBandwidth: Record<number, number[]> = {};
for (const type of types) {
  const file = files[type];
  const vocab = ((await readGguf(file)).metadata.get("tokenizer.ggml.tokens")?.value as ArrayLike<unknown> | undefined)?.length ?? 0;
  const options = sideBySideOptions({ threads, prompt: promptTokens, gen: genTokens, seqs, vocab });
  const runs: Record<EngineName, WorkerResult[]> = { keepquant: [], "node-llama-cpp": [], "llama.cpp": [], "llama.cpp haswell": [] };
  for (let r = 0; r < repeat; r++) {
    // alternate the order too, so no engine always runs first after the previous one's exit
    const order = r % 2 === 0 ? ENGINES : [...ENGINES].reverse();
    for (const engine of order) {
      log(`${type} repeat ${r + 1}/${repeat}: ${engine}`);
      const result = runWorker(engine, file, options);
      runs[engine].push(result);
      log(
        `  load ${result.loadMs.toFixed(0)} ms, prefill ${result.prefillTokensPerSecond.toFixed(1)} tok/s, decode ${result.decodeTokensPerSecond.toFixed(1)} tok/s` +
          `${result.aggregateTokensPerSecond ? `, ${seqs} seqs ${result.aggregateTokensPerSecond.toFixed(1)} tok/s` : ""}, peak RSS ${(result.peakRssBytes / 2 ** 20).toFixed(0)} MiB`,
      );
    }
    bandwidths.push(runWorker("bandwidth", file, options).bandwidthBytesPerSecond!);
    // decode-only rows (a short prompt, no concurrent sequences): the thread counts, then a busy competitor
    const side: [string, WorkerOptions][] = [
      ...threadRows.map((t): [string, WorkerOptions] => [`threads=${t}`, { ...options, threads: t, prompt: 16, seqs: 1 }]),
      ...(contention > 0 ? [[`contention`, { ...options, prompt: 16, seqs: 1, contention }] as [string, WorkerOptions]] : []),
    ];
    for (const [row, rowOptions] of side) {
      for (const engine of r % 2 === 0 ? SIDE_ENGINES : [...SIDE_ENGINES].reverse()) {
        if (row.startsWith("threads=") && engine === "node-llama-cpp") continue;
        log(`${type} repeat ${r + 1}/${repeat}: ${engine}, ${row}`);
        const result = runWorker(engine, file, rowOptions);
        log(`  decode ${result.decodeTokensPerSecond.toFixed(1)} tok/s`);
        const byRow = sideRuns[type] ?? {};
        sideRuns[type] = byRow;
        const byEngine = byRow[row] ?? { keepquant: [], "llama.cpp": [], "node-llama-cpp": [] };
        byRow[row] = byEngine;
        byEngine[engine].push(result.decodeTokensPerSecond);
      }
    }
    for (const t of threadRows)
      perThreadBandwidth[t] = [
        ...(perThreadBandwidth[t] ?? []),
        runWorker("bandwidth", file, { ...options, threads: t }).bandwidthBytesPerSecond!,
      ];
  }
  results[type] = Object.fromEntries(ENGINES.map((e) => [e, summarize(runs[e])])) as Record<EngineName, Summary>;
}
const bandwidth = median(bandwidths);

// ------------------------------------------------------------------ report
const fmt = (v: number | undefined, digits = 1) => (v === undefined ? "-" : v.toFixed(digits));
const lines: string[] = [];
lines.push(
  "| file | engine | load (ms) | prefill tok/s | time to first token (ms) | decode tok/s | " +
    `${seqs} seqs aggregate tok/s | peak RSS (MiB) |`,
);
lines.push("|---|---|---:|---:|---:|---:|---:|---:|");
for (const [type, byEngine] of Object.entries(results)) {
  for (const engine of ENGINES) {
    const s = byEngine[engine];
    lines.push(
      `| ${type} | ${engine} | ${fmt(s.loadMs, 0)} | ${fmt(s.prefill)} | ${fmt(s.ttft, 0)} | ${fmt(s.decode)} | ${fmt(s.aggregate)} | ${fmt(s.rss / 2 ** 20, 0)} |`,
    );
  }
}

// decode-only rows: thread scaling (efficiency per thread = speed-up / threads) and the contention row
const sideLines: string[] = [];
sideLines.push(
  "| file | row | keepquant decode tok/s | llama.cpp decode tok/s | node-llama-cpp decode tok/s | keepquant / llama.cpp | keepquant per-thread efficiency | read bandwidth (GB/s) |",
);
sideLines.push("|---|---|---:|---:|---:|---:|---:|---:|");
const sideMedian = (type: string, row: string, engine: SideEngine): number | undefined => {
  const v = sideRuns[type]?.[row]?.[engine] ?? [];
  return v.length > 0 ? median(v) : undefined;
};
for (const type of Object.keys(results)) {
  const one = sideMedian(type, "threads=1", "keepquant");
  for (const row of Object.keys(sideRuns[type] ?? {})) {
    const ours = sideMedian(type, row, "keepquant");
    const lc = sideMedian(type, row, "llama.cpp");
    const t = row.startsWith("threads=") ? Number(row.slice(8)) : undefined;
    const efficiency = t !== undefined && ours !== undefined && one !== undefined ? ours / one / t : undefined;
    const bw = t !== undefined && perThreadBandwidth[t] ? median(perThreadBandwidth[t]!) / 1e9 : undefined;
    sideLines.push(
      `| ${type} | ${row === "contention" ? `${threads} threads, ${contention} busy process(es)` : row.replace("=", " ")} | ${fmt(ours)} | ${fmt(lc)} | ${fmt(sideMedian(type, row, "node-llama-cpp"))} | ${ours !== undefined && lc !== undefined ? `${(ours / lc).toFixed(2)}x` : "-"} | ${efficiency === undefined ? "-" : `${(100 * efficiency).toFixed(0)}%`} | ${fmt(bw)} |`,
    );
  }
}

const targets: string[] = [];
targets.push("| file | target | measured | met |");
targets.push("|---|---|---:|---|");
for (const [type, byEngine] of Object.entries(results)) {
  const ours = byEngine.keepquant;
  const nlc = byEngine["node-llama-cpp"];
  const best = byEngine["llama.cpp"];
  const efficiency = ours.weightBytesPerToken ? (ours.weightBytesPerToken * ours.decode) / bandwidth : undefined;
  const busy = sideMedian(type, "contention", "keepquant");
  const quiet = sideMedian(type, `threads=${threads}`, "keepquant");
  const rows: [string, number | undefined, (v: number) => boolean, (v: number) => string][] = [
    ["decode >= 1.3x llama.cpp's best variant", ours.decode / best.decode, (v) => v >= 1.3, (v) => `${v.toFixed(2)}x`],
    ["decode >= 1.15x node-llama-cpp", ours.decode / nlc.decode, (v) => v >= 1.15, (v) => `${v.toFixed(2)}x`],
    ["decode >= 70% of the bandwidth bound (80% the goal)", efficiency, (v) => v >= 0.7, (v) => `${(100 * v).toFixed(0)}%`],
    [
      "prefill (128-token prompt) >= 1.3x llama.cpp's best variant",
      ours.prefill / best.prefill,
      (v) => v >= 1.3,
      (v) => `${v.toFixed(2)}x`,
    ],
    ["peak RSS <= 1.1x node-llama-cpp", ours.rss / nlc.rss, (v) => v <= 1.1, (v) => `${v.toFixed(2)}x`],
    ["load-to-ready <= node-llama-cpp", ours.loadMs / nlc.loadMs, (v) => v <= 1, (v) => `${v.toFixed(2)}x`],
    [
      `${seqs} concurrent sequences >= 3x one sequence`,
      ours.aggregate !== undefined ? ours.aggregate / ours.decode : undefined,
      (v) => v >= 3,
      (v) => `${v.toFixed(2)}x`,
    ],
    [
      "decode with a busy competitor >= 40% of quiet decode (decode-only rows)",
      busy !== undefined && quiet !== undefined ? busy / quiet : undefined,
      (v) => v >= 0.4,
      (v) => `${(100 * v).toFixed(0)}%`,
    ],
  ];
  for (const [what, value, met, show] of rows)
    targets.push(
      `| ${type} | ${what} | ${value === undefined ? "-" : show(value)} | ${value === undefined ? "not measured" : met(value) ? "yes" : "**no**"} |`,
    );
}

// keepquant against the arithmetic it reproduces bit for bit (llama.cpp's haswell kernels, no repacking):
// what the kernels and the native step are worth with the float order held fixed
const sameArithmetic: string[] = [];
sameArithmetic.push(
  "| file | prefill vs llama.cpp haswell | decode vs llama.cpp haswell | prefill vs llama.cpp (best variant) | decode vs llama.cpp (best variant) |",
);
sameArithmetic.push("|---|---:|---:|---:|---:|");
for (const [type, byEngine] of Object.entries(results)) {
  const ours = byEngine.keepquant;
  const h = byEngine["llama.cpp haswell"];
  const b = byEngine["llama.cpp"];
  sameArithmetic.push(
    `| ${type} | ${(ours.prefill / h.prefill).toFixed(2)}x | ${(ours.decode / h.decode).toFixed(2)}x | ${(ours.prefill / b.prefill).toFixed(2)}x | ${(ours.decode / b.decode).toFixed(2)}x |`,
  );
}

const chartFile = path.join(REPO_ROOT, "docs", "benchmarks", "engine-speed.svg");
const svg = drawChart(
  Object.entries(results).flatMap(([type, byEngine]) => [
    { group: `${type} prefill`, values: ENGINES.map((e) => ({ label: e, value: byEngine[e].prefill })) },
    { group: `${type} decode`, values: ENGINES.map((e) => ({ label: e, value: byEngine[e].decode })) },
  ]),
  `tok/s, real Qwen3.5-0.8B shape, ${threads} threads, prompt ${promptTokens}, decode ${genTokens} (medians of ${repeat})`,
);

const when = new Date().toISOString().replace("T", " ").slice(0, 16);
const report = [
  `### Run of ${when} UTC`,
  "",
  `Machine: ${cpu} (${isa}), ${os.cpus().length} logical CPUs, ${(os.totalmem() / 2 ** 30).toFixed(0)} GiB, load average before the run ${os.loadavg()[0]!.toFixed(1)}; ` +
    `memory read bandwidth ${(bandwidth / 1e9).toFixed(1)} GB/s (${threads} threads, median). Versions: ${Object.entries(versions)
      .map(([k, v]) => `${k} ${v}`)
      .join(", ")}.`,
  "",
  ...lines,
  "",
  `Engines: ${ENGINES.map((e) => `${e}: ${Object.values(results)[0]![e].detail}`).join("; ")}.`,
  "",
  `Decode-only rows (16-token prompt, ${genTokens} tokens, one sequence; medians of ${repeat}): thread counts, and ${threads} threads with ${contention} busy \`node -e "for (;;) {}"\` process(es) started before loading. Per-thread efficiency = (tok/s at t threads / tok/s at 1 thread) / t.`,
  "",
  ...sideLines,
  "",
  "Targets (issue 24), ratios from this run:",
  "",
  ...targets,
  "",
  "keepquant against llama.cpp's raw C API in the same run: pinned to the haswell variant with repacking off (the arithmetic keepquant reproduces bit for bit) and as an application runs it:",
  "",
  ...sameArithmetic,
  "",
  "![tok/s per engine and phase](benchmarks/engine-speed.svg)",
];
console.log(report.join("\n"));
if (write) {
  fs.writeFileSync(chartFile, svg);
  const fragment = path.join(REPO_ROOT, "docs", "benchmarks", "engine.md");
  const text = fs.readFileSync(fragment, "utf8");
  const marker = "<!-- bench:results -->";
  const [head] = text.split(marker);
  fs.writeFileSync(fragment, `${head!.trimEnd()}\n\n${marker}\n\n${report.join("\n")}\n`);
  execFileSync(tsx, [path.join(REPO_ROOT, "tools", "repo-checks", "src", "write-docs.ts")], { cwd: REPO_ROOT, stdio: "inherit" });
  log(`wrote ${path.relative(REPO_ROOT, fragment)}, ${path.relative(REPO_ROOT, chartFile)} and docs/BENCHMARKS.md`);
}
