import { GgufFormatError, GgufIoError, GgufLimitError, GgufTensorError, where, type GgufErrorCode } from "./errors.js";
import { GGML_TYPE_TRAITS, ggmlTypeName, isGgmlType, type GgmlType } from "./ggml-type.js";
import { GGUF_LIMITS, type GgufLimits } from "./limits.js";
import { toByteSource, type GgufByteSource } from "./source.js";
import type { GgufArrayItems, GgufArrayValue, GgufFile, GgufMetadataEntry, GgufTensorInfo, GgufValue } from "./types.js";
import { GGUF_VALUE_TYPE_SIZE, GgufValueType, isGgufValueType } from "./value-type.js";

export const GGUF_MAGIC = 0x46554747; // "GGUF" read as little-endian u32
export const GGUF_DEFAULT_ALIGNMENT = 32;

export interface ReadGgufOptions {
  /** Override individual parse limits (see GGUF_LIMITS). */
  limits?: Partial<GgufLimits>;
  /** First positioned-read size for file sources (default 256 KiB; doubles per read up to 16 MiB). */
  firstReadBytes?: number;
}

const FIRST_CHUNK = 256 * 1024;
const MAX_CHUNK = 16 * 1024 * 1024;
const LITTLE_ENDIAN_HOST = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;
const TWO_POW_32 = 4_294_967_296;

/**
 * A window over the header bytes. Reads are synchronous against the window; `fill` (the only
 * await) brings in the next chunk with one positioned read. Chunks grow geometrically, so a
 * 10 MiB header costs a handful of reads.
 */
class Cursor {
  buf: Buffer;
  view: DataView;
  /** Index into `buf`. */
  pos = 0;
  /** File offset of buf[0]. */
  base = 0;
  private chunk: number;

  constructor(
    private readonly source: GgufByteSource,
    private readonly limits: GgufLimits,
    initial: Uint8Array | undefined,
    firstRead: number,
  ) {
    this.chunk = Math.max(1, Math.floor(firstRead));
    const bytes = initial ?? new Uint8Array(0);
    this.buf = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }

  get offset(): number {
    return this.base + this.pos;
  }
  get available(): number {
    return this.buf.length - this.pos;
  }
  /** Bytes left in the whole source from the current position. */
  get remaining(): number {
    return this.source.size - this.offset;
  }

  /** Make at least `n` bytes available at `pos`, or throw a typed truncation error. */
  async fill(n: number, field: string): Promise<void> {
    if (this.available >= n) return;
    const start = this.offset;
    if (n > this.remaining) {
      throw new GgufFormatError(
        "GGUF_TRUNCATED",
        `truncated: ${field} needs ${n} bytes at offset ${start} but the ${this.source.description} ends at ${this.source.size}`,
        { offset: start, field },
      );
    }
    if (start + n > this.limits.maxHeaderBytes) {
      throw new GgufLimitError("header size", start + n, this.limits.maxHeaderBytes, { offset: start, field });
    }
    const tail = this.buf.subarray(this.pos);
    const want = Math.min(Math.max(n - tail.length, this.chunk), this.remaining - tail.length);
    this.chunk = Math.min(this.chunk * 2, MAX_CHUNK);
    const at = this.base + this.buf.length;
    const fresh = await this.source.read(at, want);
    // a source that returns fewer bytes than asked (or changed under the reader) is an I/O error, never a read past the buffer
    if (fresh.length !== want) throw shortRead(this.source, at, want, fresh.length, field);
    const next = Buffer.allocUnsafe(tail.length + fresh.length);
    next.set(tail, 0);
    next.set(fresh, tail.length);
    this.buf = next;
    this.view = new DataView(next.buffer, next.byteOffset, next.byteLength);
    this.base = start;
    this.pos = 0;
  }

