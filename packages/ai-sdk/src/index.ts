export { createKeepquant, keepquant, type KeepquantProvider, type KeepquantProviderSettings } from "./provider.js";
export { KeepquantLanguageModel, finishReasonOf, usageOf } from "./language-model.js";
export { DEFAULT_MODEL_ID } from "./engines.js";
export { PROVIDER_NAME, type KeepquantCallOptions, type KeepquantModelSettings } from "./settings.js";
export { convertPrompt, convertPromptWithImages, IMAGE_MEDIA_TYPES, type ConvertedPrompt, type PromptImage } from "./convert-prompt.js";
export { DEFAULT_IMAGE_URL_MAX_BYTES, DEFAULT_IMAGE_URL_TIMEOUT_MS, type ImageUrlLimits } from "./images.js";
