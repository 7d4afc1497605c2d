/**
 * Benchmark of the CPU-native arm (run: `pnpm --filter @keepquant/bench bench:tt-native-matmul`).
 *
 * 1. Memory read bandwidth of this machine (all pool threads summing a 512 MiB buffer).
 * 2. matmulLlama vs ggml's own CPU mul_mat (libggml-cpu-<variant>.so from the oracle, through a
 *    ggml graph) on the same weights, at M=1 (decode) and M=128 (prefill), on Qwen3.5-0.8B layer
 *    shapes, for every encoding. M=1 rotates through enough weight copies (>= 96 MiB) that every
 *    call streams its weights from DRAM, as in a real decode; both sides get the same rotation.
 * 3. Native dequantization vs the TS dequantizer of @keepquant/quant.
 * 4. The bf16 contract provider (cpu-native) vs the TS reference provider.
 *
 * Prints a markdown report (and `--json` for the raw numbers). Threads: the pool default (all
 * cores) for keepquant and the same count for ggml.
 */
import { GgmlType, GGML_TYPE_TRAITS, QWEN35_0_8B_SHAPE, qwen35SpecLayout } from "@keepquant/gguf";
import { loadGgmlCpuOracle, loadGgmlOracle, loadGgmlRowOracle, oracleUnavailableReason, ORACLE_VERSION } from "@keepquant/oracle";
import { dequantizeTensor, referenceProvider } from "@keepquant/quant";
import { randomPackedWeight } from "@keepquant/quant/testing";
import os from "node:os";
import {
  createNativeProvider,
  getNativeIsa,
  getNativeThreads,
  matmulLlama,
  nativeAddon,
  nativeDequantizeRows,
  nativeStatus,
  setNativeThreads,
} from "@keepquant/tt-native";

const json = process.argv.includes("--json");
const quick = process.argv.includes("--quick");
const lines: string[] = [];
const log = (s = "") => {
  lines.push(s);
  if (!json) console.log(s);
};

function now(): number {
  return Number(process.hrtime.bigint()) / 1e9;
}

/** Median seconds per call of fn, repeated until minSeconds elapsed (at least 3 runs). */
function timeIt(fn: () => void, minSeconds = quick ? 0.15 : 0.5): number {
  fn();
  const times: number[] = [];
  const start = now();
  while (times.length < 3 || now() - start < minSeconds) {
    const t0 = now();
    fn();
    times.push(now() - t0);
    if (times.length > 2000) break;
  }
  times.sort((a, b) => a - b);
  return times[times.length >> 1]!;
}

function randomFloats(count: number, seed: number, scale: number): Float32Array {
  let s = seed >>> 0;
  const out = new Float32Array(count);
  for (let i = 0; i < count; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    out[i] = ((s / 4294967296) * 2 - 1) * scale;
  }
  return out;
}

const status = nativeStatus();
if (!status.cpu.loaded) {
  console.error(`SKIP: the CPU-native arm is not loaded: ${status.cpu.reasons.join("; ")}`);
  process.exit(77);
}
const oracleReason = oracleUnavailableReason();
const addon = nativeAddon()!;
const threadsArg = process.argv.find((a) => a.startsWith("--threads="))?.slice(10);
if (threadsArg) setNativeThreads(Number(threadsArg));
const threads = getNativeThreads();

log(`# tt-native benchmark`);
log();
log(`- machine: ${os.cpus()[0]?.model ?? "unknown"}, ${os.cpus().length} logical CPUs, node ${process.version}`);
log(`- keepquant: ISA level ${getNativeIsa()} (available: ${status.cpu.isaAvailable?.join(", ")}), ${threads} threads`);
log(
  `- oracle: ${oracleReason ? `unavailable (${oracleReason})` : `@node-llama-cpp/linux-x64@${ORACLE_VERSION}, libggml-cpu-${loadGgmlCpuOracle().variant}.so, ${threads} threads`}`,
);
log();

// ------------------------------------------------------------- 1. bandwidth
const bwBuffer = new Uint8Array(512 * 1024 * 1024);
for (let i = 0; i < bwBuffer.length; i += 4096) bwBuffer[i] = i & 0xff;
const bwSeconds = timeIt(() => addon.sumWords(bwBuffer), 1.5);
const bandwidth = bwBuffer.length / bwSeconds;
log(`## Memory read bandwidth`);
log();
log(`${(bandwidth / 1e9).toFixed(1)} GB/s (${threads} threads summing 512 MiB, median of repeated passes)`);
log();

// ------------------------------------------------------------- 2. matmul
interface Shape {
  name: string;
  n: number;
  k: number;
}
// Qwen3.5-0.8B layer shapes, from the gguf package's tensor table (layer 0 is a GDN layer)
const SHAPES: Shape[] = ["attn_qkv", "ffn_up", "ffn_down", "ssm_out"].map((slot) => {
  const tensor = qwen35SpecLayout(QWEN35_0_8B_SHAPE).tensors.find((t) => t.layer === 0 && t.slot === slot)!;
  return { name: slot, n: tensor.ne[1]!, k: tensor.ne[0]! };
});
const typeFilter = process.argv
  .find((a) => a.startsWith("--types="))
  ?.slice(8)
  .split(",");
