/**
 * A WebAssembly SIMD provider of the keep-quant contract: the portable fast arm for hosts without
 * the native addon. Same numerics class as the reference (decode -> one bf16 RNE rounding -> f32
 * multiply, f32 accumulation) but it accumulates in 16 lanes and adds them pairwise at the end, so
 * it is not bit-identical to the reference; it is held to the analytic bf16 envelope like every
 * provider. Rows are processed in tiles of at most one chunk (chunk policy of the contract).
 */
import { checkMatmulBTQuantGroupedArgs, isKeepQuantEncoding, type EnvSource, type MatmulBTQuantGroupedArgs } from "./contract.js";
import { planGroupedMatmul } from "./grouped-matmul.js";
import type { KeepQuantProvider } from "./provider.js";
import { Code, lazyWasm, section, uleb, wasmName } from "./wasm-dequantize.js";

export const WASM_SIMD_PROVIDER_NAME = "wasm-simd";

// dot(m, rows, k, xOff, wOff, yOff, yStride): y[mi * yStride + r] = sum_k x[mi, k] * w[r, k]
const [M_, ROWS, K_, X_OFF, W_OFF, Y_OFF, Y_STRIDE] = [0, 1, 2, 3, 4, 5, 6];
const [MI, R, KK, XP, WP] = [7, 8, 9, 10, 11];
const [A0, A1, A2, A3] = [12, 13, 14, 15];

function dotBody(): number[] {
  const c = new Code();
  c.i32(0).set(MI);
  c.op(0x03, 0x40); // loop mi
  c.i32(0).set(R);
  c.op(0x03, 0x40); // loop r
  for (const a of [A0, A1, A2, A3]) c.vconst8(0).set(a);
  // xp = xOff + mi * k * 4; wp = wOff + r * k * 4
  c.get(X_OFF).get(MI).get(K_).op(0x6c).i32(2).op(0x74).op(0x6a).set(XP);
  c.get(W_OFF).get(R).get(K_).op(0x6c).i32(2).op(0x74).op(0x6a).set(WP);
  c.i32(0).set(KK);
  c.op(0x03, 0x40); // loop k, 16 values per step
  [A0, A1, A2, A3].forEach((a, lane) => {
    c.get(a);
    c.get(XP).op(0xfd, 0x00, 0);
    uleb(16 * lane, c.bytes);
    c.get(WP).op(0xfd, 0x00, 0);
    uleb(16 * lane, c.bytes);
    c.simd(0xe6).simd(0xe4).set(a); // a += x * w
  });
  c.get(XP).i32(64).op(0x6a).set(XP);
  c.get(WP).i32(64).op(0x6a).set(WP);
  c.get(KK).i32(16).op(0x6a).op(0x22, KK).get(K_).op(0x49).op(0x0d, 0);
  c.op(0x0b); // end loop k
  // y address, then ((a0 + a1) + (a2 + a3)) lanes: (l0 + l1) + (l2 + l3)
  c.get(Y_OFF).get(MI).get(Y_STRIDE).op(0x6c).get(R).op(0x6a).i32(2).op(0x74).op(0x6a);
  c.get(A0).get(A1).simd(0xe4).get(A2).get(A3).simd(0xe4).simd(0xe4).set(A0);
  c.get(A0).op(0xfd, 0x1f, 0).get(A0).op(0xfd, 0x1f, 1).op(0x92);
  c.get(A0).op(0xfd, 0x1f, 2).get(A0).op(0xfd, 0x1f, 3).op(0x92).op(0x92);
  c.op(0x38, 2, 0); // f32.store
  c.get(R).i32(1).op(0x6a).op(0x22, R).get(ROWS).op(0x49).op(0x0d, 0);
  c.op(0x0b); // end loop r
  c.get(MI).i32(1).op(0x6a).op(0x22, MI).get(M_).op(0x49).op(0x0d, 0);
  c.op(0x0b, 0x0b); // end loop mi, end function
  return c.bytes;
}

/** v128.const of four u32 lanes */
function vconst32(c: Code, value: number): Code {
  c.op(0xfd, 0x0c);
  for (let lane = 0; lane < 4; lane++) for (let b = 0; b < 4; b++) c.bytes.push((value >>> (8 * b)) & 0xff);
  return c;
}

