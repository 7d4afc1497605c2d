/**
 * WebAssembly SIMD dequantizers for the contract's encodings (Q8_0, Q4_K, Q5_K, Q6_K) and Q4_0, Q8_K, BF16: the same
 * arithmetic as the scalar kernels (int -> f32 conversion, one f32 multiply, one f32 subtract, in C's
 * order; no fused operations), four lanes at a time. The module is generated here as bytes (no
 * toolchain), instantiated synchronously, and used through `dequantizeWasm`, which copies input in
 * and output out in cache-sized pieces. Blocks whose f16 scales are infinite or NaN are redone by the
 * scalar kernels afterwards, so NaN payload propagation never depends on the SIMD unit.
 */
import { GGML_TYPE_TRAITS, GgmlType } from "@keepquant/gguf";
import { FP16_TO_FP32_BITS } from "./fp.js";

// ---------------------------------------------------------------- a tiny wasm emitter

export function uleb(value: number, out: number[]): void {
  let v = value >>> 0;
  do {
    let byte = v & 0x7f;
    v >>>= 7;
    if (v !== 0) byte |= 0x80;
    out.push(byte);
  } while (v !== 0);
}

function sleb(value: number, out: number[]): void {
  let v = value | 0;
  for (;;) {
    const byte = v & 0x7f;
    v >>= 7;
    if ((v === 0 && (byte & 0x40) === 0) || (v === -1 && (byte & 0x40) !== 0)) {
      out.push(byte);
      return;
    }
    out.push(byte | 0x80);
  }
}

// local indices: param nb; i32 p, o, i; f32 d, m, s; v128 v0..v6
const NB = 0;
const P = 1;
const O = 2;
const I = 3;
const D = 4;
const M = 5;
const S = 6;
const V0 = 7;
const V1 = 8;
const V2 = 9;
const V3 = 10;
const V4 = 11;
const V5 = 12;
const V6 = 13;

const TABLE = 0; // 65536 f32: the f16 -> f32 table
const E8M0_TABLE = 65536 * 4; // 256 f32: 2^(e - 128), the MXFP4 scale
const IN = E8M0_TABLE + 256 * 4;
const IN_BYTES = 8 * 1024;
const OUT = IN + IN_BYTES;
const OUT_BYTES = 8 * IN_BYTES; // a piece is also limited by this (Q2_K expands 84 B -> 1024 B)
const PAGES = Math.ceil((OUT + OUT_BYTES) / 65536);

export class Code {
  readonly bytes: number[] = [];
  op(...codes: number[]): this {
    this.bytes.push(...codes);
    return this;
  }
  simd(opcode: number): this {
    this.bytes.push(0xfd);
    uleb(opcode, this.bytes);
    return this;
  }
  get(local: number): this {
    return this.op(0x20, local);
  }
  set(local: number): this {
    return this.op(0x21, local);
  }
  i32(value: number): this {
    this.op(0x41);
    sleb(value, this.bytes);
    return this;
  }
  mem(opcode: number, align: number, offset: number): this {
    this.op(opcode, align);
    uleb(offset, this.bytes);
    return this;
  }
  /** u8 at p + offset */
  u8(offset: number): this {
    return this.get(P).mem(0x2d, 0, offset);
  }
  /** f32 value of the f16 at p + offset (through the table) */
  f16(offset: number): this {
    return this.get(P).mem(0x2f, 0, offset).i32(2).op(0x74).mem(0x2a, 2, TABLE);
  }
  vload(offset: number): this {
    this.get(P).op(0xfd, 0x00, 0);
    uleb(offset, this.bytes);
    return this;
  }
  vconstBytes(bytes: readonly number[]): this {
    this.op(0xfd, 0x0c);
    for (let i = 0; i < 16; i++) this.bytes.push(bytes[i]! & 0xff);
    return this;
  }
  vconst8(value: number): this {
    this.op(0xfd, 0x0c);
    for (let i = 0; i < 16; i++) this.bytes.push(value & 0xff);
    return this;
  }
  /** f32 on the stack -> v128 splat into `local` */
  splatTo(local: number): this {
    return this.simd(0x13).set(local);
  }
  /**
   * Converts the 16 bytes in local `vec` (signed or unsigned) to f32, multiplies by the splat in
   * `scale`, subtracts the splat in `min` (when given), stores 64 bytes at o + outOffset.
   */
  store16(vec: number, signed: boolean, scale: number, min: number | undefined, outOffset: number, addMin = false): this {
    for (let half = 0; half < 2; half++) {
      this.get(vec)
        .simd(signed ? 0x87 + half : 0x89 + half)
        .set(V3);
      for (let quarter = 0; quarter < 2; quarter++) {
        this.get(O);
        this.get(V3).simd(signed ? 0xa7 + quarter : 0xa9 + quarter);
        this.simd(0xfa); // f32x4.convert_i32x4_s (values fit in i16)
        this.get(scale).simd(0xe6); // f32x4.mul
        if (min !== undefined) this.get(min).simd(addMin ? 0xe4 : 0xe5); // f32x4.add / f32x4.sub
        this.op(0xfd, 0x0b, 0);
        uleb(outOffset + (half * 8 + quarter * 4) * 4, this.bytes);
      }
    }
    return this;
  }
}

