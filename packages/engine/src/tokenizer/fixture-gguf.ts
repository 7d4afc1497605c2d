/**
 * Test and script support (not exported from the package): a tensor-less qwen35 GGUF carrying a
 * TokenizerVocab, which llama.cpp loads with vocab_only to act as the tokenizer oracle.
 */
import { GgufValueType, type GgufMetadataEntry, gguf, writeGguf } from "@keepquant/gguf";
import { SPECIAL_TOKEN_KEYS, type TokenizerVocab, TokenType } from "./vocab.js";

/** The qwen35 header keys llama.cpp requires (values of a tiny model; no tensors follow). */
function qwen35HeaderKeys(): GgufMetadataEntry[] {
  return [
    gguf.str("general.architecture", "qwen35"),
    gguf.str("general.name", "keepquant tokenizer fixture"),
    gguf.u32("qwen35.context_length", 4096),
    gguf.u32("qwen35.embedding_length", 64),
    gguf.u32("qwen35.block_count", 2),
    gguf.u32("qwen35.feed_forward_length", 128),
    gguf.u32("qwen35.attention.head_count", 2),
    gguf.u32("qwen35.attention.head_count_kv", 1),
    gguf.u32("qwen35.attention.key_length", 32),
    gguf.u32("qwen35.attention.value_length", 32),
    gguf.f32("qwen35.attention.layer_norm_rms_epsilon", 1e-6),
    gguf.arr("qwen35.rope.dimension_sections", GgufValueType.INT32, [4, 4, 0, 0]),
    gguf.u32("qwen35.rope.dimension_count", 8),
    gguf.f32("qwen35.rope.freq_base", 10_000_000),
    gguf.u32("qwen35.ssm.conv_kernel", 4),
    gguf.u32("qwen35.ssm.state_size", 16),
    gguf.u32("qwen35.ssm.group_count", 1),
    gguf.u32("qwen35.ssm.time_step_rank", 2),
    gguf.u32("qwen35.ssm.inner_size", 32),
    gguf.u32("qwen35.full_attention_interval", 2),
  ];
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
  return writeGguf({ metadata: [...qwen35HeaderKeys(), ...vocabGgufMetadata(vocab)], tensors: [] });
}
