export * from "./ggml-type.js";
export * from "./value-type.js";
export * from "./errors.js";
export * from "./limits.js";
export type * from "./types.js";
export { BufferSource, FileSource, assertRegularFile, type GgufByteSource } from "./source.js";
export { readGguf, readTensorBytes, GGUF_MAGIC, GGUF_DEFAULT_ALIGNMENT, type ReadGgufOptions } from "./reader.js";
export {
  readGgufModel,
  splitGgufInput,
  splitGgufBytes,
  splitInfo,
  parseShardName,
  shardPath,
  SPLIT_NO_KEY,
  SPLIT_COUNT_KEY,
  SPLIT_TENSORS_COUNT_KEY,
  MAX_SPLIT_SHARDS,
  type GgufShardName,
  type GgufSplitInfo,
  type ReadGgufModelOptions,
} from "./split.js";
export {
  writeGguf,
  encodeGgufHeader,
  tensorByteLength,
  gguf,
  ggufValueByteSize,
  type GgufTensorHeader,
  type GgufWriteTensor,
  type GgufWriteInput,
  type EncodedGgufHeader,
} from "./writer.js";
export { getMetadata, getMetadataEntry, getArchitecture } from "./metadata.js";
export type { ModelArchitecture } from "./architecture.js";
export { ARCHITECTURES, architectureOf } from "./architectures.js";
export {
  FFN_KINDS,
  LAYER_KINDS,
  MODEL_TENSOR_SCHEMA,
  SCRATCH_SCHEMA,
  TOKEN_MIXERS,
  type FfnKind,
  type FfnOfOp,
  type FfnSpecOf,
  type MixerOfOp,
  type MixerSpecOf,
  type TokenMixer,
} from "./kinds.js";
export {
  FFN_OPS,
  MIXER_OPS,
  type ArchitectureKinds,
  type FfnKindSpec,
  type FfnOp,
  type KindScratch,
  type MixerKindSpec,
  type MixerOp,
} from "./layer-kind.js";
export {
  parseQwen35Config,
  type Qwen35Architecture,
  type Qwen35Config,
  type Qwen35LayerKind,
  type Qwen35MoeConfig,
} from "./qwen35/config.js";
export {
  describeQwen35,
  qwen35Dims,
  MODEL_DIM_SCHEMA,
  qwen35ExpectedTensors,
  qwen35TensorSlot,
  type LayerDescription,
  type ModelDescription,
  type ModelDimName,
  type ModelDimSchema,
  type TensorTemplate,
  type ModelDims,
  type TensorDescription,
  type Qwen35ExpectedTensor,
  type Qwen35TensorRole,
  type Qwen35TensorSlot,
} from "./qwen35/tensors.js";
export {
  synthesizeQwen35,
  writeSynthesizedQwen35,
  synthesizeQwen35Header,
  synthesizeQwen35HeaderSource,
  writeQwen35HeaderOnly,
  qwen35Metadata,
  qwen35SpecLayout,
  QWEN35_0_8B_SHAPE,
  QWEN35_27B_SHAPE,
  QWEN35_35B_A3B_SHAPE,
  QWEN35_122B_A10B_SHAPE,
  QWEN35_397B_A17B_SHAPE,
  QWEN35_TEST_SHAPE,
  QWEN35_TINY_SHAPE,
  type Qwen35Spec,
  type Qwen35HeaderOptions,
} from "./synthetic/qwen35.js";
export { mulberry32 } from "./synthetic/random.js";
export * from "./qwen3/public.js";
export * from "./clip/public.js";
export { qwen35Q4KMClassMix, useMoreBits, type Qwen35TensorTypeMix } from "./synthetic/type-mix.js";
export {
  defaultQwen35Tokenizer,
  gpt2ByteSymbols,
  DEFAULT_CHAT_TEMPLATE,
  DEFAULT_SPECIAL_TOKENS,
  TOKEN_TYPE_NORMAL,
  TOKEN_TYPE_CONTROL,
  type Qwen35TokenizerSpec,
} from "./synthetic/tokenizer.js";
export {
  buildLoadPlan,
  assertLoadable,
  type LoadPlan,
  type LoadPlanOptions,
  type LoadPlanDiagnostic,
  type PlannedTensor,
  type RefusedTensor,
  type SpeculativeMethod,
} from "./qwen35/load-plan.js";
