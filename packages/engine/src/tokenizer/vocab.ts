/**
 * The tokenizer's vocabulary as read from GGUF `tokenizer.*` keys (or the same fields as JSON),
 * and the token attributes llama.cpp derives from it.
 */
import { TokenizerError } from "./errors.js";

/** tokenizer.ggml.token_type values (llama_token_type). */
export enum TokenType {
  UNDEFINED = 0,
  NORMAL = 1,
  UNKNOWN = 2,
  CONTROL = 3,
  USER_DEFINED = 4,
  UNUSED = 5,
  BYTE = 6,
}

/** Attribute bits (llama_token_attr). A token type becomes one bit; auto-detection adds bits. */
export const TokenAttr = {
  UNDEFINED: 0,
  UNKNOWN: 1 << 0,
  UNUSED: 1 << 1,
  NORMAL: 1 << 2,
  CONTROL: 1 << 3,
  USER_DEFINED: 1 << 4,
  BYTE: 1 << 5,
} as const;

/** The attribute bit of each token type that has one. */
const TOKEN_TYPE_ATTR: Readonly<Partial<Record<number, number>>> = {
  [TokenType.UNKNOWN]: TokenAttr.UNKNOWN,
  [TokenType.UNUSED]: TokenAttr.UNUSED,
  [TokenType.NORMAL]: TokenAttr.NORMAL,
  [TokenType.CONTROL]: TokenAttr.CONTROL,
  [TokenType.USER_DEFINED]: TokenAttr.USER_DEFINED,
  [TokenType.BYTE]: TokenAttr.BYTE,
};

export function tokenTypeToAttr(type: number): number {
  return TOKEN_TYPE_ATTR[type] ?? TokenAttr.UNDEFINED;
}

/** Special token ids as stored in the file (`tokenizer.ggml.<name>_token_id`); absent = not set. */
export interface SpecialTokenIds {
  bos?: number;
  eos?: number;
  eot?: number;
  eom?: number;
  unk?: number;
  sep?: number;
  pad?: number;
  mask?: number;
  fimPre?: number;
  fimSuf?: number;
  fimMid?: number;
  fimPad?: number;
  fimRep?: number;
  fimSep?: number;
}

/**
 * A byte-level BPE vocabulary. This is also the format of goldens/tokenizer/vocab.json:
 * `{ model, pre, tokens, tokenTypes, merges, specials, addBos, addEos, chatTemplate? }`.
 */
export interface TokenizerVocab {
  /** tokenizer.ggml.model; only "gpt2" is supported. */
  model: string;
  /** tokenizer.ggml.pre */
  pre: string;
  /** tokenizer.ggml.tokens: id -> text (byte-level for normal tokens). */
  tokens: readonly string[];
  /** tokenizer.ggml.token_type (TokenType per id); absent = all NORMAL. */
  tokenTypes?: ArrayLike<number>;
  /** tokenizer.ggml.merges: "left right", rank = index. */
  merges: readonly string[];
  specials: SpecialTokenIds;
  /** tokenizer.ggml.add_bos_token / add_eos_token; absent = false for BPE. */
  addBos?: boolean;
  addEos?: boolean;
  /** tokenizer.ggml.add_space_prefix (only strips a leading space when detokenizing). */
  addSpacePrefix?: boolean;
  /** tokenizer.chat_template */
  chatTemplate?: string;
}

/** GGUF key suffix (after "tokenizer.ggml.") of each special id, in llama.cpp's reading order. */
export const SPECIAL_TOKEN_KEYS: ReadonlyArray<readonly [keyof SpecialTokenIds, string]> = [
  ["bos", "bos_token_id"],
  ["eos", "eos_token_id"],
  ["eot", "eot_token_id"],
  ["eom", "eom_token_id"],
  ["unk", "unknown_token_id"],
  ["sep", "seperator_token_id"],
  ["pad", "padding_token_id"],
  ["mask", "mask_token_id"],
  ["fimPre", "fim_pre_token_id"],
  ["fimSuf", "fim_suf_token_id"],
  ["fimMid", "fim_mid_token_id"],
  ["fimPad", "fim_pad_token_id"],
  ["fimRep", "fim_rep_token_id"],
  ["fimSep", "fim_sep_token_id"],
  // deprecated spellings
  ["fimPre", "prefix_token_id"],
  ["fimSuf", "suffix_token_id"],
  ["fimMid", "middle_token_id"],
];

/** Anything with GGUF-style metadata: `@keepquant/gguf`'s GgufFile fits. */
export interface GgufMetadataSource {
  metadata: ReadonlyMap<string, { value: unknown }>;
}

function toStringArray(value: unknown, key: string): string[] {
  if (!Array.isArray(value) || !value.every((item) => typeof item === "string")) {
    throw new TokenizerError("TOKENIZER_BAD_KEY", `${key} must be an array of strings`, { field: key });
  }
  return value as string[];
}

function toNumber(value: unknown): number | undefined {
  if (typeof value === "number") return value;
  if (typeof value === "bigint") return Number(value);
  return undefined;
}

