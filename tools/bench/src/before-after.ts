/**
 * Two builds of keepquant in one run: this checkout ("after") and another, built checkout ("before", e.g. a
 * `git worktree` at an older commit with `pnpm install` and its build done), on the same real-shape files, with
 * llama.cpp pinned to haswell (repacking off) as the anchor. Each measurement is its own process through each
 * checkout's own `tools/bench/src/worker.ts`; the order of the three flips every repeat so machine noise hits
 * all of them. Prints a markdown table of medians (nothing is written: the table goes to docs/benchmarks by hand,
 * with the machine).
 *
 *   pnpm --filter @keepquant/bench bench:before-after -- --before /work/wt-before [--repeat 3] [--types Q4_K_M,Q8_0]
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { readGguf } from "@keepquant/gguf";
import { ensureRealShape, REAL_SHAPE_TYPES, REPO_ROOT, type RealShapeType } from "./real-shape.js";
import { sideBySideOptions } from "./sequences.js";
import { flag, median, runWorker } from "./side-by-side.js";
import type { WorkerResult } from "./worker.js";

const beforeRoot = path.resolve(flag("before", ""));
const repeat = Number(flag("repeat", "3"));
const threads = Number(flag("threads", "2"));
const types = flag("types", REAL_SHAPE_TYPES.join(",")).split(",") as RealShapeType[];
const beforeWorker = path.join(beforeRoot, "tools", "bench", "src", "worker.ts");
if (!fs.existsSync(beforeWorker)) throw new Error(`--before ${beforeRoot}: no tools/bench/src/worker.ts there`);

type Build = "before" | "after" | "llama.cpp haswell";
const builds: Build[] = ["before", "after", "llama.cpp haswell"];

const files = await ensureRealShape(types);
const rows: string[] = [];
for (const type of types) {
  const file = files[type];
  const vocab = ((await readGguf(file)).metadata.get("tokenizer.ggml.tokens")?.value as ArrayLike<unknown> | undefined)?.length ?? 0;
  const options = sideBySideOptions({ threads, prompt: 128, gen: 64, seqs: 8, vocab });
  const runs = new Map<Build, WorkerResult[]>(builds.map((b) => [b, []]));
  for (let r = 0; r < repeat; r++) {
    const order = r % 2 === 0 ? builds : [...builds].reverse();
    for (const build of order) {
      const result =
        build === "llama.cpp haswell"
          ? runWorker(build, file, { ...options, seqs: 1 })
          : build === "after"
            ? runWorker("keepquant", file, options)
            : runWorker("keepquant", file, options, path.relative(path.join(REPO_ROOT, "tools", "bench", "src"), beforeWorker));
      runs.get(build)!.push(result);
      process.stderr.write(
        `${type} ${build} #${r + 1}: prefill ${result.prefillTokensPerSecond.toFixed(1)}, decode ${result.decodeTokensPerSecond.toFixed(1)}` +
          `${result.aggregateTokensPerSecond ? `, ${options.seqs} sequences ${result.aggregateTokensPerSecond.toFixed(1)}` : ""} tok/s, load ${os.loadavg()[0]!.toFixed(1)}\n`,
      );
    }
  }
  const med = (b: Build, pick: (w: WorkerResult) => number | undefined) =>
    median(
      runs
        .get(b)!
        .map(pick)
        .filter((v): v is number => v !== undefined),
    );
  const measures: [string, (w: WorkerResult) => number | undefined][] = [
    ["prefill", (w) => w.prefillTokensPerSecond],
    ["decode", (w) => w.decodeTokensPerSecond],
    [`${options.seqs} sequences`, (w) => w.aggregateTokensPerSecond],
  ];
  for (const [name, pick] of measures) {
    const before = med("before", pick);
    const after = med("after", pick);
    const anchor = name === "prefill" || name === "decode" ? med("llama.cpp haswell", pick) : Number.NaN;
    const vs = Number.isFinite(anchor) ? `${(before / anchor).toFixed(2)}x / ${(after / anchor).toFixed(2)}x` : "-";
    rows.push(`| ${type} | ${name} | ${before.toFixed(1)} | ${after.toFixed(1)} | ${(after / before).toFixed(2)}x | ${vs} |`);
  }
}

console.log(`machine: ${os.cpus()[0]?.model ?? "unknown"}, ${os.cpus().length} cores; ${threads} threads; medians of ${repeat}`);
console.log("| file | measure | before tok/s | after tok/s | after / before | vs llama.cpp haswell (before / after) |");
console.log("|---|---|---:|---:|---:|---:|");
for (const row of rows) console.log(row);
