import type { FFN_KINDS, FfnKind, TOKEN_MIXERS, TokenMixer } from "../kinds.js";
import { kinds as moeKinds } from "../qwen35moe/kinds.js";
import type { Qwen35Config } from "./config.js";
import { kinds } from "./kinds.js";

export type Qwen35TensorRole = "global" | "trunk" | "mtp";

/**
 * What a tensor is, independent of its layer: the GGUF name without `blk.N.` and without the
 * `.weight` / `.bias` suffix (qwen35.md section 3). The engine binds weights by slot. The slots are
 * those of the templates: the globals, the MTP block's own, and every registered kind's (../kinds.ts).
 */
export type Qwen35TensorSlot =
  | (typeof GLOBAL_TENSORS)[number]["slot"]
  | (typeof NEXTN_TENSORS)[number]["slot"]
  | { [K in TokenMixer]: (typeof TOKEN_MIXERS)[K][number]["slot"] }[TokenMixer]
  | { [K in FfnKind]: (typeof FFN_KINDS)[K][number]["slot"] }[FfnKind];

/**
 * The named dimensions of a model: the hyperparameters and every size derived from them, computed
 * here once. Tensor shapes, the KV and GDN state pools, the planner and the native model spec all
 * read these values by name; no other place derives them.
 */
export interface ModelDims {
  /** D */
  nEmbd: number;
  nVocab: number;
  nFf: number;
  /** H */
  nHead: number;
  /** Hkv */
  nHeadKv: number;
  /** Dh (key length = value length) */
  headDim: number;
  nRot: number;
  /** 2 H Dh: attn_q rows, per head [q_h | gate_h] */
  qDim: number;
  /** Hkv Dh: attn_k / attn_v rows, and one K (or V) row of the KV cache */
  kvDim: number;
  /** H Dh: attn_output columns */
  attnOutDim: number;
  /** K: the GDN conv kernel width */
  convKernel: number;
  /** Dk = Dv */
  ssmStateSize: number;
  /** Hk */
  ssmGroupCount: number;
  /** Hv */
  nHeadV: number;
  /** Hk Dk */
  keyDim: number;
  /** Hv Dv */
  valueDim: number;
  /** 2 keyDim + valueDim: attn_qkv rows and conv channels */
  convDim: number;
  /** Dv */
  headVDim: number;
  /** 2 D: the MTP block's eh_proj input */
  ehProjIn: number;
  /** elements of one slot's GDN conv state: convDim (K - 1) */
  convStateElements: number;
  /** elements of one slot's GDN recurrent state: Hv Dv Dk */
  ssmStateElements: number;
  /** E: routed experts per layer (qwen35moe; 0 for a dense model) */
  nExpert: number;
  /** top-k experts per token (qwen35moe; 0 for a dense model) */
  nExpertUsed: number;
  /** one routed expert's FFN width (qwen35moe; 0 for a dense model) */
  nFfExp: number;
  /** 2 nFfExp: the merged gate-and-up expert tensor's rows */
  nFfExpGateUp: number;
  /** the shared expert's FFN width (qwen35moe; 0 for a dense model) */
  nFfShexp: number;
  /** 1: a per-token scalar (the shared expert's gate) */
  one: number;
}

export type ModelDimName = keyof ModelDims;

/**
 * How a named dimension crosses to the native model (@keepquant/tt-native generates its C++ header
 * from this table): the member of the C++ model shape it fills, its C++ integer type, and the least
 * value the native model accepts. The keys are in the order the values cross N-API.
 */
export interface ModelDimSchema {
  /** the C++ member name (ModelHparams in tt-native's generated src/model/model_hparams.h) */
  readonly native: string;
  /** `int64` for element counts that can pass 2^31 (state planes); `int` otherwise */
  readonly type: "int" | "int64";
  /** the least value accepted (1 where a zero would leave the model without that part) */
  readonly min: number;
}

/** Every named dimension with its C++ name: a dimension without an entry is a compile error. */
export const MODEL_DIM_SCHEMA: Readonly<Record<ModelDimName, ModelDimSchema>> = {
  nEmbd: { native: "nEmbd", type: "int", min: 1 },
  nVocab: { native: "nVocab", type: "int", min: 1 },
  nFf: { native: "nFf", type: "int", min: 1 },
  nHead: { native: "nHead", type: "int", min: 1 },
  nHeadKv: { native: "nHeadKv", type: "int", min: 1 },
  headDim: { native: "headDim", type: "int", min: 1 },
  nRot: { native: "nRot", type: "int", min: 0 },
  qDim: { native: "qDim", type: "int", min: 1 },
  kvDim: { native: "kvDim", type: "int", min: 1 },
  attnOutDim: { native: "attnOutDim", type: "int", min: 1 },
  convKernel: { native: "convKernel", type: "int", min: 0 },
  ssmStateSize: { native: "ssmStateSize", type: "int", min: 0 },
  ssmGroupCount: { native: "ssmGroupCount", type: "int", min: 0 },
  nHeadV: { native: "ssmTimeStepRank", type: "int", min: 0 },
  keyDim: { native: "keyDim", type: "int", min: 0 },
  valueDim: { native: "ssmInnerSize", type: "int", min: 0 },
  convDim: { native: "convDim", type: "int", min: 0 },
  headVDim: { native: "headVDim", type: "int", min: 0 },
  ehProjIn: { native: "ehProjIn", type: "int", min: 0 },
  convStateElements: { native: "convStateElements", type: "int64", min: 0 },
  ssmStateElements: { native: "ssmStateElements", type: "int64", min: 0 },
  nExpert: { native: "nExpert", type: "int", min: 0 },
  nExpertUsed: { native: "nExpertUsed", type: "int", min: 0 },
  nFfExp: { native: "nFfExp", type: "int", min: 0 },
  nFfExpGateUp: { native: "nFfExpGateUp", type: "int", min: 0 },
  nFfShexp: { native: "nFfShexp", type: "int", min: 0 },
  one: { native: "one", type: "int", min: 1 },
};

