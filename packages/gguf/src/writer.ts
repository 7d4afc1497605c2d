import { GgufWriteError } from "./errors.js";
import { GGUF_LIMITS } from "./limits.js";
import { GGML_TYPE_TRAITS, ggmlTypeName, isGgmlType, type GgmlType } from "./ggml-type.js";
import { GGUF_DEFAULT_ALIGNMENT, GGUF_MAGIC } from "./reader.js";
import type { GgufArrayItems, GgufArrayValue, GgufMetadataEntry, GgufValue } from "./types.js";
import { GGUF_VALUE_TYPE_SIZE, GgufValueType, ggufValueTypeName, isGgufValueType } from "./value-type.js";

/** A tensor header for the writer (no data). */
export interface GgufTensorHeader {
  name: string;
  type: GgmlType;
  /** ggml order. */
  ne: number[];
}

export interface GgufWriteTensor extends GgufTensorHeader {
  data: Uint8Array;
}

export interface GgufWriteInput {
  metadata: GgufMetadataEntry[];
  tensors: GgufWriteTensor[];
  /** Data alignment; written as `general.alignment` when it is not the default 32. */
  alignment?: number;
  /** 3 (default) or 2; the layouts are identical, only the version field differs. */
  version?: 2 | 3;
}

export interface EncodedGgufHeader {
  /** Header bytes, padded with zeros to `dataOffset`. */
  header: Uint8Array;
  dataOffset: number;
  alignment: number;
  /** Per tensor (input order): offset relative to the data section and byte length. */
  placements: { name: string; relativeOffset: number; byteLength: number }[];
  /** Data section size including padding after each tensor. */
  dataBytes: number;
}

/** Growable little-endian byte builder. */
class ByteBuilder {
  private buf = Buffer.alloc(64 * 1024);
  length = 0;
  private ensure(n: number): void {
    if (this.length + n <= this.buf.length) return;
    let size = this.buf.length * 2;
    while (size < this.length + n) size *= 2;
    const next = Buffer.alloc(size);
    next.set(this.buf.subarray(0, this.length));
    this.buf = next;
  }
  u8(v: number): void {
    this.ensure(1);
    this.buf.writeUInt8(v, this.length);
    this.length += 1;
  }
  i8(v: number): void {
    this.ensure(1);
    this.buf.writeInt8(v, this.length);
    this.length += 1;
  }
  u16(v: number): void {
    this.ensure(2);
    this.buf.writeUInt16LE(v, this.length);
    this.length += 2;
  }
  i16(v: number): void {
    this.ensure(2);
    this.buf.writeInt16LE(v, this.length);
    this.length += 2;
  }
  u32(v: number): void {
    this.ensure(4);
    this.buf.writeUInt32LE(v, this.length);
    this.length += 4;
  }
  i32(v: number): void {
    this.ensure(4);
    this.buf.writeInt32LE(v, this.length);
    this.length += 4;
  }
  f32(v: number): void {
    this.ensure(4);
    this.buf.writeFloatLE(v, this.length);
    this.length += 4;
  }
  f64(v: number): void {
    this.ensure(8);
    this.buf.writeDoubleLE(v, this.length);
    this.length += 8;
  }
  u64(v: bigint): void {
    this.ensure(8);
    this.buf.writeBigUInt64LE(v, this.length);
    this.length += 8;
  }
  i64(v: bigint): void {
    this.ensure(8);
    this.buf.writeBigInt64LE(v, this.length);
    this.length += 8;
  }
  bytes(b: Uint8Array): void {
    this.ensure(b.length);
    this.buf.set(b, this.length);
    this.length += b.length;
  }
  str(s: string): void {
    const n = Buffer.byteLength(s, "utf8");
    this.u64(BigInt(n));
    this.ensure(n);
    this.buf.write(s, this.length, n, "utf8");
    this.length += n;
  }
  zeros(n: number): void {
    this.ensure(n);
    this.buf.fill(0, this.length, this.length + n);
    this.length += n;
  }
  result(): Uint8Array {
    return new Uint8Array(this.buf.buffer, this.buf.byteOffset, this.length);
  }
}

function fail(message: string, field: string): never {
  throw new GgufWriteError(`${message} (in ${field})`, { field });
}

function toBigInt(v: unknown, field: string): bigint {
  if (typeof v === "bigint") return v;
  if (typeof v === "number" && Number.isSafeInteger(v)) return BigInt(v);
  return fail(`expected an integer, found ${String(v)}`, field);
}

function toInt(v: unknown, min: number, max: number, field: string): number {
  const n = typeof v === "bigint" ? Number(v) : v;
  if (typeof n !== "number" || !Number.isInteger(n) || n < min || n > max)
    fail(`expected an integer in [${min}, ${max}], found ${String(v)}`, field);
  return n;
}

