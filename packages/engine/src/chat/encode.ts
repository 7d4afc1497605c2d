/**
 * Chat prompts as token ids, safe with untrusted text: only the chat template produces special
 * tokens. Every string the caller passes (message contents, names, tool calls, tool definitions,
 * template variables) is tokenized as plain text, so a user typing "<|im_start|>system" gets the
 * tokens of that text, never the control token.
 *
 * How: before rendering, each occurrence of a special-token text (the CONTROL/UNKNOWN texts that
 * only `parseSpecial` recognizes) inside a caller string is replaced by a sentinel (upper-case
 * letters and digits with a random nonce, unchanged by `tojson`, `upper`, `trim`, ...). The
 * rendered prompt is tokenized with special parsing, so the template's own "<|im_start|>" become
 * control tokens; each run of text between them has its sentinels turned back into the original
 * texts and is encoded as plain text. The content's tokens are those of `encode(content)`
 * whenever the template puts it between special tokens (ChatML and Qwen templates do).
 *
 * llama.cpp's server tokenizes the whole rendered prompt with special parsing, so there a user's
 * "<|im_start|>" becomes the control token.
 */
import { randomBytes } from "node:crypto";
import type { EncodeAsyncOptions, Tokenizer } from "../tokenizer/tokenizer.js";
import { type ChatMessage, type RenderChatOptions, renderChatFor } from "./render.js";

export type EncodeChatOptions = Omit<RenderChatOptions, "bosToken" | "eosToken">;

export interface EncodedChat {
  /** Prompt token ids (the template's special tokens and plain-text tokens for every caller string). */
  ids: number[];
  /** The rendered prompt text (what `decode(ids, { special: true })` gives back). */
  text: string;
}

/** Replaces special-token texts in every string (and object key) of a JSON-like value. */
function defang(value: unknown, replace: (text: string) => string): unknown {
  if (typeof value === "string") return replace(value);
  if (Array.isArray(value)) return value.map((item) => defang(item, replace));
  if (value !== null && typeof value === "object") {
    const out: Record<string, unknown> = {};
    for (const [key, item] of Object.entries(value)) out[replace(key)] = defang(item, replace);
    return out;
  }
  return value;
}

function containsText(value: unknown, needle: string): boolean {
  if (typeof value === "string") return value.includes(needle);
  if (Array.isArray(value)) return value.some((item) => containsText(item, needle));
  if (value !== null && typeof value === "object") {
    return Object.entries(value).some(([key, item]) => key.includes(needle) || containsText(item, needle));
  }
  return false;
}

/** A text part of a message's content. */
export interface ChatTextPart {
  type: "text";
  text: string;
}

/** An image part of a message's content: the image file's bytes (PNG, JPEG, WebP or GIF). */
export interface ChatImagePart {
  type: "image";
  image: Uint8Array;
}

/** A chat message whose content may hold images. */
export interface MultimodalChatMessage extends Omit<ChatMessage, "content"> {
  content: string | readonly (ChatTextPart | ChatImagePart)[];
}

/** A chat prompt with images: token runs and image slots (indices into `images`), in prompt order. */
export interface EncodedMultimodalChat {
  pieces: (number[] | { image: number })[];
  images: Uint8Array[];
  /** The rendered prompt with `<image>` where each image goes (for logs and echo). */
  text: string;
}

/**
 * `encodeChat` for messages whose content holds images (as llama.cpp's server and mtmd do it):
 * each image part becomes a marker in the text the template renders; the prompt is split at the
 * markers, every text run tokenized on its own, and each image sits between `<|vision_start|>` and
 * `<|vision_end|>`. The text parts of one message are joined in order.
 */
export function encodeMultimodalChat(
  tokenizer: Tokenizer,
  messages: readonly MultimodalChatMessage[],
  options: EncodeChatOptions = {},
): EncodedMultimodalChat {
  const images: Uint8Array[] = [];
  let nonce: string;
  do nonce = `KQIMG${randomBytes(6).toString("hex").toUpperCase()}`;
  while (
    containsText(
      [
        messages.map((m) => (typeof m.content === "string" ? m.content : m.content.map((p) => (p.type === "text" ? p.text : "")))),
        options.tools,
        options.variables,
      ],
      nonce,
    )
  );
  const flat: ChatMessage[] = messages.map((m) => {
    if (typeof m.content === "string") return { ...m, content: m.content };
    const text = m.content
      .map((part) => {
        if (part.type === "text") return part.text;
        images.push(part.image);
        return `${nonce}N${images.length - 1}Z`;
      })
      .join("");
    return { ...m, content: text };
  });
  const { rendered, restore } = renderForEncoding(tokenizer, flat, options);
  const marker = new RegExp(`${nonce}N(\\d+)Z`, "g");
  const pieces: (number[] | { image: number })[] = [];
  const visionStart = images.length > 0 ? visionToken(tokenizer, "<|vision_start|>") : 0;
  const visionEnd = images.length > 0 ? visionToken(tokenizer, "<|vision_end|>") : 0;
  const seen = new Set<number>();
  let last = 0;
  let text = "";
  for (const match of rendered.matchAll(marker)) {
    const image = Number(match[1]);
    seen.add(image);
    const before = rendered.slice(last, match.index);
    pieces.push([...tokenizer.encode(before, { parseSpecial: true, mapPlainText: restore }), visionStart], { image }, [visionEnd]);
    text += `${restore(before)}<|vision_start|><image><|vision_end|>`;
    last = match.index + match[0].length;
  }
  if (seen.size !== images.length) {
    throw new RangeError(`the chat template rendered ${seen.size} of the ${images.length} images: it drops message content`);
  }
  const tail = rendered.slice(last);
  pieces.push(tokenizer.encode(tail, { parseSpecial: true, mapPlainText: restore }));
  text += restore(tail);
  return { pieces: pieces.filter((p) => !Array.isArray(p) || p.length > 0), images, text };
}

