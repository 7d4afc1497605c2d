/** What the package exports of the vision projector (one line in ../index.ts). */
export {
  CLIP_ARCHITECTURE,
  CLIP_KEYS,
  QWEN3VL_DEFAULT_SPATIAL_MERGE,
  QWEN3VL_MAX_IMAGE_TOKENS,
  QWEN3VL_MIN_IMAGE_TOKENS,
  SUPPORTED_PROJECTOR_TYPES,
  isProjectorFile,
  parseProjector,
  projectorTypeOf,
  type ProjectorConfig,
  type ProjectorFfnOp,
  type ProjectorTokenLimits,
  type ProjectorType,
} from "./config.js";
export {
  describeProjector,
  type ProjectorDescription,
  type ProjectorExpectedTensor,
  type ProjectorTensorKind,
  type ProjectorTensorStage,
} from "./tensors.js";
export {
  assertProjectorLoadable,
  checkProjectorLanguage,
  projectorLoadPlan,
  type ProjectorDiagnostic,
  type ProjectorLanguageModel,
  type ProjectorLoadPlan,
  type ProjectorLoadPlanOptions,
  type ProjectorPlannedTensor,
  type ProjectorRefusedTensor,
} from "./load-plan.js";
export {
  PROJECTOR_TINY_SHAPE,
  PROJECTOR_WEIGHT_TYPES,
  projectorFallbackType,
  projectorMetadata,
  projectorSpecLayout,
  synthesizeProjector,
  writeSynthesizedProjector,
  type ProjectorQuantizer,
  type ProjectorSpec,
  type ProjectorTypeFallback,
  type ProjectorWeightType,
  type ProjectorWriteOptions,
  type SynthesizedProjector,
} from "./synthetic.js";