  u8(): number {
    return this.buf[this.pos++]!;
  }
  i8(): number {
    return this.view.getInt8(this.pos++);
  }
  u16(): number {
    return this.view.getUint16(this.advance(2), true);
  }
  i16(): number {
    return this.view.getInt16(this.advance(2), true);
  }
  u32(): number {
    return this.view.getUint32(this.advance(4), true);
  }
  i32(): number {
    return this.view.getInt32(this.advance(4), true);
  }
  f32(): number {
    return this.view.getFloat32(this.advance(4), true);
  }
  f64(): number {
    return this.view.getFloat64(this.advance(8), true);
  }
  u64big(): bigint {
    return this.view.getBigUint64(this.advance(8), true);
  }
  i64big(): bigint {
    return this.view.getBigInt64(this.advance(8), true);
  }
  /** A u64 count/size as a number; values above 2^53 come back as +Infinity (always over a limit). */
  u64num(): number {
    const at = this.advance(8);
    const lo = this.view.getUint32(at, true);
    const hi = this.view.getUint32(at + 4, true);
    return hi >= 0x200000 ? Number.POSITIVE_INFINITY : hi * TWO_POW_32 + lo;
  }
  /** Decode `len` bytes as UTF-8 (invalid sequences become U+FFFD, as TextDecoder does). */
  str(len: number): string {
    const start = this.advance(len);
    return this.buf.toString("utf8", start, start + len);
  }
  /** Copy `n` items of `size` bytes into a fresh, aligned buffer. */
  copy(bytes: number): Uint8Array {
    const start = this.advance(bytes);
    const out = new Uint8Array(bytes);
    out.set(this.buf.subarray(start, start + bytes));
    return out;
  }
  /** Moves past `bytes` bytes; returns where they start. */
  private advance(bytes: number): number {
    const at = this.pos;
    this.pos += bytes;
    return at;
  }
}

function truncated(c: Cursor, field: string, needs: number): GgufFormatError {
  return new GgufFormatError(
    "GGUF_TRUNCATED",
    `truncated: ${field} needs at least ${needs} bytes at offset ${c.offset} but only ${c.remaining} remain`,
    { offset: c.offset, field },
  );
}

async function readString(c: Cursor, field: string, maxBytes: number, limitName: string): Promise<string> {
  if (c.available < 8) await c.fill(8, field);
  const at = c.offset;
  const len = c.u64num();
  if (len > maxBytes) throw new GgufLimitError(limitName, len, maxBytes, { offset: at, field });
  if (c.available < len) await c.fill(len, field);
  return c.str(len);
}

async function readScalar(c: Cursor, type: GgufValueType, field: string, limits: GgufLimits): Promise<GgufValue> {
  if (type === GgufValueType.STRING) return readString(c, field, limits.maxStringBytes, "string length");
  const size = GGUF_VALUE_TYPE_SIZE[type];
  if (c.available < size) await c.fill(size, field);
  switch (type) {
    case GgufValueType.UINT8:
      return c.u8();
    case GgufValueType.INT8:
      return c.i8();
    case GgufValueType.UINT16:
      return c.u16();
    case GgufValueType.INT16:
      return c.i16();
    case GgufValueType.UINT32:
      return c.u32();
    case GgufValueType.INT32:
      return c.i32();
    case GgufValueType.FLOAT32:
      return c.f32();
    case GgufValueType.FLOAT64:
      return c.f64();
    case GgufValueType.UINT64:
      return c.u64big();
    case GgufValueType.INT64:
      return c.i64big();
    case GgufValueType.BOOL: {
      const at = c.offset;
      const b = c.u8();
      if (b > 1)
        throw new GgufFormatError("GGUF_BAD_VALUE", `bool value ${b} is neither 0 nor 1${where({ offset: at, field })}`, {
          offset: at,
          field,
        });
      return b === 1;
    }
    default:
      throw new GgufFormatError("GGUF_BAD_VALUE_TYPE", `value type ${type} is not a scalar${where({ offset: c.offset, field })}`, {
        offset: c.offset,
        field,
      });
  }
}

