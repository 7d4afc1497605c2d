/**
 * A deterministic synthetic qwen3vl_merger projector (an `mmproj` GGUF): the real keys and tensor
 * layout (./config.ts, ./tensors.ts) at small dimensions, seeded weights. Matmul weights are F32 by
 * default; another type needs a `quantize` function (tools/fixtures passes llama.cpp's
 * ggml_quantize_chunk: this package never depends on the oracle). A weight whose rows are not whole
 * blocks of the requested type falls back per tensor as llama.cpp's quantizer does, and the result
 * says which.
 */
import { writeFile } from "node:fs/promises";
import { GGML_TYPE_TRAITS, GgmlType, ggmlTypeName } from "../ggml-type.js";
import type { GgufMetadataEntry } from "../types.js";
import { GgufValueType } from "../value-type.js";
import { encodeGgufHeader, gguf, writeGguf } from "../writer.js";
import { mulberry32 } from "../synthetic/random.js";
import { parseProjector, type ProjectorConfig } from "./config.js";
import { describeProjector, type ProjectorExpectedTensor } from "./tensors.js";
import { writeHeaderOnlyFile } from "../synthetic/header-only.js";

/** Shape and options of a synthetic projector. */
export interface ProjectorSpec {
  /** `clip.vision.image_size` (a multiple of patchSize * spatialMerge). */
  imageSize: number;
  patchSize: number;
  /** ViT width h. */
  hidden: number;
  heads: number;
  /** ViT blocks. */
  layers: number;
  /** ViT MLP width f. */
  ffn: number;
  /** The language model's embedding_length (mm.2 out features). */
  projectionDim: number;
  /** `clip.vision.spatial_merge_size` (default 2, the only value qwen3vl_merger supports). */
  spatialMerge?: number;
  /** Blocks with a deepstack merger (default none); written as `clip.vision.is_deepstack_layers`. */
  deepstackLayers?: number[];
  /** Default 1e-6 (the converter writes the text model's rms_norm_eps). */
  eps?: number;
  /** Default [0.5, 0.5, 0.5] (Qwen's preprocessor). */
  imageMean?: [number, number, number];
  /** Default [0.5, 0.5, 0.5]. */
  imageStd?: [number, number, number];
  /** Optional `clip.vision.image_min_pixels` / `image_max_pixels` keys. */
  imageMinPixels?: number;
  imageMaxPixels?: number;
  /** PRNG seed (default 1). */
  seed?: number;
  name?: string;
  /** Extra metadata entries appended after the projector keys. */
  extraMetadata?: GgufMetadataEntry[];
}

/** Matmul weight types a synthetic projector can be written with. */
export type ProjectorWeightType = GgmlType.F32 | GgmlType.F16 | GgmlType.Q8_0 | GgmlType.Q4_K;
export const PROJECTOR_WEIGHT_TYPES: readonly ProjectorWeightType[] = [GgmlType.F32, GgmlType.F16, GgmlType.Q8_0, GgmlType.Q4_K];

/** Encodes `rows` rows of `rowLength` f32 values as `type` (e.g. llama.cpp's ggml_quantize_chunk). */
export type ProjectorQuantizer = (type: GgmlType, values: Float32Array, rows: number, rowLength: number) => Uint8Array;

export interface ProjectorWriteOptions {
  /** Type of the matmul weights (attn_qkv, attn_out, ffn_up, ffn_down, mm.*, deepstack fc*); default F32. */
  weightType?: ProjectorWeightType;
  /** Required for any weight type but F32. */
  quantize?: ProjectorQuantizer;
}

/** A matmul weight written in another type than the one asked for (its rows are not whole blocks). */
export interface ProjectorTypeFallback {
  name: string;
  wanted: GgmlType;
  used: GgmlType;
  rowLength: number;
}

export interface SynthesizedProjector {
  bytes: Uint8Array;
  config: ProjectorConfig;
  /** Every tensor's type, by name. */
  types: Record<string, GgmlType>;
  fallbacks: ProjectorTypeFallback[];
}

/** llama.cpp's `general.file_type` (llama_ftype) for each weight type. */
const FILE_TYPE: Record<ProjectorWeightType, number> = {
  [GgmlType.F32]: 0, // ALL_F32
  [GgmlType.F16]: 1, // MOSTLY_F16
  [GgmlType.Q8_0]: 7, // MOSTLY_Q8_0
  [GgmlType.Q4_K]: 14, // MOSTLY_Q4_K_S: every matrix Q4_K
};

