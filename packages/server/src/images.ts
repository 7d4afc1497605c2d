/**
 * Images in chat requests. Each API's parser turns its image part (chat completions' `image_url`, Anthropic's
 * `image` block, the Responses API's `input_image`) into one `ImageRef`: where the bytes come from (a base64
 * payload or an http(s) URL) and the part's path in the request (`messages[0].content[1]`), so that every refusal
 * names the part. The server resolves the bytes (`imageBytes`: base64 decoded, or a URL fetched when the server
 * allows it, within byte and time limits) and the engine decodes and encodes them.
 */
import type { ChatMessage, ChatTextPart } from "@keepquant/engine";
import { EngineError, type ImageError } from "@keepquant/engine";
import { ApiError, invalidRequest } from "./errors.js";

/** An image a request sends: its bytes in base64 (with the declared media type), or an http(s) URL to fetch. */
export type ImageSource = { kind: "base64"; mediaType: string; data: string } | { kind: "url"; url: string };

/** An image part of a message, with its path in the request (for the API's 400s). */
export interface ImageRef {
  type: "image";
  source: ImageSource;
  param: string;
}

/** A message of a parsed chat request: text, or (when it holds images) text and image parts in order. */
export type RequestMessage = Omit<ChatMessage, "content"> & { content: string | (ChatTextPart | ImageRef)[] };

/** Media types an image may declare (what the engine decodes). `image/jpg` is a common misspelling, accepted. */
export const IMAGE_MEDIA_TYPES: ReadonlySet<string> = new Set(["image/png", "image/jpeg", "image/jpg", "image/webp", "image/gif"]);

/** Largest image a request may send or the server fetch, in bytes (OpenAI's limit for one image is 20 MB). */
export const DEFAULT_MAX_IMAGE_BYTES = 20 * 1024 * 1024;
/** Longest fetch of an image URL, in ms (the whole answer: connection, redirects, body). */
export const DEFAULT_IMAGE_FETCH_TIMEOUT_MS = 10_000;
/** Most images in one request: each one is decoded and run through the vision encoder. */
export const DEFAULT_MAX_IMAGES_PER_REQUEST = 16;
/** Most redirects an image URL may take (each to http or https only). */
export const MAX_IMAGE_REDIRECTS = 5;

/** How the server takes images (resolved once from the server's options). */
export interface ImageOptions {
  allowUrls: boolean;
  maxBytes: number;
  fetchTimeoutMs: number;
  maxPerRequest: number;
}

/**
 * A message's content from its parts: a string when it holds no image (the parts' texts joined by `separator`,
 * exactly as the API joins text parts), else the parts in order with consecutive texts joined the same way.
 */
export function partsContent(parts: readonly (string | ImageRef)[], separator: string): RequestMessage["content"] {
  if (parts.every((p) => typeof p === "string")) return (parts as string[]).join(separator);
  const out: (ChatTextPart | ImageRef)[] = [];
  for (const part of parts) {
    const last = out.at(-1);
    if (typeof part !== "string") out.push(part);
    else if (last?.type === "text") last.text += separator + part;
    else out.push({ type: "text", text: part });
  }
  return out;
}

/** The image parts of the messages, in prompt order. */
export function imageRefs(messages: readonly RequestMessage[]): ImageRef[] {
  const refs: ImageRef[] = [];
  for (const message of messages) {
    if (typeof message.content === "string") continue;
    for (const part of message.content) if (part.type === "image") refs.push(part);
  }
  return refs;
}

/** The messages of a request without images, as the engine's ChatMessage (content always text). */
export function textMessages(messages: readonly RequestMessage[]): ChatMessage[] | undefined {
  return messages.every((m) => typeof m.content === "string") ? (messages as ChatMessage[]) : undefined;
}

/** The text bytes of a message's content (images not counted). */
export function contentText(content: RequestMessage["content"]): string {
  if (typeof content === "string") return content;
  return content.map((part) => (part.type === "text" ? part.text : "")).join("");
}

const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;
const BASE64URL = /^[A-Za-z0-9_-]*={0,2}$/;

