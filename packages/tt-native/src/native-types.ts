/**
 * The exact surface of build/Release/keepquant_native.node (src/addon.cc). One hand-written type:
 * when the addon changes, bump kAbiVersion there and NATIVE_ABI_VERSION here together.
 */
export const NATIVE_ABI_VERSION = 1;

export type IsaLevelName = "generic" | "avx2" | "avx512" | "neon";

export interface NativeBuildInfo {
  abiVersion: number;
  compiler: string;
  arch: "x64" | "arm64" | "other";
  /** levels this CPU can run with this binary, best last */
  isaAvailable: IsaLevelName[];
  isaBest: IsaLevelName;
  tt: { built: boolean; loaded: boolean; reason: string };
}

/** Any typed array view over packed bytes (Uint8Array, Buffer, ...). */
export type ByteView = ArrayBufferView & { readonly length: number };

export interface NativeAddon {
  abiVersion(): number;
  buildInfo(): NativeBuildInfo;
  getIsa(): IsaLevelName;
  /** throws (Error) with the reason when the level is unknown or unsupported here */
  setIsa(level: string): void;
  /** 0 = hardware threads */
  setThreads(threads: number): void;
  getThreads(): number;
  hardwareThreads(): number;
  /** ggml type id of the activation encoding for a weight type, -1 when there is no dot kernel */
  vecDotType(type: number): number;
  dequantSupported(type: number): boolean;
  /** dst = rows x K values decoded from src (rows of whole blocks); roundBf16 rounds each value once */
  dequantizeRows(type: number, src: ByteView, dst: Float32Array, rows: number, roundBf16?: boolean): void;
  /** activation quantizer (Q8_K, Q8_0, Q8_1, F16, BF16, F32) of `rows` rows of x into dst */
  quantizeActivations(actType: number, x: Float32Array, dst: ByteView, rows: number): void;
  /** y[M, N] = llama.cpp numerics of W[N, K] x x[M, K] */
  matmulLlama(type: number, weight: ByteView, n: number, k: number, x: Float32Array, m: number, y: Float32Array): void;
  matmulLlamaAsync(
    type: number, weight: ByteView, n: number, k: number, x: Float32Array, m: number, y: Float32Array,
  ): Promise<void>;
  /**
   * Contract numerics (decode -> bf16 RNE once -> f32): rows [rowStart, rowStart + rowCount) of
   * W (K columns) against x[M, K]; y[mi * ldy + yOffset + r] for r in [0, rowCount).
   */
  matmulBf16(
    type: number, weight: ByteView, k: number, rowStart: number, rowCount: number,
    x: Float32Array, m: number, y: Float32Array, ldy: number, yOffset: number,
  ): void;
  /** wrapping sum of the buffer's 8-byte words, read once across the pool (bandwidth probe) */
  sumWords(buffer: ByteView): bigint;
  matmulBf16Async(
    type: number, weight: ByteView, k: number, rowStart: number, rowCount: number,
    x: Float32Array, m: number, y: Float32Array, ldy: number, yOffset: number,
  ): Promise<void>;
}
