export * from "./ggml.js";
