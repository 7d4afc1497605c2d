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
export { ServerMetrics, type FinishLabel } from "./metrics.js";
export { parseChatRequest, parseCompletionRequest, type ChatRequest, type CompletionRequest, type ToolDefinition } from "./requests.js";
export { defaultWebUiDir, loadWebUi, type StaticFile } from "./webui.js";
