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
