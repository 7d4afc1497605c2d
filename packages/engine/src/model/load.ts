import {
  GGML_TYPE_TRAITS,
  GgmlType,
  ggmlRowBytes,
  readTensorBytes,
  type GgufTensorInfo,
  type LoadPlan,
  type PlannedTensor,
  type TensorDescription,
} from "@keepquant/gguf";
import { dequantizeRow } from "@keepquant/quant";
import { EngineLoadError } from "../errors.js";
import { f32BitsToBf16Bits } from "../numerics/half.js";
import { isVectorTensor } from "./config.js";
import { decodeRow, type Numerics } from "./matmul.js";
import { alignedCopy, type DrafterWeights, type LayerWeights, type ModelWeights, type PackedMatrix } from "./weights.js";

/**
 * Where tensor bytes come from: views of a memory-mapped file (no copy), or reads of a path or a
 * buffer. A view whose offset does not allow typed-array access of its element width is copied.
 */
export type TensorBytes = (tensor: GgufTensorInfo) => Uint8Array | Promise<Uint8Array>;

/** Views into `mapped` (the whole file): zero copies, pages shared with the page cache. */
export function mappedTensorBytes(mapped: ArrayBuffer): TensorBytes {
  return (tensor) => {
    if (tensor.offset + tensor.byteLength > mapped.byteLength) {
      throw new EngineLoadError(
        "ENGINE_BAD_MODEL",
        `tensor ${tensor.name}: bytes [${tensor.offset}, ${tensor.offset + tensor.byteLength}) lie past the end of the file (${mapped.byteLength} B)`,
        {
          field: tensor.name,
        },
      );
    }
    return new Uint8Array(mapped, tensor.offset, tensor.byteLength);
  };
}

/** A byte range of the file mapped as one ArrayBuffer (`buffer` holds bytes [offset, offset + length)). */
export interface MappedRange {
  offset: number;
  length: number;
}

/**
 * Cuts the file into ranges of at most `maxBytes` that each hold whole tensors, in file order, for
 * files larger than one mapping can hold (Node 20: 2^32 bytes per external ArrayBuffer). A tensor
 * larger than `maxBytes` is an error.
 */
export function planMappedRanges(
  tensors: readonly Pick<GgufTensorInfo, "name" | "offset" | "byteLength">[],
  maxBytes: number,
): MappedRange[] {
  const sorted = [...tensors].filter((t) => t.byteLength > 0).sort((a, b) => a.offset - b.offset);
  const ranges: MappedRange[] = [];
  let current: MappedRange | undefined;
  for (const tensor of sorted) {
    if (tensor.byteLength > maxBytes) {
      throw new EngineLoadError(
        "ENGINE_BAD_MODEL",
        `tensor ${tensor.name} is ${tensor.byteLength} B, more than one mapping holds (${maxBytes} B)`,
        {
          field: tensor.name,
        },
      );
    }
    const end = tensor.offset + tensor.byteLength;
    if (current && end - current.offset <= maxBytes) {
      current.length = Math.max(current.length, end - current.offset);
    } else {
      current = { offset: tensor.offset, length: tensor.byteLength };
      ranges.push(current);
    }
  }
  return ranges;
}

/** Views into mapped ranges of the file (`planMappedRanges`): zero copies, as `mappedTensorBytes`. */
export function rangedTensorBytes(ranges: readonly (MappedRange & { buffer: ArrayBuffer })[]): TensorBytes {
  return (tensor) => {
    const range = ranges.find((r) => tensor.offset >= r.offset && tensor.offset + tensor.byteLength <= r.offset + r.length);
    if (!range) {
      throw new EngineLoadError(
        "ENGINE_BAD_MODEL",
        `tensor ${tensor.name}: bytes [${tensor.offset}, ${tensor.offset + tensor.byteLength}) are in no mapped range`,
        {
          field: tensor.name,
        },
      );
    }
    return new Uint8Array(range.buffer, tensor.offset - range.offset, tensor.byteLength);
  };
}

/** Reads from a path or buffer (one copy per tensor). */
export function readTensorSource(source: string | Uint8Array): TensorBytes {
  return (tensor) => readTensorBytes(source, tensor);
}

export interface LoadedModel {
  readonly weights: ModelWeights;
  readonly diagnostics: string[];
}

/**
 * Binds the tensors of a load plan (its `used` set; the plan has already checked every name, shape
 * and the F32 rule) through the plan's model description: each tensor to its field, layer by layer
 * (a layer's kind is its token mixer): matmul weights stay packed, vectors (`isVectorTensor`) are f32 (a view
 * when the file stores F32, else decoded), the token embedding gets a bf16 twin in `bf16` numerics only (in
 * `llama` and `exact` numerics rows are decoded exactly at gather time, as llama.cpp's get_rows).
 */
