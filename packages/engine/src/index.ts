export { Engine, type GenerationStream, type EvaluateOptions } from "./engine.js";
export type {
  AbortSignalLike,
  EngineOptions,
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
export { EngineError, EngineLoadError, EngineOptionError, EngineAbortError, type EngineErrorCode } from "./errors.js";
export type { KvType } from "./kv/paged-kv.js";
export type { Numerics, MatmulProvider } from "./model/matmul.js";
export {
  Qwen35Forward,
  FLASH_ATTN_TILED_MIN_ROWS,
  setLibm,
  type ActivationTap,
  type DrafterEntry,
  type StepEntry,
} from "./model/forward.js";
export * from "./tokenizer/index.js";
export * from "./bench/benchmark.js";
export * from "./sampling/index.js";
export * from "./chat/index.js";
// parity: everything except goldens' `topK` helper, which would shadow the sampling module's topK
export * from "./parity/errors.js";
export * from "./parity/gate.js";
export * from "./parity/fixtures.js";
export * from "./parity/manifest.js";
export * from "./parity/default-model-manifest.js";
export * from "./parity/engine-runner.js";
export { topK as topKLogits } from "./parity/goldens.js";
export {
  PARITY_GOLDENS_FORMAT,
  serializeGoldens,
  parseGoldens,
  goldensPath,
  readGoldensFile,
  type ParityOracleInfo,
  type ParityPromptGolden,
  type ParityGoldens,
} from "./parity/goldens.js";
export * from "./planner/index.js";