/** ggml blocks per SIMD step: one, except BF16 (a block is one value; a step takes 8). */
const blocksPerUnit = (type: GgmlType): number => (type === GgmlType.BF16 ? 8 : 1);

/** One SIMD step of `type` from gguf's type table: `unit` values from `unitBytes` bytes. */
function unitOf(type: GgmlType): { unitBytes: number; unit: number } {
  const { blockSize, typeSize } = GGML_TYPE_TRAITS[type];
  return { unitBytes: typeSize * blocksPerUnit(type), unit: blockSize * blocksPerUnit(type) };
}

/** Wraps a per-unit body in the loop: p from IN by the unit's bytes, o from OUT by its f32 values. */
function blockLoop(type: GgmlType, body: (c: Code) => void): number[] {
  const { unitBytes: inBytes, unit } = unitOf(type);
  const outBytes = unit * 4;
  const c = new Code();
  c.i32(IN).set(P).i32(OUT).set(O).i32(0).set(I);
  c.op(0x02, 0x40); // block
  c.get(NB).op(0x45).op(0x0d, 0); // br_if 0 when nb == 0
  c.op(0x03, 0x40); // loop
  body(c);
  c.get(P).i32(inBytes).op(0x6a).set(P);
  c.get(O).i32(outBytes).op(0x6a).set(O);
  c.get(I).i32(1).op(0x6a).op(0x22, I).get(NB).op(0x49).op(0x0d, 0); // br_if loop while ++i < nb
  c.op(0x0b, 0x0b, 0x0b); // end loop, end block, end function
  return c.bytes;
}

/** With 4 low bits on the stack: low | (the byte at `offset` >> 6) << 4, a Q4_K/Q5_K 6-bit scale or min. */
function orTopBits(c: Code, offset: number): Code {
  return c.u8(offset).i32(6).op(0x76).i32(4).op(0x74).op(0x72);
}
function scaleK4(c: Code, j: number): Code {
  if (j < 4)
    return c
      .u8(4 + j)
      .i32(63)
      .op(0x71);
  return orTopBits(
    c
      .u8(4 + j + 4)
      .i32(0x0f)
      .op(0x71),
    4 + j - 4,
  );
}
function minK4(c: Code, j: number): Code {
  if (j < 4)
    return c
      .u8(4 + j + 4)
      .i32(63)
      .op(0x71);
  return orTopBits(
    c
      .u8(4 + j + 4)
      .i32(4)
      .op(0x76),
    4 + j,
  );
}
/** f32 (on stack) = base local * f32(i32 on stack) */
function timesLocal(c: Code, base: number): Code {
  return c.op(0xb2).get(base).op(0x94);
}

const q8_0 = blockLoop(GgmlType.Q8_0, (c) => {
  c.f16(0).splatTo(V4);
  c.vload(2).set(V0).store16(V0, true, V4, undefined, 0);
  c.vload(18).set(V0).store16(V0, true, V4, undefined, 64);
});

/**
 * Q4_K and Q5_K: per sub-block, d * scale and dmin * min splat, the levels the nibbles at `qs` (Q4_K 16,
 * Q5_K 48) and, with `fifthBit`, Q5_K's fifth bit from qh at 16.
 */
