/**
 * The keepquant provider: `keepquant(model, settings)` returns an AI SDK language model running in this
 * process. `model` is the path of a qwen35 GGUF file or "default" (the embedded model of
 * `@keepquant/default-model`). The provider keeps one engine per model file and engine settings, loaded on
 * the first call and shared by every call after it; `dispose()` frees them.
 */
import { NoSuchModelError, type ProviderV3 } from "@ai-sdk/provider";
import { EngineRegistry } from "./engines.js";
import { KeepquantLanguageModel } from "./language-model.js";
import type { KeepquantModelSettings } from "./settings.js";

export interface KeepquantProviderSettings {
  /** Settings every model of this provider starts from (a model's own settings override them). */
  defaults?: KeepquantModelSettings;
}

export interface KeepquantProvider extends ProviderV3 {
  /** A language model of `model` (a GGUF path or "default"). */
  (model: string, settings?: KeepquantModelSettings): KeepquantLanguageModel;
  languageModel(model: string, settings?: KeepquantModelSettings): KeepquantLanguageModel;
  /** Disposes every engine this provider loaded (running calls end as aborted); later calls load them again. */
  dispose(): Promise<void>;
}

export function createKeepquant(options: KeepquantProviderSettings = {}): KeepquantProvider {
  const registry = new EngineRegistry();
  const languageModel = (model: string, settings: KeepquantModelSettings = {}): KeepquantLanguageModel => {
    if (typeof model !== "string" || model === "") {
      throw new NoSuchModelError({
        modelId: String(model),
        modelType: "languageModel",
        message: `keepquant: the model must be the path of a GGUF file or "default", got ${JSON.stringify(model)}`,
      });
    }
    return new KeepquantLanguageModel(model, { ...options.defaults, ...settings }, registry);
  };
  const unsupported = (modelType: "embeddingModel" | "imageModel") => (modelId: string) => {
    throw new NoSuchModelError({ modelId, modelType, message: `keepquant provides language models only, not ${modelType}s` });
  };
  const provider = ((model: string, settings?: KeepquantModelSettings) => languageModel(model, settings)) as KeepquantProvider;
  Object.assign(provider, {
    specificationVersion: "v3",
    languageModel,
    embeddingModel: unsupported("embeddingModel"),
    imageModel: unsupported("imageModel"),
    dispose: () => registry.dispose(),
  });
  return provider;
}

/** The default provider instance. */
export const keepquant: KeepquantProvider = createKeepquant();