/** A multi-byte numeric GGUF type's typed array and its little-endian DataView read. */
interface WideArrayKind {
  array: new (
    ...args: [ArrayBufferLike, number, number] | [number]
  ) => Exclude<GgufArrayItems, Uint8Array | Int8Array | readonly unknown[]>;
  read: (view: DataView, at: number) => number | bigint;
}
const WIDE_ARRAY_KINDS: Partial<Record<GgufValueType, WideArrayKind>> = {
  [GgufValueType.UINT16]: { array: Uint16Array, read: (view, at) => view.getUint16(at, true) },
  [GgufValueType.INT16]: { array: Int16Array, read: (view, at) => view.getInt16(at, true) },
  [GgufValueType.UINT32]: { array: Uint32Array, read: (view, at) => view.getUint32(at, true) },
  [GgufValueType.INT32]: { array: Int32Array, read: (view, at) => view.getInt32(at, true) },
  [GgufValueType.FLOAT32]: { array: Float32Array, read: (view, at) => view.getFloat32(at, true) },
  [GgufValueType.FLOAT64]: { array: Float64Array, read: (view, at) => view.getFloat64(at, true) },
  [GgufValueType.UINT64]: { array: BigUint64Array, read: (view, at) => view.getBigUint64(at, true) },
  [GgufValueType.INT64]: { array: BigInt64Array, read: (view, at) => view.getBigInt64(at, true) },
};

/** `n` items of a numeric type from their bytes (a fresh, aligned buffer): a view of it on a little-endian host, else a copy. */
function typedFromBytes(type: GgufValueType, bytes: Uint8Array, n: number): GgufArrayItems {
  if (type === GgufValueType.UINT8) return bytes;
  if (type === GgufValueType.INT8) return new Int8Array(bytes.buffer, 0, n);
  const kind = WIDE_ARRAY_KINDS[type];
  if (!kind) throw new Error(`unreachable: ${type}`);
  if (LITTLE_ENDIAN_HOST) return new kind.array(bytes.buffer, 0, n);
  const view = new DataView(bytes.buffer);
  const size = GGUF_VALUE_TYPE_SIZE[type];
  const out = new kind.array(n);
  for (let i = 0; i < n; i++) (out as { [i: number]: number | bigint })[i] = kind.read(view, i * size);
  return out;
}

async function readValueType(c: Cursor, field: string): Promise<GgufValueType> {
  if (c.available < 4) await c.fill(4, field);
  const at = c.offset;
  const id = c.u32();
  if (!isGgufValueType(id)) {
    throw new GgufFormatError("GGUF_BAD_VALUE_TYPE", `unknown value type id ${id}${where({ offset: at, field })}`, { offset: at, field });
  }
  return id;
}

async function readArray(c: Cursor, field: string, limits: GgufLimits, depth: number): Promise<GgufArrayValue> {
  if (depth > limits.maxArrayNesting) {
    throw new GgufLimitError("array nesting", depth, limits.maxArrayNesting, { offset: c.offset, field });
  }
  const itemType = await readValueType(c, field);
  if (c.available < 8) await c.fill(8, field);
  const at = c.offset;
  const n = c.u64num();
  if (n > limits.maxArrayLength) throw new GgufLimitError("array length", n, limits.maxArrayLength, { offset: at, field });
  const itemSize = GGUF_VALUE_TYPE_SIZE[itemType];
  // Every item takes at least this many bytes: refuse counts the rest of the file cannot hold
  // before allocating anything.
  const minItem = itemType === GgufValueType.STRING ? 8 : itemType === GgufValueType.ARRAY ? 12 : itemSize;
  if (n * minItem > c.remaining) throw truncated(c, `${field}[${n}]`, n * minItem);

  if (itemType === GgufValueType.STRING) {
    const out = new Array<string>(n);
    const maxBytes = limits.maxStringBytes;
    for (let i = 0; i < n; i++) {
      if (c.buf.length - c.pos < 8) await c.fill(8, field);
      const len = c.u64num();
      if (len > maxBytes) throw new GgufLimitError("string length", len, maxBytes, { offset: c.offset - 8, field: `${field}[${i}]` });
      if (c.buf.length - c.pos < len) await c.fill(len, `${field}[${i}]`);
      out[i] = c.str(len);
    }
    return { itemType, value: out };
  }
  if (itemType === GgufValueType.ARRAY) {
    const out = new Array<GgufArrayValue>(n);
    for (let i = 0; i < n; i++) out[i] = await readArray(c, `${field}[${i}]`, limits, depth + 1);
    return { itemType, value: out };
  }
  if (itemType === GgufValueType.BOOL) {
    if (c.available < n) await c.fill(n, field);
    const out = new Array<boolean>(n);
    for (let i = 0; i < n; i++) {
      const b = c.buf[c.pos]!;
      if (b > 1) {
        throw new GgufFormatError(
          "GGUF_BAD_VALUE",
          `bool value ${b} is neither 0 nor 1${where({ offset: c.offset, field: `${field}[${i}]` })}`,
          {
            offset: c.offset,
            field: `${field}[${i}]`,
          },
        );
      }
      c.pos++;
      out[i] = b === 1;
    }
    return { itemType, value: out };
  }
  const bytes = n * itemSize;
  if (c.available < bytes) await c.fill(bytes, field);
  return { itemType, value: typedFromBytes(itemType, c.copy(bytes), n) };
}

