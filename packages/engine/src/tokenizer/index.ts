export * from "./errors.js";
export * from "./byte-unicode.js";
export * from "./pre-tokenize.js";
export * from "./vocab.js";
export * from "./tokenizer.js";
export * from "./streaming.js";
