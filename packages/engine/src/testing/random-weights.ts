import { GgmlType } from "@keepquant/gguf";
import { mulberry32 } from "@keepquant/quant/testing";
import type { ModelConfig } from "../model/config.js";
import { deriveDims } from "../model/config.js";
import { alignedCopy, type LayerWeights, type ModelWeights, type PackedMatrix } from "../model/weights.js";

/** mulberry32 (the quant package's test PRNG): small deterministic PRNG for test data. */
export const seededRandom: (seed: number) => () => number = mulberry32;

export const TINY_CONFIG: ModelConfig = {
  nLayer: 4,
  nEmbd: 64,
  nFf: 96,
  nHead: 4,
  nHeadKv: 2,
  headDim: 32,
  eps: 1e-6,
  nRot: 16,
  ropeFreqBase: 10000,
  convKernel: 4,
  ssmStateSize: 16,
  ssmGroupCount: 2,
  ssmTimeStepRank: 4,
  ssmInnerSize: 64,
  recurrent: [true, true, true, false],
  nVocab: 97,
};

/** An in-memory F32 qwen35 model with calm random weights (for engine unit tests). */
export function randomWeights(config: ModelConfig, seed: number, tied = true): ModelWeights {
  const random = seededRandom(seed);
  const dims = deriveDims(config);
  const D = config.nEmbd;
  const vec = (n: number, base: number, spread: number) => {
    const v = new Float32Array(n);
    for (let i = 0; i < n; i++) v[i] = base + (random() * 2 - 1) * spread;
    return v;
  };
  const matrix = (name: string, rows: number, cols: number, spread: number): PackedMatrix => {
    const values = vec(rows * cols, 0, spread);
    return {
      name,
      type: GgmlType.F32,
      typeName: "F32",
      groups: 1,
      rows,
      cols,
      rowBytes: cols * 4,
      data: alignedCopy(new Uint8Array(values.buffer)),
    };
  };
  const inScale = 1 / Math.sqrt(D);
  const resid = 1 / Math.sqrt(2 * config.nLayer);
  const layers: LayerWeights[] = [];
  for (let il = 0; il < config.nLayer; il++) {
    const p = `blk.${il}.`;
    const ffn = {
      ffnGate: matrix(p + "ffn_gate.weight", config.nFf, D, inScale * 1.7),
      ffnUp: matrix(p + "ffn_up.weight", config.nFf, D, inScale * 1.7),
      ffnDown: matrix(p + "ffn_down.weight", D, config.nFf, (resid * 1.7) / Math.sqrt(config.nFf)),
    };
    if (config.recurrent[il]) {
      layers.push({
        kind: "gdn",
        attnNorm: vec(D, 1, 0.1),
        postAttnNorm: vec(D, 1, 0.1),
        qkv: matrix(p + "attn_qkv.weight", dims.convDim, D, inScale * 1.7),
        gate: matrix(p + "attn_gate.weight", dims.valueDim, D, inScale * 1.7),
        beta: matrix(p + "ssm_beta.weight", config.ssmTimeStepRank, D, inScale),
        alpha: matrix(p + "ssm_alpha.weight", config.ssmTimeStepRank, D, inScale),
        conv: vec(dims.convDim * config.convKernel, 0, 0.5),
        dtBias: vec(config.ssmTimeStepRank, 0, 0.5),
        a: vec(config.ssmTimeStepRank, -1, 0.5),
        norm: vec(dims.headVDim, 1, 0.1),
        out: matrix(p + "ssm_out.weight", D, dims.valueDim, (resid * 1.7) / Math.sqrt(dims.valueDim)),
        ...ffn,
      });
    } else {
      const hDh = config.nHead * config.headDim;
      layers.push({
        kind: "attention",
        attnNorm: vec(D, 1, 0.1),
        postAttnNorm: vec(D, 1, 0.1),
        q: matrix(p + "attn_q.weight", 2 * hDh, D, inScale * 1.7),
        k: matrix(p + "attn_k.weight", config.nHeadKv * config.headDim, D, inScale * 1.7),
        v: matrix(p + "attn_v.weight", config.nHeadKv * config.headDim, D, inScale * 1.7),
        o: matrix(p + "attn_output.weight", D, hDh, (resid * 1.7) / Math.sqrt(hDh)),
        qNorm: vec(config.headDim, 1, 0.1),
        kNorm: vec(config.headDim, 1, 0.1),
        ...ffn,
      });
    }
  }
  const tokenEmbd = matrix("token_embd.weight", config.nVocab, D, 1.7);
  const output = tied ? tokenEmbd : matrix("output.weight", config.nVocab, D, 1.7 * inScale);
  return {
    config,
    tokenEmbd,
    tokenEmbdTwin: undefined,
    outputNorm: vec(D, 1, 0.1),
    output,
    tied,
    layers,
  };
}
