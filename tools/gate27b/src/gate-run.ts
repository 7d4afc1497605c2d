/**
 * One gate run on CPU, shared by the 27B and 35B-A3B gates: llama.cpp (the npm oracle, pinned haswell
 * CPU variant) and keepquant each greedy-decode 4 fixed prompts x 8 tokens on the gate's synthetic
 * Q4_K_M file, each in its own process (worker.ts), one after the other (never both resident), with the
 * same threads, context, KV type (f16) and flash-attention setting (on: both engines' defaults). The
 * parity gate classifies every prompt (STRICT / NEAR-TIE / FORWARD-DIVERGENT) and both engines' load
 * time, prefill and decode tok/s and peak RSS are recorded.
 *
 * Exit codes: 0 every target met; 1 a prompt is FORWARD-DIVERGENT (or a run failed); 2 parity met
 * but a performance target missed (keepquant peak RSS <= 1.1x llama.cpp's, decode tok/s >= 1.0x);
 * 77 the machine cannot run it (free disk for the file, or available memory below what the planner
 * needs), with the reason: never a pass.
 */
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { checkCpuLoad, cpuAvailableMemory, formatGiB } from "@keepquant/engine";
import { comparePrompt, PARITY_GOLDENS_FORMAT, summarize, type ParityGoldens, type ParityPromptResult } from "@keepquant/engine/parity";
import { writeQwen35HeaderOnly } from "@keepquant/gguf";
import { ORACLE_PACKAGE, ORACLE_VERSION } from "@keepquant/oracle";
import { REPO_ROOT, type GateFixture } from "./gate-fixture.js";
import { quantizedQwen35Layout } from "./quantized-qwen35.js";
import type { GateWorkerOptions, GateWorkerResult } from "./worker.js";

export const GATE_N_TOKENS = 8;
export const GATE_TOP_K = 64;
export const GATE_CONTEXT = 256;
/** Exit code of a gate the machine cannot run. */
export const SKIP_EXIT = 77;

/** The 4 fixed prompts (token ids spread over the vocabulary): 16, 24, 32 and 40 tokens. */
export function gatePrompts(vocab: number): number[][] {
  return [16, 24, 32, 40].map((length, p) => Array.from({ length }, (_, i) => (i * 7919 + 13 + p * 104_729) % vocab));
}

const here = path.dirname(fileURLToPath(import.meta.url));
const tsx = path.join(REPO_ROOT, "node_modules", ".bin", "tsx");

interface EngineSummary {
  loadS: number;
  warmupS: number;
  prefillTokensPerSecond: number;
  decodeTokensPerSecond: number;
  peakRssGiB: number;
  detail: string;
}

function summarizeEngine(result: GateWorkerResult, prompts: readonly number[][]): EngineSummary {
  const promptTokens = prompts.reduce((a, p) => a + p.length, 0);
  const ttft = result.runs.reduce((a, r) => a + r.timeToFirstTokenMs, 0);
  const decodeMs = result.runs.reduce((a, r) => a + r.decodeMs, 0);
  const decodeTokens = result.runs.reduce((a, r) => a + r.tokens.length - 1, 0);
  return {
    loadS: result.loadMs / 1000,
    warmupS: result.warmupMs / 1000,
    prefillTokensPerSecond: (promptTokens / ttft) * 1000,
    decodeTokensPerSecond: (decodeTokens / decodeMs) * 1000,
    peakRssGiB: result.peakRssBytes / 2 ** 30,
    detail: result.detail,
  };
}