function writeScalar(out: ByteBuilder, type: GgufValueType, v: unknown, field: string): void {
  switch (type) {
    case GgufValueType.UINT8:
      return out.u8(toInt(v, 0, 0xff, field));
    case GgufValueType.INT8:
      return out.i8(toInt(v, -0x80, 0x7f, field));
    case GgufValueType.UINT16:
      return out.u16(toInt(v, 0, 0xffff, field));
    case GgufValueType.INT16:
      return out.i16(toInt(v, -0x8000, 0x7fff, field));
    case GgufValueType.UINT32:
      return out.u32(toInt(v, 0, 0xffffffff, field));
    case GgufValueType.INT32:
      return out.i32(toInt(v, -0x80000000, 0x7fffffff, field));
    case GgufValueType.FLOAT32:
      if (typeof v !== "number") fail(`expected a number, found ${typeof v}`, field);
      return out.f32(v);
    case GgufValueType.FLOAT64:
      if (typeof v !== "number") fail(`expected a number, found ${typeof v}`, field);
      return out.f64(v);
    case GgufValueType.BOOL:
      if (typeof v !== "boolean") fail(`expected a boolean, found ${typeof v}`, field);
      return out.u8(v ? 1 : 0);
    case GgufValueType.STRING:
      if (typeof v !== "string") fail(`expected a string, found ${typeof v}`, field);
      return out.str(v);
    case GgufValueType.UINT64: {
      const b = toBigInt(v, field);
      if (b < 0n || b >= 1n << 64n) fail(`u64 out of range: ${b}`, field);
      return out.u64(b);
    }
    case GgufValueType.INT64: {
      const b = toBigInt(v, field);
      if (b < -(1n << 63n) || b >= 1n << 63n) fail(`i64 out of range: ${b}`, field);
      return out.i64(b);
    }
    default:
      fail(`value type ${type} is not a scalar`, field);
  }
}

function writeArray(out: ByteBuilder, itemType: GgufValueType, items: GgufArrayItems, field: string): void {
  if (!isGgufValueType(itemType)) fail(`unknown array item type ${String(itemType)}`, field);
  if (!Array.isArray(items) && !ArrayBuffer.isView(items)) fail("array value must be an array or typed array", field);
  const list = items as ArrayLike<unknown>;
  out.u32(itemType);
  out.u64(BigInt(list.length));
  if (itemType === GgufValueType.ARRAY) {
    for (let i = 0; i < list.length; i++) {
      const inner = list[i] as GgufArrayValue;
      if (typeof inner !== "object" || inner === null || !("itemType" in inner))
        fail("nested array items must be { itemType, value }", `${field}[${i}]`);
      writeArray(out, inner.itemType, inner.value, `${field}[${i}]`);
    }
    return;
  }
  for (let i = 0; i < list.length; i++) writeScalar(out, itemType, list[i], `${field}[${i}]`);
}

function writeEntry(out: ByteBuilder, entry: GgufMetadataEntry): void {
  out.str(entry.key);
  if (!isGgufValueType(entry.type)) fail(`unknown value type ${String(entry.type)}`, entry.key);
  out.u32(entry.type);
  if (entry.type === GgufValueType.ARRAY) {
    if (entry.itemType === undefined) fail("array entry needs itemType", entry.key);
    writeArray(out, entry.itemType, entry.value as GgufArrayItems, entry.key);
  } else {
    writeScalar(out, entry.type, entry.value, entry.key);
  }
}

/** Validated tensor byte length for a header. */
export function tensorByteLength(tensor: GgufTensorHeader): number {
  if (!isGgmlType(tensor.type)) fail(`unknown ggml type ${String(tensor.type)}`, tensor.name);
  const { blockSize, typeSize } = GGML_TYPE_TRAITS[tensor.type];
  if (tensor.ne.length > 4) fail(`${tensor.ne.length} dims (max 4)`, tensor.name);
  let elements = 1;
  for (const d of tensor.ne) {
    if (!Number.isSafeInteger(d) || d < 0) fail(`bad dimension ${d}`, tensor.name);
    elements *= d;
  }
  if (!Number.isSafeInteger(elements)) fail("element count overflows", tensor.name);
  const row = tensor.ne[0] ?? 1;
  if (row % blockSize !== 0) fail(`rows of ${row} are not whole ${ggmlTypeName(tensor.type)} blocks of ${blockSize}`, tensor.name);
  return (elements / blockSize) * typeSize;
}

/**
 * Encodes the header (metadata + tensor infos) and computes the data layout: tensors in input
 * order, each at the next multiple of the alignment.
 */
