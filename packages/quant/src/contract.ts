/**
 * The keep-quant contract (DESIGN.md): `MatmulBTQuantGrouped(x, W, ids) -> y` over weights kept in
 * their GGUF block encoding, the registered encoding set, the refusal, the chunk policy and the
 * slice decoder every provider is checked against.
 */
import { type GgmlType, GGML_TYPE_TRAITS, GGML_TYPES, isGgmlType, ggmlTypeLabel } from "@keepquant/gguf";
import { InvalidEnvironmentError, QuantArgumentError, UnregisteredEncodingError } from "./errors.js";
import { dequantizeKernel } from "./dequantize.js";

export const MATMUL_BT_QUANT_GROUPED = "MatmulBTQuantGrouped";

/**
 * Exactly the encodings the contract has kernels for (gguf's GGML_TYPE_TRAITS marks them
 * `keepQuantRegistered`), by name: the order the refusal lists them (Q4_K, Q5_K, Q6_K, Q8_0).
 */
export const KEEPQUANT_ENCODINGS: readonly GgmlType[] = Object.freeze(
  GGML_TYPES.filter((t) => GGML_TYPE_TRAITS[t].keepQuantRegistered).sort((a, b) =>
    GGML_TYPE_TRAITS[a].name < GGML_TYPE_TRAITS[b].name ? -1 : 1,
  ),
);

export function isKeepQuantEncoding(type: number): boolean {
  return (KEEPQUANT_ENCODINGS as readonly number[]).includes(type);
}

/** Throws UnregisteredEncodingError unless `type` is one of KEEPQUANT_ENCODINGS. */
export function assertKeepQuantEncoding(type: number, op: string = MATMUL_BT_QUANT_GROUPED): asserts type is GgmlType {
  if (!isKeepQuantEncoding(type)) {
    throw new UnregisteredEncodingError(
      op,
      ggmlTypeLabel(type),
      KEEPQUANT_ENCODINGS.map((t) => ggmlTypeLabel(t)),
    );
  }
}

/**
 * `E` stacked `[N, K]` matrices exactly as stored in the GGUF tensor: row = output feature, blocks
 * run along K, never transposed. Group `g`, row `r` starts at byte `(g * N + r) * rowBytes(K)`.
 */
export interface PackedWeight {
  type: GgmlType;
  /** E: number of stacked matrices (1 = dense) */
  groups: number;
  /** N: output features per group */
  rows: number;
  /** K: input features (a whole number of blocks) */
  cols: number;
  /** E * N * rowBytes(K) bytes */
  data: Uint8Array;
}

export interface MatmulBTQuantGroupedArgs {
  /** [Pa, M, K] activations, f32 */
  x: Float32Array;
  /** Pa: 1 (broadcast to every selected group) or P */
  xGroups: number;
  /** M: rows of x per group */
  m: number;
  weight: PackedWeight;
  /** [P] group ids in [0, E); required when E > 1, never read when E = 1 */
  ids?: Int32Array;
  /** P: number of selected groups (outputs) */
  p: number;
  /** [P, M, N] output; allocated when absent */
  out?: Float32Array;
}

/** Shape facts derived once at the boundary. */
export interface MatmulBTQuantGroupedShape {
  e: number;
  n: number;
  k: number;
  m: number;
  p: number;
  pa: number;
  /** bytes of one [K] row of W */
  rowBytes: number;
  /** bytes of one [N, K] group of W */
  groupBytes: number;
  /** group of each output p (all zero when E = 1) */
  groupOf: Int32Array;
}

function positiveInteger(value: unknown, op: string, argument: string): number {
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 1) {
    throw new QuantArgumentError(op, argument, `expected a positive integer, got ${String(value)}`);
  }
  return value;
}

/** Bytes of a row of `cols` values of `type`; throws naming `argument` when `cols` is not whole blocks. */
export function packedRowBytes(type: GgmlType, cols: number, op: string, argument = "weight.cols"): number {
  const { blockSize, typeSize, name } = GGML_TYPE_TRAITS[type];
  if (cols % blockSize !== 0) {
    throw new QuantArgumentError(op, argument, `${cols} is not a whole number of ${name} blocks (${blockSize} per block)`);
  }
  return (cols / blockSize) * typeSize;
}

