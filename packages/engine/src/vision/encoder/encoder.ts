/**
 * The Qwen3.5 vision encoder (the `qwen3vl_merger` projector) as an executable specification: a
 * ViT over 2x2-merged patch groups with learned position embeddings, 2D rotary positions and a
 * patch merger into the language model's embedding width. The op order follows llama.cpp's graph
 * for this projector (tools/mtmd, the oracle), so its embeddings can be held to llama.cpp's:
 *
 *   patches = conv(W0, image) + conv(W1, image)   (the temporal pair of a still image)
 *   reorder into merge order (2x2 groups, row-major groups, row-major inside), + patch bias
 *   + position embeddings (bilinear, corners aligned, when the grid is not the trained one)
 *   layers: x += attn(LN1(x)) with 2D RoPE; x += FFN_gelu(LN2(x)); deepstack taps
 *   LN_post, 4 patches -> one row, mm0 -> gelu -> mm2; deepstack features appended per row
 *
 * Matmuls go through a `VisionMatmul` (the engine's providers), so the weights stay in their GGUF
 * encoding; every other op is f32 in ggml's order (./ggml-ops.ts).
 */
import { GGML_TYPE_TRAITS, GgmlType } from "@keepquant/gguf";
import type { MatmulProvider, PackedWeight } from "@keepquant/quant";
import { libm } from "../../model/forward.js";
import { fmaf } from "../../numerics/fma.js";
import { f32BitsToF16Bits } from "../../numerics/half.js";
import { ggmlVecDotF32 } from "../../numerics/ggml-expf.js";
import { geluRow, layerNorm, softMaxRow } from "./ggml-ops.js";

const fround = Math.fround;

/** y [m, weight.rows] = x [m, weight.cols] W^T. */
export type VisionMatmul = (weight: PackedWeight, x: Float32Array, m: number, y: Float32Array) => void;

/** A VisionMatmul over one of the engine's matmul providers (the keep-quant contract's dense arm). */
export function providerMatmul(provider: MatmulProvider): VisionMatmul {
  return (weight, x, m, y) => {
    provider.matmulBTQuantGrouped({ x, xGroups: 1, m, weight, p: 1, out: y });
  };
}

/** The hyperparameters the encoder computes with (read from the projector GGUF). */
export interface VisionEncoderDims {
  /** Patch side in pixels. */
  readonly patchSize: number;
  /** ViT width. */
  readonly hidden: number;
  readonly heads: number;
  /** FFN width. */
  readonly ffn: number;
  /** LayerNorm epsilon. */
  readonly eps: number;
  /** Side of the 2D merge (2 for this projector). */
  readonly merge: number;
  /** Output width: the language model's embedding length. */
  readonly projection: number;
  /** Side of the trained position-embedding grid (sqrt of its rows). */
  readonly positionSide: number;
}

export interface VisionLinear {
  readonly weight: PackedWeight;
  readonly bias: Float32Array;
}

export interface VisionNorm {
  readonly weight: Float32Array;
  readonly bias: Float32Array;
}

export interface VisionDeepstack {
  readonly norm: VisionNorm;
  readonly fc1: VisionLinear;
  readonly fc2: VisionLinear;
}

export interface VisionLayerWeights {
  readonly ln1: VisionNorm;
  readonly qkv: VisionLinear;
  readonly out: VisionLinear;
  readonly ln2: VisionNorm;
  readonly up: VisionLinear;
  readonly down: VisionLinear;
  readonly deepstack?: VisionDeepstack;
}

export interface VisionEncoderWeights {
  /** The two temporal halves of the patch convolution, [hidden, 3 * patch * patch] each (F32 or F16). */
  readonly patch: readonly [PackedWeight, PackedWeight];
  readonly patchBias: Float32Array;
  /** [positionSide^2, hidden], row-major over the trained grid. */
  readonly position: Float32Array;
  readonly preNorm?: VisionNorm;
  readonly layers: readonly VisionLayerWeights[];
  readonly postNorm?: VisionNorm;
  readonly mm0: VisionLinear;
  readonly mm2: VisionLinear;
}

/** A preprocessed image: f32 planes [3][height][width] (normalized), width and height multiples of patch * merge. */
export interface VisionInput {
  readonly pixels: Float32Array;
  readonly width: number;
  readonly height: number;
}

export interface VisionOutput {
  /** [tokens, projection * (1 + deepstack layers)] */
  readonly embeddings: Float32Array;
  readonly tokens: number;
  /** Merged-token grid: tokens = gridWidth * gridHeight. */
  readonly gridWidth: number;
  readonly gridHeight: number;
  readonly width: number;
}

/** Tap for debugging and tests: receives named intermediate tensors, [rows, width] row-major. */
export type VisionTap = (name: string, data: Float32Array, rows: number, width: number) => void;

