export { Engine, type GenerationStream, type EvaluateOptions, type MultimodalPrompt } from "./engine.js";
export type {
  AbortSignalLike,
  ConstraintSpec,
  DecodeTuning,
  EngineOptions,
  HubLoadOptions,
  EngineStats,
  GenerateParams,
  GenerationEvent,
  GenerationResult,
  GenerationStats,
  ResidentBytes,
  SpeculativeOptions,
  SpeculativeStats,
} from "./engine-types.js";
export { MAX_DRAFT_TOKENS } from "./engine-types.js";
export {
  EngineError,
  EngineLoadError,
  EngineOptionError,
  EngineAbortError,
  type EngineErrorCode,
  ImageError,
  type ImageErrorReason,
} from "./errors.js";
export {
  checkJsonSchema,
  checkOutput,
  ConstraintError,
  type ConstraintErrorCode,
  type ConstraintErrorDetails,
  ENFORCED_FORMATS,
  DEFAULT_GRAMMAR_LIMITS,
  type GrammarLimits,
  JsonNumber,
  JsonTextError,
  normalizeJsonSchema,
  parseJsonKeepingNumbers,
  plainJson,
  pythonJsonDumps,
  type RelaxedKeyword,
  type RelaxedSchema,
  relaxJsonSchema,
  type SchemaCheck,
  SchemaChecker,
  type SchemaCheckResult,
  type SchemaTest,
  type SchemaTestResult,
} from "./constrain/index.js";
export type { AllocateStorage, KvType, PagedKvCache } from "./kv/paged-kv.js";
export type { RefCountedPool } from "./kv/block-pool.js";
export type { DequantizeRow, Numerics, MatmulProvider } from "./model/matmul.js";
export type { ModelWeights, PackedMatrix } from "./model/weights.js";
export type { StepBackend, StepLabels } from "./model/step-backend.js";
export {
  Qwen35Forward,
  FLASH_ATTN_TILED_MIN_ROWS,
  setLibm,
  type ActivationTap,
  type DrafterEntry,
  type StepEntry,
} from "./model/forward.js";
export * from "./tokenizer/index.js";
export * from "./sampling/index.js";
export * from "./chat/index.js";
export * from "./planner/index.js";
export { resolveModelFile, isHubReference } from "./model-source.js";
// Image input for the vision encoder (llama.cpp's QWEN3VL preprocessing): the entry points by name, and
// every part (targetSize, resizeBicubicRgb, resizeWithPadding, normalizeRgb, ...) under `visionImage`
export {
  DEFAULT_IMAGE_DECODE_LIMITS,
  type DecodedImage,
  decodeImage,
  type ImageDecodeLimits,
  type ImageFormat,
  type PreprocessConfig,
  type PreprocessedImage,
  preprocessImage,
  preprocessRgb,
  pixelLimitsForTokens,
  type RgbImage,
  type ImageSize,
  type TargetSizeOptions,
} from "./vision/image/index.js";
export { visionImage } from "./vision/image/parts.js";
// The parity gate is `@keepquant/engine/parity` and the benchmark `@keepquant/engine/bench` (their own
// entries); the parity fixtures, oracle goldens and test helpers are dev-only and live under tools/.
// Prompts with images: encoded images placed among token runs (Engine.generate's MultimodalPrompt)
export { assemblePrompt, imageHash, type EncodedImage, type PromptMedia } from "./vision/media.js";
