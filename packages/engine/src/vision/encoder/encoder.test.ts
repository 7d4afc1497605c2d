import { GgmlType, mulberry32 } from "@keepquant/gguf";
import type { PackedWeight } from "@keepquant/quant";
import { describe, expect, it } from "vitest";
import { typescriptProviders } from "../../model/providers.js";
import {
  mergeOrder,
  providerMatmul,
  VisionEncoderSpec,
  type VisionEncoderDims,
  type VisionEncoderWeights,
  type VisionLinear,
  type VisionNorm,
} from "./encoder.js";

const random = mulberry32;

function floats(rand: () => number, n: number, scale: number, offset = 0): Float32Array {
  return Float32Array.from({ length: n }, () => offset + (rand() * 2 - 1) * scale);
}

function f32Weight(values: Float32Array, rows: number, cols: number): PackedWeight {
  return { type: GgmlType.F32, groups: 1, rows, cols, data: new Uint8Array(values.buffer) };
}

interface Raw {
  rows: number;
  cols: number;
  w: Float32Array;
  b: Float32Array;
}

function linear(rand: () => number, rows: number, cols: number): Raw {
  return { rows, cols, w: floats(rand, rows * cols, 1 / Math.sqrt(cols)), b: floats(rand, rows, 0.1) };
}

function norm(rand: () => number, n: number): VisionNorm {
  return { weight: floats(rand, n, 0.2, 1), bias: floats(rand, n, 0.1) };
}

const asLinear = (r: Raw): VisionLinear => ({ weight: f32Weight(r.w, r.rows, r.cols), bias: r.b });

const DIMS: VisionEncoderDims = { patchSize: 4, hidden: 32, heads: 2, ffn: 48, eps: 1e-6, merge: 2, projection: 24, positionSide: 4 };

function model(seed: number, deepstackAt: number[] = []) {
  const rand = random(seed);
  const { patchSize: p, hidden: D, ffn, projection: P, positionSide: S } = DIMS;
  const K = 3 * p * p;
  const patch0 = floats(rand, D * K, 0.2);
  const patch1 = floats(rand, D * K, 0.2);
  const raw = {
    patch0,
    patch1,
    patchBias: floats(rand, D, 0.1),
    position: floats(rand, S * S * D, 0.5),
    layers: [0, 1].map((il) => ({
      ln1: norm(rand, D),
      qkv: linear(rand, 3 * D, D),
      out: linear(rand, D, D),
      ln2: norm(rand, D),
      up: linear(rand, ffn, D),
      down: linear(rand, D, ffn),
      deepstack: deepstackAt.includes(il)
        ? { norm: norm(rand, 4 * D), fc1: linear(rand, 4 * D, 4 * D), fc2: linear(rand, P, 4 * D) }
        : undefined,
    })),
    postNorm: norm(rand, D),
    mm0: linear(rand, 4 * D, 4 * D),
    mm2: linear(rand, P, 4 * D),
  };
  const weights: VisionEncoderWeights = {
    patch: [f32Weight(patch0, D, K), f32Weight(patch1, D, K)],
    patchBias: raw.patchBias,
    position: raw.position,
    layers: raw.layers.map((l) => ({
      ln1: l.ln1,
      qkv: asLinear(l.qkv),
      out: asLinear(l.out),
      ln2: l.ln2,
      up: asLinear(l.up),
      down: asLinear(l.down),
      deepstack: l.deepstack && { norm: l.deepstack.norm, fc1: asLinear(l.deepstack.fc1), fc2: asLinear(l.deepstack.fc2) },
    })),
    postNorm: raw.postNorm,
    mm0: asLinear(raw.mm0),
    mm2: asLinear(raw.mm2),
  };
  return { raw, weights };
}

/*
 * An independent reference in f64, written from the published model code (Hugging Face
 * transformers' Qwen3-VL vision tower) rather than from llama.cpp's graph: patches as rows of
 * [C, T, p, p] through the Conv3d of a frame repeated twice, fast_pos_embed_interpolate (linspace
 * grid, bilinear), the vision rotary embedding with rotate_half, pre-norm blocks, the merger. It
 * uses llama.cpp's tanh GELU in the merger where transformers uses the erf GELU (llama.cpp's choice,
 * the one we match).
 */
