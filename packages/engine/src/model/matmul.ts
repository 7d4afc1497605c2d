import { GgmlType, GGML_TYPE_TRAITS } from "@keepquant/gguf";
import {
  checkGroupedMatmulShape,
  MATMUL_BT_QUANT_GROUPED,
  runDenseGroups,
  UnsupportedGgmlTypeError,
  type MatmulBTQuantGroupedArgs,
  type MatmulNumerics,
  type MatmulProvider,
  type PackedWeight,
} from "@keepquant/quant";
import { F16_TO_F32, roundRowBf16, roundRowF16 } from "../numerics/half.js";

/** The engine's matmul providers are @keepquant/quant's (one interface for every numerics). */
export type { MatmulProvider };

/** Numerics of the engine: `llama` converts activations to each weight type's vec_dot_type
 * (as llama.cpp's CPU backend); `bf16` is the keep-quant contract (weights rounded once to bf16;
 * other encodings in `llama` numerics); `exact` is a test/diagnostic reference (weights decoded
 * exactly, f32 activations, f64 accumulation, exact embedding rows; TypeScript only, slow). */
export type Numerics = MatmulNumerics;

/** Decodes one packed row to f32, bit-exact (the quant package's dequantizeRow). */
export type DequantizeRow = (type: GgmlType, src: Uint8Array, dst: Float32Array) => void;

/** A dense kernel: y [m, rows] = x [m, cols] W^T for a one-group weight. */
export type DenseKernel = (weight: PackedWeight, x: Float32Array, m: number, y: Float32Array) => void;

const FLOAT_TYPES: ReadonlySet<GgmlType> = new Set([GgmlType.F32, GgmlType.F16, GgmlType.BF16]);

function rowBytesOf(weight: PackedWeight): number {
  const { blockSize, typeSize } = GGML_TYPE_TRAITS[weight.type];
  return (weight.cols / blockSize) * typeSize;
}

