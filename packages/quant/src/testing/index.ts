/** Test helpers for providers of the keep-quant contract: `@keepquant/quant/testing`. */
export * from "./envelope.js";
export * from "./sweep.js";
export * from "./block-layout.js";