function reference(raw: ReturnType<typeof model>["raw"], pixels: Float32Array, width: number, height: number): Float64Array[] {
  const { patchSize: p, hidden: D, heads: H, eps, projection: P, positionSide: S } = DIMS;
  const gh = height / p;
  const gw = width / p;
  const m = 2;
  // tokens in the processor's order: (group row, group col, row in group, col in group)
  const coords: [number, number][] = [];
  for (let by = 0; by < gh / m; by++)
    for (let bx = 0; bx < gw / m; bx++)
      for (let dy = 0; dy < m; dy++) for (let dx = 0; dx < m; dx++) coords.push([by * m + dy, bx * m + dx]);
  const lin = (n: number, i: number) => (n === 1 ? 0 : (i * (S - 1)) / (n - 1));
  const gelu = (x: number) => 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x * x * x)));
  const mv = (l: Raw, x: Float64Array) => {
    const y = new Float64Array(l.rows);
    for (let r = 0; r < l.rows; r++) {
      let s = l.b[r]!;
      for (let c = 0; c < l.cols; c++) s += l.w[r * l.cols + c]! * x[c]!;
      y[r] = s;
    }
    return y;
  };
  const ln = (x: Float64Array, n: VisionNorm) => {
    const mean = x.reduce((a, b) => a + b, 0) / x.length;
    const v = x.reduce((a, b) => a + (b - mean) ** 2, 0) / x.length;
    return x.map((e, i) => ((e - mean) / Math.sqrt(v + eps)) * n.weight[i]! + n.bias[i]!);
  };
  let h = coords.map(([y, x]) => {
    const out = new Float64Array(D);
    for (let d = 0; d < D; d++) {
      let s = raw.patchBias[d]!;
      for (let c = 0; c < 3; c++)
        for (let ky = 0; ky < p; ky++)
          for (let kx = 0; kx < p; kx++) {
            const px = pixels[c * width * height + (y * p + ky) * width + x * p + kx]!;
            const k = d * 3 * p * p + (c * p + ky) * p + kx;
            s += (raw.patch0[k]! + raw.patch1[k]!) * px; // both frames of the temporal pair
          }
      const fy = lin(gh, y);
      const fx = lin(gw, x);
      const y0 = Math.floor(fy);
      const x0 = Math.floor(fx);
      const y1 = Math.min(y0 + 1, S - 1);
      const x1 = Math.min(x0 + 1, S - 1);
      const ty = fy - y0;
      const tx = fx - x0;
      const e = (yy: number, xx: number) => raw.position[(yy * S + xx) * D + d]!;
      s += (1 - ty) * (1 - tx) * e(y0, x0) + (1 - ty) * tx * e(y0, x1) + ty * (1 - tx) * e(y1, x0) + ty * tx * e(y1, x1);
      out[d] = s;
    }
    return out;
  });
  const Dh = D / H;
  const invFreq = Array.from({ length: Dh / 4 }, (_, j) => 1 / 10000 ** ((2 * j) / (Dh / 2)));
  const angle = (t: number, i: number) => {
    const [y, x] = coords[t]!;
    const j = i % (Dh / 2);
    return j < Dh / 4 ? y * invFreq[j]! : x * invFreq[j - Dh / 4]!;
  };
  const rotary = (v: Float64Array, t: number) =>
    v.map((e, i) => {
      const a = angle(t, i);
      const rotated = i < Dh / 2 ? -v[i + Dh / 2]! : v[i - Dh / 2]!;
      return e * Math.cos(a) + rotated * Math.sin(a);
    });
  const deepstack: Float64Array[][] = [];
  const merged = (rows: Float64Array[]) =>
    Array.from({ length: rows.length / 4 }, (_, g) => {
      const row = new Float64Array(4 * D);
      for (let k = 0; k < 4; k++) row.set(rows[g * 4 + k]!, k * D);
      return row;
    });
  for (const l of raw.layers) {
    const qkv = h.map((x) => mv(l.qkv, ln(x, l.ln1)));
    const attn = h.map(() => new Float64Array(D));
    for (let head = 0; head < H; head++) {
      const q = qkv.map((r, t) => rotary(r.slice(head * Dh, (head + 1) * Dh), t));
      const k = qkv.map((r, t) => rotary(r.slice(D + head * Dh, D + (head + 1) * Dh), t));
      const v = qkv.map((r) => r.slice(2 * D + head * Dh, 2 * D + (head + 1) * Dh));
      for (let t = 0; t < h.length; t++) {
        const s = k.map((kk) => kk.reduce((a, e, i) => a + e * q[t]![i]!, 0) / Math.sqrt(Dh));
        const max = Math.max(...s);
        const e = s.map((x) => Math.exp(x - max));
        const z = e.reduce((a, b) => a + b, 0);
        for (let i = 0; i < Dh; i++) attn[t]![head * Dh + i] = e.reduce((a, w, u) => a + (w / z) * v[u]![i]!, 0);
      }
    }
    h = h.map((x, t) => x.map((e, i) => e + mv(l.out, attn[t]!)[i]!));
    h = h.map((x) => {
      const y = mv(l.down, mv(l.up, ln(x, l.ln2)).map(gelu));
      return x.map((e, i) => e + y[i]!);
    });
    if (l.deepstack) {
      const ds = l.deepstack;
      deepstack.push(merged(h).map((r) => mv(ds.fc2, mv(ds.fc1, ln(r, ds.norm)).map(gelu))));
    }
  }
  const main = merged(h.map((x) => ln(x, raw.postNorm))).map((r) => mv(raw.mm2, mv(raw.mm0, r).map(gelu)));
  return main.map((row, t) => {
    const out = new Float64Array(P * (1 + deepstack.length));
    out.set(row, 0);
    deepstack.forEach((d, k) => out.set(d[t]!, (k + 1) * P));
    return out;
  });
}