function kScaleMinLoop(type: GgmlType.Q4_K | GgmlType.Q5_K, qs: number, fifthBit: boolean): number[] {
  return blockLoop(type, (c) => {
    c.f16(0).set(D).f16(2).set(M);
    for (let pair = 0; pair < 4; pair++) {
      for (let nibble = 0; nibble < 2; nibble++) {
        timesLocal(scaleK4(c, 2 * pair + nibble), D).splatTo(V4);
        timesLocal(minK4(c, 2 * pair + nibble), M).splatTo(V5);
        for (let half = 0; half < 2; half++) {
          c.vload(qs + 32 * pair + 16 * half);
          if (nibble === 0) c.vconst8(0x0f).simd(0x4e);
          else c.i32(4).simd(0x6d);
          if (fifthBit) {
            // ((qh >> (2 pair + nibble)) << 4) & 0x10
            c.vload(16 + 16 * half)
              .i32(2 * pair + nibble)
              .simd(0x6d)
              .i32(4)
              .simd(0x6b)
              .vconst8(0x10)
              .simd(0x4e)
              .simd(0x50);
          }
          c.set(V0).store16(V0, false, V4, V5, (64 * pair + 32 * nibble + 16 * half) * 4);
        }
      }
    }
  });
}

const q4_K = kScaleMinLoop(GgmlType.Q4_K, 16, false);
const q5_K = kScaleMinLoop(GgmlType.Q5_K, 48, true);

const q6_K = blockLoop(GgmlType.Q6_K, (c) => {
  c.f16(208).set(D);
  for (let n = 0; n < 2; n++) {
    const ql = 64 * n;
    const qh = 128 + 32 * n;
    const sc = 192 + 8 * n;
    for (let half = 0; half < 2; half++) {
      const l0 = 16 * half;
      c.vload(ql + l0)
        .set(V0)
        .vload(ql + 32 + l0)
        .set(V1)
        .vload(qh + l0)
        .set(V2);
      // level = low | high - 32, as i8; scale = d * sc[is + 2 k]
      const parts: Array<(c: Code) => void> = [
        (c) => c.get(V0).vconst8(0x0f).simd(0x4e).get(V2).i32(4).simd(0x6b).vconst8(0x30).simd(0x4e),
        (c) => c.get(V1).vconst8(0x0f).simd(0x4e).get(V2).i32(2).simd(0x6b).vconst8(0x30).simd(0x4e),
        (c) => c.get(V0).i32(4).simd(0x6d).get(V2).vconst8(0x30).simd(0x4e),
        (c) => c.get(V1).i32(4).simd(0x6d).get(V2).i32(2).simd(0x6d).vconst8(0x30).simd(0x4e),
      ];
      parts.forEach((part, k) => {
        c.get(P).mem(0x2c, 0, sc + half + 2 * k); // i32.load8_s
        timesLocal(c, D).set(S).get(S).splatTo(V4);
        part(c);
        c.simd(0x50).vconst8(32).simd(0x71).set(V6); // v128.or, i8x16.sub 32
        c.store16(V6, true, V4, undefined, (128 * n + 32 * k + l0) * 4);
      });
    }
  }
});

const q4_0 = blockLoop(GgmlType.Q4_0, (c) => {
  c.f16(0).splatTo(V4);
  c.vload(2).vconst8(0x0f).simd(0x4e).vconst8(8).simd(0x71).set(V0).store16(V0, true, V4, undefined, 0);
  c.vload(2).i32(4).simd(0x6d).vconst8(8).simd(0x71).set(V0).store16(V0, true, V4, undefined, 64);
});

const q8_K = blockLoop(GgmlType.Q8_K, (c) => {
  c.get(P).mem(0x2a, 0, 0).splatTo(V4); // f32 d
  for (let k = 0; k < 16; k++)
    c.vload(4 + 16 * k)
      .set(V0)
      .store16(V0, true, V4, undefined, 64 * k);
});

const q2_K = blockLoop(GgmlType.Q2_K, (c) => {
  c.f16(80).set(D).f16(82).set(M);
  for (let n = 0; n < 2; n++) {
    for (let j = 0; j < 4; j++) {
      for (let g = 0; g < 2; g++) {
        const is = 8 * n + 2 * j + g;
        timesLocal(c.u8(is).i32(0x0f).op(0x71), D).splatTo(V4);
        timesLocal(c.u8(is).i32(4).op(0x76), M).splatTo(V5);
        c.vload(16 + 32 * n + 16 * g)
          .i32(2 * j)
          .simd(0x6d)
          .vconst8(3)
          .simd(0x4e)
          .set(V0);
        c.store16(V0, false, V4, V5, (128 * n + 32 * j + 16 * g) * 4);
      }
    }
  }
});