/**
 * A convolution kernel as ggml_conv_2d uses it: its im2col buffer is F16 (for F32 and F16 kernels),
 * so the matmul sees F16 patches and converts the kernel to F16 too. An F32 kernel becomes an F16
 * copy here; the matmul's `llama` numerics then round the patches to f16 as ggml does.
 */
export function convKernelF16(weight: PackedWeight): PackedWeight {
  if (weight.type === GgmlType.F16) return weight;
  if (weight.type !== GgmlType.F32) {
    throw new RangeError(`patch embedding kernel is ${GGML_TYPE_TRAITS[weight.type].name}; F32 or F16 expected`);
  }
  const n = weight.rows * weight.cols;
  const src = new Uint32Array(weight.data.buffer, weight.data.byteOffset, n);
  const out = new Uint16Array(n);
  for (let i = 0; i < n; i++) out[i] = f32BitsToF16Bits(src[i]!);
  return { ...weight, type: GgmlType.F16, data: new Uint8Array(out.buffer) };
}

export class VisionEncoderSpec {
  private readonly patch: readonly [PackedWeight, PackedWeight];

  constructor(
    readonly dims: VisionEncoderDims,
    private readonly weights: VisionEncoderWeights,
    private readonly matmul: VisionMatmul,
  ) {
    this.patch = [convKernelF16(weights.patch[0]), convKernelF16(weights.patch[1])];
  }

  /** Output width of one image token. */
  get outputWidth(): number {
    const deepstack = this.weights.layers.filter((l) => l.deepstack).length;
    return this.dims.projection * (1 + deepstack);
  }

  encode(input: VisionInput, tap?: VisionTap): VisionOutput {
    const { patchSize: p, hidden: D, merge } = this.dims;
    const { width, height } = input;
    if (width % (p * merge) !== 0 || height % (p * merge) !== 0) {
      throw new RangeError(`image ${width}x${height} is not a multiple of ${p * merge} pixels on each side`);
    }
    if (input.pixels.length !== 3 * width * height) {
      throw new RangeError(`image pixels: expected ${3 * width * height} values for 3x${height}x${width}, got ${input.pixels.length}`);
    }
    const px = width / p;
    const py = height / p;
    const n = px * py;
    const order = mergeOrder(px, py, merge);

    const hidden = this.embedPatches(input, px, py, order, tap);
    tap?.("inp_pos_emb", hidden, n, D);
    if (this.weights.preNorm) {
      const w = this.weights.preNorm;
      for (let t = 0; t < n; t++) layerNorm(hidden, t * D, w.weight, w.bias, hidden, t * D, D, this.dims.eps);
    }

    const rope = this.ropeTables(order, px);
    const group = merge * merge;
    const deepstackRows: Float32Array[] = [];
    for (let il = 0; il < this.weights.layers.length; il++) {
      const layer = this.weights.layers[il]!;
      this.layer(layer, hidden, n, rope);
      tap?.(`layer_out-${il}`, hidden, n, D);
      if (layer.deepstack)
        deepstackRows.push(this.mergerFfn(hidden, n / group, layer.deepstack.norm, layer.deepstack.fc1, layer.deepstack.fc2));
    }

    if (this.weights.postNorm) {
      const w = this.weights.postNorm;
      for (let t = 0; t < n; t++) layerNorm(hidden, t * D, w.weight, w.bias, hidden, t * D, D, this.dims.eps);
    }
    const tokens = n / group;
    const main = this.mergerFfn(hidden, tokens, undefined, this.weights.mm0, this.weights.mm2);
    const P = this.dims.projection;
    const outWidth = P * (1 + deepstackRows.length);
    let embeddings = main;
    if (deepstackRows.length > 0) {
      embeddings = new Float32Array(tokens * outWidth);
      for (let t = 0; t < tokens; t++) {
        embeddings.set(main.subarray(t * P, (t + 1) * P), t * outWidth);
        deepstackRows.forEach((rows, k) => embeddings.set(rows.subarray(t * P, (t + 1) * P), t * outWidth + (k + 1) * P));
      }
    }
    tap?.("embeddings", embeddings, tokens, outWidth);
    return { embeddings, tokens, gridWidth: px / merge, gridHeight: py / merge, width: outWidth };
  }

