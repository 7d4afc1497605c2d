/**
 * Test and script support (not exported from the package): a tensor-less qwen35 GGUF carrying a
 * TokenizerVocab, which llama.cpp loads with vocab_only to act as the tokenizer oracle.
 */
import { GgufValueType, QWEN35_TEST_SHAPE, type GgufMetadataEntry, gguf, qwen35Metadata, writeGguf } from "@keepquant/gguf";
import { SPECIAL_TOKEN_KEYS, type TokenizerVocab, TokenType } from "./vocab.js";

/**
 * The qwen35 header keys llama.cpp requires, as the gguf package writes them for its small test
 * shape (no tensors follow); the tokenizer keys come from the vocabulary below.
 */
function qwen35HeaderKeys(vocab: TokenizerVocab): GgufMetadataEntry[] {
  const spec = {
    ...QWEN35_TEST_SHAPE,
    vocab: vocab.tokens.length,
    tokenizer: { tokens: [...vocab.tokens] },
    name: "keepquant tokenizer fixture",
  };
  return qwen35Metadata(spec).filter((entry) => !entry.key.startsWith("tokenizer."));
}

/** tokenizer.* metadata entries of a vocabulary (as a converter writes them). */
export function vocabGgufMetadata(vocab: TokenizerVocab): GgufMetadataEntry[] {
  const entries: GgufMetadataEntry[] = [
    gguf.str("tokenizer.ggml.model", vocab.model),
    gguf.str("tokenizer.ggml.pre", vocab.pre),
    gguf.arr("tokenizer.ggml.tokens", GgufValueType.STRING, [...vocab.tokens]),
    gguf.arr(
      "tokenizer.ggml.token_type",
      GgufValueType.INT32,
      vocab.tokenTypes ? Array.from(vocab.tokenTypes) : vocab.tokens.map(() => TokenType.NORMAL),
    ),
    gguf.arr("tokenizer.ggml.merges", GgufValueType.STRING, [...vocab.merges]),
  ];
  const written = new Set<string>();
  for (const [name, suffix] of SPECIAL_TOKEN_KEYS) {
    const id = vocab.specials[name];
    if (id === undefined || written.has(name)) continue;
    written.add(name);
    entries.push(gguf.u32(`tokenizer.ggml.${suffix}`, id));
  }
  if (vocab.addBos !== undefined) entries.push(gguf.bool("tokenizer.ggml.add_bos_token", vocab.addBos));
  if (vocab.addEos !== undefined) entries.push(gguf.bool("tokenizer.ggml.add_eos_token", vocab.addEos));
  if (vocab.chatTemplate !== undefined) entries.push(gguf.str("tokenizer.chat_template", vocab.chatTemplate));
  return entries;
}

/** A tensor-less qwen35 GGUF holding the vocabulary (for llama.cpp's vocab_only load). */
export function vocabOnlyGguf(vocab: TokenizerVocab): Uint8Array {
  return writeGguf({ metadata: [...qwen35HeaderKeys(vocab), ...vocabGgufMetadata(vocab)], tensors: [] });
}