/** Q3_K's and IQ4_XS's 6-bit scale: with low (4 bits) and high on the stack, (low | ((high >> shift) & 3) << 4) - 32. */
function sixBitScale(c: Code, shift: number): Code {
  return c.i32(shift).op(0x76).i32(3).op(0x71).i32(4).op(0x74).op(0x72).i32(32).op(0x6b);
}

const q3_K = blockLoop(GgmlType.Q3_K, (c) => {
  c.f16(108).set(D);
  const scale = (j: number) => {
    // (low | high << 4) - 32 of the 12-byte 6-bit scale array at 96
    if (j < 8)
      c.u8(96 + j)
        .i32(0x0f)
        .op(0x71);
    else
      c.u8(96 + j - 8)
        .i32(4)
        .op(0x76);
    sixBitScale(c.u8(96 + 8 + (j & 3)), 2 * (j >> 2));
  };
  for (let n = 0; n < 2; n++) {
    for (let j = 0; j < 4; j++) {
      for (let g = 0; g < 2; g++) {
        scale(8 * n + 2 * j + g);
        timesLocal(c, D).splatTo(V4);
        c.vload(32 + 32 * n + 16 * g)
          .i32(2 * j)
          .simd(0x6d)
          .vconst8(3)
          .simd(0x4e); // (q >> shift) & 3
        c.vload(16 * g)
          .i32(4 * n + j)
          .simd(0x6d)
          .i32(2)
          .simd(0x6b)
          .vconst8(4)
          .simd(0x4e); // hbit << 2
        c.simd(0x6e).vconst8(4).simd(0x71).set(V0); // + , - 4
        c.store16(V0, true, V4, undefined, (128 * n + 32 * j + 16 * g) * 4);
      }
    }
  }
});

const KVALUES_IQ4NL_BYTES = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];
const KVALUES_MXFP4_BYTES = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/** 32 values from 16 nibble bytes at `offset` through a 16-entry code book, times the splat in V4. */
function codebook32(c: Code, book: readonly number[], offset: number, outOffset: number): void {
  c.vconstBytes(book).vload(offset).vconst8(0x0f).simd(0x4e).simd(0x0e).set(V0); // i8x16.swizzle
  c.store16(V0, true, V4, undefined, outOffset);
  c.vconstBytes(book).vload(offset).i32(4).simd(0x6d).simd(0x0e).set(V0);
  c.store16(V0, true, V4, undefined, outOffset + 64);
}

const iq4_nl = blockLoop(GgmlType.IQ4_NL, (c) => {
  c.f16(0).splatTo(V4);
  codebook32(c, KVALUES_IQ4NL_BYTES, 2, 0);
});

const iq4_xs = blockLoop(GgmlType.IQ4_XS, (c) => {
  c.f16(0).set(D);
  for (let ib = 0; ib < 8; ib++) {
    c.u8(4 + (ib >> 1))
      .i32(4 * (ib & 1))
      .op(0x76)
      .i32(0x0f)
      .op(0x71);
    sixBitScale(c.get(P).mem(0x2f, 0, 2), 2 * ib);
    timesLocal(c, D).splatTo(V4);
    codebook32(c, KVALUES_IQ4NL_BYTES, 8 + 16 * ib, 128 * ib);
  }
});

const mxfp4 = blockLoop(GgmlType.MXFP4, (c) => {
  c.u8(0).i32(2).op(0x74).mem(0x2a, 2, E8M0_TABLE).splatTo(V4);
  codebook32(c, KVALUES_MXFP4_BYTES, 1, 0);
});

const q4_1 = blockLoop(GgmlType.Q4_1, (c) => {
  c.f16(0).splatTo(V4).f16(2).splatTo(V5);
  c.vload(4).vconst8(0x0f).simd(0x4e).set(V0).store16(V0, false, V4, V5, 0, true);
  c.vload(4).i32(4).simd(0x6d).set(V0).store16(V0, false, V4, V5, 64, true);
});

