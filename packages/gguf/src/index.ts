export * from "./ggml-type.js";