export type { FfnKind, TokenMixer } from "../kinds.js";

/** One tensor of the description. */
export interface TensorDescription {
  /** The GGUF name. */
  name: string;
  slot: Qwen35TensorSlot;
  /** The field of the engine's weight object it binds to (e.g. attn_q -> `q`; a dotted path nests: `moe.router`). */
  field: string;
  /** ggml `ne` as named dimensions (ne[0] first: for a matrix, its columns, then its rows). */
  dims: readonly ModelDimName[];
  /** ggml `ne`: the values of `dims`. */
  ne: number[];
  role: Qwen35TensorRole;
  /** Layer index for `blk.N.*` tensors. */
  layer?: number;
  /** Absent is fine (e.g. `output.weight` when the head is tied). */
  optional: boolean;
  /** When absent, the weight object binds this field of the globals instead (e.g. output -> tokenEmbd). */
  fallback?: string;
  /** Must be stored as F32 (llama.cpp's CPU ssm_conv asserts 4-byte elements). */
  requiresF32?: boolean;
  /** Required unless the file holds this other slot of the same layer instead (split or merged expert gate/up). */
  requiredUnless?: Qwen35TensorSlot;
}

/** One block `blk.N`: a token mixer plus an FFN (the MTP block adds its nextn tensors). */
export interface LayerDescription {
  index: number;
  role: "trunk" | "mtp";
  mixer: TokenMixer;
  ffn: FfnKind;
  /** The KV plane (attention; the MTP block's follows the trunk's) or the GDN state layer (gdn). */
  cacheIndex: number;
  tensors: TensorDescription[];
}

/** The whole model as data: dimensions, global tensors and layers. */
export interface ModelDescription {
  /** `general.architecture`: a registered architecture (../architectures.ts) */
  architecture: string;
  dims: ModelDims;
  global: TensorDescription[];
  /** Trunk layers in order, then the MTP block (when nextn_predict_layers = 1). */
  layers: LayerDescription[];
  /** Full-attention trunk layers (KV planes before the drafter's). */
  attentionLayers: number;
  /** GDN trunk layers (state planes). */
  gdnLayers: number;
}

/** The slot of a qwen35 tensor name (see Qwen35TensorSlot). */
export function qwen35TensorSlot(name: string): Qwen35TensorSlot {
  return name.replace(/^blk\.\d+\./, "").replace(/\.(weight|bias)$/, "") as Qwen35TensorSlot;
}

/** A tensor template: slot, binding field, shape in named dims, GGUF suffix and flags. */
export interface TensorTemplate {
  /** the tensor's slot (see Qwen35TensorSlot, which is the union of the templates' slots) */
  slot: string;
  field: string;
  dims: readonly ModelDimName[];
  suffix?: ".weight" | ".bias" | "";
  optional?: boolean;
  fallback?: string;
  requiresF32?: boolean;
  /** required unless the layer holds this other slot of its kinds instead */
  requiredUnless?: string;
}

/** The global tensors of every architecture: the token embedding, the output norm, the head (tied when absent). */
export const GLOBAL_TENSORS = [
  { slot: "token_embd", field: "tokenEmbd", dims: ["nEmbd", "nVocab"] },
  { slot: "output_norm", field: "outputNorm", dims: ["nEmbd"] },
  { slot: "output", field: "output", dims: ["nEmbd", "nVocab"], optional: true, fallback: "tokenEmbd" },
] as const satisfies readonly TensorTemplate[];

/** The MTP/NextN block's own tensors (qwen35.md section 12), after its attention block. */
export const NEXTN_TENSORS = [
  { slot: "nextn.eh_proj", field: "ehProj", dims: ["ehProjIn", "nEmbd"] },
  { slot: "nextn.enorm", field: "enorm", dims: ["nEmbd"] },
  { slot: "nextn.hnorm", field: "hnorm", dims: ["nEmbd"] },
  { slot: "nextn.shared_head_norm", field: "headNorm", dims: ["nEmbd"], fallback: "outputNorm" },
  { slot: "nextn.embed_tokens", field: "embedTokens", dims: ["nEmbd", "nVocab"], optional: true },
  { slot: "nextn.shared_head_head", field: "head", dims: ["nEmbd", "nVocab"], optional: true, fallback: "output" },
] as const satisfies readonly TensorTemplate[];