function image(seed: number, width: number, height: number): Float32Array {
  return floats(random(seed), 3 * width * height, 1.5);
}

function worstRelative(out: Float32Array, expected: Float64Array[], width: number): number {
  let worst = 0;
  const scale = Math.max(...expected.map((r) => Math.max(...r.map(Math.abs))));
  expected.forEach((row, t) => row.forEach((e, i) => (worst = Math.max(worst, Math.abs(out[t * width + i]! - e) / scale))));
  return worst;
}

describe("vision encoder spec (qwen3vl_merger)", () => {
  const matmul = providerMatmul(typescriptProviders("llama", [])[0]!);

  it("tokens are 2x2 groups in row-major group order", () => {
    expect([...mergeOrder(4, 2, 2)]).toEqual([0, 1, 4, 5, 2, 3, 6, 7]);
  });

  it.each([
    ["the trained grid (16x16)", 16, 16],
    ["a wider grid, resized position embeddings (24x16)", 24, 16],
    ["a taller, larger grid (16x32)", 16, 32],
  ])("matches a reference written from the published model code: %s", (_name, width, height) => {
    const { raw, weights } = model(7);
    const spec = new VisionEncoderSpec(DIMS, weights, matmul);
    const pixels = image(11, width, height);
    const out = spec.encode({ pixels, width, height });
    expect(out.tokens).toBe((width / 8) * (height / 8));
    expect(out.width).toBe(DIMS.projection);
    expect([out.gridWidth, out.gridHeight]).toEqual([width / 8, height / 8]);
    // f16 GELU tables and f32 sums against f64: a few parts in a thousand of the output scale
    expect(worstRelative(out.embeddings, reference(raw, pixels, width, height), out.width)).toBeLessThan(3e-3);
  });

  it("appends each deepstack layer's merged features after the main projection", () => {
    const { raw, weights } = model(5, [0, 1]);
    const spec = new VisionEncoderSpec(DIMS, weights, matmul);
    expect(spec.outputWidth).toBe(3 * DIMS.projection);
    const pixels = image(3, 16, 16);
    const out = spec.encode({ pixels, width: 16, height: 16 });
    expect(out.width).toBe(3 * DIMS.projection);
    expect(worstRelative(out.embeddings, reference(raw, pixels, 16, 16), out.width)).toBeLessThan(3e-3);
  });

  it("the reference check has teeth: a transposed image does not pass", () => {
    const { raw, weights } = model(7);
    const spec = new VisionEncoderSpec(DIMS, weights, matmul);
    const pixels = image(11, 16, 16);
    const transposed = new Float32Array(pixels.length);
    for (let c = 0; c < 3; c++)
      for (let y = 0; y < 16; y++) for (let x = 0; x < 16; x++) transposed[c * 256 + x * 16 + y] = pixels[c * 256 + y * 16 + x]!;
    const out = spec.encode({ pixels: transposed, width: 16, height: 16 });
    expect(worstRelative(out.embeddings, reference(raw, pixels, 16, 16), out.width)).toBeGreaterThan(0.05);
  });

  it("refuses an image whose sides are not multiples of patch x merge, or whose plane size is wrong", () => {
    const spec = new VisionEncoderSpec(DIMS, model(1).weights, matmul);
    expect(() => spec.encode({ pixels: image(1, 12, 16), width: 12, height: 16 })).toThrow(/not a multiple of 8 pixels/);
    expect(() => spec.encode({ pixels: new Float32Array(10), width: 16, height: 16 })).toThrow(/expected 768 values/);
  });
});
