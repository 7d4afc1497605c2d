/**
 * The prompt's images for the engine: URL images fetched (only when the model's `imageUrls` setting allows it,
 * within its limits), then each image encoded by the engine's vision projector. Every failure is the AI SDK's
 * error naming the part (`prompt[1] (user) content[0]`).
 */
import { InvalidArgumentError, InvalidPromptError, UnsupportedFunctionalityError } from "@ai-sdk/provider";
import { type EncodedImage, type Engine, EngineError } from "@keepquant/engine";
import type { PromptImage } from "./convert-prompt.js";
import { PROVIDER_NAME } from "./settings.js";

/** Limits of fetching an image URL (the `imageUrls` setting). */
export interface ImageUrlLimits {
  /** Most bytes of one image (default 20 MiB); a larger answer is refused. */
  maxBytes?: number;
  /** Most milliseconds one fetch may take (default 30,000). */
  timeoutMs?: number;
}

export const DEFAULT_IMAGE_URL_MAX_BYTES = 20 << 20;
export const DEFAULT_IMAGE_URL_TIMEOUT_MS = 30_000;

/** Checks the `imageUrls` setting's limits: positive integers. */
function checkLimits(limits: ImageUrlLimits): void {
  for (const key of ["maxBytes", "timeoutMs"] as const) {
    const value = limits[key];
    if (value !== undefined && !(Number.isSafeInteger(value) && value > 0)) {
      throw new InvalidArgumentError({
        argument: `imageUrls.${key}`,
        message: `${PROVIDER_NAME}: imageUrls.${key} must be a positive integer, got ${JSON.stringify(value)}`,
      });
    }
  }
}

/** Fetches one image URL (http or https) within the limits; InvalidPromptError naming the part otherwise. */
async function fetchImage(
  image: PromptImage,
  limits: ImageUrlLimits,
  prompt: unknown,
  signal: AbortSignal | undefined,
): Promise<Uint8Array> {
  const url = image.url!;
  const fail = (why: string, cause?: unknown) =>
    new InvalidPromptError({ prompt, message: `${PROVIDER_NAME}: ${image.where}: the image at ${url.href} ${why}`, cause });
  if (url.protocol !== "http:" && url.protocol !== "https:") throw fail("is not an http or https URL");
  const maxBytes = limits.maxBytes ?? DEFAULT_IMAGE_URL_MAX_BYTES;
  const timeout = AbortSignal.timeout(limits.timeoutMs ?? DEFAULT_IMAGE_URL_TIMEOUT_MS);
  const combined = signal ? AbortSignal.any([signal, timeout]) : timeout;
  let response: Response;
  try {
    response = await fetch(url, { signal: combined, redirect: "follow" });
  } catch (error) {
    if (signal?.aborted) throw error;
    throw fail(timeout.aborted ? `took longer than ${limits.timeoutMs ?? DEFAULT_IMAGE_URL_TIMEOUT_MS} ms` : "cannot be fetched", error);
  }
  if (!response.ok) throw fail(`answered HTTP ${response.status}`);
  const declared = Number(response.headers.get("content-length") ?? Number.NaN);
  if (declared > maxBytes) throw fail(`is ${declared} bytes, more than the imageUrls limit of ${maxBytes}`);
  const chunks: Uint8Array[] = [];
  let total = 0;
  try {
    // leaving the loop early cancels the body
    for await (const chunk of response.body ?? []) {
      total += chunk.byteLength;
      if (total > maxBytes) break;
      chunks.push(chunk);
    }
  } catch (error) {
    if (signal?.aborted) throw error;
    throw fail(timeout.aborted ? `took longer than ${limits.timeoutMs ?? DEFAULT_IMAGE_URL_TIMEOUT_MS} ms` : "could not be read", error);
  }
  if (total > maxBytes) throw fail(`is more than the imageUrls limit of ${maxBytes} bytes`);
  const bytes = new Uint8Array(total);
  let offset = 0;
  for (const chunk of chunks) {
    bytes.set(chunk, offset);
    offset += chunk.byteLength;
  }
  return bytes;
}

/**
 * Fills the URL images' bytes (refused unless `imageUrls` is set) and encodes every image with the engine's
 * projector: the encodings by the identity of their bytes, for `encodeMultimodalChat`'s slots.
 */
export async function encodePromptImages(
  engine: Engine,
  modelId: string,
  images: readonly PromptImage[],
  options: { imageUrls: true | ImageUrlLimits | undefined; prompt: unknown; signal: AbortSignal | undefined },
): Promise<Map<Uint8Array, EncodedImage>> {
  const encoded = new Map<Uint8Array, EncodedImage>();
  if (images.length === 0) return encoded;
  if (!engine.projector) {
    throw new UnsupportedFunctionalityError({
      functionality: "images",
      message: `${PROVIDER_NAME}: ${images[0]!.where} is an image (${images[0]!.mediaType}), but the model ${modelId} takes no images: load its vision projector with keepquant(model, { projector: "mmproj.gguf" })`,
    });
  }
  for (const image of images) {
    if (image.url) {
      if (options.imageUrls === undefined) {
        throw new UnsupportedFunctionalityError({
          functionality: "image URLs",
          message: `${PROVIDER_NAME}: ${image.where} is an image URL (${image.url.href}); pass its bytes, or allow fetching with keepquant(model, { imageUrls: { maxBytes, timeoutMs } })`,
        });
      }
      const limits = options.imageUrls === true ? {} : options.imageUrls;
      checkLimits(limits);
      image.part.image = await fetchImage(image, limits, options.prompt, options.signal);
    }
    try {
      encoded.set(image.part.image, await engine.encodeImage(image.part.image));
    } catch (error) {
      if (EngineError.isInstance(error) && error.code === "ENGINE_BAD_IMAGE") {
        throw new InvalidPromptError({
          prompt: options.prompt,
          message: `${PROVIDER_NAME}: ${image.where}: ${error.message}`,
          cause: error,
        });
      }
      throw error;
    }
  }
  return encoded;
}
