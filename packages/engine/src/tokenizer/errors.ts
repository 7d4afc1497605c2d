/**
 * Typed errors of the tokenizer, sampling and chat modules. Each carries a stable `code` and a
 * `Symbol.for` marker so `isInstance` works across duplicate copies of the package.
 */
const TOKENIZER_ERROR_MARKER = Symbol.for("@keepquant/engine.tokenizer-error");

export type TokenizerErrorCode =
  /** A required tokenizer.* key is missing from the GGUF metadata or vocabulary JSON. */
  | "TOKENIZER_MISSING_KEY"
  /** A key has the wrong type or an inconsistent length. */
  | "TOKENIZER_BAD_KEY"
  /** tokenizer.ggml.model is not "gpt2" (byte-level BPE). */
  | "TOKENIZER_UNSUPPORTED_MODEL"
  /** tokenizer.ggml.pre is not one we implement ("qwen35", "qwen2"). */
  | "TOKENIZER_UNSUPPORTED_PRE"
  /** The same token text appears twice in the vocabulary. */
  | "TOKENIZER_DUPLICATE_TOKEN"
  /** A token id outside [0, vocabSize). */
  | "TOKENIZER_BAD_TOKEN_ID"
  /** An option of an encode call is out of range (sliceSteps). */
  | "TOKENIZER_BAD_OPTION"
  /** A sampling parameter is out of range. */
  | "SAMPLING_BAD_PARAM"
  /** A chat template failed to parse or render. */
  | "CHAT_TEMPLATE_ERROR";

export interface TokenizerErrorDetails {
  /** The key, field or parameter that was wrong. */
  field?: string;
  cause?: unknown;
}

export class TokenizerError extends Error {
  readonly [TOKENIZER_ERROR_MARKER] = true;
  readonly code: TokenizerErrorCode;
  readonly field: string | undefined;

  constructor(code: TokenizerErrorCode, message: string, details: TokenizerErrorDetails = {}) {
    super(message, details.cause === undefined ? undefined : { cause: details.cause });
    this.name = new.target.name;
    this.code = code;
    this.field = details.field;
  }

  /** Works across duplicate copies of this package. */
  static isInstance(value: unknown): value is TokenizerError {
    return typeof value === "object" && value !== null && (value as Record<symbol, unknown>)[TOKENIZER_ERROR_MARKER] === true;
  }
}
