export * from "./ggml.js";
export * from "./llama.js";
export * from "./ggml-rows.js";
export * from "./ggml-cpu.js";
export * from "./cpu-kernels.js";