function checkMediaType(mediaType: string, param: string): string {
  const type = mediaType.toLowerCase();
  if (!IMAGE_MEDIA_TYPES.has(type)) {
    throw invalidRequest(
      param,
      `${param}: image media type ${JSON.stringify(mediaType)} is not supported (image/png, image/jpeg, image/webp or image/gif)`,
      "invalid_image",
    );
  }
  return type;
}

/** A base64 image (Anthropic's `source.type: "base64"`), its media type checked now, its size when the bytes are decoded. */
export function base64Image(mediaType: unknown, data: unknown, param: string): ImageRef {
  if (typeof mediaType !== "string") throw invalidRequest(param, `${param}: source.media_type must be a string`, "invalid_type");
  if (typeof data !== "string") throw invalidRequest(param, `${param}: source.data must be a base64 string`, "invalid_type");
  return { type: "image", source: { kind: "base64", mediaType: checkMediaType(mediaType, param), data }, param };
}

/**
 * An image URL as the OpenAI APIs send it: a `data:image/...;base64,` URL, or an http(s) URL (fetched only when
 * the server allows image URLs; checked when the request is served). Any other scheme (file:, ftp:, ...) is a 400.
 */
export function urlImage(url: unknown, param: string): ImageRef {
  if (typeof url !== "string") throw invalidRequest(param, `${param}: the image URL must be a string, got ${typeof url}`, "invalid_type");
  if (/^data:/i.test(url)) {
    const comma = url.indexOf(",");
    const header = comma < 0 ? "" : url.slice(5, comma);
    const [mediaType = "", ...flags] = header.split(";");
    if (comma < 0 || !flags.some((f) => f.toLowerCase() === "base64"))
      throw invalidRequest(param, `${param}: a data URL image must be data:<media type>;base64,<data>`, "invalid_image");
    return {
      type: "image",
      source: { kind: "base64", mediaType: checkMediaType(mediaType, param), data: url.slice(comma + 1) },
      param,
    };
  }
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw invalidRequest(param, `${param}: the image URL is neither a data: URL nor a valid http(s) URL`, "invalid_image");
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:")
    throw invalidRequest(
      param,
      `${param}: image URLs must be data: (base64) or http(s) URLs, not ${parsed.protocol.replace(/:$/, "")}:`,
      "invalid_image",
    );
  return { type: "image", source: { kind: "url", url: parsed.href }, param };
}

/** The bytes of a base64 payload, its decoded size checked against `maxBytes` before it is decoded. */
function decodeBase64(data: string, param: string, maxBytes: number): Uint8Array {
  const text = data.replace(/[\r\n\t ]+/g, "");
  if (!BASE64.test(text) && !BASE64URL.test(text))
    throw invalidRequest(param, `${param}: the image data is not valid base64`, "invalid_image");
  const padding = text.endsWith("==") ? 2 : text.endsWith("=") ? 1 : 0;
  const size = Math.floor((text.length * 3) / 4) - padding;
  if (size > maxBytes)
    throw invalidRequest(param, `${param}: the image has ${size} bytes, more than this server takes (${maxBytes})`, "image_too_large");
  if (size === 0) throw invalidRequest(param, `${param}: the image data is empty`, "invalid_image");
  return new Uint8Array(Buffer.from(text, BASE64.test(text) ? "base64" : "base64url"));
}

/** 400 for an image URL a server without `allowImageUrls` was sent. */
function urlsDisabled(param: string): ApiError {
  return invalidRequest(
    param,
    `${param}: this server does not fetch image URLs; send the image as a data: URL (base64), or start the server with --allow-image-urls (the allowImageUrls option)`,
    "image_urls_disabled",
  );
}

/** Refuses image URLs early (before any work) when the server fetches none. */
export function refuseImageUrls(refs: readonly ImageRef[], options: ImageOptions): void {
  if (options.allowUrls) return;
  const url = refs.find((r) => r.source.kind === "url");
  if (url) throw urlsDisabled(url.param);
}