/** Reads the tokenizer.* keys of a GGUF file. */
export function vocabFromGguf(file: GgufMetadataSource): TokenizerVocab {
  const get = (key: string): unknown => file.metadata.get(key)?.value;
  const model = get("tokenizer.ggml.model");
  if (typeof model !== "string") {
    throw new TokenizerError("TOKENIZER_MISSING_KEY", "GGUF has no tokenizer.ggml.model", {
      field: "tokenizer.ggml.model",
    });
  }
  const tokensValue = get("tokenizer.ggml.tokens");
  if (tokensValue === undefined) {
    throw new TokenizerError("TOKENIZER_MISSING_KEY", "GGUF has no tokenizer.ggml.tokens", {
      field: "tokenizer.ggml.tokens",
    });
  }
  const tokens = toStringArray(tokensValue, "tokenizer.ggml.tokens");
  const mergesValue = get("tokenizer.ggml.merges");
  if (mergesValue === undefined) {
    throw new TokenizerError("TOKENIZER_MISSING_KEY", "GGUF has no tokenizer.ggml.merges", {
      field: "tokenizer.ggml.merges",
    });
  }
  const merges = toStringArray(mergesValue, "tokenizer.ggml.merges");
  const typesValue = get("tokenizer.ggml.token_type");
  let tokenTypes: ArrayLike<number> | undefined;
  if (typesValue !== undefined) {
    if (!(typesValue instanceof Int32Array) && !Array.isArray(typesValue)) {
      throw new TokenizerError("TOKENIZER_BAD_KEY", "tokenizer.ggml.token_type must be an int32 array", {
        field: "tokenizer.ggml.token_type",
      });
    }
    tokenTypes = typesValue as ArrayLike<number>;
  }
  const specials: SpecialTokenIds = {};
  for (const [name, suffix] of SPECIAL_TOKEN_KEYS) {
    const id = toNumber(get(`tokenizer.ggml.${suffix}`));
    if (id !== undefined) specials[name] = id;
  }
  const flag = (key: string): boolean | undefined => {
    const value = get(key);
    return typeof value === "boolean" ? value : undefined;
  };
  const chatTemplate = get("tokenizer.chat_template");
  const pre = get("tokenizer.ggml.pre");
  const vocab: TokenizerVocab = {
    model,
    pre: typeof pre === "string" ? pre : "",
    tokens,
    merges,
    specials,
  };
  if (tokenTypes) vocab.tokenTypes = tokenTypes;
  const addBos = flag("tokenizer.ggml.add_bos_token");
  if (addBos !== undefined) vocab.addBos = addBos;
  const addEos = flag("tokenizer.ggml.add_eos_token");
  if (addEos !== undefined) vocab.addEos = addEos;
  const addSpacePrefix = flag("tokenizer.ggml.add_space_prefix");
  if (addSpacePrefix !== undefined) vocab.addSpacePrefix = addSpacePrefix;
  if (typeof chatTemplate === "string") vocab.chatTemplate = chatTemplate;
  return vocab;
}

/** Checks a parsed vocab.json (unknown input) and returns it typed. */
export function vocabFromJson(json: unknown): TokenizerVocab {
  if (typeof json !== "object" || json === null) {
    throw new TokenizerError("TOKENIZER_BAD_KEY", "vocabulary JSON must be an object");
  }
  const record = json as Record<string, unknown>;
  const tokens = toStringArray(record["tokens"], "tokens");
  const merges = toStringArray(record["merges"], "merges");
  const types = record["tokenTypes"];
  if (types !== undefined && !(Array.isArray(types) && types.every((t) => Number.isInteger(t)))) {
    throw new TokenizerError("TOKENIZER_BAD_KEY", "tokenTypes must be an array of integers", { field: "tokenTypes" });
  }
  const specialsValue = record["specials"] ?? {};
  if (typeof specialsValue !== "object" || specialsValue === null) {
    throw new TokenizerError("TOKENIZER_BAD_KEY", "specials must be an object", { field: "specials" });
  }
  const specials: SpecialTokenIds = {};
  for (const [name] of SPECIAL_TOKEN_KEYS) {
    const id = (specialsValue as Record<string, unknown>)[name];
    if (typeof id === "number") specials[name] = id;
  }
  const vocab: TokenizerVocab = {
    model: typeof record["model"] === "string" ? record["model"] : "gpt2",
    pre: typeof record["pre"] === "string" ? record["pre"] : "qwen35",
    tokens,
    merges,
    specials,
  };
  if (types !== undefined) vocab.tokenTypes = types as number[];
  if (typeof record["addBos"] === "boolean") vocab.addBos = record["addBos"];
  if (typeof record["addEos"] === "boolean") vocab.addEos = record["addEos"];
  if (typeof record["addSpacePrefix"] === "boolean") vocab.addSpacePrefix = record["addSpacePrefix"];
  if (typeof record["chatTemplate"] === "string") vocab.chatTemplate = record["chatTemplate"];
  return vocab;
}