function visionToken(tokenizer: Tokenizer, text: string): number {
  const id = tokenizer.tokenId(text);
  if (id === undefined) throw new RangeError(`this model's vocabulary has no ${text} token: it cannot take images`);
  return id;
}

/**
 * Renders `messages` with the tokenizer's chat template and tokenizes the result so that only
 * the template's text can yield special tokens (see the module comment).
 */
export function encodeChat(tokenizer: Tokenizer, messages: readonly ChatMessage[], options: EncodeChatOptions = {}): EncodedChat {
  const { rendered, text, restore } = renderForEncoding(tokenizer, messages, options);
  return { ids: tokenizer.encode(rendered, { parseSpecial: true, mapPlainText: restore }), text };
}

/** Options of `encodeChatAsync`'s tokenization (slices, abort) and a check of the prompt text before it. */
export interface EncodeChatAsyncOptions extends Pick<EncodeAsyncOptions, "sliceSteps" | "signal" | "onSlice"> {
  /** Called with the prompt text (`EncodedChat.text`) before it is tokenized; a throw stops the encode. */
  beforeEncode?: (text: string) => void;
}

/** `encodeChat` with the tokenization in slices (`Tokenizer.encodeAsync`): the same ids. */
export async function encodeChatAsync(
  tokenizer: Tokenizer,
  messages: readonly ChatMessage[],
  options: EncodeChatOptions = {},
  encodeOptions: EncodeChatAsyncOptions = {},
): Promise<EncodedChat> {
  const { rendered, text, restore } = renderForEncoding(tokenizer, messages, options);
  encodeOptions.beforeEncode?.(text);
  const { beforeEncode: _, ...slices } = encodeOptions;
  return { ids: await tokenizer.encodeAsync(rendered, { ...slices, parseSpecial: true, mapPlainText: restore }), text };
}

/** The rendered prompt with sentinels for caller-supplied special texts, the prompt text, and the sentinels' undoing. */
function renderForEncoding(
  tokenizer: Tokenizer,
  messages: readonly ChatMessage[],
  options: EncodeChatOptions,
): { rendered: string; text: string; restore: (text: string) => string } {
  const specials = tokenizer.parseSpecialTexts;
  const inputs = [messages, options.tools, options.variables];
  let nonce: string;
  do nonce = `KQ${randomBytes(6).toString("hex").toUpperCase()}`;
  while (containsText(inputs, nonce));
  const sentinelOf = new Map<string, string>();
  const textOf = new Map<string, string>();
  specials.forEach((text, i) => {
    const sentinel = `${nonce}X${i}Z`;
    sentinelOf.set(text, sentinel);
    textOf.set(sentinel, text);
  });
  // longest texts first (the tokenizer's order), as one alternation
  const specialPattern = specials.length > 0 ? new RegExp(specials.map(escapeRegExp).join("|"), "g") : undefined;
  const replace = (text: string): string => (specialPattern ? text.replace(specialPattern, (match) => sentinelOf.get(match)!) : text);
  const safeMessages = defang(messages, replace) as ChatMessage[];
  const safeOptions: EncodeChatOptions = { ...options };
  if (options.tools !== undefined) safeOptions.tools = defang(options.tools, replace) as unknown[];
  if (options.variables !== undefined) safeOptions.variables = defang(options.variables, replace) as Record<string, unknown>;
  const rendered = renderChatFor(tokenizer, safeMessages, safeOptions);
  const sentinelPattern = new RegExp(`${nonce}X\\d+Z`, "g");
  const restore = (text: string): string => text.replace(sentinelPattern, (match) => textOf.get(match) ?? match);
  return { rendered, text: restore(rendered), restore };
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}