/** Checks a packed weight's geometry (any dequantizable type) and returns its row bytes. */
export function checkPackedWeight(weight: PackedWeight, op: string): number {
  if (typeof weight !== "object" || weight === null) throw new QuantArgumentError(op, "weight", "missing");
  const e = positiveInteger(weight.groups, op, "weight.groups");
  const n = positiveInteger(weight.rows, op, "weight.rows");
  const k = positiveInteger(weight.cols, op, "weight.cols");
  if (!(weight.data instanceof Uint8Array)) throw new QuantArgumentError(op, "weight.data", "expected a Uint8Array");
  const rowBytes = packedRowBytes(weight.type, k, op);
  const expected = e * n * rowBytes;
  if (weight.data.length !== expected) {
    throw new QuantArgumentError(
      op,
      "weight.data",
      `[${e}, ${n}, ${k}] ${ggmlTypeLabel(weight.type)} is ${expected} bytes, data has ${weight.data.length}`,
    );
  }
  return rowBytes;
}

/** The whole contract of MatmulBTQuantGrouped, checked once; kernels after this assume valid input. */
export function checkMatmulBTQuantGroupedArgs(args: MatmulBTQuantGroupedArgs): MatmulBTQuantGroupedShape {
  const op = MATMUL_BT_QUANT_GROUPED;
  if (typeof args !== "object" || args === null) throw new QuantArgumentError(op, "args", "missing");
  const { weight } = args;
  if (typeof weight !== "object" || weight === null) throw new QuantArgumentError(op, "weight", "missing");
  assertKeepQuantEncoding(weight.type, op);
  return checkGroupedMatmulShape(args, op);
}

/**
 * The shape part of the contract for a weight of any ggml type with a block geometry (providers in
 * other numerics, e.g. llama.cpp's, compute the same operation on more encodings): geometry of W,
 * x, ids and out, checked once. Does not check the encoding: the provider refuses what it lacks.
 */
export function checkGroupedMatmulShape(args: MatmulBTQuantGroupedArgs, op: string = MATMUL_BT_QUANT_GROUPED): MatmulBTQuantGroupedShape {
  if (typeof args !== "object" || args === null) throw new QuantArgumentError(op, "args", "missing");
  const { weight } = args;
  if (typeof weight !== "object" || weight === null) throw new QuantArgumentError(op, "weight", "missing");
  if (!isGgmlType(weight.type)) throw new QuantArgumentError(op, "weight.type", `${ggmlTypeLabel(weight.type)} is not a ggml type`);
  const rowBytes = checkPackedWeight(weight, op);
  const e = weight.groups;
  const n = weight.rows;
  const k = weight.cols;
  const m = positiveInteger(args.m, op, "m");
  const p = positiveInteger(args.p, op, "p");
  const pa = positiveInteger(args.xGroups, op, "xGroups");
  if (pa !== 1 && pa !== p) throw new QuantArgumentError(op, "xGroups", `must be 1 (broadcast) or p = ${p}, got ${pa}`);
  if (!(args.x instanceof Float32Array)) throw new QuantArgumentError(op, "x", "expected a Float32Array");
  if (args.x.length !== pa * m * k) {
    throw new QuantArgumentError(op, "x", `expected [${pa}, ${m}, ${k}] = ${pa * m * k} values, got ${args.x.length}`);
  }
  const groupOf = new Int32Array(p);
  if (e > 1) {
    const { ids } = args;
    if (!(ids instanceof Int32Array)) throw new QuantArgumentError(op, "ids", `required as an Int32Array when E = ${e} > 1`);
    if (ids.length !== p) throw new QuantArgumentError(op, "ids", `expected ${p} ids, got ${ids.length}`);
    for (let i = 0; i < p; i++) {
      const id = ids[i]!;
      if (id < 0 || id >= e) throw new QuantArgumentError(op, `ids[${i}]`, `${id} is outside [0, ${e})`);
      groupOf[i] = id;
    }
  }
  if (args.out !== undefined) {
    if (!(args.out instanceof Float32Array)) throw new QuantArgumentError(op, "out", "expected a Float32Array");
    if (args.out.length !== p * m * n) {
      throw new QuantArgumentError(op, "out", `expected [${p}, ${m}, ${n}] = ${p * m * n} values, got ${args.out.length}`);
    }
  }
  return { e, n, k, m, p, pa, rowBytes, groupBytes: n * rowBytes, groupOf };
}

// ---------------------------------------------------------------- chunk policy

