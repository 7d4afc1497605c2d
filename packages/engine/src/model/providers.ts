import { GgmlType } from "@keepquant/gguf";
import {
  KEEPQUANT_ENCODINGS,
  LLAMA_WEIGHT_TYPES,
  dequantizeRow,
  matmulLlamaReference,
  matmulNumericsFor,
  quantizeActivationRow,
  rankProviders,
  selectProvider,
} from "@keepquant/quant";
import { matmulQ4KLlama } from "../numerics/q4k-llama.js";
import { EngineLoadError } from "../errors.js";
import { TsMatmulProvider, type DenseKernel, type DequantizeRow, type MatmulProvider, type Numerics } from "./matmul.js";
import { isAttention, type ModelWeights, type PackedMatrix } from "./weights.js";

export const quantDequantizeRow: DequantizeRow = dequantizeRow;

/** Weight types the TypeScript tier decodes or dots beyond F32/F16/BF16 (which it computes inline). */
const TS_QUANTIZED_TYPES: ReadonlySet<GgmlType> = new Set(
  LLAMA_WEIGHT_TYPES.filter((t) => t !== GgmlType.F32 && t !== GgmlType.F16 && t !== GgmlType.BF16),
);

export interface ProviderSelection {
  readonly byWeight: Map<PackedMatrix, MatmulProvider>;
  /** op class ("matmul:Q4_K", ...) -> provider name */
  readonly opProviders: Record<string, string>;
}

const isPackedMatrix = (value: unknown): value is PackedMatrix =>
  typeof value === "object" &&
  value !== null &&
  "rowBytes" in value &&
  "typeName" in value &&
  (value as PackedMatrix).data instanceof Uint8Array;

/** The packed matrices of a weight object, its nested ones (an MoE FFN) included, in field order. */
function matricesOf(object: object, into: PackedMatrix[]): void {
  for (const value of Object.values(object)) {
    if (isPackedMatrix(value)) into.push(value);
    else if (typeof value === "object" && value !== null && !ArrayBuffer.isView(value)) matricesOf(value, into);
  }
}

/**
 * Every packed matrix the forward multiplies by (each once): the layers' (as bound from the model
 * description), the head, and the drafter's except the token tables it only gathers rows from.
 */
export function allMatrices(weights: ModelWeights): PackedMatrix[] {
  const list: PackedMatrix[] = [];
  for (const layer of weights.layers) matricesOf(layer, list);
  list.push(weights.output);
  const d = weights.drafter;
  if (d) {
    const { embedTokens, head, ...block } = d;
    void embedTokens;
    matricesOf(block, list);
    list.push(head);
  }
  return [...new Set(list)];
}

/** Bytes of the weights in memory: packed matrices (each once, the token table too), the bf16 twin, f32 vectors. */
export function residentWeightBytes(weights: ModelWeights): { packed: number; twin: number; f32: number } {
  const packedSeen = new Set<Uint8Array>();
  let packed = 0;
  for (const w of allMatrices(weights)) {
    if (packedSeen.has(w.data)) continue;
    packedSeen.add(w.data);
    packed += w.data.byteLength;
  }
  if (!packedSeen.has(weights.tokenEmbd.data)) packed += weights.tokenEmbd.data.byteLength;
  let f32 = weights.outputNorm.byteLength;
  for (const layer of weights.layers) {
    f32 += layer.attnNorm.byteLength + layer.postAttnNorm.byteLength;
    if (isAttention(layer)) f32 += layer.qNorm.byteLength + layer.kNorm.byteLength;
    else f32 += layer.conv.byteLength + layer.dtBias.byteLength + layer.a.byteLength + layer.norm.byteLength;
  }
  return { packed, twin: weights.tokenEmbdTwin?.byteLength ?? 0, f32 };
}

/**
 * Picks a provider per weight: the highest-ranked candidate (priority, then name) of the numerics
 * the weight runs in (`matmulNumericsFor`: a `bf16` model computes unregistered encodings in `llama`
 * numerics) that supports its type. A type nobody computes is refused by name here, at load,
 * before any compute.
 */
export function selectProviders(
  weights: ModelWeights,
  candidates: readonly MatmulProvider[],
  numerics: Numerics,
  numericsHint = "",
): ProviderSelection {
  const ranked = rankProviders(candidates);
  const byWeight = new Map<PackedMatrix, MatmulProvider>();
  const opProviders: Record<string, string> = {};
  const refused = new Map<string, string[]>();
  for (const weight of allMatrices(weights)) {
    const provider = selectProvider(ranked, matmulNumericsFor(numerics, weight.type), weight.type);
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
    const tried = ranked.map((p) => `${p.name} (${p.numerics}, priority ${p.priority})`);
    throw new EngineLoadError(
      "ENGINE_UNSUPPORTED_TYPE",
      `no matmul provider computes weight type ${detail.join("; ")} in ${numerics} numerics (providers tried: ${tried.join(", ")})${numericsHint}`,
      { field: [...refused.values()][0]![0] },
    );
  }
  return { byWeight, opProviders };
}

/**
 * The TypeScript tier (priority 0, below every native provider). `llama`: F32/F16/BF16 inline,
 * quantized types through the quant package's llama.cpp-numerics reference (activations quantized
 * to Q8_0/Q8_1/Q8_K, integer dots), Q4_K in llama.cpp's AVX2 order. `bf16`: the contract for the
 * registered encodings, plus the `llama` provider for every other type. `exact`: every type the
 * quant package dequantizes, decoded exactly (no activation quantization, no rounding).
 */
export function typescriptProviders(numerics: Numerics, diagnostics: string[]): MatmulProvider[] {
  void diagnostics;
  if (numerics === "exact") return [new TsMatmulProvider("exact", quantDequantizeRow, TS_QUANTIZED_TYPES)];
  if (numerics === "llama") {
    const llamaReference: DenseKernel = (weight, x, m, y) => {
      if (weight.type === GgmlType.Q4_K) {
        // llama.cpp's AVX2 Q4_K order (bit-exact with the oracle; the quant reference is not)
        matmulQ4KLlama(weight.data, weight.rows, weight.cols, x, m, y, (row, dst) => quantizeActivationRow(GgmlType.Q8_K, row, dst));
        return;
      }
      y.set(matmulLlamaReference(weight, x, m));
    };
    return [new TsMatmulProvider("llama", quantDequantizeRow, TS_QUANTIZED_TYPES, llamaReference)];
  }
  // bf16: the registered encodings under the contract; every other type through the general (llama) matmul
  const contract = new TsMatmulProvider("bf16", quantDequantizeRow, new Set(KEEPQUANT_ENCODINGS));
  return [contract, ...typescriptProviders("llama", diagnostics)];
}
