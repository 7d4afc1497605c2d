/**
 * The exact CPU kernels the llama oracle runs: the exported functions of the pinned ggml CPU
 * variant (libggml-cpu-haswell.so, AVX2; see ORACLE_CPU_VARIANT in llama.ts), called through koffi.
 * Test support: compare our kernels bit for bit with the ones that produced the parity goldens.
 *
 *   const cpu = loadCpuKernelOracle();
 *   cpu.vecDot("q4_K_q8_K", 256, weightBlockBytes, activationBlockBytes)  // ggml_vec_dot_q4_K_q8_K
 *   cpu.quantizeRow("q8_K", activations, out)                             // quantize_row_q8_K (from_float)
 *   cpu.silu(x), cpu.swiglu(x, g), cpu.softMax(x, max)
 *
 * Facts observed with it (AVX2 variant): quantize_row_q8_K and quantize_row_q8_0 equal their _ref
 * versions on random data, but quantize_row_q8_0 / q8_1 round exact .5 ties to even (the _ref rounds
 * them away from zero); ggml_vec_silu_f32 differs from x/(1+exp(-x)) rounded to f32 in ~40% of
 * elements (ggml's own vectorized expf).
 */
import path from "node:path";
import fs from "node:fs";
import koffi from "koffi";
import { functionsOf, oracleLibDir, oracleUnavailableReason } from "./ggml.js";
import { ORACLE_CPU_VARIANT } from "./llama.js";

type Bytes = Uint8Array | Uint16Array | Float32Array;

export interface CpuKernelOracle {
  readonly variant: string;
  /**
   * ggml_vec_dot_<pair>(n, &s, 0, x, 0, y, 0, 1): `pair` as ggml names it, e.g. "q4_K_q8_K",
   * "q8_0_q8_0", "f16", "bf16", "f32"; `n` elements; x = weight row bytes, y = activation row bytes.
   */
  vecDot(pair: string, n: number, x: Bytes, y: Bytes): number;
  /** quantize_row_<name>(x, y, k): the SIMD activation quantizer (from_float), e.g. "q8_K", "q8_0". */
  quantizeRow(name: string, src: Float32Array, dst: Uint8Array): void;
  /** ggml_vec_silu_f32. */
  silu(x: Float32Array): Float32Array;
  /** ggml_vec_swiglu_f32: silu(x) * g. */
  swiglu(x: Float32Array, g: Float32Array): Float32Array;
  /** ggml_vec_soft_max_f32(n, y, x, max): y = exp(x - max), returns the (double) sum. */
  softMax(x: Float32Array, max: number): { y: Float32Array; sum: number };
}

/** Why the CPU kernel oracle is unavailable, or undefined. */
export function cpuKernelsUnavailableReason(variant = ORACLE_CPU_VARIANT): string | undefined {
  const reason = oracleUnavailableReason();
  if (reason) return reason;
  const file = path.join(oracleLibDir(), `libggml-cpu-${variant}.so`);
  if (!fs.existsSync(file)) return `${file} not found`;
  try {
    const flags = /^flags\s*:\s*(.*)$/m.exec(fs.readFileSync("/proc/cpuinfo", "utf8"))?.[1]?.split(/\s+/) ?? [];
    if (variant === "haswell" && !["avx2", "fma", "f16c"].every((f) => flags.includes(f))) {
      return "this CPU lacks AVX2/FMA/F16C needed by the haswell variant";
    }
  } catch {
    return "cannot read /proc/cpuinfo";
  }
  return undefined;
}

const loaded = new Map<string, CpuKernelOracle>();

export function loadCpuKernelOracle(variant = ORACLE_CPU_VARIANT): CpuKernelOracle {
  const existing = loaded.get(variant);
  if (existing) return existing;
  const reason = cpuKernelsUnavailableReason(variant);
  if (reason) throw new Error(`CPU kernel oracle unavailable: ${reason}`);
  const fn = functionsOf(koffi.load(path.join(oracleLibDir(), `libggml-cpu-${variant}.so`)));
  fn("void ggml_cpu_init(void)")();
  const oracle: CpuKernelOracle = {
    variant,
    vecDot(pair, n, x, y) {
      const out = new Float32Array(1);
      fn(`void ggml_vec_dot_${pair}(int n, _Out_ float *s, size_t bs, const void *x, size_t bx, const void *y, size_t by, int nrc)`)(
        n,
        out,
        0,
        x,
        0,
        y,
        0,
        1,
      );
      return out[0]!;
    },
    quantizeRow(name, src, dst) {
      fn(`void quantize_row_${name}(const float *x, _Out_ void *y, int64_t k)`)(src, dst, src.length);
    },
    silu(x) {
      const y = new Float32Array(x.length);
      fn("void ggml_vec_silu_f32(int n, _Out_ float *y, const float *x)")(x.length, y, x);
      return y;
    },
    swiglu(x, g) {
      const y = new Float32Array(x.length);
      fn("void ggml_vec_swiglu_f32(int n, _Out_ float *y, const float *x, const float *g)")(x.length, y, x, g);
      return y;
    },
    softMax(x, max) {
      const y = new Float32Array(x.length);
      const sum = fn("double ggml_vec_soft_max_f32(int n, _Out_ float *y, const float *x, float max)")(x.length, y, x, max) as number;
      return { y, sum };
    },
  };
  loaded.set(variant, oracle);
  return oracle;
}
