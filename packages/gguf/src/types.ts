import type { GgmlType } from "./ggml-type.js";
import type { GgufValueType } from "./value-type.js";

/** Items of a GGUF array: typed arrays for numbers, JS arrays for bool/string/nested arrays. */
export type GgufArrayItems =
  | Uint8Array
  | Int8Array
  | Uint16Array
  | Int16Array
  | Uint32Array
  | Int32Array
  | Float32Array
  | Float64Array
  | BigUint64Array
  | BigInt64Array
  | readonly number[]
  | readonly bigint[]
  | readonly boolean[]
  | readonly string[]
  | readonly GgufArrayValue[];

/** A nested array element: its own item type and items. */
export interface GgufArrayValue {
  itemType: GgufValueType;
  value: GgufArrayItems;
}

/** Plain JS value of a metadata entry (arrays as typed arrays or JS arrays). */
export type GgufValue = number | bigint | boolean | string | GgufArrayItems;

/**
 * One metadata key. Arrays: `type = ARRAY`, `itemType` set, `value` the items.
 * Scalars: u64/i64 are bigint, every other number is a JS number.
 */
export interface GgufMetadataEntry {
  key: string;
  type: GgufValueType;
  itemType?: GgufValueType;
  value: GgufValue;
  /** File offset of the key (set by the reader; ignored by the writer). */
  offset?: number;
}

export type GgufMetadata = ReadonlyMap<string, GgufMetadataEntry>;

export interface GgufTensorInfo {
  name: string;
  type: GgmlType;
  /** Dimensions in ggml order (ne0 contiguous). */
  ne: number[];
  /** Row-major shape (ne reversed). */
  shape: number[];
  /** Absolute file offset of the tensor's first byte. */
  offset: number;
  /** Offset relative to the data section, as stored in the file. */
  relativeOffset: number;
  byteLength: number;
  elements: number;
  /** File offset of this tensor's info record in the header. */
  infoOffset: number;
  /** In a split model (`readGgufModel`), the index in `GgufFile.shards` of the file holding the bytes. */
  shard?: number;
}

/** One file of a split model: `offset`s of the tensors whose `shard` names it are offsets in this file. */
export interface GgufShard {
  /** Where it was read from (a path). */
  source: string;
  fileSize: number;
  dataOffset: number;
  tensorCount: number;
}

export interface GgufFile {
  version: 2 | 3;
  metadata: GgufMetadata;
  tensors: GgufTensorInfo[];
  alignment: number;
  /** Absolute offset of the data section (end of header, padded to `alignment`). */
  dataOffset: number;
  /** Size of the file or buffer that was parsed (of every shard together for a split model). */
  fileSize: number;
  /** Where it was read from (a path or "buffer"; the first shard of a split model). */
  source: string;
  /** The shards of a split model, in order (`readGgufModel`); absent for a model in one file. */
  shards?: readonly GgufShard[];
}