// bf16(off, count): rounds `count` f32 (a multiple of 4) at `off` to bf16 precision in place, RNE,
// NaNs kept quiet with their top payload bits (as fp32BitsToBf16Bits)
const [B_OFF, B_COUNT] = [0, 1];
const [B_END] = [2];
const [B_U, B_T] = [3, 4];
function bf16Body(): number[] {
  const c = new Code();
  c.get(B_OFF).get(B_COUNT).i32(2).op(0x74).op(0x6a).set(B_END);
  c.op(0x02, 0x40).get(B_COUNT).op(0x45).op(0x0d, 0); // nothing to do
  c.op(0x03, 0x40);
  c.get(B_OFF); // store address
  c.get(B_OFF).op(0xfd, 0x00, 0, 0).set(B_U);
  // NaN lanes: (u | 0x00400000) & 0xffff0000
  c.get(B_U);
  vconst32(c, 0x00400000).simd(0x50);
  vconst32(c, 0xffff0000).simd(0x4e);
  // other lanes: (u + 0x7fff + ((u >> 16) & 1)) & 0xffff0000
  c.get(B_U);
  vconst32(c, 0x7fff).simd(0xae);
  c.get(B_U).i32(16).simd(0xad);
  vconst32(c, 1).simd(0x4e).simd(0xae);
  vconst32(c, 0xffff0000).simd(0x4e);
  // mask: (u & 0x7fffffff) > 0x7f800000 (unsigned)
  c.get(B_U);
  vconst32(c, 0x7fffffff).simd(0x4e);
  vconst32(c, 0x7f800000).simd(0x3c); // i32x4.gt_u
  c.simd(0x52); // v128.bitselect(nanValue, rounded, mask)
  c.op(0xfd, 0x0b, 0, 0); // v128.store
  c.get(B_OFF).i32(16).op(0x6a).op(0x22, B_OFF).get(B_END).op(0x49).op(0x0d, 0);
  c.op(0x0b, 0x0b, 0x0b);
  void B_T;
  return c.bytes;
}

function buildDotModule(): Uint8Array {
  const out = [0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00];
  section(1, [2, 0x60, 7, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0, 0x60, 2, 0x7f, 0x7f, 0], out);
  section(3, [2, 0, 1], out);
  section(5, [1, 0x00, 1], out); // memory, grown on demand
  const exports: number[] = [3];
  wasmName("memory", exports);
  exports.push(0x02, 0);
  wasmName("dot", exports);
  exports.push(0x00, 0);
  wasmName("bf16", exports);
  exports.push(0x00, 1);
  section(7, exports, out);
  const dot = [2, 5, 0x7f, 4, 0x7b, ...dotBody()]; // locals: 5 i32, 4 v128
  const bf16 = [2, 1, 0x7f, 2, 0x7b, ...bf16Body()]; // locals: 1 i32, 2 v128
  const code: number[] = [2];
  uleb(dot.length, code);
  code.push(...dot);
  uleb(bf16.length, code);
  code.push(...bf16);
  section(10, code, out);
  return Uint8Array.from(out);
}

interface DotModule {
  memory: { buffer: ArrayBuffer; grow(pages: number): number };
  dot: (m: number, rows: number, k: number, xOff: number, wOff: number, yOff: number, yStride: number) => void;
  bf16: (off: number, count: number) => void;
}

const dotModule = lazyWasm(
  buildDotModule,
  (exports): DotModule => ({
    memory: exports.memory as DotModule["memory"],
    dot: exports.dot as DotModule["dot"],
    bf16: exports.bf16 as DotModule["bf16"],
  }),
);
const loadDot = dotModule.load;

/** Why the wasm-simd provider cannot run here, or undefined when it can. */
export function wasmSimdProviderUnavailableReason(): string | undefined {
  return dotModule.unavailableReason();
}

/** Rows per tile: at most 1 MiB of bf16-rounded f32 weights, and never more than the contract's chunk. */
const TILE_BYTES = 1024 * 1024;

export interface WasmSimdProviderOptions {
  /** where KEEPQUANT_CHUNK_BYTES is read from at each call (default process.env) */
  env?: EnvSource;
}