async function readKv(c: Cursor, limits: GgufLimits, index: number): Promise<GgufMetadataEntry> {
  const offset = c.offset;
  const key = await readString(c, `metadata key #${index}`, limits.maxKeyBytes, "key length");
  const type = await readValueType(c, key);
  if (type === GgufValueType.ARRAY) {
    const array = await readArray(c, key, limits, 1);
    return { key, type, itemType: array.itemType, value: array.value, offset };
  }
  return { key, type, value: await readScalar(c, type, key, limits), offset };
}

function shortRead(source: GgufByteSource, offset: number, asked: number, got: number, field: string): GgufIoError {
  return new GgufIoError(
    `short read from ${source.description}: ${asked} bytes asked at offset ${offset}, ${got} returned (did the file change while it was read?)${where({ offset, field })}`,
    { offset, field },
  );
}

function tensorError(code: GgufErrorCode, message: string, offset: number, field: string): GgufTensorError {
  return new GgufTensorError(code, `${message}${where({ offset, field })}`, { offset, field });
}

/**
 * Parses the header of a GGUF v2/v3 file or buffer: metadata and tensor infos, validated against
 * the file size. Tensor data is not read.
 */
export async function readGguf(source: string | Uint8Array | GgufByteSource, options: ReadGgufOptions = {}): Promise<GgufFile> {
  const limits: GgufLimits = { ...GGUF_LIMITS, ...options.limits };
  const { source: bytes, owned } = await toByteSource(source);
  try {
    return await parse(bytes, limits, source instanceof Uint8Array ? source : undefined, options.firstReadBytes ?? FIRST_CHUNK);
  } finally {
    if (owned) await bytes.close();
  }
}

