import {
  GGML_TYPE_TRAITS,
  ggmlRowBytes,
  parseQwen35Config,
  readTensorBytes,
  type GgmlType,
  type GgufFile,
  type GgufTensorInfo,
  type Qwen35Config,
} from "@keepquant/gguf";
import { dequantizeRow } from "@keepquant/quant";
import { EngineLoadError } from "../errors.js";
import { f32BitsToBf16Bits } from "../numerics/half.js";
import type { ModelConfig } from "./config.js";
import { decodeRow, type Numerics } from "./matmul.js";
import { alignedCopy, type LayerWeights, type ModelWeights, type PackedMatrix } from "./weights.js";

/** Maps the gguf package's typed config to what the forward reads. */
export function modelConfigFromQwen35(config: Qwen35Config, nVocab: number): ModelConfig {
  return {
    nLayer: config.nLayer,
    nEmbd: config.embeddingLength,
    nFf: config.feedForwardLength,
    nHead: config.headCount,
    nHeadKv: config.headCountKv,
    headDim: config.headDim,
    eps: config.rmsEps,
    nRot: config.ropeDimensionCount,
    ropeFreqBase: config.ropeFreqBase,
    convKernel: config.ssmConvKernel,
    ssmStateSize: config.ssmStateSize,
    ssmGroupCount: config.ssmGroupCount,
    ssmTimeStepRank: config.ssmTimeStepRank,
    ssmInnerSize: config.ssmInnerSize,
    recurrent: config.layerKinds.map((kind) => kind === "gdn"),
    nVocab,
  };
}

function rowBytes(info: GgufTensorInfo, cols: number): number {
  const bytes = ggmlRowBytes(info.type, cols);
  if (bytes === undefined) {
    throw new EngineLoadError("ENGINE_BAD_MODEL", `tensor ${info.name}: ${cols} columns is not a whole number of ${GGML_TYPE_TRAITS[info.type].name} blocks`, { field: info.name });
  }
  return bytes;
}

export interface LoadedModel {
  readonly weights: ModelWeights;
  readonly qwen35: Qwen35Config;
  readonly diagnostics: string[];
}

/**
 * Reads the trunk tensors of a qwen35 file. `tensors` is the list of tensors to read (the load
 * plan's used set); matmul weights stay packed, 1-D tensors are decoded to f32, the token
 * embedding gets a bf16 twin in `bf16` numerics only (in `llama` and `exact` numerics rows are decoded exactly
 * from the packed words at gather time, as llama.cpp's get_rows).
 */
