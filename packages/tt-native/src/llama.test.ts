/**
 * matmulLlama (llama.cpp's CPU numerics) against the TS reference of the same arithmetic
 * (@keepquant/quant matmulLlamaReference) and against ggml's own CPU kernels.
 *
 * Tolerance for paths whose f32 accumulation order differs (SIMD lanes vs ggml's scalar order, or
 * ggml's own AVX2 kernels): |y - y_ref| <= (B + 16) * 2^-23 * T, where T is the sum of |terms| that
 * the accumulation adds (the reference reports it per output) and B the number of blocks per row
 * (K for float weights). Integer block dots are exact on every path, so only the order of f32
 * additions (at most B + 8 of them: blocks plus 8 lanes) and the rounding of d * sum vs a fused
 * multiply-add differ; the classical bound for reordering a sum of n terms is (n - 1) u T with
 * u = 2^-24, and the bound above is twice that. The generic level follows ggml's generic C code
 * operation by operation and must match the reference bit for bit.
 */
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { GgmlType, GGML_TYPE_TRAITS } from "@keepquant/gguf";
import { loadGgmlCpuOracle, loadGgmlOracle, loadGgmlRowOracle, oracleUnavailableReason } from "@keepquant/oracle";
import {
  QuantArgumentError,
  UnsupportedGgmlTypeError,
  llamaVecDotType,
  matmulLlamaReference,
  quantizeActivationRow,
} from "@keepquant/quant";
import { afterAll, describe, expect, it } from "vitest";
import {
  NATIVE_LLAMA_TYPES,
  availableNativeIsas,
  getNativeIsa,
  matmulLlama,
  matmulLlamaAsync,
  nativeAddon,
  nativeVecDotType,
  setNativeIsa,
  setNativeThreads,
  type NativeLlamaWeight,
} from "./index.js";
import { firstBitMismatch, randomFloats } from "./test-support.js";

const ORACLE_REASON = oracleUnavailableReason();

const initialIsa = getNativeIsa();
afterAll(() => {
  setNativeIsa(initialIsa);
  setNativeThreads(0);
});

function blocksPerRow(type: GgmlType, k: number): number {
  return k / GGML_TYPE_TRAITS[type].blockSize;
}

/**
 * Real quantized weights (ggml's quantizer through the oracle; the quant package's when absent).
 * `varied`: each 16-value group scaled by one of 7 factors (0.25 .. 1.75), so that the sub-block scales of a
 * K-quant block differ: with uniform values they quantize to nearly one value, and a kernel that pairs a
 * sub-block with the wrong scale would still give the right bits.
 */
function makeWeight(type: GgmlType, n: number, k: number, seed: number, varied = false): NativeLlamaWeight {
  const { blockSize, typeSize } = GGML_TYPE_TRAITS[type];
  const f = randomFloats(n * k, seed, 0.05);
  if (varied) for (let i = 0; i < f.length; i++) f[i] = f[i]! * (0.25 + 0.25 * (((i >> 4) * 3) % 7));
  const data = new Uint8Array((n * k * typeSize) / blockSize);
  if (type === GgmlType.F32) data.set(new Uint8Array(f.buffer));
  else if (type === GgmlType.F16 || type === GgmlType.BF16) {
    const halves = new Uint16Array(data.buffer);
    const rows = loadGgmlRowOracle();
    if (type === GgmlType.F16) rows.fp32ToFp16Row(f, halves);
    else rows.fp32ToBf16RowRef(f, halves);
  } else loadGgmlOracle().quantizeChunk(type, f, data, n, k);
  return { type, rows: n, cols: k, data };
}

/**
 * Types whose AVX2 / AVX-512 kernels reproduce ggml's AVX2 kernels (libggml-cpu-haswell.so) bit for
 * bit: same integer lanes, same f32 operation order, and FMA where ggml's compiler contracts.
 */
const HASWELL_EXACT: readonly GgmlType[] = [
  GgmlType.Q4_0,
  GgmlType.Q4_1,
  GgmlType.Q5_0,
  GgmlType.Q5_1,
  GgmlType.Q8_0,
  GgmlType.Q4_K,
  GgmlType.Q5_K,
  GgmlType.Q6_K,
  GgmlType.IQ4_NL,
  GgmlType.IQ4_XS,
  GgmlType.MXFP4,
  GgmlType.F32,
  GgmlType.F16,
  GgmlType.BF16,
  GgmlType.Q2_K,
  GgmlType.Q3_K,
];

const N = 37;
const K = 768;
const M = 3;

function tolerance(type: GgmlType, k: number, magnitude: number): number {
  return (blocksPerRow(type, k) + 16) * 2 ** -23 * magnitude;
}