/** The image's bytes: base64 decoded, or the URL fetched (when allowed) within the byte and time limits. */
export async function imageBytes(ref: ImageRef, options: ImageOptions, signal: AbortSignal): Promise<Uint8Array> {
  if (ref.source.kind === "base64") return decodeBase64(ref.source.data, ref.param, options.maxBytes);
  if (!options.allowUrls) throw urlsDisabled(ref.param);
  return fetchImage(ref.source.url, ref.param, options, signal);
}

/**
 * GETs an image URL: redirects followed by hand (at most MAX_IMAGE_REDIRECTS, each to http or https only), the
 * whole fetch within `fetchTimeoutMs`, the body read until it passes `maxBytes` (a declared Content-Length over
 * it is refused before the body is read). Failures are 400s naming the part.
 */
async function fetchImage(url: string, param: string, options: ImageOptions, signal: AbortSignal): Promise<Uint8Array> {
  const timeout = AbortSignal.timeout(options.fetchTimeoutMs);
  const both = AbortSignal.any([signal, timeout]);
  const fail = (why: string): ApiError =>
    invalidRequest(param, `${param}: the image URL could not be fetched: ${why}`, "image_fetch_failed");
  let current = url;
  try {
    for (let redirects = 0; ; redirects++) {
      const response = await fetch(current, { redirect: "manual", signal: both, headers: { Accept: "image/*" } });
      if (response.status >= 300 && response.status < 400 && response.headers.has("location")) {
        await response.body?.cancel();
        if (redirects >= MAX_IMAGE_REDIRECTS) throw fail(`more than ${MAX_IMAGE_REDIRECTS} redirects`);
        const next = new URL(response.headers.get("location")!, current);
        if (next.protocol !== "http:" && next.protocol !== "https:")
          throw fail(`it redirects to a ${next.protocol.replace(/:$/, "")}: URL (only http and https are followed)`);
        current = next.href;
        continue;
      }
      if (!response.ok) {
        await response.body?.cancel();
        throw fail(`HTTP ${response.status}`);
      }
      const declared = Number(response.headers.get("content-length") ?? Number.NaN);
      if (Number.isFinite(declared) && declared > options.maxBytes) {
        await response.body?.cancel();
        throw invalidRequest(
          param,
          `${param}: the image at the URL has ${declared} bytes, more than this server takes (${options.maxBytes})`,
          "image_too_large",
        );
      }
      const chunks: Uint8Array[] = [];
      let size = 0;
      const reader = response.body?.getReader();
      while (reader) {
        const { done, value } = await reader.read();
        if (done) break;
        size += value.byteLength;
        if (size > options.maxBytes) {
          await reader.cancel();
          throw invalidRequest(
            param,
            `${param}: the image at the URL has more than ${options.maxBytes} bytes, more than this server takes`,
            "image_too_large",
          );
        }
        chunks.push(value);
      }
      return new Uint8Array(Buffer.concat(chunks));
    }
  } catch (error) {
    if (ApiError.isInstance(error)) throw error;
    if (signal.aborted) throw signal.reason;
    if (timeout.aborted) throw fail(`no complete answer within ${options.fetchTimeoutMs} ms`);
    throw fail((error as Error).cause instanceof Error ? ((error as Error).cause as Error).message : (error as Error).message);
  }
}

/** 400 for an image sent to a model without a vision projector, naming the part. */
export function noProjector(param: string): ApiError {
  return invalidRequest(
    param,
    `${param}: this model takes no images (the server has no vision projector: start it with --mmproj FILE, or the projector option)`,
    "images_not_supported",
  );
}

/** An engine error about an image (ImageError, ENGINE_BAD_IMAGE) as a 400 naming the part and the reason; other errors unchanged. */
export function imageError(error: unknown, param: string): unknown {
  if (EngineError.isInstance(error) && error.code === "ENGINE_BAD_IMAGE") {
    const reason = (error as ImageError).reason ?? "invalid";
    return invalidRequest(param, `${param}: the image was refused (${reason}): ${error.message}`, "invalid_image");
  }
  return error;
}
