export { createKeepquant, keepquant, type KeepquantProvider, type KeepquantProviderSettings } from "./provider.js";
export { KeepquantLanguageModel, finishReasonOf, usageOf } from "./language-model.js";
export { DEFAULT_MODEL_ID } from "./engines.js";
export { PROVIDER_NAME, type KeepquantCallOptions, type KeepquantModelSettings } from "./settings.js";
export { convertPrompt } from "./convert-prompt.js";
