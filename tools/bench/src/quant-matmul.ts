/**
 * MatmulBTQuantGrouped throughput of this package's two providers (TS reference, wasm-simd) on the
 * registered encodings, dense E = 1, for a decode-like M = 1 and a prefill-like M = 16.
 * (The native providers and their ratios against ggml are benchmarked in tt-native-matmul.ts.)
 *
 *   pnpm --filter @keepquant/bench bench:quant-matmul
 */
import { GGML_TYPE_TRAITS } from "@keepquant/gguf";
import { KEEPQUANT_ENCODINGS, referenceProvider, wasmSimdProvider, type KeepQuantProvider } from "@keepquant/quant";
import { randomActivations, randomPackedWeight } from "@keepquant/quant/testing";

const N = 2048;
const K = 1024;
const MIN_SECONDS = 0.5;

function timeCall(provider: KeepQuantProvider, args: Parameters<KeepQuantProvider["matmulBTQuantGrouped"]>[0]): number {
  for (let i = 0; i < 3; i++) provider.matmulBTQuantGrouped(args); // JIT warm-up
  let calls = 0;
  const start = performance.now();
  let now = start;
  do {
    provider.matmulBTQuantGrouped(args);
    calls++;
    now = performance.now();
  } while (now - start < MIN_SECONDS * 1000);
  return (now - start) / 1000 / calls;
}

console.log(`\nMatmulBTQuantGrouped [N=${N}, K=${K}], E = 1, node ${process.version}`);
console.log("| encoding | M | ts-reference GMAC/s | wasm-simd GMAC/s | wasm / reference |\n|---|---:|---:|---:|---:|");
for (const type of KEEPQUANT_ENCODINGS) {
  for (const m of [1, 16]) {
    const args = { x: randomActivations(m * K, 7), xGroups: 1, m, p: 1, weight: randomPackedWeight(type, 1, N, K, 8) };
    const reference = (N * K * m) / timeCall(referenceProvider, args) / 1e9;
    const wasm = (N * K * m) / timeCall(wasmSimdProvider, args) / 1e9;
    console.log(
      `| ${GGML_TYPE_TRAITS[type].name} | ${m} | ${reference.toFixed(3)} | ${wasm.toFixed(3)} | ${(wasm / reference).toFixed(1)} |`,
    );
  }
}
