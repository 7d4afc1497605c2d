/**
 * The ggml library shipped in @node-llama-cpp/linux-x64 (the oracle), called through koffi.
 * Test and script support only: published packages never import this.
 */
import { createRequire } from "node:module";
import path from "node:path";
import fs from "node:fs";
import koffi, { type LibraryHandle } from "koffi";

const require = createRequire(import.meta.url);

export const ORACLE_PACKAGE = "@node-llama-cpp/linux-x64";
export const ORACLE_VERSION: string = (
  JSON.parse(fs.readFileSync(path.join(path.dirname(require.resolve(ORACLE_PACKAGE)), "..", "package.json"), "utf8")) as { version: string }
).version;

/** Folder holding libggml-base.so, libllama.v0.5.0.so, ... */
export function oracleLibDir(): string {
  return path.join(path.dirname(require.resolve(ORACLE_PACKAGE)), "..", "bins", "linux-x64");
}

/** Why the oracle cannot be used on this machine, or undefined when it can. */
export function oracleUnavailableReason(): string | undefined {
  if (process.platform !== "linux" || process.arch !== "x64") {
    return `oracle binaries are linux-x64 only (this is ${process.platform}-${process.arch})`;
  }
  try {
    const dir = oracleLibDir();
    if (!fs.existsSync(path.join(dir, "libggml-base.so"))) return `libggml-base.so not found in ${dir}`;
  } catch (error) {
    return `${ORACLE_PACKAGE} is not installed: ${(error as Error).message}`;
  }
  return undefined;
}

type Fn = (...args: unknown[]) => unknown;

/** `lib.func(signature)`, declared once per signature and then reused. */
export function functionsOf(lib: LibraryHandle): (signature: string) => Fn {
  const fns = new Map<string, Fn>();
  return (signature) => {
    let f = fns.get(signature);
    if (!f) {
      f = lib.func(signature) as Fn;
      fns.set(signature, f);
    }
    return f;
  };
}

/** The oracle's libggml-base.so; throws (`what` unavailable, and why) when the oracle is not installed. */
export function loadGgmlBase(what: string): LibraryHandle {
  const reason = oracleUnavailableReason();
  if (reason) throw new Error(`${what} unavailable: ${reason}`);
  return koffi.load(path.join(oracleLibDir(), "libggml-base.so"));
}

export interface GgmlOracle {
  /** ggml_type_size / ggml_blck_size / ggml_type_name for a type id */
  typeSize(type: number): number;
  blockSize(type: number): number;
  typeName(type: number): string;
  rowSize(type: number, elements: number): number;
  /** dequantize_row_<name>(src, dst, k); `name` is ggml's lower-case token, e.g. "q4_K" */
  dequantizeRow(name: string, src: Uint8Array, dst: Float32Array): void;
  /** quantize_row_<name>_ref(src, dst, k) */
  quantizeRowRef(name: string, src: Float32Array, dst: Uint8Array): void;
  /** ggml_quantize_chunk(type, src, dst, start=0, nrows, n_per_row, imatrix=null) -> bytes */
  quantizeChunk(type: number, src: Float32Array, dst: Uint8Array, nrows: number, nPerRow: number): number;
  fp32ToBf16(value: number): number;
  fp32ToFp16(value: number): number;
  fp16ToFp32(bits: number): number;
  bf16ToFp32(bits: number): number;
  /** ggml_fp32_to_bf16_row(src, dst, n) */
  fp32ToBf16Row(src: Float32Array, dst: Uint16Array): void;
}

let cached: GgmlOracle | undefined;

export function loadGgmlOracle(): GgmlOracle {
  if (cached) return cached;
  const fn = functionsOf(loadGgmlBase("ggml oracle"));
  // ggml_bf16_t and ggml_fp16_t are 16-bit structs/ints returned by value: uint16 in the ABI.
  cached = {
    typeSize: (type) => Number(fn("size_t ggml_type_size(int type)")(type)),
    blockSize: (type) => Number(fn("int64_t ggml_blck_size(int type)")(type)),
    typeName: (type) => fn("const char *ggml_type_name(int type)")(type) as string,
    rowSize: (type, elements) => Number(fn("size_t ggml_row_size(int type, int64_t ne)")(type, elements)),
    dequantizeRow: (name, src, dst) => {
      fn(`void dequantize_row_${name}(const void *x, _Out_ float *y, int64_t k)`)(src, dst, dst.length);
    },
    quantizeRowRef: (name, src, dst) => {
      fn(`void quantize_row_${name}_ref(const float *x, _Out_ void *y, int64_t k)`)(src, dst, src.length);
    },
    quantizeChunk: (type, src, dst, nrows, nPerRow) =>
      Number(
        fn(
          "size_t ggml_quantize_chunk(int type, const float *src, _Out_ void *dst, int64_t start, int64_t nrows, int64_t n_per_row, const float *imatrix)",
        )(type, src, dst, 0, nrows, nPerRow, null),
      ),
    fp32ToBf16: (value) => fn("uint16_t ggml_fp32_to_bf16(float x)")(value) as number,
    fp32ToFp16: (value) => fn("uint16_t ggml_fp32_to_fp16(float x)")(value) as number,
    fp16ToFp32: (bits) => fn("float ggml_fp16_to_fp32(uint16_t x)")(bits) as number,
    bf16ToFp32: (bits) => fn("float ggml_bf16_to_fp32(uint16_t x)")(bits) as number,
    fp32ToBf16Row: (src, dst) => {
      fn("void ggml_fp32_to_bf16_row(const float *x, _Out_ uint16_t *y, int64_t n)")(src, dst, src.length);
    },
  };
  return cached;
}
