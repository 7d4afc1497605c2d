/**
 * Whole-model quantization as llama.cpp's `llama_model_quantize` does it (no importance matrix,
 * default parameters), for the file types keepquant produces: Q8_0 and Q4_K_M. Given an F32 (or
 * F16/BF16) GGUF it picks every tensor's type with llama.cpp's rules (`llama_tensor_get_type`),
 * quantizes with our bit-exact `quantize_row_<type>_ref` kernels and writes the file in llama.cpp's
 * tensor order and metadata order, so the output is byte-identical to llama.cpp's (tested against
 * the oracle).
 *
 * Type rules (llama-quant.cpp), as they apply to these two file types:
 * - only tensors with >= 2 dims whose name ends in "weight" are quantized, never `*_norm.weight`,
 *   `ssm_conv1d`, `ffn_gate_inp` (so norms, `ssm_a`, `ssm_dt.bias`, the conv stay as they are);
 * - `output.weight`, and `token_embd.weight` when the head is tied (no `output.weight`): Q6_K for
 *   Q4_K_M (Q8_0 when its rows are not a multiple of 256); Q8_0 for Q8_0;
 * - Q4_K_M, V-like tensors (`attn_v`, `attn_qkv`, `attn_kv_b`) and `ffn_down`: Q6_K when
 *   use_more_bits(i, n) (first eighth, last eighth, and every third in between), counted in file
 *   order over all such tensors (n = their count; for `ffn_down` n = block_count, MTP included);
 *   every other quantized tensor Q4_K;
 * - a row length that is not a multiple of the type's block falls back: Q4_K -> Q5_0, Q5_K -> Q5_1,
 *   Q6_K -> Q8_0, then F16 when even that does not divide.
 */
import {
  GgmlType,
  GGML_TYPE_TRAITS,
  getMetadata,
  gguf,
  readGguf,
  readTensorBytes,
  writeGguf,
  type GgufFile,
  type GgufTensorInfo,
  type GgufWriteTensor,
} from "@keepquant/gguf";
import { QuantArgumentError } from "./errors.js";
import { bf16ToFp32, fp16ToFp32, fp32ToFp16 } from "./fp.js";
import { quantizeTensor } from "./quantize.js";

export type LlamaFileType = "Q8_0" | "Q4_K_M";

/** llama_ftype ids written as `general.file_type`. */
export const LLAMA_FILE_TYPE_IDS: Readonly<Record<LlamaFileType, number>> = { Q8_0: 7, Q4_K_M: 15 };

/** GGML_QNT_VERSION, written as `general.quantization_version`. */
export const GGML_QUANTIZATION_VERSION = 2;

const DEFAULT_TYPE: Readonly<Record<LlamaFileType, GgmlType>> = { Q8_0: GgmlType.Q8_0, Q4_K_M: GgmlType.Q4_K };

/** A tensor as the planner sees it. */
export interface QuantizeTensorInfo {
  name: string;
  /** ggml order. */
  ne: readonly number[];
  type: GgmlType;
}

export interface TensorQuantization {
  name: string;
  ne: readonly number[];
  from: GgmlType;
  to: GgmlType;
}

function layerOf(name: string): number {
  const match = /^blk\.(\d+)\./.exec(name);
  return match ? Number(match[1]) : -1;
}

/** llama.cpp's tensor order (llama_model_loader's weight_name_comparer): by layer (non-block first), then by name. */
export function llamaTensorOrder(a: string, b: string): number {
  const la = layerOf(a);
  const lb = layerOf(b);
  if (la !== lb) return la - lb;
  return a < b ? -1 : a > b ? 1 : 0;
}

type Category = "token_embd" | "output" | "attn_v_like" | "ffn_down" | "other";

function categoryOf(name: string): Category {
  if (name === "output.weight") return "output";
  if (name === "token_embd.weight") return "token_embd";
  if (name.includes("attn_qkv.weight") || name.includes("attn_kv_b.weight") || name.includes("attn_v.weight")) return "attn_v_like";
  if (name.includes("ffn_down")) return "ffn_down";
  return "other";
}

function dims(ne: readonly number[]): number {
  let n = ne.length;
  while (n > 1 && ne[n - 1] === 1) n--;
  return n;
}

function allowsQuantization(tensor: QuantizeTensorInfo): boolean {
  const name = tensor.name;
  return (
    dims(tensor.ne) >= 2 &&
    name.endsWith("weight") &&
    !name.includes("_norm.weight") &&
    !name.includes("ffn_gate_inp.weight") &&
    !name.includes("ssm_conv1d")
  );
}

/** llama.cpp's use_more_bits: the first and last eighth, and every third tensor in between. */
function useMoreBits(index: number, count: number): boolean {
  const eighth = Math.trunc(count / 8);
  return index < eighth || index >= Math.trunc((7 * count) / 8) || (index - eighth) % 3 === 2;
}

function fallback(name: string, rowLength: number, type: GgmlType): GgmlType {
  if (rowLength % GGML_TYPE_TRAITS[type].blockSize === 0) return type;
  const next =
    type === GgmlType.Q4_K ? GgmlType.Q5_0 : type === GgmlType.Q5_K ? GgmlType.Q5_1 : type === GgmlType.Q6_K ? GgmlType.Q8_0 : undefined;
  if (next === undefined) {
    throw new QuantArgumentError(
      "planLlamaQuantization",
      name,
      `row length ${rowLength} is not a multiple of ${GGML_TYPE_TRAITS[type].name}'s block and no fallback is defined`,
    );
  }
  return rowLength % GGML_TYPE_TRAITS[next].blockSize === 0 ? next : GgmlType.F16;
}