export function createWasmSimdProvider(options: WasmSimdProviderOptions = {}): KeepQuantProvider {
  return {
    name: WASM_SIMD_PROVIDER_NAME,
    priority: 10,
    numerics: "bf16",
    /** the registered encodings, where WebAssembly SIMD runs */
    supports: (type) => isKeepQuantEncoding(type) && loadDot() !== null,
    matmulBTQuantGrouped(args: MatmulBTQuantGroupedArgs): Float32Array {
      const shape = checkMatmulBTQuantGroupedArgs(args);
      const module = loadDot();
      if (!module) throw new Error(`${WASM_SIMD_PROVIDER_NAME} provider: ${dotModule.unavailableReason()}`);
      const { n, k, m, pa, rowBytes } = shape;
      const { weight, x } = args;
      const { out, kernel, blocksPerRow, chunk, users } = planGroupedMatmul(args, shape, options.env ?? process.env);
      const tileRows = Math.max(1, Math.min(chunk, Math.floor(TILE_BYTES / (4 * k))));

      // memory: x [Pa, M, K] | tile [tileRows, K] | y [M, tileRows]
      const xOff = 0;
      const tileOff = xOff + x.length * 4;
      const yOff = tileOff + tileRows * k * 4;
      const needed = yOff + m * tileRows * 4;
      const have = module.memory.buffer.byteLength;
      if (needed > have) module.memory.grow(Math.ceil((needed - have) / 65536));
      const buffer = module.memory.buffer;
      new Float32Array(buffer, xOff, x.length).set(x);
      const tile = new Float32Array(buffer, tileOff, tileRows * k);
      const y = new Float32Array(buffer, yOff, m * tileRows);

      for (const [g, outputs] of users) {
        for (let r0 = 0; r0 < n; r0 += tileRows) {
          const rows = Math.min(tileRows, n - r0);
          kernel(weight.data, (g * n + r0) * rowBytes, tile, 0, rows * blocksPerRow);
          module.bf16(tileOff, rows * k); // rows * K is a multiple of 32
          for (const pi of outputs) {
            const xGroup = pa === 1 ? 0 : pi;
            module.dot(m, rows, k, xOff + xGroup * m * k * 4, tileOff, yOff, tileRows);
            for (let mi = 0; mi < m; mi++) {
              out.set(y.subarray(mi * tileRows, mi * tileRows + rows), (pi * m + mi) * n + r0);
            }
          }
        }
      }
      return out;
    },
  };
}

/**
 * The exact arithmetic of the wasm-simd provider for one output, in plain TS (for tests): 16 f32
 * lane accumulators over k (lane = k mod 16), then lanes summed as
 * ((a0 + a1) + (a2 + a3)) per 4-lane group and (l0 + l1) + (l2 + l3) across lanes.
 * `w` must already be rounded to bf16.
 */
export function wasmSimdDotModel(x: Float32Array, xBase: number, w: Float32Array, wBase: number, k: number): number {
  const fround = Math.fround;
  const acc = new Float64Array(16);
  for (let kk = 0; kk < k; kk++) acc[kk & 15] = fround(acc[kk & 15]! + fround(x[xBase + kk]! * w[wBase + kk]!));
  const lanes = [0, 1, 2, 3].map((l) => fround(fround(acc[l]! + acc[4 + l]!) + fround(acc[8 + l]! + acc[12 + l]!)));
  return fround(fround(lanes[0]! + lanes[1]!) + fround(lanes[2]! + lanes[3]!));
}

/** Rounds f32 values to bf16 in place with the provider's SIMD rounding (tests compare it to fp32BitsToBf16Bits). */
export function roundToBf16Wasm(values: Float32Array): Float32Array {
  const module = loadDot();
  if (!module) throw new Error(`${WASM_SIMD_PROVIDER_NAME} provider: ${dotModule.unavailableReason()}`);
  const padded = Math.ceil(values.length / 4) * 4;
  if (padded * 4 > module.memory.buffer.byteLength) {
    module.memory.grow(Math.ceil((padded * 4 - module.memory.buffer.byteLength) / 65536));
  }
  const view = new Float32Array(module.memory.buffer, 0, padded);
  view.set(values);
  module.bf16(0, padded);
  values.set(view.subarray(0, values.length));
  return values;
}

/** The wasm-simd provider reading process.env at each call. */
export const wasmSimdProvider: KeepQuantProvider = createWasmSimdProvider();
