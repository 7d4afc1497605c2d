/**
 * ggml's CPU backend from the oracle (libggml-cpu-<variant>.so), called through koffi: the real
 * vec_dot kernels llama.cpp runs (through ggml_get_type_traits_cpu) and a plain ggml graph with one
 * or more mul_mat nodes (ggml_graph_compute_with_ctx), for parity tests and matmul benchmarks.
 * Test and bench support only.
 */
import fs from "node:fs";
import path from "node:path";
import koffi from "koffi";
import { oracleLibDir, oracleUnavailableReason } from "./ggml.js";

type Fn = (...args: unknown[]) => unknown;

/** CPU variants in the order they are tried (the first one this CPU can run is used). */
export const GGML_CPU_VARIANTS = ["haswell", "x64"] as const;

export interface GgmlCpuOracle {
  /** the libggml-cpu-<variant>.so that was loaded */
  variant: string;
  /** ggml type id of the activation encoding llama.cpp uses for weights of `type` */
  vecDotType(type: number): number;
  /**
   * The backend's vec_dot for `type`: n elements of weight row bytes `w` against activation row
   * bytes `a` (already in vecDotType(type) encoding).
   */
  vecDot(type: number, n: number, w: Uint8Array, a: Uint8Array): number;
  /** The backend's own from_float (activation quantizer) for the vec_dot type of `type`. */
  fromFloat(type: number, x: Float32Array, dst: Uint8Array): void;
  /**
   * Builds one graph with `weights.length` independent mul_mats y_i = W_i [n, k] x x [m, k] and
   * returns a function that computes it with `threads` threads (returns the outputs, [m, n] each).
   */
  mulMatGraph(type: number, weights: Uint8Array[], n: number, k: number, x: Float32Array, m: number): GgmlMulMatGraph;
}

export interface GgmlMulMatGraph {
  compute(threads: number): void;
  output(i: number): Float32Array;
  free(): void;
}

let cached: GgmlCpuOracle | undefined;

function cpuSupportsHaswell(): boolean {
  try {
    const flags = fs.readFileSync("/proc/cpuinfo", "utf8");
    return ["avx2", "fma", "f16c", "bmi2"].every((f) => new RegExp(`\\b${f}\\b`).test(flags));
  } catch {
    return false;
  }
}

export function loadGgmlCpuOracle(): GgmlCpuOracle {
  if (cached) return cached;
  const reason = oracleUnavailableReason();
  if (reason) throw new Error(`ggml oracle unavailable: ${reason}`);
  const dir = oracleLibDir();
  const variant = cpuSupportsHaswell() ? "haswell" : "x64";
  const base = koffi.load(path.join(dir, "libggml-base.so"));
  const cpu = koffi.load(path.join(dir, `libggml-cpu-${variant}.so`));
  (cpu.func("void ggml_cpu_init(void)") as Fn)();

  const traitsType = koffi.struct("kq_ggml_type_traits_cpu", {
    from_float: "void *",
    vec_dot: "void *",
    vec_dot_type: "int",
    nrows: "int64_t",
  });
  const getTraits = cpu.func("const void *ggml_get_type_traits_cpu(int type)") as Fn;
  const vecDotProto = koffi.proto(
    "void kq_ggml_vec_dot_t(int n, _Out_ float *s, size_t bs, const void *x, size_t bx, const void *y, size_t by, int nrc)",
  );
  const fromFloatProto = koffi.proto("void kq_ggml_from_float_t(const float *x, _Out_ void *y, int64_t k)");
  const traits = new Map<number, { from_float: unknown; vec_dot: unknown; vec_dot_type: number }>();
  const traitsOf = (type: number) => {
    let t = traits.get(type);
    if (!t) {
      t = koffi.decode(getTraits(type), traitsType) as { from_float: unknown; vec_dot: unknown; vec_dot_type: number };
      traits.set(type, t);
    }
    return t;
  };

  // registers the struct type that the ggml_init declaration below names
  koffi.struct("kq_ggml_init_params", { mem_size: "size_t", mem_buffer: "void *", no_alloc: "bool" });
  const ggmlInit = base.func("void *ggml_init(kq_ggml_init_params params)") as Fn;
  const ggmlFree = base.func("void ggml_free(void *ctx)") as Fn;
  const newTensor2d = base.func("void *ggml_new_tensor_2d(void *ctx, int type, int64_t ne0, int64_t ne1)") as Fn;
  const mulMat = base.func("void *ggml_mul_mat(void *ctx, void *a, void *b)") as Fn;
  const newGraph = base.func("void *ggml_new_graph(void *ctx)") as Fn;
  const buildForward = base.func("void ggml_build_forward_expand(void *graph, void *tensor)") as Fn;
  const getData = base.func("void *ggml_get_data(void *tensor)") as Fn;
  const rowSize = base.func("size_t ggml_row_size(int type, int64_t ne)") as Fn;
  const computeWithCtx = cpu.func("int ggml_graph_compute_with_ctx(void *ctx, void *graph, int n_threads)") as Fn;

  cached = {
    variant,
    vecDotType: (type) => traitsOf(type).vec_dot_type,
    vecDot: (type, n, w, a) => {
      const out = new Float32Array(1);
      koffi.call(traitsOf(type).vec_dot, vecDotProto, n, out, 0, w, 0, a, 0, 1);
      return out[0]!;
    },
    fromFloat: (type, x, dst) => {
      const act = traitsOf(type).vec_dot_type;
      koffi.call(traitsOf(act).from_float, fromFloatProto, x, dst, x.length);
    },
    mulMatGraph: (type, weights, n, k, x, m) => {
      const wBytes = Number(rowSize(type, k)) * n;
      const memSize = weights.length * (wBytes + 4 * n * m + 4096) + 4 * m * k + 64 * 1024 * 1024;
      const ctx = ggmlInit({ mem_size: memSize, mem_buffer: null, no_alloc: false });
      if (!ctx) throw new Error("ggml_init failed");
      const xt = newTensor2d(ctx, 0, k, m);
      new Float32Array(koffi.view(getData(xt), 4 * m * k)).set(x);
      const graph = newGraph(ctx);
      const outs: unknown[] = [];
      for (const w of weights) {
        const wt = newTensor2d(ctx, type, k, n);
        new Uint8Array(koffi.view(getData(wt), wBytes)).set(w.subarray(0, wBytes));
        const y = mulMat(ctx, wt, xt);
        buildForward(graph, y);
        outs.push(y);
      }
      let freed = false;
      return {
        compute: (threads) => {
          const status = computeWithCtx(ctx, graph, threads) as number;
          if (status !== 0) throw new Error(`ggml_graph_compute_with_ctx returned ${status}`);
        },
        output: (i) => new Float32Array(koffi.view(getData(outs[i]), 4 * n * m).slice(0)),
        free: () => {
          if (!freed) ggmlFree(ctx);
          freed = true;
        },
      };
    },
  };
  return cached;
}