const ALL_TYPES: GgmlType[] = [
  GgmlType.Q4_K,
  GgmlType.Q5_K,
  GgmlType.Q6_K,
  GgmlType.Q8_0,
  GgmlType.Q4_0,
  GgmlType.Q4_1,
  GgmlType.Q5_0,
  GgmlType.Q5_1,
  GgmlType.Q2_K,
  GgmlType.Q3_K,
  GgmlType.IQ4_NL,
  GgmlType.IQ4_XS,
  GgmlType.MXFP4,
  GgmlType.F16,
  GgmlType.BF16,
  GgmlType.F32,
];
const TYPES = typeFilter ? ALL_TYPES.filter((t) => typeFilter.includes(GGML_TYPE_TRAITS[t].name)) : ALL_TYPES;
const sectionFilter = process.argv.find((a) => a.startsWith("--only="))?.slice(7);
const runSection = (name: string) => sectionFilter === undefined || sectionFilter.split(",").includes(name);

function makeWeight(type: GgmlType, n: number, k: number, seed: number): Uint8Array {
  const { blockSize, typeSize } = GGML_TYPE_TRAITS[type];
  const f = randomFloats(n * k, seed, 0.05);
  const data = new Uint8Array((n * k * typeSize) / blockSize);
  if (type === GgmlType.F32) data.set(new Uint8Array(f.buffer));
  else if (type === GgmlType.F16) loadGgmlRowOracle().fp32ToFp16Row(f, new Uint16Array(data.buffer));
  else if (type === GgmlType.BF16) loadGgmlRowOracle().fp32ToBf16RowRef(f, new Uint16Array(data.buffer));
  else loadGgmlOracle().quantizeChunk(type, f, data, n, k);
  return data;
}

interface MatmulRow {
  type: string;
  shape: string;
  n: number;
  k: number;
  m: number;
  oursSeconds: number;
  ggmlSeconds: number;
  weightBytes: number;
}
const matmulRows: MatmulRow[] = [];
const dequantRows: { type: string; rows: number; threads: number; native: number; ts: number }[] = [];
const contractRows: { m: number; native: number; ts: number }[] = [];

if (oracleReason) {
  log(`SKIP: matmul vs ggml: ${oracleReason}`);
} else if (runSection("matmul")) {
  const ggml = loadGgmlCpuOracle();
  log(`## matmulLlama vs ggml CPU mul_mat (same weights, same thread count)`);
  log();
  log(`GFLOP/s = 2·M·N·K / time; GB/s = weight bytes / time (M=1 rotates through >= 96 MiB of copies).`);
  log(`ratio = ggml time / keepquant time (> 1: keepquant faster).`);
  log();
  log(`| type | shape [N, K] | M | keepquant GFLOP/s | keepquant GB/s | ggml GFLOP/s | ggml GB/s | ratio |`);
  log(`|---|---|---|---|---|---|---|---|`);
  for (const type of TYPES) {
    const name = GGML_TYPE_TRAITS[type].name;
    const shapes = type === GgmlType.Q4_K || !quick ? (type === GgmlType.Q4_K ? SHAPES : SHAPES.slice(1, 3)) : SHAPES.slice(1, 2);
    for (const shape of shapes) {
      const { n, k } = shape;
      const base = makeWeight(type, n, k, 7 + type);
      const weightBytes = base.length;
      for (const m of [1, 128]) {
        const copies = m === 1 ? Math.max(2, Math.ceil((96 * 1024 * 1024) / weightBytes)) : 2;
        const weights: Uint8Array[] = [];
        for (let c = 0; c < copies; c++) weights.push(base.slice());
        const x = randomFloats(m * k, 3, 1);
        const out = new Float32Array(m * n);
        let next = 0;
        const ours =
          timeIt(() => {
            for (let c = 0; c < copies; c++) {
              matmulLlama({ type, rows: n, cols: k, data: weights[next++ % copies]! }, x, m, out);
            }
          }) / copies;
        const graph = ggml.mulMatGraph(type, weights, n, k, x, m);
        const theirs = timeIt(() => graph.compute(threads)) / copies;
        // sanity: same numerics family (llama.cpp's), so outputs agree closely
        const g0 = graph.output(0);
        const mine = matmulLlama({ type, rows: n, cols: k, data: weights[0]! }, x, m);
        let maxRel = 0;
        let maxAbs = 0;
        for (let i = 0; i < mine.length; i++) maxAbs = Math.max(maxAbs, Math.abs(g0[i]!));
        for (let i = 0; i < mine.length; i++) maxRel = Math.max(maxRel, Math.abs(mine[i]! - g0[i]!) / maxAbs);
        graph.free();
        if (maxRel > 1e-3)
          log(`WARNING: ${name} ${shape.name} M=${m}: outputs differ from ggml by ${maxRel.toExponential(2)} (relative to max |y|)`);
        const flop = 2 * m * n * k;
        matmulRows.push({ type: name, shape: shape.name, n, k, m, oursSeconds: ours, ggmlSeconds: theirs, weightBytes });
        log(
          `| ${name} | ${shape.name} [${n}, ${k}] | ${m} | ${(flop / ours / 1e9).toFixed(1)} | ${(weightBytes / ours / 1e9).toFixed(1)} | ` +
            `${(flop / theirs / 1e9).toFixed(1)} | ${(weightBytes / theirs / 1e9).toFixed(1)} | ${(theirs / ours).toFixed(2)} |`,
        );
      }
    }
  }
  log();
  const q4 = matmulRows.filter((r) => r.type === "Q4_K" && r.m === 1);
  if (q4.length > 0) {
    const bytes = q4.reduce((s, r) => s + r.weightBytes, 0);
    const ours = q4.reduce((s, r) => s + r.oursSeconds, 0);
    const theirs = q4.reduce((s, r) => s + r.ggmlSeconds, 0);
    log(
      `Q4_K M=1 over the ${q4.length} shapes: keepquant ${(bytes / ours / 1e9).toFixed(1)} GB/s = ` +
        `${((100 * bytes) / ours / bandwidth).toFixed(0)}% of the measured read bandwidth; ` +
        `ggml ${(bytes / theirs / 1e9).toFixed(1)} GB/s = ${((100 * bytes) / theirs / bandwidth).toFixed(0)}%.`,
    );
    log();
  }
}