/** The fifth bits of a Q5_0/Q5_1 block as 0x10 per lane: qh bits [16 h, 16 h + 16) for the half h. */
function fifthBits(c: Code, qhOffset: number, half: number): Code {
  const pick = [...Array(8).fill(2 * half), ...Array(8).fill(2 * half + 1)];
  const bits = [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128];
  c.vload(qhOffset).vconstBytes(pick).simd(0x0e).vconstBytes(bits).simd(0x4e);
  return c.vconst8(0).simd(0x24).vconst8(0x10).simd(0x4e); // i8x16.ne 0 -> 0xff, & 0x10
}

const q5_0 = blockLoop(GgmlType.Q5_0, (c) => {
  c.f16(0).splatTo(V4);
  c.vload(6).vconst8(0x0f).simd(0x4e);
  fifthBits(c, 2, 0).simd(0x50).vconst8(16).simd(0x71).set(V0).store16(V0, true, V4, undefined, 0);
  c.vload(6).i32(4).simd(0x6d);
  fifthBits(c, 2, 1).simd(0x50).vconst8(16).simd(0x71).set(V0).store16(V0, true, V4, undefined, 64);
});

const q5_1 = blockLoop(GgmlType.Q5_1, (c) => {
  c.f16(0).splatTo(V4).f16(2).splatTo(V5);
  c.vload(8).vconst8(0x0f).simd(0x4e);
  fifthBits(c, 4, 0).simd(0x50).set(V0).store16(V0, false, V4, V5, 0, true);
  c.vload(8).i32(4).simd(0x6d);
  fifthBits(c, 4, 1).simd(0x50).set(V0).store16(V0, false, V4, V5, 64, true);
});

/** BF16: 8 values (16 bytes) per step; each u16 moves to the top half of a u32. Pure integer work. */
const bf16 = blockLoop(GgmlType.BF16, (c) => {
  for (let half = 0; half < 2; half++) {
    c.get(O)
      .vload(0)
      .simd(half === 0 ? 0xa9 : 0xaa)
      .i32(16)
      .simd(0xab); // i32x4.extend_*_i16x8_u, i32x4.shl
    c.op(0xfd, 0x0b, 0);
    uleb(16 * half, c.bytes);
  }
});

export function section(id: number, content: number[], out: number[]): void {
  out.push(id);
  uleb(content.length, out);
  out.push(...content);
}

export function wasmName(text: string, out: number[]): void {
  uleb(text.length, out);
  for (const ch of text) out.push(ch.charCodeAt(0));
}

const FUNCTIONS: Array<[string, number[]]> = [
  ["q2_K", q2_K],
  ["q3_K", q3_K],
  ["iq4_nl", iq4_nl],
  ["iq4_xs", iq4_xs],
  ["mxfp4", mxfp4],
  ["q4_1", q4_1],
  ["q5_0", q5_0],
  ["q5_1", q5_1],
  ["q4_0", q4_0],
  ["q8_K", q8_K],
  ["bf16", bf16],
  ["q8_0", q8_0],
  ["q4_K", q4_K],
  ["q5_K", q5_K],
  ["q6_K", q6_K],
];

function buildModule(): Uint8Array {
  const out = [0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00];
  section(1, [1, 0x60, 1, 0x7f, 0], out); // type 0: (i32) -> ()
  const functions: number[] = [];
  uleb(FUNCTIONS.length, functions);
  for (let i = 0; i < FUNCTIONS.length; i++) functions.push(0);
  section(3, functions, out);
  section(5, [1, 0x00, PAGES], out); // one memory, min PAGES
  const exports: number[] = [];
  uleb(FUNCTIONS.length + 1, exports);
  wasmName("memory", exports);
  exports.push(0x02, 0);
  FUNCTIONS.forEach(([fname], i) => {
    wasmName(fname, exports);
    exports.push(0x00, i);
  });
  section(7, exports, out);
  const code: number[] = [];
  uleb(FUNCTIONS.length, code);
  for (const [, body] of FUNCTIONS) {
    const fn: number[] = [3, 3, 0x7f, 3, 0x7d, 7, 0x7b, ...body]; // locals: 3 i32, 3 f32, 7 v128
    uleb(fn.length, code);
    code.push(...fn);
  }
  section(10, code, out);
  return Uint8Array.from(out);
}

// ---------------------------------------------------------------- runtime