describe.skipIf(ORACLE_REASON)("activation quantizers (vec_dot_type) are byte-exact", () => {
  const x = randomFloats(4 * 256, 3, 2);
  x.fill(0, 256, 512); // an all-zero block
  x[600] = 1e-30; // tiny
  // exact ties of x * (127 / amax): amax 127 makes the codes x itself, and x = amax / 2 is 63.5
  for (let j = 0; j < 32; j++) x[768 + j] = j === 0 ? 127 : (j % 16) - 8 + 0.5;
  for (let j = 0; j < 32; j++) x[800 + j] = j === 0 ? -3 : j === 1 ? 1.5 : -0.5 * (j % 7);
  const cpuSkip =
    ORACLE_REASON ??
    (loadGgmlCpuOracle().variant !== "haswell" ? `ggml variant is ${loadGgmlCpuOracle().variant}, not haswell` : undefined);
  for (const [act, name, weight] of [
    [GgmlType.Q8_K, "q8_K", GgmlType.Q4_K],
    [GgmlType.Q8_0, "q8_0", GgmlType.Q8_0],
    [GgmlType.Q8_1, "q8_1", GgmlType.Q4_1],
  ] as const) {
    it.skipIf(cpuSkip !== undefined)(
      `${name}: native = TS = the haswell variant's own quantize_row_${name} (from_float)${cpuSkip ? ` (skipped: ${cpuSkip})` : ""}`,
      () => {
        const bytes = (x.length / GGML_TYPE_TRAITS[act].blockSize) * GGML_TYPE_TRAITS[act].typeSize;
        const native = new Uint8Array(bytes);
        nativeAddon()!.quantizeActivations(act, x, native, 1);
        const ts = quantizeActivationRow(act, x, new Uint8Array(bytes));
        const ggml = new Uint8Array(bytes);
        loadGgmlCpuOracle().fromFloat(weight, x, ggml);
        expect(Buffer.from(native).equals(Buffer.from(ggml))).toBe(true);
        expect(Buffer.from(ts).equals(Buffer.from(ggml))).toBe(true);
        if (act !== GgmlType.Q8_K) {
          // the ties are real: the _ref quantizer (halves away from zero) gives other codes here
          const ref = new Uint8Array(bytes);
          loadGgmlOracle().quantizeRowRef(name, x, ref);
          expect(Buffer.from(ref).equals(Buffer.from(ggml))).toBe(false);
        }
      },
    );
  }
  it("f16 / bf16 activations: RNE as ggml's row converters", () => {
    const rows = loadGgmlRowOracle();
    for (const act of [GgmlType.F16, GgmlType.BF16]) {
      const native = new Uint8Array(2 * x.length);
      nativeAddon()!.quantizeActivations(act, x, native, 1);
      const ggml = new Uint16Array(x.length);
      if (act === GgmlType.F16) rows.fp32ToFp16Row(x, ggml);
      else rows.fp32ToBf16RowRef(x, ggml);
      expect(Buffer.from(native).equals(Buffer.from(ggml.buffer))).toBe(true);
    }
  });
});