/** The metadata of a synthetic projector: the keys llama.cpp's converter writes for Qwen3_5ForConditionalGeneration. */
export function projectorMetadata(spec: ProjectorSpec, weightType: ProjectorWeightType = GgmlType.F32): GgufMetadataEntry[] {
  const deepstack = new Set(spec.deepstackLayers ?? []);
  const m: GgufMetadataEntry[] = [
    gguf.str("general.architecture", "clip"),
    gguf.str("general.type", "mmproj"),
    gguf.str("general.name", spec.name ?? "synthetic-qwen35-mmproj"),
    gguf.u32("general.file_type", FILE_TYPE[weightType]),
    gguf.bool("clip.has_vision_encoder", true),
    gguf.u32("clip.vision.projection_dim", spec.projectionDim),
    gguf.u32("clip.vision.image_size", spec.imageSize),
    gguf.u32("clip.vision.patch_size", spec.patchSize),
    gguf.u32("clip.vision.embedding_length", spec.hidden),
    gguf.u32("clip.vision.feed_forward_length", spec.ffn),
    gguf.u32("clip.vision.block_count", spec.layers),
    gguf.u32("clip.vision.attention.head_count", spec.heads),
    gguf.arr("clip.vision.image_mean", GgufValueType.FLOAT32, spec.imageMean ?? [0.5, 0.5, 0.5]),
    gguf.arr("clip.vision.image_std", GgufValueType.FLOAT32, spec.imageStd ?? [0.5, 0.5, 0.5]),
    gguf.str("clip.projector_type", "qwen3vl_merger"),
    gguf.bool("clip.use_gelu", true),
    gguf.u32("clip.vision.spatial_merge_size", spec.spatialMerge ?? 2),
    gguf.f32("clip.vision.attention.layer_norm_epsilon", spec.eps ?? 1e-6),
    gguf.arr(
      "clip.vision.is_deepstack_layers",
      GgufValueType.BOOL,
      Array.from({ length: spec.layers }, (_, i) => deepstack.has(i)),
    ),
  ];
  if (spec.imageMinPixels !== undefined) m.push(gguf.u32("clip.vision.image_min_pixels", spec.imageMinPixels));
  if (spec.imageMaxPixels !== undefined) m.push(gguf.u32("clip.vision.image_max_pixels", spec.imageMaxPixels));
  m.push(...(spec.extraMetadata ?? []));
  return m;
}

/** Config and tensor list of a spec (the same tables the load plan checks files against; optional tensors left out). */
export function projectorSpecLayout(
  spec: ProjectorSpec,
  weightType: ProjectorWeightType = GgmlType.F32,
): {
  config: ProjectorConfig;
  metadata: GgufMetadataEntry[];
  tensors: ProjectorExpectedTensor[];
} {
  const metadata = projectorMetadata(spec, weightType);
  const config = parseProjector({ metadata: new Map(metadata.map((e) => [e.key, e])) });
  return { config, metadata, tensors: describeProjector(config).tensors.filter((t) => !t.optional) };
}

/**
 * The type llama.cpp's quantizer gives a matrix whose rows are `rowLength` long when `wanted` was asked
 * (llama-quant.cpp, tensor_type_fallback): Q4_K -> Q5_0 when the row is not whole 256-blocks, then F16
 * when not whole 32-blocks either; 32-block types go straight to F16.
 */
export function projectorFallbackType(wanted: GgmlType, rowLength: number): GgmlType {
  if (rowLength % GGML_TYPE_TRAITS[wanted].blockSize === 0) return wanted;
  const next = wanted === GgmlType.Q4_K ? GgmlType.Q5_0 : wanted;
  return rowLength % GGML_TYPE_TRAITS[next].blockSize === 0 ? next : GgmlType.F16;
}

/** FNV-1a of the name, mixed with the seed: each tensor has its own stream, independent of order. */
function tensorSeed(seed: number, name: string): number {
  let h = 0x811c9dc5 ^ seed;
  for (let i = 0; i < name.length; i++) h = Math.imul(h ^ name.charCodeAt(i), 0x01000193);
  return h >>> 0 || 1;
}

/**
 * Calm initialisation: matrices uniform with std 1/sqrt(fan_in) (the patch kernels' fan-in is 3 p^2),
 * norm weights 1 + small, biases small, the position table std 0.02.
 */
function tensorValues(tensor: ProjectorExpectedTensor, seed: number): Float32Array {
  const random = mulberry32(tensorSeed(seed, tensor.name));
  const n = tensor.ne.reduce((a, b) => a * b, 1);
  const out = new Float32Array(n);
  const sqrt3 = Math.sqrt(3);
  let center = 0;
  let scale: number;
  if (tensor.kind === "vector") {
    const norm = /(ln1|ln2|post_ln|pre_ln|norm)\.weight$/.test(tensor.name);
    center = norm ? 1 : 0;
    scale = norm ? 0.05 : 0.02;
  } else if (tensor.kind === "table") {
    scale = 0.02 * sqrt3;
  } else {
    const fanIn = tensor.kind === "conv" ? tensor.ne[0]! * tensor.ne[1]! * tensor.ne[2]! : tensor.ne[0]!;
    scale = sqrt3 / Math.sqrt(fanIn);
  }
  for (let i = 0; i < n; i++) out[i] = center + (2 * random() - 1) * scale;
  return out;
}