/** Decodes row `row` of `weight` into `dst[0, cols)`. F32/F16/BF16 inline; others through `dequantize`. */
export function decodeRow(weight: PackedWeight, row: number, dst: Float32Array, dequantize: DequantizeRow | undefined): void {
  const cols = weight.cols;
  const rowBytes = rowBytesOf(weight);
  const byteOffset = weight.data.byteOffset + row * rowBytes;
  if (weight.type === GgmlType.F32) {
    dst.set(new Float32Array(weight.data.buffer, byteOffset, cols));
  } else if (weight.type === GgmlType.F16) {
    const src = new Uint16Array(weight.data.buffer, byteOffset, cols);
    for (let i = 0; i < cols; i++) dst[i] = F16_TO_F32[src[i]!]!;
  } else if (weight.type === GgmlType.BF16) {
    const src = new Uint16Array(weight.data.buffer, byteOffset, cols);
    const out = new Uint32Array(dst.buffer, dst.byteOffset, cols);
    for (let i = 0; i < cols; i++) out[i] = src[i]! << 16;
  } else if (dequantize) {
    dequantize(weight.type, weight.data.subarray(row * rowBytes, (row + 1) * rowBytes), dst.subarray(0, cols));
  } else {
    throw new Error(`no row decoder for ggml type ${GGML_TYPE_TRAITS[weight.type].name}`);
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
 * dotRows for activation rows t and t + 1 (at `xOffset` and `xOffset + n`) against one weight row, each
 * output summed exactly as dotRows sums it (the same four accumulators, the same order): the same bits,
 * with each weight element read once for both rows. Writes y[yAt] and y[yAt + yStride].
 */
function dotRowsPair(
  w: Float32Array,
  wOffset: number,
  x: Float32Array,
  xOffset: number,
  n: number,
  y: Float32Array,
  yAt: number,
  yStride: number,
): void {
  let a0 = 0;
  let a1 = 0;
  let a2 = 0;
  let a3 = 0;
  let b0 = 0;
  let b1 = 0;
  let b2 = 0;
  let b3 = 0;
  const xb = xOffset + n;
  let i = 0;
  for (; i + 4 <= n; i += 4) {
    const w0 = w[wOffset + i]!;
    const w1 = w[wOffset + i + 1]!;
    const w2 = w[wOffset + i + 2]!;
    const w3 = w[wOffset + i + 3]!;
    a0 += w0 * x[xOffset + i]!;
    a1 += w1 * x[xOffset + i + 1]!;
    a2 += w2 * x[xOffset + i + 2]!;
    a3 += w3 * x[xOffset + i + 3]!;
    b0 += w0 * x[xb + i]!;
    b1 += w1 * x[xb + i + 1]!;
    b2 += w2 * x[xb + i + 2]!;
    b3 += w3 * x[xb + i + 3]!;
  }
  for (; i < n; i++) {
    a0 += w[wOffset + i]! * x[xOffset + i]!;
    b0 += w[wOffset + i]! * x[xb + i]!;
  }
  y[yAt] = a0 + a1 + a2 + a3;
  y[yAt + yStride] = b0 + b1 + b2 + b3;
}

/**
 * Pure TypeScript provider (the reference tier, priority 0). `llama` numerics: F32 weights see f32
 * activations, F16 weights f16-rounded activations, BF16 weights bf16-rounded activations (the
 * vec_dot_type rule); quantized weights are computed by `quantizedLlama` when given (integer dots
 * against Q8_0/Q8_1/Q8_K activations), else refused. `bf16` numerics: every weight row decoded and
 * rounded once to bf16, f32 activations. `exact`: every weight row decoded exactly, f32
 * activations, no rounding anywhere. Products accumulate in f64 and round to f32 once per output.
 */
export class TsMatmulProvider implements MatmulProvider {
  readonly name: string;
  readonly priority = 0;
  private rowScratch = new Float32Array(0);
  private xScratch = new Float32Array(0);

  constructor(
    readonly numerics: Numerics,
    private readonly dequantize: DequantizeRow | undefined,
    private readonly supportedQuantized: ReadonlySet<GgmlType>,
    private readonly quantizedLlama?: DenseKernel,
    name?: string,
  ) {
    this.name = name ?? `ts-reference-${numerics}`;
  }

  supports(type: GgmlType): boolean {
    if (FLOAT_TYPES.has(type)) return true;
    if (!this.supportedQuantized.has(type)) return false;
    return this.numerics === "llama" ? this.quantizedLlama !== undefined : this.dequantize !== undefined;
  }

  matmulBTQuantGrouped(args: MatmulBTQuantGroupedArgs): Float32Array {
    const op = MATMUL_BT_QUANT_GROUPED;
    const shape = checkGroupedMatmulShape(args, op);
    if (!this.supports(args.weight.type)) {
      const supported = [...FLOAT_TYPES, ...this.supportedQuantized].filter((t) => this.supports(t));
      throw new UnsupportedGgmlTypeError(
        GGML_TYPE_TRAITS[args.weight.type].name,
        `${op} (${this.name})`,
        supported.map((t) => GGML_TYPE_TRAITS[t].name),
      );
    }
    return runDenseGroups(args, shape, (weight, x, y) => this.dense(weight, x, shape.m, y));
  }

  private dense(weight: PackedWeight, x: Float32Array, m: number, y: Float32Array): void {
    const { rows, cols, type } = weight;
    const float = FLOAT_TYPES.has(type);
    if (this.numerics === "llama" && !float) {
      this.quantizedLlama!(weight, x, m, y);
      return;
    }
    let xs = x;
    if (this.numerics === "llama" && (type === GgmlType.F16 || type === GgmlType.BF16)) {
      if (this.xScratch.length < m * cols) this.xScratch = new Float32Array(m * cols);
      xs = this.xScratch;
      for (let t = 0; t < m; t++) {
        if (type === GgmlType.F16) roundRowF16(x, t * cols, xs, t * cols, cols);
        else roundRowBf16(x, t * cols, xs, t * cols, cols);
      }
    }
    if (this.rowScratch.length < cols) this.rowScratch = new Float32Array(cols);
    const row = this.rowScratch;
    const f32View = type === GgmlType.F32 && this.numerics !== "bf16";
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
      let t = 0;
      for (; t + 2 <= m; t += 2) dotRowsPair(w, wOffset, xs, t * cols, cols, y, t * rows + n, rows);
      for (; t < m; t++) y[t * rows + n] = dotRows(w, wOffset, xs, t * cols, cols);
    }
  }
}
