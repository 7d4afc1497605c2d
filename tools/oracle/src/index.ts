export * from "./ggml.js";
export * from "./llama.js";
export * from "./cpu-kernels.js";
