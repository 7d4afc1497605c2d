export * from "./ggml.js";
export * from "./llama.js";
