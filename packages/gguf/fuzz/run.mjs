// `pnpm fuzz`: coverage-guided fuzzing of the GGUF reader with Jazzer.js (libFuzzer), bounded by time.
//
//   pnpm fuzz                    # 60 s
//   pnpm fuzz -- --time 600      # 10 minutes
//   pnpm fuzz -- --runs 5000     # a fixed number of inputs (the CI smoke run)
//   pnpm fuzz -- --target file-source   # the chunked file path (FileSource, files changing size, short reads)
//   pnpm fuzz -- --timeout 120   # seconds one input may take before libFuzzer calls it a hang (default 10)
//
// Prints one line `fuzz: <cases> cases in <s> s, <corpus> corpus entries, no finding` (exit 0) or
// the finding (exit 1; the input is saved under fuzz/.cache/findings/). Seeds are small valid GGUF
// files written by our writer; the corpus grows in fuzz/.cache/corpus/ across runs.
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "..");
const cache = path.join(here, ".cache");
const args = process.argv.slice(2).filter((a) => a !== "--");
const option = (name) => {
  const i = args.indexOf(`--${name}`);
  if (i < 0) return undefined;
  const value = Number(args[i + 1]);
  if (!Number.isSafeInteger(value) || value < 1) throw new Error(`--${name} ${args[i + 1]}: expected a positive integer`);
  return value;
};
const runs = option("runs");
const targetIndex = args.indexOf("--target");
const target = targetIndex < 0 ? "reader" : args[targetIndex + 1];
if (target !== "reader" && target !== "file-source") throw new Error(`--target ${target}: expected reader or file-source`);
const seed = option("seed");
const seconds = option("time") ?? (runs === undefined ? 60 : undefined);
const inputTimeout = option("timeout") ?? 10;

// 1. the target, bundled to CommonJS so that Jazzer instruments the reader's code
const dist = path.join(cache, "dist");
const bundle = spawnSync("tsup", [`fuzz/${target}.fuzz.ts`, "--format", "cjs", "--out-dir", dist, "--target", "node20", "--silent"], {
  cwd: root,
  encoding: "utf8",
});
if (bundle.status !== 0) throw new Error(`bundling the fuzz target failed: ${bundle.stderr || bundle.error}`);

// 2. seeds: small valid files (metadata of every type, tensors, a qwen35 header)
const seeds = path.join(cache, "seeds");
const corpus = path.join(cache, target === "reader" ? "corpus" : `corpus-${target}`);
const findings = path.join(cache, "findings");
for (const dir of [seeds, corpus, findings]) fs.mkdirSync(dir, { recursive: true });
const gguf = await import(path.join(root, "dist", "index.js"));
const { GgufValueType: V, GgmlType: T } = gguf;
const small = gguf.writeGguf({
  metadata: [
    gguf.gguf.str("general.architecture", "llama"),
    gguf.gguf.u32("t.u32", 7),
    gguf.gguf.i64("t.i64", -5n),
    gguf.gguf.f32("t.f32", 0.5),
    gguf.gguf.bool("t.bool", true),
    gguf.gguf.arr("t.strings", V.STRING, ["a", "bc"]),
    gguf.gguf.arr("t.floats", V.FLOAT32, [1, 2, 3]),
  ],
  tensors: [
    { name: "a", type: T.F32, ne: [4, 2], data: new Uint8Array(32) },
    { name: "b", type: T.Q8_0, ne: [32], data: new Uint8Array(34) },
  ],
});
fs.writeFileSync(path.join(seeds, "small.gguf"), small);
const layout = gguf.qwen35SpecLayout(gguf.QWEN35_TEST_SHAPE);
fs.writeFileSync(path.join(seeds, "qwen35-metadata.gguf"), gguf.writeGguf({ metadata: layout.metadata, tensors: [] }));
fs.writeFileSync(
  path.join(seeds, "qwen35-header.gguf"),
  gguf.encodeGgufHeader({ metadata: layout.metadata, tensors: layout.tensors.map((t) => ({ ...t, type: T.F32, ne: [...t.ne] })) }).header,
);

// 3. Jazzer, with the glibc shim (fuzz/glibc-compat.cjs) preloaded
const require = createRequire(path.join(root, "package.json"));
const cli = path.join(path.dirname(require.resolve("@jazzer.js/core/package.json")), "dist", "cli.js");
const libFuzzer = [
  ...(seconds === undefined ? [] : [`-max_total_time=${seconds}`]),
  ...(runs === undefined ? [] : [`-runs=${runs}`]),
  ...(seed === undefined ? [] : [`-seed=${seed}`]),
  `-timeout=${inputTimeout}`,
  "-max_len=65536",
  "-print_final_stats=1",
  `-artifact_prefix=${findings}${path.sep}`,
];
const started = performance.now();
const result = spawnSync(
  process.execPath,
  ["--require", path.join(here, "glibc-compat.cjs"), cli, path.join(dist, `${target}.fuzz.cjs`), corpus, seeds, "--", ...libFuzzer],
  { cwd: root, encoding: "utf8", maxBuffer: 256 * 1024 * 1024 },
);
const elapsed = (performance.now() - started) / 1000;
const output = `${result.stdout}\n${result.stderr}`;
const executed = output.match(/stat::number_of_executed_units:\s*(\d+)/)?.[1] ?? output.match(/Done (\d+) runs/)?.[1];
if (result.status !== 0 || executed === undefined) {
  process.stderr.write(output.split("\n").slice(-60).join("\n"));
  console.error(`fuzz: FINDING or failure (exit ${result.status}); inputs saved in ${path.relative(process.cwd(), findings)}`);
  process.exit(1);
}
console.log(`fuzz target: ${target}`);
console.log(`fuzz: ${executed} cases in ${elapsed.toFixed(0)} s, ${fs.readdirSync(corpus).length} corpus entries, no finding`);