// ------------------------------------------------------------- 3. dequant
if (runSection("dequant")) {
  log(`## Dequantization: native vs @keepquant/quant (TS)`);
  log();
  log(`Output GB/s (f32 bytes written / time). [256, 1024] stays in cache (kernel speed, 1 thread both sides);`);
  log(`[3584, 1024] streams (native with the pool's ${threads} threads, TS single-threaded).`);
  log();
  log(`| type | rows x K | native threads | native GB/s | TS GB/s | speed-up |`);
  log(`|---|---|---|---|---|---|`);
  for (const type of [GgmlType.Q4_K, GgmlType.Q5_K, GgmlType.Q6_K, GgmlType.Q8_0, GgmlType.Q4_0, GgmlType.IQ4_XS, GgmlType.F16]) {
    for (const [n, pool] of [
      [256, 1],
      [3584, threads],
    ] as const) {
      const k = 1024;
      const { blockSize, typeSize } = GGML_TYPE_TRAITS[type];
      const bytes = new Uint8Array((n * k * typeSize) / blockSize);
      if (oracleReason) {
        const fill = randomFloats(bytes.length / 4 + 1, 5, 1);
        bytes.set(new Uint8Array(fill.buffer).subarray(0, bytes.length));
      } else bytes.set(makeWeight(type, n, k, 9));
      const dst = new Float32Array(n * k);
      setNativeThreads(pool);
      const native = timeIt(() => nativeDequantizeRows(type, bytes, dst, n));
      setNativeThreads(threads);
      const ts = timeIt(() => dequantizeTensor(type, bytes, n * k, dst));
      dequantRows.push({ type: GGML_TYPE_TRAITS[type].name, rows: n, threads: pool, native, ts });
      log(
        `| ${GGML_TYPE_TRAITS[type].name} | ${n} x ${k} | ${pool} | ${((4 * n * k) / native / 1e9).toFixed(2)} | ${((4 * n * k) / ts / 1e9).toFixed(2)} | ${(ts / native).toFixed(1)}x |`,
      );
    }
  }
  log();
}

// ------------------------------------------------------------- 4. contract provider
if (runSection("contract")) {
  log(`## bf16 contract provider (cpu-native) vs TS reference provider, Q4_K [3584, 1024]`);
  log();
  log(`| M | cpu-native GFLOP/s | ts-reference GFLOP/s | speed-up |`);
  log(`|---|---|---|---|`);
  const provider = createNativeProvider();
  for (const m of [1, 16]) {
    const weight = randomPackedWeight(GgmlType.Q4_K, 1, 3584, 1024, 3);
    const x = randomFloats(m * 1024, 4, 1);
    const args = { x, xGroups: 1, m, weight, p: 1 };
    const native = timeIt(() => provider.matmulBTQuantGrouped(args));
    const ts = timeIt(() => referenceProvider.matmulBTQuantGrouped(args), 0.3);
    contractRows.push({ m, native, ts });
    const flop = 2 * m * 3584 * 1024;
    log(`| ${m} | ${(flop / native / 1e9).toFixed(2)} | ${(flop / ts / 1e9).toFixed(3)} | ${(ts / native).toFixed(0)}x |`);
  }
  log();
}

if (json) {
  console.log(
    JSON.stringify({ bandwidth, threads, isa: getNativeIsa(), matmul: matmulRows, dequant: dequantRows, contract: contractRows }, null, 2),
  );
}