async function parse(source: GgufByteSource, limits: GgufLimits, whole: Uint8Array | undefined, firstRead: number): Promise<GgufFile> {
  const c = new Cursor(source, limits, whole, firstRead);
  await c.fill(4, "magic");
  const magic = c.u32();
  if (magic !== GGUF_MAGIC) throw badMagic(c);
  await c.fill(4, "version");
  const versionAt = c.offset;
  const version = c.u32();
  if (version !== 2 && version !== 3) {
    const swapped = ((version & 0xff) << 24) | (((version >>> 8) & 0xff) << 16) | (((version >>> 16) & 0xff) << 8) | (version >>> 24);
    const detail =
      version === 1
        ? "GGUF v1 (32-bit counts) is not supported; re-convert the model with a current converter"
        : swapped === 2 || swapped === 3
          ? `big-endian GGUF v${swapped} is not supported`
          : `GGUF version ${version} is not supported (supported: 2, 3)`;
    throw new GgufFormatError("GGUF_UNSUPPORTED_VERSION", `${detail}${where({ offset: versionAt, field: "version" })}`, {
      offset: versionAt,
      field: "version",
    });
  }

  await c.fill(16, "header counts");
  const tensorCountAt = c.offset;
  const tensorCount = c.u64num();
  const kvCountAt = c.offset;
  const kvCount = c.u64num();
  if (tensorCount > limits.maxTensorCount) {
    throw new GgufLimitError("tensor count", tensorCount, limits.maxTensorCount, { offset: tensorCountAt, field: "tensor_count" });
  }
  if (kvCount > limits.maxKeyCount) {
    throw new GgufLimitError("metadata key count", kvCount, limits.maxKeyCount, { offset: kvCountAt, field: "metadata_kv_count" });
  }
  // Minimum record sizes: a key/value is 8+4+1 bytes, a tensor info 8+4+4+8 bytes.
  if (kvCount * 13 + tensorCount * 24 > c.remaining) {
    throw truncated(c, `${kvCount} metadata entries and ${tensorCount} tensor infos`, kvCount * 13 + tensorCount * 24);
  }

  const metadata = new Map<string, GgufMetadataEntry>();
  for (let i = 0; i < kvCount; i++) {
    const entry = await readKv(c, limits, i);
    if (metadata.has(entry.key)) {
      throw new GgufFormatError(
        "GGUF_DUPLICATE_KEY",
        `duplicate metadata key "${entry.key}"${where({ offset: entry.offset, field: entry.key })}`,
        {
          offset: entry.offset,
          field: entry.key,
        },
      );
    }
    metadata.set(entry.key, entry);
  }

  let alignment = GGUF_DEFAULT_ALIGNMENT;
  const alignmentEntry = metadata.get("general.alignment");
  if (alignmentEntry) {
    const value = alignmentEntry.value;
    if (alignmentEntry.type !== GgufValueType.UINT32 || typeof value !== "number" || value === 0 || (value & (value - 1)) !== 0) {
      throw new GgufFormatError(
        "GGUF_BAD_ALIGNMENT",
        `general.alignment must be a u32 power of two, found ${String(value)}${where({ offset: alignmentEntry.offset, field: "general.alignment" })}`,
        { offset: alignmentEntry.offset, field: "general.alignment" },
      );
    }
    alignment = value;
  }

  const tensors: GgufTensorInfo[] = new Array(tensorCount);
  const names = new Set<string>();
  for (let i = 0; i < tensorCount; i++) {
    const infoOffset = c.offset;
    const name = await readString(c, `tensor info #${i} name`, limits.maxTensorNameBytes, "tensor name length");
    if (names.has(name)) throw tensorError("GGUF_DUPLICATE_TENSOR", `duplicate tensor name "${name}"`, infoOffset, name);
    names.add(name);
    await c.fill(4, name);
    const dimsAt = c.offset;
    const nDims = c.u32();
    if (nDims > limits.maxDims) throw new GgufLimitError("tensor dimension count", nDims, limits.maxDims, { offset: dimsAt, field: name });
    await c.fill(8 * nDims + 12, name);
    const ne: number[] = new Array(nDims);
    let elements = 1;
    for (let d = 0; d < nDims; d++) {
      const dimAt = c.offset;
      const dim = c.u64num();
      if (dim > limits.maxTensorElements || (dim > 0 && elements > Math.floor(limits.maxTensorElements / dim))) {
        throw new GgufLimitError(
          "tensor element count",
          dim === Number.POSITIVE_INFINITY ? dim : elements * dim,
          limits.maxTensorElements,
          {
            offset: dimAt,
            field: `${name}.ne[${d}]`,
          },
        );
      }
      ne[d] = dim;
      elements *= dim;
    }
    const typeAt = c.offset;
    const typeId = c.u32();
    if (!isGgmlType(typeId)) throw tensorError("GGUF_BAD_TENSOR_TYPE", `unknown ggml type id ${typeId} for tensor "${name}"`, typeAt, name);
    const type: GgmlType = typeId;
    const { blockSize, typeSize } = GGML_TYPE_TRAITS[type];
    const rowElements = nDims > 0 ? ne[0]! : 1;
    if (rowElements % blockSize !== 0) {
      throw tensorError(
        "GGUF_PARTIAL_BLOCK",
        `tensor "${name}" has rows of ${rowElements} elements, not a whole number of ${ggmlTypeName(type)} blocks of ${blockSize}`,
        dimsAt,
        name,
      );
    }
    const relAt = c.offset;
    const relativeOffset = c.u64num();
    if (relativeOffset > source.size) {
      throw tensorError(
        "GGUF_TENSOR_OUT_OF_BOUNDS",
        `tensor "${name}" data offset ${relativeOffset} is beyond the end of the ${source.description} (${source.size} bytes)`,
        relAt,
        name,
      );
    }
    if (relativeOffset % alignment !== 0) {
      throw tensorError(
        "GGUF_MISALIGNED_TENSOR",
        `tensor "${name}" data offset ${relativeOffset} is not a multiple of the alignment ${alignment}`,
        relAt,
        name,
      );
    }
    const byteLength = (elements / blockSize) * typeSize;
    tensors[i] = {
      name,
      type,
      ne,
      shape: ne.slice().reverse(),
      offset: relativeOffset, // made absolute below
      relativeOffset,
      byteLength,
      elements,
      infoOffset,
    };
  }

  const headerEnd = c.offset;
  if (headerEnd > limits.maxHeaderBytes) {
    throw new GgufLimitError("header size", headerEnd, limits.maxHeaderBytes, { offset: headerEnd, field: "header" });
  }
  const dataOffset = Math.ceil(headerEnd / alignment) * alignment;
  if (tensorCount > 0 && dataOffset > source.size) {
    throw new GgufFormatError(
      "GGUF_TRUNCATED",
      `truncated: data section starts at ${dataOffset} but the ${source.description} ends at ${source.size}`,
      {
        offset: headerEnd,
        field: "data section",
      },
    );
  }
  for (const tensor of tensors) {
    tensor.offset = dataOffset + tensor.relativeOffset;
    if (tensor.offset + tensor.byteLength > source.size) {
      throw tensorError(
        "GGUF_TENSOR_OUT_OF_BOUNDS",
        `tensor "${tensor.name}" bytes [${tensor.offset}, ${tensor.offset + tensor.byteLength}) run past the end of the ${source.description} (${source.size} bytes)`,
        tensor.infoOffset,
        tensor.name,
      );
    }
  }
  const byOffset = tensors.filter((t) => t.byteLength > 0).sort((a, b) => a.offset - b.offset);
  for (let i = 1; i < byOffset.length; i++) {
    const prev = byOffset[i - 1]!;
    const cur = byOffset[i]!;
    if (cur.offset < prev.offset + prev.byteLength) {
      throw tensorError(
        "GGUF_OVERLAPPING_TENSORS",
        `tensor "${cur.name}" at [${cur.offset}, ${cur.offset + cur.byteLength}) overlaps tensor "${prev.name}" at [${prev.offset}, ${prev.offset + prev.byteLength})`,
        cur.infoOffset,
        cur.name,
      );
    }
  }

  return { version, metadata, tensors, alignment, dataOffset, fileSize: source.size, source: source.description };
}