interface WasmDequantizer {
  memory: Uint8Array;
  output: Float32Array;
  kernels: Partial<Record<GgmlType, (blocks: number) => void>>;
}

/** The few WebAssembly JS API members used here (the ES lib of this repo does not declare them). */
interface WasmApi {
  Module: new (bytes: Uint8Array) => object;
  Instance: new (module: object, imports: object) => { exports: Record<string, unknown> };
}

/** A WebAssembly SIMD module instantiated on first use: its wrapper, or null and why not. */
export interface LazyWasm<T> {
  load(): T | null;
  /** Why the module cannot run here, or undefined when it can. */
  unavailableReason(): string | undefined;
}

/** `build()`'s module (no imports), instantiated once on the first load and handed to `wrap`. */
export function lazyWasm<T>(build: () => Uint8Array, wrap: (exports: Record<string, unknown>) => T): LazyWasm<T> {
  let value: T | null | undefined;
  let reason: string | undefined;
  const load = (): T | null => {
    if (value !== undefined) return value;
    try {
      const api = (globalThis as unknown as { WebAssembly?: WasmApi }).WebAssembly;
      if (!api) throw new Error("no WebAssembly in this runtime");
      // wasm memory is little-endian; typed-array views of it are host-endian
      if (new Uint8Array(Uint16Array.of(1).buffer)[0] !== 1) throw new Error("big-endian host");
      value = wrap(new api.Instance(new api.Module(build()), {}).exports);
    } catch (error) {
      reason = `WebAssembly SIMD unavailable: ${(error as Error).message}`;
      value = null;
    }
    return value;
  };
  return {
    load,
    unavailableReason: () => {
      load();
      return reason;
    },
  };
}

const dequantizer = lazyWasm(buildModule, (exports): WasmDequantizer => {
  const memory = exports.memory as { buffer: ArrayBuffer };
  new Uint32Array(memory.buffer, TABLE, 65536).set(FP16_TO_FP32_BITS);
  new Uint32Array(memory.buffer, E8M0_TABLE, 256).set(
    Uint32Array.from({ length: 256 }, (_, e) => (e < 2 ? 0x00200000 << e : (e - 1) << 23)),
  );
  const fn = (key: string) => exports[key] as (blocks: number) => void;
  return {
    memory: new Uint8Array(memory.buffer),
    output: new Float32Array(memory.buffer, OUT, OUT_BYTES / 4),
    kernels: {
      [GgmlType.Q2_K]: fn("q2_K"),
      [GgmlType.Q3_K]: fn("q3_K"),
      [GgmlType.IQ4_NL]: fn("iq4_nl"),
      [GgmlType.IQ4_XS]: fn("iq4_xs"),
      [GgmlType.MXFP4]: fn("mxfp4"),
      [GgmlType.Q4_1]: fn("q4_1"),
      [GgmlType.Q5_0]: fn("q5_0"),
      [GgmlType.Q5_1]: fn("q5_1"),
      [GgmlType.Q4_0]: fn("q4_0"),
      [GgmlType.Q8_K]: fn("q8_K"),
      [GgmlType.BF16]: fn("bf16"),
      [GgmlType.Q8_0]: fn("q8_0"),
      [GgmlType.Q4_K]: fn("q4_K"),
      [GgmlType.Q5_K]: fn("q5_K"),
      [GgmlType.Q6_K]: fn("q6_K"),
    },
  };
});

/** Why the SIMD kernels are not used here (the scalar ones are), or undefined when they are. */
export function wasmDequantizeUnavailableReason(): string | undefined {
  return dequantizer.unavailableReason();
}

/**
 * Where the scales of one SIMD step live (its geometry is gguf's type table: `unitOf`): `f16Scales`
 * byte offsets of f16 scales, or `f32Scale` for Q8_K. A block with an infinite or NaN scale is redone
 * by the scalar kernel.
 */
