/**
 * keepquant's errors as the AI SDK's error types, so that an application handles a local model's failures
 * with the same checks as any provider's (`InvalidPromptError.isInstance(error)`, ...). The original error
 * is kept as `cause`.
 *
 * - the model file is absent, or the default model's package is not installed: NoSuchModelError
 * - the file cannot be run (not a GGUF, refused tensors) or does not fit the memory: LoadSettingError
 * - a prompt longer than the context or the KV cache, a chat template that fails, an image that does not decode or
 *   whose URL cannot be fetched: InvalidPromptError
 * - a call setting out of range (temperature, maxOutputTokens, provider options): InvalidArgumentError
 * - a part of the prompt or call the model cannot take (files other than images, an image for a model without a
 *   projector, an image URL without the imageUrls setting, provider tools): UnsupportedFunctionalityError
 * - an aborted call: the abort signal's reason (an `AbortError` DOMException unless the caller gave another),
 *   which the AI SDK recognizes as an abort
 */
import { AISDKError, InvalidArgumentError, InvalidPromptError, LoadSettingError, NoSuchModelError } from "@ai-sdk/provider";
import { EngineError, PlanError, TokenizerError } from "@keepquant/engine";
import { PROVIDER_NAME } from "./settings.js";

/** Sets `cause` on an AI SDK error whose constructor has no such parameter (LoadSettingError, NoSuchModelError). */
function withCause<T extends Error>(error: T, cause: unknown): T {
  Object.defineProperty(error, "cause", { value: cause, enumerable: false, configurable: true, writable: false });
  return error;
}

/** What an engine-side request field is called in the AI SDK's call options. */
const SDK_ARGUMENT: Readonly<Record<string, string>> = {
  maxTokens: "maxOutputTokens",
  stop: "stopSequences",
  temperature: "temperature",
  topK: "topK",
  topP: "topP",
  seed: "seed",
  presencePenalty: "presencePenalty",
  frequencyPenalty: "frequencyPenalty",
  minP: `providerOptions.${PROVIDER_NAME}.minP`,
  repeatPenalty: `providerOptions.${PROVIDER_NAME}.repeatPenalty`,
  penaltyLastN: `providerOptions.${PROVIDER_NAME}.penaltyLastN`,
};

/** A failure to load `modelId` as the AI SDK's error type. */
export function loadError(modelId: string, error: unknown): Error {
  if (AISDKError.isInstance(error)) return error;
  const reason = error instanceof Error ? error.message : String(error);
  if (EngineError.isInstance(error) && error.code === "ENGINE_NO_DEFAULT_MODEL") {
    return withCause(new NoSuchModelError({ modelId, modelType: "languageModel", message: `${PROVIDER_NAME}: ${reason}` }), error);
  }
  if (PlanError.isInstance(error) && error.code === "PLAN_DOES_NOT_FIT") {
    return withCause(new LoadSettingError({ message: `${PROVIDER_NAME}: the model ${modelId} does not fit: ${reason}` }), error);
  }
  return withCause(new LoadSettingError({ message: `${PROVIDER_NAME}: cannot load the model ${modelId}: ${reason}` }), error);
}

/** The model file `modelId` does not exist. */
export function missingModelError(modelId: string, path: string): NoSuchModelError {
  return new NoSuchModelError({
    modelId,
    modelType: "languageModel",
    message: `${PROVIDER_NAME}: no model file at ${path} (pass the path of a qwen35 GGUF file, an hf:<owner>/<repo>[:<quant>] model, or "default" for the embedded model)`,
  });
}

/** A failure of one call (prompt encoding or generation) as the AI SDK's error type. */
export function callError(error: unknown, prompt: unknown): unknown {
  if (AISDKError.isInstance(error)) return error;
  if (TokenizerError.isInstance(error)) {
    return new InvalidPromptError({ prompt, message: `${PROVIDER_NAME}: ${error.message}`, cause: error });
  }
  if (!EngineError.isInstance(error)) return error;
  switch (error.code) {
    case "ENGINE_PROMPT_TOO_LONG":
    case "ENGINE_CAPACITY":
      return new InvalidPromptError({ prompt, message: `${PROVIDER_NAME}: ${error.message}`, cause: error });
    case "ENGINE_BAD_REQUEST":
    case "ENGINE_BAD_OPTION": {
      const argument = (error.field && SDK_ARGUMENT[error.field]) ?? error.field ?? "options";
      return new InvalidArgumentError({ argument, message: `${PROVIDER_NAME}: ${argument}: ${error.message}`, cause: error });
    }
    default:
      return error;
  }
}

/** The error an aborted call ends with: the signal's reason when it is an Error, else an AbortError. */
export function abortError(signal: { reason?: unknown } | undefined): Error {
  const reason = signal?.reason;
  if (reason instanceof Error) return reason;
  return new DOMException(reason === undefined ? "This operation was aborted" : String(reason), "AbortError");
}
