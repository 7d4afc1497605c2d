import { F16_TO_F32, roundRowBf16, roundRowF16 } from "../numerics/half.js";
import type { PackedMatrix } from "./weights.js";

/** Numerics of the engine: `llama` converts activations to each weight type's vec_dot_type
 * (as llama.cpp's CPU backend); `bf16` is the keep-quant contract (weights rounded once to bf16);
 * `exact` is a test/diagnostic reference (weights decoded exactly, f32 activations, f64
 * accumulation, exact embedding rows; TypeScript only, slow). */
export type Numerics = "llama" | "bf16" | "exact";

/**
 * Computes `y[t, n] = sum_k W[n, k] * x[t, k]` for `t < m` with `W` kept packed. `x` is `[m, cols]`
 * row-major, `y` is `[m, rows]`. Implementations must not keep references to `x` or `y`.
 */
export interface MatmulProvider {
  readonly name: string;
  /** ggml type ids this provider computes in the given numerics. */
  supports(type: number): boolean;
  matmul(weight: PackedMatrix, x: Float32Array, m: number, y: Float32Array): void;
}

/** Decodes one packed row to f32, bit-exact (the quant package's dequantizeRow). */
export type DequantizeRow = (type: number, src: Uint8Array, dst: Float32Array) => void;

const F32 = 0;
const F16 = 1;
const BF16 = 30;

/** Decodes row `row` of `weight` into `dst[0, cols)`. F32/F16/BF16 inline; others through `dequantize`. */
export function decodeRow(
  weight: PackedMatrix,
  row: number,
  dst: Float32Array,
  dequantize: DequantizeRow | undefined,
): void {
  const cols = weight.cols;
  const byteOffset = weight.data.byteOffset + row * weight.rowBytes;
  if (weight.type === F32) {
    dst.set(new Float32Array(weight.data.buffer, byteOffset, cols));
  } else if (weight.type === F16) {
    const src = new Uint16Array(weight.data.buffer, byteOffset, cols);
    for (let i = 0; i < cols; i++) dst[i] = F16_TO_F32[src[i]!]!;
  } else if (weight.type === BF16) {
    const src = new Uint16Array(weight.data.buffer, byteOffset, cols);
    const out = new Uint32Array(dst.buffer, dst.byteOffset, cols);
    for (let i = 0; i < cols; i++) out[i] = src[i]! << 16;
  } else if (dequantize) {
    dequantize(weight.type, weight.data.subarray(row * weight.rowBytes, (row + 1) * weight.rowBytes), dst.subarray(0, cols));
  } else {
    throw new Error(`no row decoder for ggml type ${weight.typeName} (${weight.name})`);
  }
}

function dotRows(w: Float32Array, wOffset: number, x: Float32Array, xOffset: number, n: number): number {
  let s0 = 0;
  let s1 = 0;
  let s2 = 0;
  let s3 = 0;
  let i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += w[wOffset + i]! * x[xOffset + i]!;
    s1 += w[wOffset + i + 1]! * x[xOffset + i + 1]!;
    s2 += w[wOffset + i + 2]! * x[xOffset + i + 2]!;
    s3 += w[wOffset + i + 3]! * x[xOffset + i + 3]!;
  }
  for (; i < n; i++) s0 += w[wOffset + i]! * x[xOffset + i]!;
  return s0 + s1 + s2 + s3;
}

/**
 * Pure TypeScript provider. `llama` numerics: F32 weights see f32 activations, F16 weights f16-rounded
 * activations, BF16 weights bf16-rounded activations (the vec_dot_type rule); quantized weights are
 * computed by `quantizedLlama` when given (integer dots against Q8_0/Q8_1/Q8_K activations), else
 * refused. `bf16` numerics: every weight row decoded and rounded once to bf16, f32 activations.
 * `exact` (or `f32`): every weight row decoded exactly, f32 activations, no rounding anywhere.
 * Products accumulate in f64 and round to f32 once per output.
 */
export class TsMatmulProvider implements MatmulProvider {
  readonly name: string;
  private rowScratch = new Float32Array(0);
  private xScratch = new Float32Array(0);

  constructor(
    private readonly numerics: Numerics | "f32",
    private readonly dequantize: DequantizeRow | undefined,
    private readonly supportedQuantized: ReadonlySet<number>,
    private readonly quantizedLlama?: (weight: PackedMatrix, x: Float32Array, m: number, y: Float32Array) => void,
    name?: string,
  ) {
    this.name = name ?? `ts-reference-${numerics}`;
  }

  supports(type: number): boolean {
    if (type === F32 || type === F16 || type === BF16) return true;
    if (!this.supportedQuantized.has(type)) return false;
    return this.numerics === "llama" ? this.quantizedLlama !== undefined : this.dequantize !== undefined;
  }

  matmul(weight: PackedMatrix, x: Float32Array, m: number, y: Float32Array): void {
    const { rows, cols, type } = weight;
    if (this.numerics === "llama" && type !== F32 && type !== F16 && type !== BF16) {
      this.quantizedLlama!(weight, x, m, y);
      return;
    }
    let xs = x;
    if (this.numerics === "llama" && (type === F16 || type === BF16)) {
      if (this.xScratch.length < m * cols) this.xScratch = new Float32Array(m * cols);
      xs = this.xScratch;
      for (let t = 0; t < m; t++) {
        if (type === F16) roundRowF16(x, t * cols, xs, t * cols, cols);
        else roundRowBf16(x, t * cols, xs, t * cols, cols);
      }
    }
    if (this.rowScratch.length < cols) this.rowScratch = new Float32Array(cols);
    const row = this.rowScratch;
    const f32View = type === F32 && this.numerics !== "bf16";
    const wAll = f32View ? new Float32Array(weight.data.buffer, weight.data.byteOffset, rows * cols) : undefined;
    for (let n = 0; n < rows; n++) {
      let w: Float32Array;
      let wOffset: number;
      if (wAll) {
        w = wAll;
        wOffset = n * cols;
      } else {
        decodeRow(weight, n, row, this.dequantize);
        if (this.numerics === "bf16") roundRowBf16(row, 0, row, 0, cols);
        w = row;
        wOffset = 0;
      }
      for (let t = 0; t < m; t++) y[t * rows + n] = dotRows(w, wOffset, xs, t * cols, cols);
    }
  }
}
