/**
 * What the reference and the wasm-simd providers set up alike for one matmulBTQuantGrouped call (after
 * checking its arguments): the output, the row decoder, and the outputs that use each weight group, so
 * each slice of a group is decoded once for all of them.
 */
import { GGML_TYPE_TRAITS } from "@keepquant/gguf";
import { type EnvSource, type MatmulBTQuantGroupedArgs, type MatmulBTQuantGroupedShape, chunkRows } from "./contract.js";
import { type DequantizeKernel, dequantizeKernel } from "./dequantize.js";

export interface GroupedMatmulPlan {
  /** args.out, or a new [P, M, N] */
  out: Float32Array;
  /** the weight type's dequantizer */
  kernel: DequantizeKernel;
  blocksPerRow: number;
  /** rows per chunk (the contract's chunk policy) */
  chunk: number;
  /** group -> the outputs (0..P-1) that use it, in output order */
  users: Map<number, number[]>;
}

export function planGroupedMatmul(args: MatmulBTQuantGroupedArgs, shape: MatmulBTQuantGroupedShape, env: EnvSource): GroupedMatmulPlan {
  const { n, k, m, p, groupOf } = shape;
  const out = args.out ?? new Float32Array(p * m * n);
  const kernel = dequantizeKernel(args.weight.type, "MatmulBTQuantGrouped");
  const blocksPerRow = k / GGML_TYPE_TRAITS[args.weight.type].blockSize;
  const chunk = chunkRows(n, k, env);
  const users = new Map<number, number[]>();
  for (let i = 0; i < p; i++) {
    const g = groupOf[i]!;
    const list = users.get(g);
    if (list) list.push(i);
    else users.set(g, [i]);
  }
  return { out, kernel, blocksPerRow, chunk, users };
}