export const KEEPQUANT_CHUNK_BYTES = "KEEPQUANT_CHUNK_BYTES";
/** Default plane budget: one [chunk, K] f32 plane of at most 256 MiB, unless N / 8 rows is larger. */
export const DEFAULT_CHUNK_PLANE_BYTES = 256 * 1024 * 1024;
/** At most this many chunks by default (the ceil(N / 8) term). */
export const DEFAULT_MAX_CHUNKS = 8;

export type EnvSource = Readonly<Record<string, string | undefined>>;

/** The KEEPQUANT_CHUNK_BYTES cap, or undefined when unset/empty; anything but a positive integer throws. */
export function chunkBytesCap(env: EnvSource = process.env): number | undefined {
  const raw = env[KEEPQUANT_CHUNK_BYTES];
  if (raw === undefined || raw === "") return undefined;
  const value = /^[0-9]+$/.test(raw) ? Number(raw) : Number.NaN;
  if (!Number.isSafeInteger(value) || value < 1) {
    throw new InvalidEnvironmentError(
      KEEPQUANT_CHUNK_BYTES,
      raw,
      "a positive integer number of bytes (decimal digits only), or empty/unset for the default policy",
    );
  }
  return value;
}

/**
 * Rows per chunk for the E = 1 arm (DESIGN.md): `max(floor(256 MiB / (4 K)), ceil(N / 8))` clamped
 * to [1, N]; with KEEPQUANT_CHUNK_BYTES=cap, `floor(cap / (4 K))` (at least 1 row, at most N).
 */
export function chunkRows(n: number, k: number, env: EnvSource = process.env): number {
  const op = "chunkRows";
  positiveInteger(n, op, "n");
  positiveInteger(k, op, "k");
  const cap = chunkBytesCap(env);
  const rows =
    cap === undefined
      ? Math.max(Math.floor(DEFAULT_CHUNK_PLANE_BYTES / (4 * k)), Math.ceil(n / DEFAULT_MAX_CHUNKS))
      : Math.floor(cap / (4 * k));
  return Math.min(n, Math.max(1, rows));
}

export interface ChunkPlan {
  rows: number;
  chunks: number;
  /** bytes of the largest live [rows, K] f32 plane */
  planeBytes: number;
}

export function chunkPlan(n: number, k: number, env: EnvSource = process.env): ChunkPlan {
  const rows = chunkRows(n, k, env);
  return { rows, chunks: Math.ceil(n / rows), planeBytes: rows * k * 4 };
}

// ---------------------------------------------------------------- slice decode

/**
 * Decodes rows [rowStart, rowEnd) of group `group` of `weight` into `dst` (row-major [rows, K],
 * from dst[0]); bit-exact against dequantizeRow on the same bytes. Returns dst.
 */
export function decodeSlice(weight: PackedWeight, group: number, rowStart: number, rowEnd: number, dst: Float32Array): Float32Array {
  const op = "decodeSlice";
  const kernel = dequantizeKernel(weight.type, op);
  const rowBytes = checkPackedWeight(weight, op);
  if (!Number.isSafeInteger(group) || group < 0 || group >= weight.groups) {
    throw new QuantArgumentError(op, "group", `${group} is outside [0, ${weight.groups})`);
  }
  if (!Number.isSafeInteger(rowStart) || !Number.isSafeInteger(rowEnd) || rowStart < 0 || rowEnd > weight.rows || rowStart > rowEnd) {
    throw new QuantArgumentError(op, "rowStart/rowEnd", `[${rowStart}, ${rowEnd}) is not a row range within [0, ${weight.rows}]`);
  }
  const k = weight.cols;
  const rows = rowEnd - rowStart;
  if (dst.length < rows * k) throw new QuantArgumentError(op, "dst", `needs ${rows * k} values, has ${dst.length}`);
  const blocksPerRow = k / GGML_TYPE_TRAITS[weight.type].blockSize;
  decodeRowsUnchecked(kernel, weight.data, (group * weight.rows + rowStart) * rowBytes, rows * blocksPerRow, dst);
  return dst;
}

/** Rows are whole blocks and contiguous, so a row range is one run of blocks. */
function decodeRowsUnchecked(
  kernel: ReturnType<typeof dequantizeKernel>,
  data: Uint8Array,
  byteOffset: number,
  blocks: number,
  dst: Float32Array,
): void {
  kernel(data, byteOffset, dst, 0, blocks);
}