/** A deterministic synthetic projector GGUF in memory, with each tensor's type and the fallbacks taken. */
export function synthesizeProjector(spec: ProjectorSpec, options: ProjectorWriteOptions = {}): SynthesizedProjector {
  const weightType = options.weightType ?? GgmlType.F32;
  if (!PROJECTOR_WEIGHT_TYPES.includes(weightType)) {
    throw new RangeError(`weightType ${ggmlTypeName(weightType)} is not one of ${PROJECTOR_WEIGHT_TYPES.map(ggmlTypeName).join(", ")}`);
  }
  if (weightType !== GgmlType.F32 && !options.quantize) {
    throw new RangeError(
      `weightType ${ggmlTypeName(weightType)} needs a quantize function (tools/fixtures passes llama.cpp's ggml_quantize_chunk)`,
    );
  }
  const { config, metadata, tensors } = projectorSpecLayout(spec, weightType);
  const seed = spec.seed ?? 1;
  const types: Record<string, GgmlType> = {};
  const fallbacks: ProjectorTypeFallback[] = [];
  const written = tensors.map((t) => {
    const values = tensorValues(t, seed);
    let type = GgmlType.F32;
    let data = new Uint8Array(values.buffer, values.byteOffset, values.byteLength);
    if (t.kind === "matmul" && weightType !== GgmlType.F32) {
      const rowLength = t.ne[0]!;
      type = projectorFallbackType(weightType, rowLength);
      if (type !== weightType) fallbacks.push({ name: t.name, wanted: weightType, used: type, rowLength });
      data = options.quantize!(type, values, values.length / rowLength, rowLength);
    }
    types[t.name] = type;
    return { name: t.name, type, ne: t.ne, data };
  });
  return { bytes: writeGguf({ metadata, tensors: written }), config, types, fallbacks };
}

/** Writes `synthesizeProjector(spec, options)` to `path`; returns what it wrote (without the bytes). */
export async function writeSynthesizedProjector(
  path: string,
  spec: ProjectorSpec,
  options: ProjectorWriteOptions = {},
): Promise<Omit<SynthesizedProjector, "bytes"> & { fileSize: number }> {
  const { bytes, ...rest } = synthesizeProjector(spec, options);
  await writeFile(path, bytes);
  return { ...rest, fileSize: bytes.byteLength };
}

/**
 * A small projector: image 64, patch 16 (a 4 x 4 position grid), hidden 64 (4 heads of 16), 2 blocks,
 * ffn 128, merge 2 (merged tokens 256 wide, so mm.0 / mm.2 rows are whole Q4_K blocks; ffn_down's 128
 * falls back to Q5_0). Set `projectionDim` to the language model's embedding_length.
 */
export const PROJECTOR_TINY_SHAPE: Readonly<Omit<ProjectorSpec, "projectionDim">> = Object.freeze({
  imageSize: 64,
  patchSize: 16,
  hidden: 64,
  heads: 4,
  layers: 2,
  ffn: 128,
  spatialMerge: 2,
  name: "synthetic-qwen35-mmproj-tiny",
});

/**
 * The vision tower of the released Qwen3.5 checkpoints as transformers' `Qwen3_5VisionConfig` defaults give it
 * (depth 27, hidden 1152, intermediate 4304, 16 heads, patch 16, merge 2, 2304 position embeddings so image_size
 * 768, no deepstack), a planning preset for header-only files. **Not verified per checkpoint**: read from
 * third-party ports of the config (this work had no checkpoint's config.json); a small model may ship a smaller
 * tower. Image mean and std 0.5 (Qwen-VL's preprocessor). Set `projectionDim` to the model's embedding_length.
 */
export const QWEN35_VISION_SHAPE: Readonly<Omit<ProjectorSpec, "projectionDim">> = Object.freeze({
  imageSize: 768,
  patchSize: 16,
  hidden: 1152,
  heads: 16,
  layers: 27,
  ffn: 4304,
  spatialMerge: 2,
  name: "synthetic-qwen35-mmproj",
});

/**
 * The header of a synthetic projector with its matrices typed `weightType` (fallbacks as llama.cpp's quantizer
 * takes them), and the size of the whole file: header-only files of real shapes, for planning.
 */
export function synthesizeProjectorHeader(
  spec: ProjectorSpec,
  options: Pick<ProjectorWriteOptions, "weightType"> = {},
): { header: Uint8Array; fileSize: number; types: Record<string, GgmlType> } {
  const weightType = options.weightType ?? GgmlType.F32;
  const { metadata, tensors } = projectorSpecLayout(spec, weightType);
  const types: Record<string, GgmlType> = {};
  const headers = tensors.map((t) => {
    const type = t.kind === "matmul" ? projectorFallbackType(weightType, t.ne[0]!) : GgmlType.F32;
    types[t.name] = type;
    return { name: t.name, type, ne: t.ne };
  });
  const encoded = encodeGgufHeader({ metadata, tensors: headers });
  return { header: encoded.header, fileSize: encoded.dataOffset + encoded.dataBytes, types };
}

/** Writes the header and extends the file to its full size without data (a sparse file); returns the size. */
export async function writeProjectorHeaderOnly(
  path: string,
  spec: ProjectorSpec,
  options: Pick<ProjectorWriteOptions, "weightType"> = {},
): Promise<number> {
  return writeHeaderOnlyFile(path, synthesizeProjectorHeader(spec, options));
}