/** qwen35's token mixers (./kinds.ts) and its FFNs: the dense one, or qwen35moe's MoE FFN. */
const MIXERS = kinds.mixers;
const FFNS = { ...kinds.ffns, ...moeKinds.ffns };

/** Every named dimension of a config and vocabulary (see ModelDims); the vocabulary enters only `nVocab`. */
export function qwen35Dims(config: Qwen35Config, vocab = config.vocabSize ?? 0): ModelDims {
  const D = config.embeddingLength;
  const Dh = config.headDim;
  const Hv = config.ssmTimeStepRank;
  return {
    nEmbd: D,
    nVocab: vocab,
    nFf: config.feedForwardLength,
    nHead: config.headCount,
    nHeadKv: config.headCountKv,
    headDim: Dh,
    nRot: config.ropeDimensionCount,
    qDim: 2 * config.headCount * Dh,
    kvDim: config.headCountKv * Dh,
    attnOutDim: config.headCount * Dh,
    convKernel: config.ssmConvKernel,
    ssmStateSize: config.ssmStateSize,
    ssmGroupCount: config.ssmGroupCount,
    nHeadV: Hv,
    keyDim: config.keyDim,
    valueDim: config.valueDim,
    convDim: config.convDim,
    headVDim: config.headVDim,
    ehProjIn: 2 * D,
    convStateElements: config.convDim * (config.ssmConvKernel - 1),
    ssmStateElements: Hv * config.headVDim * config.ssmStateSize,
    nExpert: config.moe?.expertCount ?? 0,
    nExpertUsed: config.moe?.expertUsedCount ?? 0,
    nFfExp: config.moe?.expertFeedForwardLength ?? 0,
    nFfExpGateUp: 2 * (config.moe?.expertFeedForwardLength ?? 0),
    nFfShexp: config.moe?.sharedFeedForwardLength ?? 0,
    one: 1,
  };
}

/** One tensor of a template for these dims (a layer's when `layer` is given): what every architecture's description is made of. */
export function instantiateTensor(t: TensorTemplate, dims: ModelDims, role: Qwen35TensorRole, layer?: number): TensorDescription {
  const base = `${t.slot}${t.suffix ?? ".weight"}`;
  return {
    name: layer === undefined ? base : `blk.${layer}.${base}`,
    slot: t.slot as Qwen35TensorSlot,
    field: t.field,
    dims: t.dims,
    ne: t.dims.map((d) => dims[d]),
    role,
    ...(layer !== undefined ? { layer } : {}),
    optional: t.optional ?? false,
    ...(t.fallback ? { fallback: t.fallback } : {}),
    ...(t.requiresF32 ? { requiresF32: true } : {}),
    ...(t.requiredUnless ? { requiredUnless: t.requiredUnless as Qwen35TensorSlot } : {}),
  };
}

/**
 * The model as data (qwen35.md sections 2-3, 12): every layer a token mixer plus an FFN, every
 * tensor with its binding field and its shape in named dimensions. The load plan, the weight
 * binding, the pools, the planner and the native model spec are derived from it.
 */
export function describeQwen35(config: Qwen35Config, vocab: number): ModelDescription {
  const dims = qwen35Dims(config, vocab);
  const ffn: keyof typeof FFNS = config.moe ? "moe" : "dense";
  const layers: LayerDescription[] = [];
  let attentionLayers = 0;
  let gdnLayers = 0;
  config.layerKinds.forEach((mixer, il) => {
    const cacheIndex = mixer === "attention" ? attentionLayers++ : gdnLayers++;
    const tensors = [...MIXERS[mixer].tensors, ...FFNS[ffn].tensors].map((t) => instantiateTensor(t, dims, "trunk", il));
    layers.push({ index: il, role: "trunk", mixer, ffn, cacheIndex, tensors });
  });
  for (let il = config.nLayer; il < config.blockCount; il++) {
    const tensors = [...MIXERS.attention.tensors, ...FFNS[ffn].tensors, ...NEXTN_TENSORS].map((t) => instantiateTensor(t, dims, "mtp", il));
    layers.push({ index: il, role: "mtp", mixer: "attention", ffn, cacheIndex: attentionLayers + (il - config.nLayer), tensors });
  }
  return {
    architecture: config.architecture,
    dims,
    global: GLOBAL_TENSORS.map((t) => instantiateTensor(t, dims, "global")),
    layers,
    attentionLayers,
    gdnLayers,
  };
}

/** One tensor a qwen35 file may hold, with its expected ggml `ne`. */
export type Qwen35ExpectedTensor = TensorDescription;

/**
 * Every tensor name and shape of qwen35.md section 3 for this config and vocabulary, in file order
 * (the description's tensors, flattened). MTP tensors (`blk.{n_layer}.*`) are included when
 * nextn_predict_layers = 1.
 */
export function qwen35ExpectedTensors(config: Qwen35Config, vocab: number): Qwen35ExpectedTensor[] {
  const d = describeQwen35(config, vocab);
  return [...d.global, ...d.layers.flatMap((l) => l.tensors)];
}