export function encodeGgufHeader(input: {
  metadata: GgufMetadataEntry[];
  tensors: GgufTensorHeader[];
  alignment?: number;
  version?: 2 | 3;
}): EncodedGgufHeader {
  const metadata = [...input.metadata];
  const keys = new Set<string>();
  for (const entry of metadata) {
    if (keys.has(entry.key)) fail("duplicate metadata key", entry.key);
    keys.add(entry.key);
  }
  const alignEntry = metadata.find((e) => e.key === "general.alignment");
  let alignment = input.alignment ?? GGUF_DEFAULT_ALIGNMENT;
  if (alignEntry) {
    if (alignEntry.type !== GgufValueType.UINT32 || typeof alignEntry.value !== "number")
      fail("general.alignment must be a u32", "general.alignment");
    if (input.alignment !== undefined && input.alignment !== alignEntry.value) {
      fail(`alignment option ${input.alignment} disagrees with the key (${alignEntry.value})`, "general.alignment");
    }
    alignment = alignEntry.value;
  } else if (alignment !== GGUF_DEFAULT_ALIGNMENT) {
    metadata.push({ key: "general.alignment", type: GgufValueType.UINT32, value: alignment });
  }
  if (!Number.isInteger(alignment) || alignment <= 0 || (alignment & (alignment - 1)) !== 0)
    fail(`alignment ${alignment} is not a power of two`, "general.alignment");

  const out = new ByteBuilder();
  out.u32(GGUF_MAGIC);
  out.u32(input.version ?? 3);
  out.u64(BigInt(input.tensors.length));
  out.u64(BigInt(metadata.length));
  for (const entry of metadata) writeEntry(out, entry);

  const names = new Set<string>();
  const placements: EncodedGgufHeader["placements"] = [];
  let cursor = 0;
  for (const tensor of input.tensors) {
    if (names.has(tensor.name)) fail("duplicate tensor name", tensor.name);
    names.add(tensor.name);
    const byteLength = tensorByteLength(tensor);
    if (Buffer.byteLength(tensor.name, "utf8") > GGUF_LIMITS.maxTensorNameBytes) {
      fail(`tensor name longer than ${GGUF_LIMITS.maxTensorNameBytes} bytes (ggml's GGML_MAX_NAME)`, tensor.name);
    }
    out.str(tensor.name);
    out.u32(tensor.ne.length);
    for (const d of tensor.ne) out.u64(BigInt(d));
    out.u32(tensor.type);
    out.u64(BigInt(cursor));
    placements.push({ name: tensor.name, relativeOffset: cursor, byteLength });
    cursor += Math.ceil(byteLength / alignment) * alignment;
  }
  const dataOffset = Math.ceil(out.length / alignment) * alignment;
  out.zeros(dataOffset - out.length);
  return { header: out.result(), dataOffset, alignment, placements, dataBytes: cursor };
}

/** A complete GGUF v3 (or v2) file in memory. */
export function writeGguf(input: GgufWriteInput): Uint8Array {
  const encoded = encodeGgufHeader(input);
  const file = new Uint8Array(encoded.dataOffset + encoded.dataBytes);
  file.set(encoded.header, 0);
  input.tensors.forEach((tensor, i) => {
    const placement = encoded.placements[i]!;
    if (tensor.data.byteLength !== placement.byteLength) {
      fail(`data has ${tensor.data.byteLength} bytes, expected ${placement.byteLength}`, tensor.name);
    }
    file.set(tensor.data, encoded.dataOffset + placement.relativeOffset);
  });
  return file;
}

type ArrayInput = GgufArrayItems | readonly number[];

/** The constructor of a scalar entry of `type`. */
function scalar<V extends number | bigint | boolean | string>(type: GgufValueType): (key: string, value: V) => GgufMetadataEntry {
  return (key, value) => ({ key, type, value });
}

/** Small constructors for metadata entries: `gguf.u32("qwen35.block_count", 24)`. */
export const gguf = {
  u8: scalar<number>(GgufValueType.UINT8),
  i8: scalar<number>(GgufValueType.INT8),
  u16: scalar<number>(GgufValueType.UINT16),
  i16: scalar<number>(GgufValueType.INT16),
  u32: scalar<number>(GgufValueType.UINT32),
  i32: scalar<number>(GgufValueType.INT32),
  f32: scalar<number>(GgufValueType.FLOAT32),
  f64: scalar<number>(GgufValueType.FLOAT64),
  u64: scalar<bigint>(GgufValueType.UINT64),
  i64: scalar<bigint>(GgufValueType.INT64),
  bool: scalar<boolean>(GgufValueType.BOOL),
  str: scalar<string>(GgufValueType.STRING),
  arr: (key: string, itemType: GgufValueType, value: ArrayInput): GgufMetadataEntry => ({
    key,
    type: GgufValueType.ARRAY,
    itemType,
    value: value as GgufValue,
  }),
};

/** Fixed-size byte width of a scalar type (for callers sizing buffers). */
export function ggufValueByteSize(type: GgufValueType): number {
  const size = GGUF_VALUE_TYPE_SIZE[type];
  if (size === 0) throw new GgufWriteError(`${ggufValueTypeName(type)} has no fixed size`);
  return size;
}
