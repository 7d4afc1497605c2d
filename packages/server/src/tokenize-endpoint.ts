/**
 * `POST /tokenize` and `POST /detokenize`, in llama.cpp's server shapes:
 *
 *   /tokenize    {content, add_special?, parse_special?, with_pieces?} -> {tokens: [id, ...]}
 *                with_pieces: {tokens: [{id, piece}, ...]}, piece a string, or its bytes when the
 *                token alone is not valid UTF-8 (part of a character)
 *   /detokenize  {tokens: [id, ...]} -> {content}
 *
 * `content` is a string or an array of strings and token ids (ids are kept, strings tokenized;
 * add_special applies before the first element only). Defaults as llama.cpp's: add_special false,
 * parse_special true, with_pieces false. Special tokens detokenize as their text. Bodies are bounded by
 * the server's body limit, as chat's are; any other field, a wrong type or an id outside the
 * vocabulary is a 400 naming the field.
 *
 * Both are bounded and run off the event loop's critical path: at most `limit` tokens in or out (a text whose
 * byte length alone proves more is refused before it is tokenized), the encode and the decode in slices
 * (`encodeAsync`, `decodeAsync`), and the answer's JSON built in slices too, so that a megabyte of text or a
 * million ids never stalls `/health` or a stream beside it.
 */
import type { Tokenizer } from "@keepquant/engine";
import { invalidRequest } from "./errors.js";

/** Ids per slice of the answer's JSON (and of the id checks). */
const JSON_SLICE = 16_384;

export interface TokenizationOptions {
  /** Most tokens one request may tokenize or detokenize (400 `too_many_tokens` beyond). */
  limit: number;
  /** Stops the work when the client goes away or the server drains. */
  signal: AbortSignal;
}

/** The most tokens /tokenize and /detokenize handle in one request: four contexts, and at least 65,536. */
export function tokenizationLimit(contextTokens: number): number {
  return Math.max(4 * contextTokens, 65_536);
}

function tooMany(param: string, what: string, limit: number): never {
  throw invalidRequest(param, `${what}: at most ${limit} tokens per request (four times the context, at least 65536)`, "too_many_tokens");
}

const nextTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/** `[a,b,...]` of `items` mapped by `text`, built in slices of JSON_SLICE items. */
async function jsonArray<T>(items: readonly T[], text: (item: T) => string, signal: AbortSignal): Promise<string> {
  const parts: string[] = [];
  for (let start = 0; start < items.length; start += JSON_SLICE) {
    if (start > 0) {
      await nextTurn();
      signal.throwIfAborted();
    }
    parts.push(
      items
        .slice(start, start + JSON_SLICE)
        .map(text)
        .join(","),
    );
  }
  return `[${parts.join(",")}]`;
}

const TOKENIZE_FIELDS: ReadonlySet<string> = new Set(["content", "add_special", "parse_special", "with_pieces"]);
const DETOKENIZE_FIELDS: ReadonlySet<string> = new Set(["tokens"]);

function typeName(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  return typeof value;
}

function requireBody(raw: unknown, fields: ReadonlySet<string>): Record<string, unknown> {
  if (typeof raw !== "object" || raw === null || Array.isArray(raw))
    throw invalidRequest(null, `the request body must be a JSON object, got ${typeName(raw)}`, "invalid_type");
  const body = raw as Record<string, unknown>;
  for (const key of Object.keys(body)) {
    if (!fields.has(key))
      throw invalidRequest(
        key,
        `unrecognized request field ${JSON.stringify(key)} (accepted: ${[...fields].join(", ")})`,
        "unknown_parameter",
      );
  }
  return body;
}

function flag(body: Record<string, unknown>, field: string, fallback: boolean): boolean {
  const value = body[field];
  if (value === undefined || value === null) return fallback;
  if (typeof value !== "boolean") throw invalidRequest(field, `${field} must be a boolean, got ${typeName(value)}`, "invalid_type");
  return value;
}