export async function loadQwen35Weights(
  source: string | Uint8Array,
  file: GgufFile,
  tensors: readonly GgufTensorInfo[],
  numerics: Numerics,
  onProgress?: (done: number, total: number) => void,
): Promise<LoadedModel> {
  const qwen35 = parseQwen35Config(file);
  const byName = new Map(tensors.map((t) => [t.name, t] as const));
  const embd = byName.get("token_embd.weight");
  if (!embd) throw new EngineLoadError("ENGINE_BAD_MODEL", "token_embd.weight is missing", { field: "token_embd.weight" });
  const nVocab = embd.ne[1]!;
  const config = modelConfigFromQwen35(qwen35, nVocab);
  const diagnostics: string[] = [];
  const totalBytes = tensors.reduce((sum, t) => sum + t.byteLength, 0);
  let doneBytes = 0;

  const read = async (info: GgufTensorInfo): Promise<Uint8Array> => {
    const bytes = await readTensorBytes(source, info);
    doneBytes += info.byteLength;
    onProgress?.(doneBytes, totalBytes);
    return bytes.byteOffset % 64 === 0 ? bytes : alignedCopy(bytes);
  };
  const need = (name: string): GgufTensorInfo => {
    const info = byName.get(name);
    if (!info) throw new EngineLoadError("ENGINE_BAD_MODEL", `tensor ${name} is missing`, { field: name });
    return info;
  };
  const matrix = async (name: string, rows: number, cols: number): Promise<PackedMatrix> => {
    const info = need(name);
    if (info.ne.length !== 2 || info.ne[0] !== cols || info.ne[1] !== rows) {
      throw new EngineLoadError("ENGINE_BAD_MODEL", `tensor ${name} has ne [${info.ne.join(", ")}], expected [${cols}, ${rows}]`, {
        field: name,
      });
    }
    return {
      name,
      type: info.type,
      typeName: GGML_TYPE_TRAITS[info.type].name,
      rows,
      cols,
      rowBytes: rowBytes(info, cols),
      data: await read(info),
    };
  };
  const vector = async (name: string, length: number): Promise<Float32Array> => {
    const info = need(name);
    if (info.elements !== length) {
      throw new EngineLoadError("ENGINE_BAD_MODEL", `tensor ${name} has ${info.elements} elements, expected ${length}`, { field: name });
    }
    const packed: PackedMatrix = {
      name,
      type: info.type,
      typeName: GGML_TYPE_TRAITS[info.type].name,
      rows: 1,
      cols: length,
      rowBytes: rowBytes(info, length),
      data: await read(info),
    };
    const out = new Float32Array(length);
    decodeRow(packed, 0, out, (type, src, dst) => dequantizeRow(type as GgmlType, src, dst));
    return out;
  };

  const D = config.nEmbd;
  const H = config.nHead;
  const Dh = config.headDim;
  const kvDh = config.nHeadKv * Dh;
  const { valueDim, convDim } = qwen35;
  const layers: LayerWeights[] = [];
  for (let il = 0; il < config.nLayer; il++) {
    const p = `blk.${il}.`;
    const attnNorm = await vector(p + "attn_norm.weight", D);
    const postAttnNorm = await vector(p + "post_attention_norm.weight", D);
    const ffnGate = await matrix(p + "ffn_gate.weight", config.nFf, D);
    const ffnUp = await matrix(p + "ffn_up.weight", config.nFf, D);
    const ffnDown = await matrix(p + "ffn_down.weight", D, config.nFf);
    if (config.recurrent[il]) {
      const convInfo = need(p + "ssm_conv1d.weight");
      if (convInfo.type !== 0) {
        throw new EngineLoadError("ENGINE_BAD_MODEL", `${convInfo.name} must be F32 (found ${GGML_TYPE_TRAITS[convInfo.type].name})`, {
          field: convInfo.name,
        });
      }
      layers.push({
        kind: "gdn",
        attnNorm,
        postAttnNorm,
        qkv: await matrix(p + "attn_qkv.weight", convDim, D),
        gate: await matrix(p + "attn_gate.weight", valueDim, D),
        beta: await matrix(p + "ssm_beta.weight", config.ssmTimeStepRank, D),
        alpha: await matrix(p + "ssm_alpha.weight", config.ssmTimeStepRank, D),
        conv: await vector(p + "ssm_conv1d.weight", convDim * config.convKernel),
        dtBias: await vector(p + "ssm_dt.bias", config.ssmTimeStepRank),
        a: await vector(p + "ssm_a", config.ssmTimeStepRank),
        norm: await vector(p + "ssm_norm.weight", qwen35.headVDim),
        out: await matrix(p + "ssm_out.weight", D, valueDim),
        ffnGate,
        ffnUp,
        ffnDown,
      });
    } else {
      layers.push({
        kind: "attention",
        attnNorm,
        postAttnNorm,
        q: await matrix(p + "attn_q.weight", 2 * H * Dh, D),
        k: await matrix(p + "attn_k.weight", kvDh, D),
        v: await matrix(p + "attn_v.weight", kvDh, D),
        o: await matrix(p + "attn_output.weight", D, H * Dh),
        qNorm: await vector(p + "attn_q_norm.weight", Dh),
        kNorm: await vector(p + "attn_k_norm.weight", Dh),
        ffnGate,
        ffnUp,
        ffnDown,
      });
    }
  }
  const tokenEmbd = await matrix("token_embd.weight", nVocab, D);
  const outputNorm = await vector("output_norm.weight", D);
  const tied = !byName.has("output.weight");
  const output = tied ? tokenEmbd : await matrix("output.weight", nVocab, D);
  let tokenEmbdTwin: Uint16Array | undefined;
  if (numerics === "bf16") {
    tokenEmbdTwin = new Uint16Array(nVocab * D);
    const row = new Float32Array(D);
    const rowBits = new Uint32Array(row.buffer);
    for (let t = 0; t < nVocab; t++) {
      decodeRow(tokenEmbd, t, row, (type, src, dst) => dequantizeRow(type as GgmlType, src, dst));
      for (let d = 0; d < D; d++) tokenEmbdTwin[t * D + d] = f32BitsToBf16Bits(rowBits[d]!);
    }
  }
  return { weights: { config, tokenEmbd, tokenEmbdTwin, outputNorm, output, tied, layers }, qwen35, diagnostics };
}
