import type { GgmlType } from "@keepquant/gguf";
import { LLAMA_WEIGHT_TYPES, dequantizeRow, matmulLlamaReference, quantizeActivationRow } from "@keepquant/quant";
import { matmulQ4KLlama } from "../numerics/q4k-llama.js";
import { EngineLoadError } from "../errors.js";
import { TsMatmulProvider, type DequantizeRow, type MatmulProvider, type Numerics } from "./matmul.js";
import type { ModelWeights, PackedMatrix } from "./weights.js";

const Q4_K = 12;
const Q8_K = 15;

export const quantDequantizeRow: DequantizeRow = (type, src, dst) => {
  dequantizeRow(type as GgmlType, src, dst);
};

export interface ProviderSelection {
  readonly byWeight: Map<PackedMatrix, MatmulProvider>;
  /** op class ("matmul:Q4_K", ...) -> provider name */
  readonly opProviders: Record<string, string>;
  readonly diagnostics: string[];
}

/** Every packed matrix of the model (the tied head counted once). */
export function allMatrices(weights: ModelWeights): PackedMatrix[] {
  const list: PackedMatrix[] = [];
  for (const layer of weights.layers) {
    if (layer.kind === "attention") list.push(layer.q, layer.k, layer.v, layer.o);
    else list.push(layer.qkv, layer.gate, layer.beta, layer.alpha, layer.out);
    list.push(layer.ffnGate, layer.ffnUp, layer.ffnDown);
  }
  list.push(weights.output);
  return list;
}

/**
 * Picks a provider per weight by priority (first that supports the type in this numerics mode).
 * A type nobody computes is refused by name here, at load, before any compute.
 */
export function selectProviders(
  weights: ModelWeights,
  candidates: readonly MatmulProvider[],
  diagnostics: string[],
  numericsHint = "",
): ProviderSelection {
  const byWeight = new Map<PackedMatrix, MatmulProvider>();
  const opProviders: Record<string, string> = {};
  const refused = new Map<string, string[]>();
  for (const weight of allMatrices(weights)) {
    const provider = candidates.find((p) => p.supports(weight.type));
    if (!provider) {
      const names = refused.get(weight.typeName) ?? [];
      names.push(weight.name);
      refused.set(weight.typeName, names);
      continue;
    }
    byWeight.set(weight, provider);
    opProviders[`matmul:${weight.typeName}`] = provider.name;
  }
  if (refused.size > 0) {
    const detail = [...refused].map(([type, names]) => `${type} (${names.slice(0, 3).join(", ")}${names.length > 3 ? ", ..." : ""})`);
    throw new EngineLoadError(
      "ENGINE_UNSUPPORTED_TYPE",
      `no matmul provider computes weight type ${detail.join("; ")} (providers tried: ${candidates.map((p) => p.name).join(", ")})${numericsHint}`,
      { field: [...refused.values()][0]![0] },
    );
  }
  return { byWeight, opProviders, diagnostics };
}

/**
 * The TypeScript tier (last priority). `llama`: F32/F16/BF16 inline, quantized types through the
 * quant package's llama.cpp-numerics reference (activations quantized to Q8_0/Q8_1/Q8_K, integer
 * dots). `bf16`: every type the quant package dequantizes, rounded once to bf16. `exact`: every
 * type the quant package dequantizes, decoded exactly (no activation quantization, no rounding).
 */
export function typescriptProviders(numerics: Numerics, diagnostics: string[]): MatmulProvider[] {
  void diagnostics;
  if (numerics === "exact") {
    const all = new Set<number>(LLAMA_WEIGHT_TYPES.filter((t) => t !== 0 && t !== 1 && t !== 30));
    return [new TsMatmulProvider("exact", quantDequantizeRow, all)];
  }
  if (numerics === "llama") {
    const quantized = new Set<number>(LLAMA_WEIGHT_TYPES.filter((t) => t !== 0 && t !== 1 && t !== 30));
    const llamaReference = (weight: PackedMatrix, x: Float32Array, m: number, y: Float32Array): void => {
      if (weight.type === Q4_K) {
        // llama.cpp's AVX2 Q4_K order (bit-exact with the oracle; the quant reference is not)
        matmulQ4KLlama(weight.data, weight.rows, weight.cols, x, m, y, (row, dst) => quantizeActivationRow(Q8_K as GgmlType, row, dst));
        return;
      }
      const out = matmulLlamaReference(
        { type: weight.type as GgmlType, rows: weight.rows, cols: weight.cols, data: weight.data },
        x.length === m * weight.cols ? x : x.subarray(0, m * weight.cols),
        m,
      );
      y.set(out);
    };
    return [new TsMatmulProvider("llama", quantDequantizeRow, quantized, llamaReference)];
  }
  // bf16: registered encodings under the contract; every other type through the general (llama) matmul
  const registered = new Set<number>([8, 12, 13, 14]);
  const contract = new TsMatmulProvider("bf16", quantDequantizeRow, registered);
  const general = typescriptProviders("llama", diagnostics)[0]!;
  return [
    { name: contract.name, supports: (t) => registered.has(t) && contract.supports(t), matmul: (w, x, m, y) => contract.matmul(w, x, m, y) },
    { name: general.name, supports: (t) => !registered.has(t) && general.supports(t), matmul: (w, x, m, y) => general.matmul(w, x, m, y) },
  ];
}