export async function loadQwen35Weights(
  plan: LoadPlan,
  bytes: TensorBytes,
  numerics: Numerics,
  onProgress?: (done: number, total: number) => void,
): Promise<LoadedModel> {
  const { config, vocab, description } = plan;
  const diagnostics: string[] = [];
  // the MTP drafter block is bound when the plan uses it (speculative method "mtp")
  const used = plan.used;
  const totalBytes = used.reduce((sum, t) => sum + t.byteLength, 0);
  let doneBytes = 0;
  const byName = new Map<string, PackedMatrix | Float32Array>();
  for (const tensor of used) {
    let data = await bytes(tensor);
    // typed-array views need element alignment (GGUF aligns tensors to 32 B by default: no copy)
    if (data.byteOffset % 4 !== 0) data = alignedCopy(data);
    doneBytes += tensor.byteLength;
    onProgress?.(doneBytes, totalBytes);
    byName.set(tensor.name, isVectorTensor(tensor) ? vector(tensor, data) : packed(tensor, data));
  }

  // Every weight object is bound from the description: each tensor to its field, an absent optional
  // one to its fallback (a field of the globals: output -> tokenEmbd, the drafter's head -> output).
  type Bound = Record<string, PackedMatrix | Float32Array | undefined>;
  // A dotted field nests (`moe.router`: the MoE FFN's router in the layer's `moe` object).
  const bind = (tensors: readonly TensorDescription[], fallbacks: Bound): Bound => {
    const out: Bound = {};
    const nested: Record<string, Bound> = {};
    for (const t of tensors) {
      const value = byName.get(t.name) ?? (t.fallback ? (out[t.fallback] ?? fallbacks[t.fallback]) : undefined);
      const required = !t.optional && !(t.requiredUnless && byName.has(t.name.replace(t.slot, t.requiredUnless)));
      if (value === undefined && required) {
        const where = t.name.replace(/\.(weight|bias)$/, "");
        throw new EngineLoadError("ENGINE_BAD_MODEL", `${where} is missing from the load plan`, { field: where });
      }
      const dot = t.field.indexOf(".");
      if (dot < 0) {
        out[t.field] = value;
        continue;
      }
      const group = t.field.slice(0, dot);
      nested[group] ??= {};
      nested[group][t.field.slice(dot + 1)] = value;
    }
    return Object.assign(out, nested) as Bound;
  };
  const globals = bind(description.global, {});
  const layers = description.layers
    .filter((l) => l.role === "trunk")
    .map((l) => ({ kind: l.mixer, ...bind(l.tensors, globals) }) as unknown as LayerWeights);
  const tokenEmbd = globals.tokenEmbd as PackedMatrix;
  const outputNorm = globals.outputNorm as Float32Array;
  const output = globals.output as PackedMatrix;
  const tied = plan.tiedHead;
  const mtp = description.layers.find((l) => l.role === "mtp");
  const drafter = mtp?.tensors.some((t) => byName.has(t.name))
    ? ({ kind: mtp.mixer, ...bind(mtp.tensors, globals) } as unknown as DrafterWeights)
    : undefined;
  let tokenEmbdTwin: Uint16Array | undefined;
  if (numerics === "bf16") {
    const D = config.embeddingLength;
    tokenEmbdTwin = new Uint16Array(vocab * D);
    const row = new Float32Array(D);
    const rowBits = new Uint32Array(row.buffer);
    for (let t = 0; t < vocab; t++) {
      decodeRow(tokenEmbd, t, row, dequantizeRow);
      for (let d = 0; d < D; d++) tokenEmbdTwin[t * D + d] = f32BitsToBf16Bits(rowBits[d]!);
    }
  }
  return {
    weights: { config, vocab, description, tokenEmbd, tokenEmbdTwin, outputNorm, output, tied, layers, ...(drafter ? { drafter } : {}) },
    diagnostics,
  };
}

/** A matmul weight: rows = ne[1] output features of ne[0] inputs (ne[2] stacked experts), exactly as stored. */
function packed(tensor: PlannedTensor, data: Uint8Array): PackedMatrix {
  const cols = tensor.ne[0]!;
  const rows = tensor.ne.length > 1 ? tensor.ne[1]! : 1;
  const groups = tensor.ne.length > 2 ? tensor.ne[2]! : 1;
  const rowBytes = ggmlRowBytes(tensor.type, cols);
  if (rowBytes === undefined) {
    throw new EngineLoadError(
      "ENGINE_BAD_MODEL",
      `tensor ${tensor.name}: ${cols} columns is not a whole number of ${GGML_TYPE_TRAITS[tensor.type].name} blocks`,
      {
        field: tensor.name,
      },
    );
  }
  return { name: tensor.name, type: tensor.type, typeName: GGML_TYPE_TRAITS[tensor.type].name, groups, rows, cols, rowBytes, data };
}

/** A small tensor as f32: a view of F32 bytes, else decoded bit-exactly. */
function vector(tensor: PlannedTensor, data: Uint8Array): Float32Array {
  if (tensor.type === GgmlType.F32) return new Float32Array(data.buffer, data.byteOffset, tensor.elements);
  const matrix = { ...packed(tensor, data), rows: 1, cols: tensor.elements, rowBytes: tensor.byteLength };
  const out = new Float32Array(tensor.elements);
  decodeRow(matrix, 0, out, dequantizeRow);
  return out;
}
