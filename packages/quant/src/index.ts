export * from "./errors.js";
export * from "./fp.js";
export * from "./dequantize.js";
export * from "./contract.js";
export * from "./reference-provider.js";
export * from "./quantize.js";
export * from "./llama-numerics/index.js";
export { wasmDequantizeUnavailableReason } from "./wasm-dequantize.js";
export * from "./wasm-provider.js";