/** Runs the gate with the command line's `--threads` (default 2) and exits with the gate's code. */
export async function runGate(fixture: GateFixture): Promise<never> {
  const config = fixture.recipe;
  const { minFreeDiskBytes } = config;
  const args = process.argv.slice(2);
  const flag = (name: string, fallback: string): string => {
    const i = args.indexOf(`--${name}`);
    return i >= 0 && args[i + 1] ? args[i + 1]! : fallback;
  };
  const threads = Number(flag("threads", "2"));
  const log = (line: string): void => console.error(`[gate:${config.name}] ${line}`);
  const skip = (reason: string): never => {
    console.log(`SKIP: ${config.title} gate: ${reason}`);
    process.exit(SKIP_EXIT);
  };
  const gatePromptIds = gatePrompts(config.spec.vocab);

  function runWorker(engine: "keepquant" | "llama.cpp", file: string, options: GateWorkerOptions): GateWorkerResult {
    const started = Date.now();
    log(`${engine}: load, warm up, ${options.prompts.length} prompts x ${options.nTokens} tokens (its own process)`);
    const result = spawnSync(tsx, [path.join(here, "worker.ts"), engine, file, JSON.stringify(options)], {
      cwd: path.join(here, ".."),
      encoding: "utf8",
      timeout: 3 * 3_600_000,
      maxBuffer: 64 * 2 ** 20,
      stdio: ["ignore", "pipe", "pipe"],
    });
    const line = result.stdout.trim().split("\n").at(-1) ?? "";
    if (result.status !== 0 || !line.startsWith("{")) {
      throw new Error(
        `${engine} failed (exit ${result.status}, signal ${result.signal}): ${result.stderr.trim().split("\n").slice(-8).join(" | ")}`,
      );
    }
    log(`${engine}: done in ${((Date.now() - started) / 1000).toFixed(0)} s`);
    return JSON.parse(line) as GateWorkerResult;
  }

  const gateStarted = Date.now();
  const file = fixture.file();
  const engineOptions = { kvCacheTokens: GATE_CONTEXT, maxSequences: 1, kvType: "f16", flashAttention: true } as const;

  // 0. Memory first, from the header alone (when configured): the planner's verdict on a header-only
  //    (sparse) file of the same layout, so a machine that cannot hold the model is told so before the
  //    file is written.
  if (config.planFromHeaderFirst && !fs.existsSync(file)) {
    fs.mkdirSync(fixture.dir(), { recursive: true });
    const headerOnly = path.join(fixture.dir(), `header-only-${process.pid}.gguf`);
    let early: Awaited<ReturnType<typeof checkCpuLoad>>;
    try {
      const layout = quantizedQwen35Layout(config.spec);
      const types = new Map(layout.tensors.map((t) => [t.tensor.name, t.type]));
      await writeQwen35HeaderOnly(headerOnly, config.spec, { types: (t) => types.get(t.name)! });
      early = await checkCpuLoad(headerOnly, engineOptions, { memory: cpuAvailableMemory() });
    } finally {
      fs.rmSync(headerOnly, { force: true });
    }
    log(`plan (from the header): ${early.plan.verdict}`);
    if (!early.plan.fits) skip(`the planner says it does not fit (checked before generating the file): ${early.plan.verdict}`);
  }

  // 1. The file: generate it when missing (only with the disk for it).
  if (!fs.existsSync(file)) {
    const dir = fixture.dir();
    fs.mkdirSync(dir, { recursive: true });
    const stat = fs.statfsSync(dir);
    const free = stat.bavail * stat.bsize;
    const partial = fs.existsSync(`${file}.partial`) ? fs.statSync(`${file}.partial`).size : 0;
    if (free + partial < minFreeDiskBytes) {
      skip(
        `${(free / 1e9).toFixed(1)} GB free in ${dir} (${fixture.dirVariable}), the ${(fixture.fileSize() / 1e9).toFixed(1)} GB file needs about ${minFreeDiskBytes / 1e9} GB`,
      );
    }
  }
  const generationStarted = Date.now();
  const model = await fixture.ensure({ log: (line) => log(line) });
  const generationS = (Date.now() - generationStarted) / 1000;

  // 2. Memory: the planner's verdict for this engine configuration on this machine (on the real file).
  const memory = cpuAvailableMemory();
  const check = await checkCpuLoad(model, engineOptions, { memory });
  log(`plan: ${check.plan.verdict}`);
  if (!check.plan.fits) skip(`the planner says it does not fit: ${check.explanation}`);

  // 3. Both engines, one after the other.
  const options: GateWorkerOptions = {
    threads,
    context: GATE_CONTEXT,
    kvType: engineOptions.kvType,
    flashAttention: engineOptions.flashAttention,
    nTokens: GATE_N_TOKENS,
    prompts: gatePromptIds.map((p) => [...p]),
    warmup: [11, 4099, 70_001, 200_003],
    topK: GATE_TOP_K,
  };
  const llama = runWorker("llama.cpp", model, options);
  const ours = runWorker("keepquant", model, options);

  // 4. Parity: llama.cpp's greedy run is the golden (its step-s logits are teacher-forced on our prefix
  //    up to the first difference).
  const goldens: ParityGoldens = {
    format: PARITY_GOLDENS_FORMAT,
    fixture: config.fixtureName,
    weightType: "Q4_K_M",
    modelSha256: fs.readFileSync(`${model}.sha256`, "utf8").trim(),
    modelBytes: fs.statSync(model).size,
    oracle: {
      package: ORACLE_PACKAGE,
      version: ORACLE_VERSION,
      llamaVersion: llama.detail,
      cpuVariant: "haswell",
      // The goldens type records the committed goldens' fixed settings; this gate's own (KV f16,
      // flash attention on, repacking off) are in `options` and the printed report.
      settings: { kvType: "f32", repack: false, flashAttention: false, threads },
    },
    nTokens: GATE_N_TOKENS,
    topK: GATE_TOP_K,
    prompts: gatePromptIds.map((ids, p) => ({
      ids: [...ids],
      tokens: llama.runs[p]!.tokens,
      topIds: llama.runs[p]!.topIds!.map((ids) => Int32Array.from(ids)),
      topLogits: llama.runs[p]!.topLogits!.map((values) => Float32Array.from(values)),
    })),
  };
  const prompts: ParityPromptResult[] = goldens.prompts.map((golden, p) => comparePrompt(golden, p, { tokens: ours.runs[p]!.tokens }));
  const report = summarize(goldens.fixture, goldens.weightType, "llama", prompts);
  const parityMet = report.forwardDivergent === 0 && report.strict + report.nearTie === report.total;

  const a = summarizeEngine(llama, gatePromptIds);
  const b = summarizeEngine(ours, gatePromptIds);
  const rssRatio = b.peakRssGiB / a.peakRssGiB;
  const decodeRatio = b.decodeTokensPerSecond / a.decodeTokensPerSecond;
  const rssMet = rssRatio <= 1.1;
  const decodeMet = decodeRatio >= 1.0;
  const gateS = (Date.now() - gateStarted) / 1000;

  const fmt = (v: number, digits = 2): string => v.toFixed(digits);
  const table = [
    "| engine | load (s) | warm-up (s) | prefill (tok/s) | decode (tok/s) | peak RSS (GiB) |",
    "|---|---:|---:|---:|---:|---:|",
    `| llama.cpp (haswell, repack off) | ${fmt(a.loadS)} | ${fmt(a.warmupS)} | ${fmt(a.prefillTokensPerSecond)} | ${fmt(a.decodeTokensPerSecond)} | ${fmt(a.peakRssGiB)} |`,
    `| keepquant | ${fmt(b.loadS)} | ${fmt(b.warmupS)} | ${fmt(b.prefillTokensPerSecond)} | ${fmt(b.decodeTokensPerSecond)} | ${fmt(b.peakRssGiB)} |`,
    `| keepquant / llama.cpp | | | ${fmt(b.prefillTokensPerSecond / a.prefillTokensPerSecond)}x | ${fmt(decodeRatio)}x | ${fmt(rssRatio)}x |`,
  ];
  const parityLines = prompts.map(
    (p) =>
      `prompt ${p.index} (${gatePromptIds[p.index]!.length} tokens): ${p.status.toUpperCase()}` +
      (p.status === "strict"
        ? ""
        : ` at step ${p.divergedAt} (llama.cpp ${p.oracleToken}, keepquant ${p.ourToken}, gap ${fmt((p.gapNats ?? 0) * 1000, 0)} mnats)`) +
      `  llama.cpp [${llama.runs[p.index]!.tokens.join(" ")}]  keepquant [${p.tokens.join(" ")}]`,
  );
  const lines = [
    `model: ${model} (${(goldens.modelBytes / 1e9).toFixed(2)} GB, sha256 ${goldens.modelSha256.slice(0, 16)}...)`,
    `machine: ${os.cpus()[0]?.model ?? "?"}, ${os.cpus().length} cores, ${formatGiB(os.totalmem())} memory, ${formatGiB(memory.bytes)} available; ${threads} threads, context ${GATE_CONTEXT}, KV f16, flash attention on`,
    `plan (keepquant, cpu): ${check.plan.verdict}`,
    "",
    ...table,
    "",
    `parity: STRICT ${report.strict}/${report.total}  NEAR-TIE ${report.nearTie}  FORWARD-DIVERGENT ${report.forwardDivergent}  max gap ${fmt(report.maxGapNats * 1000, 0)} mnats  ${parityMet ? "MET" : "MISSED"}`,
    ...parityLines,
    `peak RSS keepquant / llama.cpp ${fmt(rssRatio)}x (target <= 1.10x): ${rssMet ? "MET" : "MISSED"}`,
    `decode keepquant / llama.cpp ${fmt(decodeRatio)}x (target >= 1.00x): ${decodeMet ? "MET" : "MISSED"}`,
    `llama.cpp: ${a.detail}`,
    `keepquant: ${b.detail}`,
    `time: generation ${fmt(generationS, 0)} s (0 when cached), gate ${fmt(gateS, 0)} s in all`,
  ];
  console.log(lines.join("\n"));
  const out = path.join(fixture.dir(), `gate-${config.name}-result.json`);
  fs.writeFileSync(
    `${out}.tmp`,
    `${JSON.stringify({ date: new Date().toISOString(), model, threads, llama, keepquant: ours, summary: { llama: a, keepquant: b, rssRatio, decodeRatio }, report, generationS, gateS }, null, 2)}\n`,
  );
  fs.renameSync(`${out}.tmp`, out);
  log(`wrote ${out}`);
  process.exit(!parityMet ? 1 : rssMet && decodeMet ? 0 : 2);
}
