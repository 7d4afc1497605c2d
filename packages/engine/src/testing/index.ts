/**
 * `@keepquant/engine/testing`: helpers for the repository's dev tools and benchmarks (tokenizer
 * fixture files and vocabularies). Needs no dev-only package; product code never imports it (a
 * repository check in tools/repo-checks enforces that).
 */
export { vocabGgufMetadata, vocabOnlyGguf } from "../tokenizer/fixture-gguf.js";
export { growVocab, QWEN35_VOCAB_SIZE } from "../tokenizer/test-support.js";