  /** Patch embedding, merge reorder, bias and position embeddings: [n, D] in merge order. */
  private embedPatches(input: VisionInput, px: number, py: number, order: Int32Array, tap?: VisionTap): Float32Array {
    const { patchSize: p, hidden: D } = this.dims;
    const n = px * py;
    const K = 3 * p * p;
    // im2col: one row per patch (raster order), elements (channel, ky, kx)
    const cols = new Float32Array(n * K);
    const plane = input.width * input.height;
    for (let y = 0; y < py; y++) {
      for (let x = 0; x < px; x++) {
        const row = (y * px + x) * K;
        for (let c = 0; c < 3; c++) {
          for (let ky = 0; ky < p; ky++) {
            const src = c * plane + (y * p + ky) * input.width + x * p;
            cols.set(input.pixels.subarray(src, src + p), row + (c * p + ky) * p);
          }
        }
      }
    }
    const a = new Float32Array(n * D);
    const b = new Float32Array(n * D);
    this.matmul(this.patch[0], cols, n, a);
    this.matmul(this.patch[1], cols, n, b);
    const pos = this.positionEmbeddings(px, py);
    const out = new Float32Array(n * D);
    const bias = this.weights.patchBias;
    for (let t = 0; t < n; t++) {
      const src = order[t]! * D;
      for (let d = 0; d < D; d++) out[t * D + d] = fround(fround(a[src + d]! + b[src + d]!) + bias[d]!);
    }
    tap?.("patch_bias", out, n, D);
    for (let t = 0; t < n; t++) {
      const src = order[t]! * D;
      for (let d = 0; d < D; d++) out[t * D + d] = fround(out[t * D + d]! + pos[src + d]!);
    }
    return out;
  }

  /** Position embeddings for a px x py grid, raster order [n, D]: the trained grid, or its bilinear resize with corners aligned. */
  private positionEmbeddings(px: number, py: number): Float32Array {
    const { hidden: D, positionSide: S } = this.dims;
    const table = this.weights.position;
    if (px === S && py === S) return table;
    const out = new Float32Array(px * py * D);
    const sfx = px > 1 && S > 1 ? fround((px - 1) / (S - 1)) : fround(px / S);
    const sfy = py > 1 && S > 1 ? fround((py - 1) / (S - 1)) : fround(py / S);
    for (let i1 = 0; i1 < py; i1++) {
      const y = fround(i1 / sfy);
      const y0 = Math.min(Math.max(Math.floor(y), 0), S - 1);
      const y1 = Math.min(Math.max(Math.floor(y) + 1, 0), S - 1);
      const dy = Math.max(0, Math.min(fround(y - y0), 1));
      for (let i0 = 0; i0 < px; i0++) {
        const x = fround(i0 / sfx);
        const x0 = Math.min(Math.max(Math.floor(x), 0), S - 1);
        const x1 = Math.min(Math.max(Math.floor(x) + 1, 0), S - 1);
        const dx = Math.max(0, Math.min(fround(x - x0), 1));
        const wa = fround(fround(1 - dx) * fround(1 - dy));
        const wb = fround(dx * fround(1 - dy));
        const wc = fround(fround(1 - dx) * dy);
        const wd = fround(dx * dy);
        const o = (i1 * px + i0) * D;
        const ra = (y0 * S + x0) * D;
        const rb = (y0 * S + x1) * D;
        const rc = (y1 * S + x0) * D;
        const rd = (y1 * S + x1) * D;
        for (let d = 0; d < D; d++) {
          const v = fround(fround(table[ra + d]! * wa) + fround(table[rb + d]! * wb));
          out[o + d] = fround(fround(v + fround(table[rc + d]! * wc)) + fround(table[rd + d]! * wd));
        }
      }
    }
    return out;
  }

  /**
   * The rotary tables of every token: the first quarter of each head's dimension pairs turns with
   * the patch row, the second quarter with the patch column (ggml's vision RoPE, theta base 10000
   * over n_dims = head_dim / 2). Returns [n, headDim / 2] cosines then sines.
   */
  private ropeTables(order: Int32Array, px: number): { cos: Float32Array; sin: Float32Array } {
    const Dh = this.dims.hidden / this.dims.heads;
    const half = Dh / 2;
    const quarter = Dh / 4;
    const n = order.length;
    const thetaScale = libm.powf(10000, fround(-2 / half));
    const cos = new Float32Array(n * half);
    const sin = new Float32Array(n * half);
    for (let t = 0; t < n; t++) {
      const row = Math.floor(order[t]! / px);
      const col = order[t]! % px;
      let thetaRow = row;
      let thetaCol = col;
      for (let j = 0; j < half; j++) {
        const theta = j < quarter ? thetaRow : thetaCol;
        cos[t * half + j] = libm.cosf(theta);
        sin[t * half + j] = libm.sinf(theta);
        if (j < quarter) thetaRow = fround(thetaRow * thetaScale);
        else thetaCol = fround(thetaCol * thetaScale);
      }
    }
    return { cos, sin };
  }

