/** Load-time check that the native `llama` kernels are bit-exact with llama.cpp (see EngineOptions.exactKernels). */
import { GgmlType } from "@keepquant/gguf";
import { matmulDense } from "@keepquant/quant";
import type { MatmulProvider } from "./matmul.js";
import { allMatrices } from "./providers.js";
import type { ModelWeights, PackedMatrix } from "./weights.js";

/** Weight types whose TypeScript llama kernel is bit-exact with llama.cpp's CPU backend (verified in tests). */
const EXACT_TS_TYPES: ReadonlySet<GgmlType> = new Set([GgmlType.Q4_K]);
/** Probe size: rows of the sampled weight, and tokens of the multi-token call. */
const PROBE_ROWS = 16;
const PROBE_TOKENS = 4;

/**
 * For each weight type with an exact TypeScript kernel, compares the selected (native) provider on
 * a few rows of a real weight against it; where they differ, every weight of that type moves to the
 * TypeScript kernel (slow, exact) and the diagnostics say so.
 */
export function probeExactKernels(
  weights: ModelWeights,
  byWeight: Map<PackedMatrix, MatmulProvider>,
  opProviders: Record<string, string>,
  tsProviders: MatmulProvider[],
  diagnostics: string[],
): void {
  const matrices = allMatrices(weights);
  for (const type of EXACT_TS_TYPES) {
    const ts = tsProviders.find((p) => p.numerics === "llama" && p.supports(type));
    if (!ts) continue;
    // weights already on the exact kernel (provider "ts") need no probe
    const sample = matrices.find((w) => w.type === type && byWeight.get(w)?.name !== ts.name);
    if (!sample) continue;
    // bounded cost: PROBE_ROWS rows, one single-token and one multi-token call (kernels may take
    // different paths for m = 1 and m > 1), activations of mixed sign and magnitude
    const rows = Math.min(sample.rows, PROBE_ROWS);
    const probe: PackedMatrix = { ...sample, rows, data: sample.data.subarray(0, rows * sample.rowBytes) };
    let differs = false;
    for (const m of [1, PROBE_TOKENS]) {
      const x = new Float32Array(m * sample.cols);
      for (let i = 0; i < x.length; i++) x[i] = Math.sin(i * 12.9898 + m) * (1 + (i % 7)) * 0.75;
      const fast = new Float32Array(m * rows);
      const exact = new Float32Array(m * rows);
      matmulDense(byWeight.get(sample)!, probe, x, m, fast);
      matmulDense(ts, probe, x, m, exact);
      if (!fast.every((v, i) => Object.is(v, exact[i]))) differs = true;
    }
    if (!differs) continue;
    for (const w of matrices) if (w.type === type) byWeight.set(w, ts);
    opProviders[`matmul:${sample.typeName}`] = ts.name;
    diagnostics.push(
      `exactKernels: the native ${sample.typeName} kernel is not bit-exact with llama.cpp's (probed at load); ${sample.typeName} weights use the exact TypeScript kernel ${ts.name} (slower). Pass exactKernels: false for the native kernel (faster, last-bit differences from llama.cpp).`,
    );
  }
}
