/**
 * Dequantization throughput: TS kernels of @keepquant/quant vs ggml's dequantize_row_<type> from
 * the oracle's libggml-base.so (through koffi, pointers passed without copies), on the same packed
 * buffers, in the same process, interleaved. Reports GB/s of packed input and the TS/ggml ratio.
 *
 *   pnpm --filter @keepquant/bench bench:quant-dequantize            # all types
 *   pnpm --filter @keepquant/bench bench:quant-dequantize -- q4_K    # some types (ggml tokens or names)
 */
import { GgmlType, GGML_TYPE_TRAITS } from "@keepquant/gguf";
import { loadGgmlOracle, loadGgmlRowOracle, ORACLE_VERSION, oracleUnavailableReason } from "@keepquant/oracle";
import { dequantizeTensor, DEQUANTIZE_TYPES } from "@keepquant/quant";
import { F16_SCALE_FIELDS } from "@keepquant/quant/testing";

const TARGET_BYTES = 8 * 1024 * 1024; // packed input per call: larger than L2, like a weight slice
const MIN_SECONDS = 0.4;
const ROUNDS = 5;

const reason = oracleUnavailableReason();
if (reason) {
  console.log(`SKIP: dequantize benchmark needs the ggml oracle: ${reason}`);
  process.exit(77);
}
const oracle = loadGgmlOracle();
const rows = loadGgmlRowOracle();
const filters = process.argv
  .slice(2)
  .filter((a) => a !== "--")
  .map((a) => a.toLowerCase());

function seconds(): number {
  return Number(process.hrtime.bigint()) / 1e9;
}

/** GB/s of packed input for one round of `run` lasting at least MIN_SECONDS. */
function round(run: () => void, bytes: number): number {
  let calls = 0;
  const start = seconds();
  let now = start;
  do {
    run();
    calls++;
    now = seconds();
  } while (now - start < MIN_SECONDS);
  return (calls * bytes) / (now - start) / 1e9;
}

/** Alternating rounds of both sides (so machine noise hits both alike); best round of each. */
function measurePair(a: () => void, b: () => void, bytes: number): [number, number] {
  let bestA = 0;
  let bestB = 0;
  for (let i = 0; i < ROUNDS; i++) {
    bestA = Math.max(bestA, round(a, bytes));
    bestB = Math.max(bestB, round(b, bytes));
  }
  return [bestA, bestB];
}

interface Row {
  name: string;
  ts: number;
  ggml: number;
}
const results: Row[] = [];
for (const type of DEQUANTIZE_TYPES) {
  const { name, blockSize, typeSize } = GGML_TYPE_TRAITS[type];
  const token = oracle.typeName(type);
  if (filters.length > 0 && !filters.includes(token.toLowerCase()) && !filters.includes(name.toLowerCase())) continue;
  if (type === GgmlType.F32) continue; // a memcpy on both sides, not a decoder
  const blocks = Math.floor(TARGET_BYTES / typeSize);
  const src = new Uint8Array(blocks * typeSize);
  let seed = 12345;
  for (let i = 0; i < src.length; i++) {
    seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
    src[i] = seed >>> 24;
  }
  if (type === GgmlType.F16 || type === GgmlType.BF16) {
    for (let i = 1; i < src.length; i += 2) src[i] = 0x3c ^ (src[i]! & 0x83); // finite, normal halves
  }
  for (const offset of F16_SCALE_FIELDS[type] ?? []) {
    for (let b = 0; b < blocks; b++) {
      src[b * typeSize + offset] = src[b * typeSize + offset]! & 0xff;
      src[b * typeSize + offset + 1] = 0x20 | (src[b * typeSize + offset + 1]! & 0x03); // ~2^-7 .. 2^-5
    }
  }
  if (type === GgmlType.Q8_K) for (let b = 0; b < blocks; b++) new DataView(src.buffer).setFloat32(b * typeSize, 0.01, true);
  if (type === GgmlType.MXFP4) for (let b = 0; b < blocks; b++) src[b * typeSize] = 120 + (b & 7);
  const elements = blocks * blockSize;
  const dstTs = new Float32Array(elements);
  const dstGgml = new Float32Array(elements);
  let ggmlRun: () => void;
  if (type === GgmlType.F16) {
    const halfs = new Uint16Array(src.buffer);
    ggmlRun = () => rows.fp16ToFp32Row(halfs, dstGgml);
  } else if (type === GgmlType.BF16) {
    const halfs = new Uint16Array(src.buffer);
    ggmlRun = () => rows.bf16ToFp32Row(halfs, dstGgml);
  } else {
    const fn = rows.dequantizeRowFn(token);
    ggmlRun = () => fn(src, dstGgml, elements);
  }
  const tsRun = () => void dequantizeTensor(type, src, elements, dstTs);
  // warm up both (JIT tiers, page faults), then interleave measurements
  for (let i = 0; i < 5; i++) {
    tsRun();
    ggmlRun();
  }
  const [ts, ggml] = measurePair(tsRun, ggmlRun, src.length);
  results.push({ name, ts, ggml });
  console.log(
    `${name.padEnd(7)} TS ${ts.toFixed(2).padStart(6)} GB/s   ggml ${ggml.toFixed(2).padStart(6)} GB/s   ratio ${(ts / ggml).toFixed(2)}`,
  );
}

console.log(
  `\noracle @node-llama-cpp/linux-x64 ${ORACLE_VERSION}, node ${process.version}, ${TARGET_BYTES / 1024 / 1024} MiB packed per call, best of ${ROUNDS} alternating rounds of >= ${MIN_SECONDS} s`,
);
console.log("\n| type | TS GB/s | ggml GB/s | TS / ggml |\n|---|---:|---:|---:|");
for (const r of results) console.log(`| ${r.name} | ${r.ts.toFixed(2)} | ${r.ggml.toFixed(2)} | ${(r.ts / r.ggml).toFixed(2)} |`);