function badMagic(c: Cursor): GgufFormatError {
  const head = c.buf.subarray(0, Math.min(4, c.buf.length));
  const shown = Array.from(head, (b) => b.toString(16).padStart(2, "0")).join(" ");
  return new GgufFormatError(
    "GGUF_BAD_MAGIC",
    `not a GGUF file: magic is [${shown}], expected "GGUF" (47 47 55 46)${where({ offset: 0, field: "magic" })}`,
    {
      offset: 0,
      field: "magic",
    },
  );
}

/** The bytes of one tensor (a view for buffers, a positioned read for files), bounds-checked. */
export async function readTensorBytes(source: string | Uint8Array | GgufByteSource, tensor: GgufTensorInfo): Promise<Uint8Array> {
  const { source: bytes, owned } = await toByteSource(source);
  try {
    if (tensor.offset < 0 || tensor.offset + tensor.byteLength > bytes.size) {
      throw tensorError(
        "GGUF_TENSOR_OUT_OF_BOUNDS",
        `tensor "${tensor.name}" bytes [${tensor.offset}, ${tensor.offset + tensor.byteLength}) are beyond the end of ${bytes.description} (${bytes.size} bytes)`,
        tensor.offset,
        tensor.name,
      );
    }
    const data = await bytes.read(tensor.offset, tensor.byteLength);
    if (data.length !== tensor.byteLength) throw shortRead(bytes, tensor.offset, tensor.byteLength, data.length, tensor.name);
    return data;
  } finally {
    if (owned) await bytes.close();
  }
}