function checkId(value: unknown, param: string, vocabSize: number): number {
  if (typeof value !== "number" || !Number.isInteger(value) || value < 0 || value >= vocabSize) {
    throw invalidRequest(param, `${param} = ${JSON.stringify(value)} is not a token id in [0, ${vocabSize})`);
  }
  return value;
}

function isValidUtf8(bytes: Uint8Array): boolean {
  try {
    new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(bytes);
    return true;
  } catch {
    return false;
  }
}

/** The answer of /tokenize, as JSON text: `{"tokens": [id, ...]}` or `{"tokens": [{"id", "piece"}, ...]}`. */
export async function tokenizeRoute(tokenizer: Tokenizer, raw: unknown, { limit, signal }: TokenizationOptions): Promise<string> {
  const vocabSize = tokenizer.vocabSize;
  const body = requireBody(raw, TOKENIZE_FIELDS);
  const addSpecial = flag(body, "add_special", false);
  const parseSpecial = flag(body, "parse_special", true);
  const withPieces = flag(body, "with_pieces", false);
  const content = body["content"];
  let parts: (string | number)[];
  if (typeof content === "string") parts = [content];
  else if (Array.isArray(content)) {
    if (content.length > limit) tooMany("content", `content has ${content.length} elements`, limit);
    parts = content.map((item, i) => (typeof item === "string" ? item : checkId(item, `content[${i}]`, vocabSize)));
  } else {
    throw invalidRequest(
      "content",
      `content must be a string or an array of strings and token ids, got ${typeName(content)}`,
      "invalid_type",
    );
  }
  // a lower bound from the byte length alone, before any work (see refuseByteLength in admission.ts)
  const perToken = tokenizer.maxTokenBytes;
  if (perToken !== undefined) {
    let atLeast = 0;
    for (const part of parts) atLeast += typeof part === "number" ? 1 : Math.ceil(Buffer.byteLength(part, "utf8") / perToken);
    if (atLeast > limit) tooMany("content", `content has at least ${atLeast} tokens`, limit);
  }
  const ids: number[] = [];
  for (let i = 0; i < parts.length; i++) {
    const part = parts[i]!;
    if (typeof part === "number") ids.push(part);
    else {
      for (const id of await tokenizer.encodeAsync(part, { addSpecial: addSpecial && i === 0, parseSpecial, signal })) ids.push(id);
    }
    if (ids.length > limit) tooMany("content", `content has more than ${limit} tokens`, limit);
  }
  if (!withPieces) return `{"tokens":${await jsonArray(ids, String, signal)}}`;
  const decoder = new TextDecoder("utf-8", { ignoreBOM: true });
  const piece = (id: number): string => {
    const bytes = tokenizer.tokenToPiece(id, { special: true });
    return JSON.stringify({ id, piece: isValidUtf8(bytes) ? decoder.decode(bytes) : Array.from(bytes) });
  };
  return `{"tokens":${await jsonArray(ids, piece, signal)}}`;
}

/** The answer of /detokenize, as JSON text: `{"content": text}`. */
export async function detokenizeRoute(tokenizer: Tokenizer, raw: unknown, { limit, signal }: TokenizationOptions): Promise<string> {
  const vocabSize = tokenizer.vocabSize;
  const body = requireBody(raw, DETOKENIZE_FIELDS);
  const tokens = body["tokens"];
  if (!Array.isArray(tokens))
    throw invalidRequest("tokens", `tokens must be an array of token ids, got ${typeName(tokens)}`, "invalid_type");
  if (tokens.length > limit) tooMany("tokens", `tokens has ${tokens.length} ids`, limit);
  const ids: number[] = new Array(tokens.length);
  for (let i = 0; i < tokens.length; i++) {
    if (i > 0 && i % JSON_SLICE === 0) {
      await nextTurn();
      signal.throwIfAborted();
    }
    ids[i] = checkId(tokens[i], `tokens[${i}]`, vocabSize);
  }
  return JSON.stringify({ content: await tokenizer.decodeAsync(ids, { special: true, signal }) });
}