  private layer(w: VisionLayerWeights, hidden: Float32Array, n: number, rope: { cos: Float32Array; sin: Float32Array }): void {
    const { hidden: D, heads: H, eps, ffn } = this.dims;
    const Dh = D / H;
    const half = Dh / 2;
    const normed = new Float32Array(n * D);
    for (let t = 0; t < n; t++) layerNorm(hidden, t * D, w.ln1.weight, w.ln1.bias, normed, t * D, D, eps);
    const qkv = new Float32Array(n * 3 * D);
    this.linear(w.qkv, normed, n, qkv);
    // RoPE on q and k of every head
    for (let t = 0; t < n; t++) {
      for (let part = 0; part < 2; part++) {
        for (let h = 0; h < H; h++) {
          const base = t * 3 * D + part * D + h * Dh;
          for (let i = 0; i < half; i++) {
            const c = rope.cos[t * half + i]!;
            const s = rope.sin[t * half + i]!;
            const x0 = qkv[base + i]!;
            const x1 = qkv[base + i + half]!;
            // as GCC contracts rotate_pairs in the haswell build: one product rounded, one fused
            qkv[base + i] = fmaf(x0, c, -fround(x1 * s));
            qkv[base + i + half] = fmaf(x0, s, fround(x1 * c));
          }
        }
      }
    }
    // attention over all patches (no mask): KQ with ggml_vec_dot_f32, soft max, then KQV
    const attn = new Float32Array(n * D);
    const q = new Float32Array(Dh);
    const k = new Float32Array(n * Dh);
    const vT = new Float32Array(Dh * n);
    const scores = new Float32Array(n);
    const scale = fround(1 / fround(Math.sqrt(Dh)));
    for (let h = 0; h < H; h++) {
      for (let s = 0; s < n; s++) {
        k.set(qkv.subarray(s * 3 * D + D + h * Dh, s * 3 * D + D + (h + 1) * Dh), s * Dh);
        for (let i = 0; i < Dh; i++) vT[i * n + s] = qkv[s * 3 * D + 2 * D + h * Dh + i]!;
      }
      for (let t = 0; t < n; t++) {
        q.set(qkv.subarray(t * 3 * D + h * Dh, t * 3 * D + (h + 1) * Dh));
        for (let s = 0; s < n; s++) scores[s] = ggmlVecDotF32(k, s * Dh, q, 0, Dh);
        softMaxRow(scores, n, scale);
        for (let i = 0; i < Dh; i++) attn[t * D + h * Dh + i] = ggmlVecDotF32(vT, i * n, scores, 0, n);
      }
    }
    const projected = new Float32Array(n * D);
    this.linear(w.out, attn, n, projected);
    for (let i = 0; i < n * D; i++) hidden[i] = fround(projected[i]! + hidden[i]!);
    for (let t = 0; t < n; t++) layerNorm(hidden, t * D, w.ln2.weight, w.ln2.bias, normed, t * D, D, eps);
    const up = new Float32Array(n * ffn);
    this.linear(w.up, normed, n, up);
    geluRow(up, 0, n * ffn);
    this.linear(w.down, up, n, projected);
    for (let i = 0; i < n * D; i++) hidden[i] = fround(hidden[i]! + projected[i]!);
  }

  /** Rows of `group` consecutive tokens concatenated, optionally normed, then fc1 -> gelu -> fc2. */
  private mergerFfn(hidden: Float32Array, rows: number, norm: VisionNorm | undefined, fc1: VisionLinear, fc2: VisionLinear): Float32Array {
    const width = hidden.length / rows;
    let x = hidden;
    if (norm) {
      x = new Float32Array(hidden.length);
      for (let r = 0; r < rows; r++) layerNorm(hidden, r * width, norm.weight, norm.bias, x, r * width, width, this.dims.eps);
    }
    const mid = new Float32Array(rows * fc1.weight.rows);
    this.linear(fc1, x, rows, mid);
    geluRow(mid, 0, mid.length);
    const out = new Float32Array(rows * fc2.weight.rows);
    this.linear(fc2, mid, rows, out);
    return out;
  }

  private linear(l: VisionLinear, x: Float32Array, m: number, y: Float32Array): void {
    this.matmul(l.weight, x, m, y);
    const N = l.weight.rows;
    for (let t = 0; t < m; t++) for (let i = 0; i < N; i++) y[t * N + i] = fround(y[t * N + i]! + l.bias[i]!);
  }
}

/**
 * The patch order the encoder works in: 2x2 (merge x merge) groups in row-major group order, each
 * group row-major inside. `order[t]` is the raster index (row * px + col) of token t.
 */
export function mergeOrder(px: number, py: number, merge: number): Int32Array {
  const order = new Int32Array(px * py);
  let t = 0;
  for (let gy = 0; gy < py; gy += merge) {
    for (let gx = 0; gx < px; gx += merge) {
      for (let dy = 0; dy < merge; dy++) for (let dx = 0; dx < merge; dx++) order[t++] = (gy + dy) * px + gx + dx;
    }
  }
  return order;
}