/**
 * Every tensor's target type, in llama.cpp's tensor order. `blockCount` is `<arch>.block_count`
 * (MTP blocks included: llama.cpp's n_layer_all).
 */
export function planLlamaQuantization(
  tensors: readonly QuantizeTensorInfo[],
  options: { fileType: LlamaFileType; blockCount: number },
): TensorQuantization[] {
  const ordered = [...tensors].sort((a, b) => llamaTensorOrder(a.name, b.name));
  const tied = !ordered.some((t) => t.name === "output.weight");
  const vLikeCount = ordered.filter((t) => categoryOf(t.name) === "attn_v_like").length;
  let vLikeIndex = 0;
  let ffnDownIndex = 0;
  return ordered.map((tensor) => {
    if (!allowsQuantization(tensor)) return { name: tensor.name, ne: tensor.ne, from: tensor.type, to: tensor.type };
    const category = categoryOf(tensor.name);
    let type = DEFAULT_TYPE[options.fileType];
    if (category === "output" || (tied && category === "token_embd")) {
      if (tensor.ne[0]! % GGML_TYPE_TRAITS[type].blockSize !== 0) type = GgmlType.Q8_0;
      else if (type !== GgmlType.Q8_0) type = GgmlType.Q6_K;
    } else if (category === "attn_v_like") {
      if (options.fileType === "Q4_K_M" && useMoreBits(vLikeIndex, vLikeCount)) type = GgmlType.Q6_K;
      vLikeIndex++;
    } else if (category === "ffn_down") {
      if (options.fileType === "Q4_K_M" && useMoreBits(ffnDownIndex, options.blockCount)) type = GgmlType.Q6_K;
      ffnDownIndex++;
    }
    return { name: tensor.name, ne: tensor.ne, from: tensor.type, to: fallback(tensor.name, tensor.ne[0]!, type) };
  });
}

/**
 * An exact-size copy of `bytes`, aligned for any typed-array view. Not `bytes.slice().buffer`: a
 * Node Buffer's slice is a view, and its `.buffer` is the whole allocation pool a small read came
 * from (Buffer.poolSize: 8 KiB up to Node 22, 64 KiB from Node 24, so a tensor of up to 32 KiB
 * comes back inside a larger pool and would be read with the pool's other bytes).
 */
function ownedCopy(bytes: Uint8Array): ArrayBuffer {
  return new Uint8Array(bytes).buffer;
}

function toF32(type: GgmlType, bytes: Uint8Array, name: string): Float32Array {
  if (type === GgmlType.F32) return new Float32Array(ownedCopy(bytes));
  const halves = new Uint16Array(ownedCopy(bytes));
  if (type === GgmlType.F16) return Float32Array.from(halves, fp16ToFp32);
  if (type === GgmlType.BF16) return Float32Array.from(halves, bf16ToFp32);
  throw new QuantArgumentError(
    "quantizeGgufModel",
    name,
    `source type ${GGML_TYPE_TRAITS[type].name} is not F32, F16 or BF16 (re-quantization is not supported)`,
  );
}

function encode(type: GgmlType, values: Float32Array): Uint8Array {
  if (type === GgmlType.F32) return new Uint8Array(values.buffer, values.byteOffset, values.byteLength);
  if (type === GgmlType.F16) return new Uint8Array(Uint16Array.from(values, fp32ToFp16).buffer);
  return quantizeTensor(type, values);
}

/**
 * Quantizes a whole GGUF model (file path or bytes, held in memory: meant for small models) to
 * `fileType`; returns the bytes of the new file, identical to what llama_model_quantize writes.
 */
export async function quantizeGgufModel(
  source: string | Uint8Array,
  fileType: LlamaFileType,
): Promise<{ bytes: Uint8Array; plan: TensorQuantization[] }> {
  const file: GgufFile = await readGguf(source);
  const architecture = getMetadata(file, "general.architecture");
  const blockCount = getMetadata(file, `${String(architecture)}.block_count`);
  if (typeof blockCount !== "number") {
    throw new QuantArgumentError("quantizeGgufModel", `${String(architecture)}.block_count`, "missing or not a number");
  }
  const byName = new Map<string, GgufTensorInfo>(file.tensors.map((t) => [t.name, t]));
  const plan = planLlamaQuantization(file.tensors, { fileType, blockCount });
  const tensors: GgufWriteTensor[] = [];
  for (const step of plan) {
    const info = byName.get(step.name)!;
    const bytes = await readTensorBytes(source, info);
    const data = step.to === step.from ? bytes : encode(step.to, toF32(step.from, bytes, step.name));
    tensors.push({ name: step.name, type: step.to, ne: [...step.ne], data });
  }
  // llama.cpp copies every key, then sets quantization_version and file_type (removed and appended).
  const metadata = [...file.metadata.values()]
    .filter((e) => e.key !== "general.quantization_version" && e.key !== "general.file_type")
    .map(({ offset: _offset, ...entry }) => entry);
  metadata.push(
    gguf.u32("general.quantization_version", GGML_QUANTIZATION_VERSION),
    gguf.u32("general.file_type", LLAMA_FILE_TYPE_IDS[fileType]),
  );
  return { bytes: writeGguf({ metadata, tensors, alignment: file.alignment, version: file.version }), plan };
}
