/**
 * `@keepquant/engine/spec`: the TypeScript forward's matmul building blocks, for diagnostics that
 * swap a loaded engine's matmul providers (tools/bench's bf16-sensitivity and residual-gain): the
 * TypeScript reference provider, the row decoder, the quant package's row dequantizer as the
 * engine passes it, and the list of a model's packed matrices. Needs no dev-only package.
 */
export { TsMatmulProvider, decodeRow, type DenseKernel, type DequantizeRow, type MatmulProvider, type Numerics } from "./model/matmul.js";
export { allMatrices, quantDequantizeRow } from "./model/providers.js";
export type { ModelWeights, PackedMatrix } from "./model/weights.js";
