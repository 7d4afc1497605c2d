export {
  createKeepquantServer,
  KeepquantServer,
  type KeepquantServerOptions,
  DEFAULT_CONTEXT_TOKENS,
  DEFAULT_MAX_QUEUE,
  DEFAULT_MAX_BODY_BYTES,
  DEFAULT_DRAIN_TIMEOUT_MS,
  MAX_DRAIN_TIMEOUT_MS,
} from "./server.js";
export { ApiError, type ApiErrorType } from "./errors.js";
export {
  DEFAULT_IMAGE_FETCH_TIMEOUT_MS,
  DEFAULT_MAX_IMAGE_BYTES,
  DEFAULT_MAX_IMAGES_PER_REQUEST,
  IMAGE_MEDIA_TYPES,
  type ImageRef,
  type ImageSource,
  type RequestMessage,
} from "./images.js";
export { ServerMetrics, type FinishLabel } from "./metrics.js";
export { parseChatRequest, parseCompletionRequest, type ChatRequest, type CompletionRequest, type ToolDefinition } from "./requests.js";
export { defaultWebUiDir, loadWebUi, type StaticFile } from "./webui.js";
export {
  MAX_PLANNED_SEQUENCES,
  DEFAULT_MEMORY_BUDGET_SHARE,
  planCapacity,
  parseByteSize,
  type Capacity,
  type CapacityInput,
} from "./capacity.js";
