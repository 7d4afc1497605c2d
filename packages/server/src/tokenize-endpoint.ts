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
 */
import type { Tokenizer } from "@keepquant/engine";
import { invalidRequest } from "./errors.js";

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

export type TokenizeResponse = { tokens: number[] } | { tokens: { id: number; piece: string | number[] }[] };

export function tokenizeRoute(tokenizer: Tokenizer, raw: unknown): TokenizeResponse {
  const vocabSize = tokenizer.vocabSize;
  const body = requireBody(raw, TOKENIZE_FIELDS);
  const addSpecial = flag(body, "add_special", false);
  const parseSpecial = flag(body, "parse_special", true);
  const withPieces = flag(body, "with_pieces", false);
  const content = body["content"];
  let parts: (string | number)[];
  if (typeof content === "string") parts = [content];
  else if (Array.isArray(content)) {
    parts = content.map((item, i) => (typeof item === "string" ? item : checkId(item, `content[${i}]`, vocabSize)));
  } else {
    throw invalidRequest(
      "content",
      `content must be a string or an array of strings and token ids, got ${typeName(content)}`,
      "invalid_type",
    );
  }
  const ids: number[] = [];
  parts.forEach((part, i) => {
    if (typeof part === "number") ids.push(part);
    else ids.push(...tokenizer.encode(part, { addSpecial: addSpecial && i === 0, parseSpecial }));
  });
  if (!withPieces) return { tokens: ids };
  return {
    tokens: ids.map((id) => {
      const bytes = tokenizer.tokenToPiece(id, { special: true });
      return { id, piece: isValidUtf8(bytes) ? new TextDecoder("utf-8", { ignoreBOM: true }).decode(bytes) : Array.from(bytes) };
    }),
  };
}

export function detokenizeRoute(tokenizer: Tokenizer, raw: unknown): { content: string } {
  const vocabSize = tokenizer.vocabSize;
  const body = requireBody(raw, DETOKENIZE_FIELDS);
  const tokens = body["tokens"];
  if (!Array.isArray(tokens))
    throw invalidRequest("tokens", `tokens must be an array of token ids, got ${typeName(tokens)}`, "invalid_type");
  const ids = tokens.map((id, i) => checkId(id, `tokens[${i}]`, vocabSize));
  return { content: tokenizer.decode(ids, { special: true }) };
}