const SCALES: Partial<Record<GgmlType, { f16Scales?: readonly number[]; f32Scale?: boolean }>> = {
  [GgmlType.Q2_K]: { f16Scales: [80, 82] },
  [GgmlType.Q3_K]: { f16Scales: [108] },
  [GgmlType.IQ4_NL]: { f16Scales: [0] },
  [GgmlType.IQ4_XS]: { f16Scales: [0] },
  [GgmlType.MXFP4]: {}, // E8M0 scales are always finite
  [GgmlType.Q4_1]: { f16Scales: [0, 2] },
  [GgmlType.Q5_0]: { f16Scales: [0] },
  [GgmlType.Q5_1]: { f16Scales: [0, 2] },
  [GgmlType.Q4_0]: { f16Scales: [0] },
  [GgmlType.Q8_0]: { f16Scales: [0] },
  [GgmlType.Q4_K]: { f16Scales: [0, 2] },
  [GgmlType.Q5_K]: { f16Scales: [0, 2] },
  [GgmlType.Q6_K]: { f16Scales: [208] },
  [GgmlType.Q8_K]: { f32Scale: true },
  [GgmlType.BF16]: {},
};

/** Redoes with `scalar` every block of [so, so + n blocks) whose scale is infinite or NaN. */
function redoSpecialBlocks(
  scalar: ScalarKernel,
  layout: { unitBytes: number; unit: number; f16Scales?: readonly number[]; f32Scale?: boolean },
  src: Uint8Array,
  so: number,
  dst: Float32Array,
  dOff: number,
  n: number,
): void {
  const { unitBytes, unit, f16Scales, f32Scale } = layout;
  if (f16Scales) {
    for (const offset of f16Scales) {
      // an f16 is infinite or NaN when its exponent bits (0x7c of the high byte) are all set
      for (let b = 0, high = so + offset + 1; b < n; b++, high += unitBytes) {
        if ((src[high]! & 0x7c) === 0x7c) scalar(src, so + b * unitBytes, dst, dOff + b * unit, 1);
      }
    }
  } else if (f32Scale) {
    for (let b = 0, base = so; b < n; b++, base += unitBytes) {
      if ((src[base + 3]! & 0x7f) === 0x7f && (src[base + 2]! & 0x80) !== 0) scalar(src, base, dst, dOff + b * unit, 1);
    }
  }
}

export type ScalarKernel = (src: Uint8Array, srcOffset: number, dst: Float32Array, dstOffset: number, blocks: number) => void;

/** Below this many SIMD units a call stays scalar (the copies would cost more than they save). */
const MIN_WASM_UNITS = 8;

/**
 * A kernel with the scalar kernel's signature that runs the SIMD module for `type`, or the scalar
 * kernel itself when SIMD is unavailable or the type has no SIMD kernel.
 */
export function wasmKernel(type: GgmlType, scalar: ScalarKernel): ScalarKernel {
  // compiled on first use, so importing the package stays cheap
  let resolved: ScalarKernel | undefined;
  return (src, srcOffset, dst, dstOffset, blocks) => {
    resolved ??= resolveWasmKernel(type, scalar);
    resolved(src, srcOffset, dst, dstOffset, blocks);
  };
}

function resolveWasmKernel(type: GgmlType, scalar: ScalarKernel): ScalarKernel {
  const wasm = dequantizer.load();
  const scales = SCALES[type];
  const run = wasm?.kernels[type];
  if (!wasm || !scales || !run) return scalar;
  const layout = { ...unitOf(type), ...scales };
  const { unitBytes, unit } = layout;
  // scalar kernels count ggml blocks; for BF16 a block is one value and a SIMD unit is 8
  const perUnit = blocksPerUnit(type);
  const perPiece = Math.min(Math.floor(IN_BYTES / unitBytes), Math.floor(OUT_BYTES / (unit * 4)));
  const { memory, output } = wasm;
  return (src, srcOffset, dst, dstOffset, blocks) => {
    const units = Math.floor(blocks / perUnit);
    if (units < MIN_WASM_UNITS) {
      scalar(src, srcOffset, dst, dstOffset, blocks);
      return;
    }
    let so = srcOffset;
    let dOff = dstOffset;
    for (let left = units; left > 0; ) {
      const n = Math.min(left, perPiece);
      memory.set(src.subarray(so, so + n * unitBytes), IN);
      run(n);
      dst.set(output.subarray(0, n * unit), dOff);
      redoSpecialBlocks(scalar, layout, src, so, dst, dOff, n);
      so += n * unitBytes;
      dOff += n * unit;
      left -= n;
    }
    const rest = blocks - units * perUnit;
    if (rest > 0) scalar(src, so, dst, dOff, rest);
  };
}