describe.skipIf(ORACLE_REASON)("matmulLlama", () => {
  const x = randomFloats(M * K, 11, 1);

  for (const type of NATIVE_LLAMA_TYPES) {
    const name = GGML_TYPE_TRAITS[type].name;
    it(`${name}: vec_dot_type as ggml; generic bit-exact with the TS reference; SIMD within f32 reordering`, () => {
      const weight = makeWeight(type, N, K, 100 + type);
      expect(nativeVecDotType(type)).toBe(llamaVecDotType(type));
      expect(nativeVecDotType(type)).toBe(loadGgmlCpuOracle().vecDotType(type));
      const magnitudes = new Float64Array(M * N);
      const ref = matmulLlamaReference(weight, x, M, { magnitudes });
      for (const isa of availableNativeIsas()) {
        setNativeIsa(isa);
        const y = matmulLlama(weight, x, M);
        if (isa === "generic") {
          expect(firstBitMismatch(y, ref), `${name} generic`).toBe(-1);
        } else {
          for (let i = 0; i < y.length; i++) {
            const tol = tolerance(type, K, magnitudes[i]!);
            if (!(Math.abs(y[i]! - ref[i]!) <= tol)) {
              expect.fail(`${name} ${isa}: y[${i}] = ${y[i]} vs reference ${ref[i]} (tolerance ${tol})`);
            }
          }
        }
      }
    });

    const ggmlLabel = HASWELL_EXACT.includes(type) ? "bit-identical to" : "within f32 reordering of";
    it(`${name}: ${ggmlLabel} ggml's own CPU vec_dot (libggml-cpu-haswell, SIMD levels)`, () => {
      const ggml = loadGgmlCpuOracle();
      const oracle = loadGgmlOracle();
      const rows = loadGgmlRowOracle();
      const weight = makeWeight(type, N, K, 200 + type);
      const act = llamaVecDotType(type);
      const actBytes = (K / GGML_TYPE_TRAITS[act].blockSize) * GGML_TYPE_TRAITS[act].typeSize;
      const rowBytes = (K / GGML_TYPE_TRAITS[type].blockSize) * GGML_TYPE_TRAITS[type].typeSize;
      const magnitudes = new Float64Array(M * N);
      matmulLlamaReference(weight, x, M, { magnitudes });
      setNativeIsa("best");
      const y = matmulLlama(weight, x, M);
      const exact = getNativeIsa() !== "generic" && ggml.variant === "haswell" && HASWELL_EXACT.includes(type);
      for (let mi = 0; mi < M; mi++) {
        const xr = x.subarray(mi * K, (mi + 1) * K);
        const a = new Uint8Array(actBytes);
        // activations from ggml's reference quantizers (libggml-base), fed to libggml-cpu's vec_dot
        if (act === GgmlType.F32) a.set(new Uint8Array(xr.slice().buffer));
        else if (act === GgmlType.F16) rows.fp32ToFp16Row(xr, new Uint16Array(a.buffer));
        else if (act === GgmlType.BF16) rows.fp32ToBf16RowRef(xr, new Uint16Array(a.buffer));
        else oracle.quantizeRowRef(oracle.typeName(act), xr, a);
        for (let r = 0; r < N; r++) {
          const g = ggml.vecDot(type, K, weight.data.subarray(r * rowBytes, (r + 1) * rowBytes), a);
          const i = mi * N + r;
          if (exact) {
            if (!Object.is(y[i], g)) expect.fail(`${name}: y[${i}] = ${y[i]} is not bit-identical to ggml's haswell kernel (${g})`);
            continue;
          }
          const tol = tolerance(type, K, magnitudes[i]!);
          if (!(Math.abs(y[i]! - g) <= tol)) expect.fail(`${name}: y[${i}] = ${y[i]} vs ggml ${g} (tolerance ${tol})`);
        }
      }
    });
  }

  const oddBlockSkip =
    ORACLE_REASON ??
    (loadGgmlCpuOracle().variant !== "haswell"
      ? `ggml variant is ${loadGgmlCpuOracle().variant}, not haswell`
      : availableNativeIsas().every((isa) => isa === "generic")
        ? "no SIMD level on this CPU"
        : undefined);
  it.skipIf(oddBlockSkip !== undefined)(
    `odd block counts (K = 800) stay bit-identical to ggml's haswell kernels for the block-32 types${oddBlockSkip ? ` (skipped: ${oddBlockSkip})` : ""}`,
    () => {
      const ggml = loadGgmlCpuOracle();
      const oracle = loadGgmlOracle();
      setNativeIsa("best");
      const k = 800;
      const xs = randomFloats(2 * k, 31);
      for (const type of [GgmlType.Q4_0, GgmlType.Q5_0, GgmlType.Q8_0, GgmlType.IQ4_NL, GgmlType.MXFP4, GgmlType.Q4_1, GgmlType.Q5_1]) {
        const weight = makeWeight(type, 11, k, 500 + type);
        const y = matmulLlama(weight, xs, 2);
        const act = llamaVecDotType(type);
        const rowBytes = (k / 32) * GGML_TYPE_TRAITS[type].typeSize;
        for (let mi = 0; mi < 2; mi++) {
          const a = new Uint8Array((k / 32) * GGML_TYPE_TRAITS[act].typeSize);
          oracle.quantizeRowRef(oracle.typeName(act), xs.subarray(mi * k, (mi + 1) * k), a);
          for (let r = 0; r < 11; r++) {
            const g = ggml.vecDot(type, k, weight.data.subarray(r * rowBytes, (r + 1) * rowBytes), a);
            expect(Object.is(y[mi * 11 + r], g), `${GGML_TYPE_TRAITS[type].name} m=${mi} r=${r}: ${y[mi * 11 + r]} vs ${g}`).toBe(true);
          }
        }
      }
    },
  );

  it("results are bit-identical for 1, 2 and 5 threads (every level)", () => {
    for (const type of [GgmlType.Q4_K, GgmlType.Q6_K, GgmlType.Q8_0, GgmlType.F16, GgmlType.F32]) {
      const weight = makeWeight(type, 203, 512, 300 + type);
      const xs = randomFloats(5 * 512, 12);
      for (const isa of availableNativeIsas()) {
        setNativeIsa(isa);
        setNativeThreads(1);
        const one = matmulLlama(weight, xs, 5);
        for (const threads of [2, 5]) {
          setNativeThreads(threads);
          expect(firstBitMismatch(matmulLlama(weight, xs, 5), one), `${GGML_TYPE_TRAITS[type].name} ${isa} ${threads}`).toBe(-1);
        }
      }
    }
    setNativeThreads(0);
  });

  it("a row of a batch gets the same bits as that row alone (multi-row kernels), every type and level", () => {
    // 2 .. 4 rows: the register kernels of small batches; 11: one 8-row call and a 3-row one where a
    // level takes 8, else 4 + 4 + 3, and the block kernels; 33: a 32-row tile, then a tile of one row
    const xs = randomFloats(33 * K, 21);
    for (const m of [2, 3, 4, 11, 33]) {
      for (const type of NATIVE_LLAMA_TYPES) {
        // 37 weight rows: tasks of a few rows each, so the block kernels see pairs of weight rows and an odd one
        const weight = makeWeight(type, 37, K, 400 + type, true);
        for (const isa of availableNativeIsas()) {
          setNativeIsa(isa);
          const batch = matmulLlama(weight, xs.subarray(0, m * K), m);
          for (let mi = 0; mi < m; mi++) {
            const alone = matmulLlama(weight, xs.slice(mi * K, (mi + 1) * K), 1);
            expect(
              firstBitMismatch(batch.subarray(mi * 37, (mi + 1) * 37), alone),
              `${GGML_TYPE_TRAITS[type].name} ${isa} m ${m} row ${mi}`,
            ).toBe(-1);
          }
        }
      }
    }
  });

  // Deterministic, with no timing: every thread of libuv's pool is first blocked on a read from a FIFO
  // that only this test writes to, so the matmul queued behind them cannot start until the test says
  // so. While it waits, the event loop must keep turning (setImmediate) and the output stay unwritten;
  // then the FIFO is fed, the matmul runs on the pool, and its bits equal the synchronous call's.
  it.skipIf(process.platform === "win32")("async: runs on libuv's pool while the event loop keeps turning, same bits as sync", async () => {
    setNativeIsa("best");
    const weight = makeWeight(GgmlType.Q4_K, 64, 512, 77);
    const xs = randomFloats(4 * 512, 13);
    const sync = matmulLlama(weight, xs, 4);
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kq-async-"));
    const fifo = path.join(dir, "gate");
    execFileSync("mkfifo", [fifo]);
    const gate = fs.openSync(fifo, fs.constants.O_RDWR); // read-write: opening does not wait for a writer
    const poolSize = Number(process.env.UV_THREADPOOL_SIZE) || 4; // libuv's default
    let released = false;
    const release = (): void => {
      if (released) return;
      released = true;
      fs.writeSync(gate, Buffer.alloc(poolSize)); // one byte per blocked read: the pool is free again
    };
    const blockers = Array.from(
      { length: poolSize },
      () =>
        new Promise<void>((resolve, reject) => {
          fs.read(gate, Buffer.alloc(1), 0, 1, null, (error) => (error ? reject(error) : resolve()));
        }),
    );
    try {
      const out = new Float32Array(4 * 64).fill(Number.NaN);
      let settled = false;
      const pending = matmulLlamaAsync(weight, xs, 4, out).finally(() => (settled = true));
      let turns = 0;
      for (let i = 0; i < 3; i++) {
        await new Promise<void>((resolve) => setImmediate(resolve));
        turns++;
      }
      expect(turns).toBe(3);
      expect(settled).toBe(false);
      expect(out.every((v) => Number.isNaN(v))).toBe(true); // queued behind the blocked pool: not started
      release();
      await Promise.all(blockers);
      const y = await pending;
      expect(y).toBe(out);
      expect(firstBitMismatch(y, sync)).toBe(-1);
    } finally {
      release(); // also when an expectation failed: never leave libuv's pool blocked
      await Promise.allSettled(blockers);
      fs.closeSync(gate);
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it("refuses types without a dot kernel and malformed shapes, naming the argument", () => {
    const w = makeWeight(GgmlType.Q4_K, 4, 256, 1);
    expect(() => matmulLlama({ ...w, type: GgmlType.Q8_K }, new Float32Array(256), 1)).toThrow(UnsupportedGgmlTypeError);
    expect(() => matmulLlama({ ...w, cols: 128 }, new Float32Array(128), 1)).toThrow(QuantArgumentError);
    expect(() => matmulLlama(w, new Float32Array(255), 1)).toThrow(/invalid argument x/);
    expect(() => matmulLlama({ ...w, rows: 5 }, new Float32Array(256), 1)).toThrow(/invalid argument weight.data/);
    expect(() => matmulLlama(w, new Float32Array(256), 1, new Float32Array(3))).toThrow(/invalid argument out/);
  });
});
