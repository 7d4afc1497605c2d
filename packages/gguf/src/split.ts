/**
 * Split GGUF models (llama.cpp's `gguf-split` layout): a model stored as shards named
 * `<prefix>-00001-of-00003.gguf` ... `<prefix>-00003-of-00003.gguf`, each a GGUF file of its own. The first
 * shard holds the model's metadata; every shard holds `split.no` (0-based), `split.count`, and the first
 * `split.tensors.count` (the model's tensor count). Each tensor lives in exactly one shard, at an offset in
 * that shard's data section.
 */
import { GgufError, GgufFormatError } from "./errors.js";
import { getMetadata } from "./metadata.js";
import { readGguf, type ReadGgufOptions } from "./reader.js";
import type { GgufByteSource } from "./source.js";
import type { GgufFile, GgufMetadataEntry, GgufShard } from "./types.js";
import { gguf, writeGguf, type GgufWriteInput } from "./writer.js";

export const SPLIT_NO_KEY = "split.no";
export const SPLIT_COUNT_KEY = "split.count";
export const SPLIT_TENSORS_COUNT_KEY = "split.tensors.count";

/** Most shards a split model may have: the five-digit shard number of the naming. */
export const MAX_SPLIT_SHARDS = 99_999;

const SHARD_NAME = /^(.*)-(\d{5})-of-(\d{5})\.gguf$/i;

/** What a shard's file name says: the common prefix, its 0-based index and the shard count. */
export interface GgufShardName {
  prefix: string;
  index: number;
  count: number;
}

/** Parses `<prefix>-00002-of-00003.gguf` (a path or a file name); undefined when the name is not a shard's. */
export function parseShardName(path: string): GgufShardName | undefined {
  const match = SHARD_NAME.exec(path);
  if (!match) return undefined;
  const number = Number(match[2]);
  const count = Number(match[3]);
  if (number < 1 || number > count) return undefined;
  return { prefix: match[1]!, index: number - 1, count };
}

/** The path of shard `index` (0-based) of `count`: `<prefix>-0000{index+1}-of-0000{count}.gguf`. */
export function shardPath(prefix: string, index: number, count: number): string {
  const five = (n: number): string => String(n).padStart(5, "0");
  return `${prefix}-${five(index + 1)}-of-${five(count)}.gguf`;
}

/** A file's place in a split model (`split.*` keys), or undefined for a file that is a whole model. */
export interface GgufSplitInfo {
  index: number;
  count: number;
  /** The model's tensor count (`split.tensors.count`), when the shard carries it. */
  tensorsCount: number | undefined;
}

function integerKey(file: Pick<GgufFile, "metadata" | "source">, key: string): number | undefined {
  const value = getMetadata(file, key);
  if (value === undefined) return undefined;
  const number = typeof value === "bigint" ? Number(value) : value;
  if (typeof number !== "number" || !Number.isSafeInteger(number) || number < 0) {
    throw new GgufFormatError("GGUF_BAD_SPLIT", `${file.source}: ${key} is ${String(value)}, expected a non-negative integer`, {
      field: key,
    });
  }
  return number;
}

/** Reads the `split.*` keys: undefined when `split.count` is absent or 1. */
export function splitInfo(file: Pick<GgufFile, "metadata" | "source">): GgufSplitInfo | undefined {
  const count = integerKey(file, SPLIT_COUNT_KEY);
  if (count === undefined || count <= 1) return undefined;
  if (count > MAX_SPLIT_SHARDS) {
    throw new GgufFormatError("GGUF_BAD_SPLIT", `${file.source}: ${SPLIT_COUNT_KEY} is ${count}, more than ${MAX_SPLIT_SHARDS} shards`, {
      field: SPLIT_COUNT_KEY,
    });
  }
  const index = integerKey(file, SPLIT_NO_KEY);
  if (index === undefined || index >= count) {
    throw new GgufFormatError(
      "GGUF_BAD_SPLIT",
      `${file.source}: ${SPLIT_COUNT_KEY} is ${count} but ${SPLIT_NO_KEY} is ${index ?? "missing"} (expected 0 .. ${count - 1})`,
      { field: SPLIT_NO_KEY },
    );
  }
  return { index, count, tensorsCount: integerKey(file, SPLIT_TENSORS_COUNT_KEY) };
}

export interface ReadGgufModelOptions extends ReadGgufOptions {
  /**
   * Opens shard `index` (0-based) of a split model. By default, for a path, the sibling file named as
   * `gguf-split` names it; a split model read from a buffer or a byte source needs this.
   */
  openShard?: (index: number, count: number) => string | Uint8Array | GgufByteSource | Promise<string | Uint8Array | GgufByteSource>;
}

const splitError = (message: string, field?: string): GgufFormatError =>
  new GgufFormatError("GGUF_BAD_SPLIT", message, field === undefined ? {} : { field });

/**
 * Reads a model's GGUF header: one file, or every shard of a split model merged into one `GgufFile` (the first
 * shard's metadata, every shard's tensors with their `shard` index, `shards` listing the files, `fileSize` their
 * sum). Any shard of a split model may be named: the others are found by their names. A missing shard, a shard of
 * another split, a tensor in two shards or a tensor count that disagrees with `split.tensors.count` is a
 * GgufFormatError `GGUF_BAD_SPLIT` naming the file.
 */
export async function readGgufModel(source: string | Uint8Array | GgufByteSource, options: ReadGgufModelOptions = {}): Promise<GgufFile> {
  let first = await readGguf(source, options);
  let info = splitInfo(first);
  if (info === undefined) return first;
  const named = typeof source === "string" ? parseShardName(source) : undefined;
  const open =
    options.openShard ??
    (named
      ? (index: number, count: number): string => shardPath(named.prefix, index, count)
      : (): never => {
          throw splitError(
            typeof source === "string"
              ? `${source} is shard ${info!.index + 1} of a split GGUF of ${info!.count}, but its name does not end in -0000N-of-${String(info!.count).padStart(5, "0")}.gguf, so its other shards cannot be found: keep the names gguf-split gave them`
              : `${first.source} is shard ${info!.index + 1} of a split GGUF of ${info!.count}: read it from its path so its other shards can be found`,
            "split.count",
          );
        });
  if (named && named.count !== info.count) {
    throw splitError(`${source as string}: the name says ${named.count} shards but ${SPLIT_COUNT_KEY} is ${info.count}`, SPLIT_COUNT_KEY);
  }
  const openAt = async (index: number): Promise<GgufFile> => {
    const shardSource = await open(index, info!.count);
    try {
      return await readGguf(shardSource, options);
    } catch (error) {
      if (GgufError.isInstance(error) && error.code === "GGUF_IO") {
        const where =
          typeof shardSource === "string" ? shardSource : shardSource instanceof Uint8Array ? "buffer" : shardSource.description;
        throw splitError(`shard ${index + 1} of ${info!.count} (${where}) cannot be read: ${error.message}`, "split.no");
      }
      throw error;
    }
  };
  if (info.index !== 0) {
    first = await openAt(0);
    const again = splitInfo(first);
    if (again === undefined || again.index !== 0 || again.count !== info.count) {
      throw splitError(`${first.source} is not shard 1 of ${info.count} of the same split model`, SPLIT_NO_KEY);
    }
    info = again;
  }
  const files: GgufFile[] = [first];
  for (let index = 1; index < info.count; index++) {
    const shard = await openAt(index);
    const its = splitInfo(shard);
    if (its === undefined || its.index !== index || its.count !== info.count) {
      throw splitError(
        `${shard.source} should be shard ${index + 1} of ${info.count}, but its ${SPLIT_NO_KEY}/${SPLIT_COUNT_KEY} say ${its ? `${its.index + 1} of ${its.count}` : "it is not a shard"}`,
        SPLIT_NO_KEY,
      );
    }
    files.push(shard);
  }
  const seen = new Map<string, string>();
  const tensors = files.flatMap((file, shard) =>
    file.tensors.map((tensor) => {
      const other = seen.get(tensor.name);
      if (other !== undefined) {
        throw new GgufFormatError("GGUF_BAD_SPLIT", `tensor "${tensor.name}" is in two shards: ${other} and ${file.source}`, {
          field: tensor.name,
        });
      }
      seen.set(tensor.name, file.source);
      return { ...tensor, shard };
    }),
  );
  if (info.tensorsCount !== undefined && info.tensorsCount !== tensors.length) {
    throw splitError(
      `${first.source}: ${SPLIT_TENSORS_COUNT_KEY} says ${info.tensorsCount} tensors, the ${info.count} shards hold ${tensors.length}`,
      SPLIT_TENSORS_COUNT_KEY,
    );
  }
  const shards: GgufShard[] = files.map((file) => ({
    source: file.source,
    fileSize: file.fileSize,
    dataOffset: file.dataOffset,
    tensorCount: file.tensors.length,
  }));
  return { ...first, tensors, fileSize: shards.reduce((sum, s) => sum + s.fileSize, 0), shards };
}

/**
 * Splits a model into `count` GGUF files as `gguf-split --split-max-tensors` does: tensors in order, as evenly as
 * possible, the model's metadata in the first shard only, the `split.*` keys in every shard.
 */
export function splitGgufInput(input: GgufWriteInput, count: number): GgufWriteInput[] {
  if (!Number.isInteger(count) || count < 2 || count > Math.min(MAX_SPLIT_SHARDS, input.tensors.length)) {
    throw new RangeError(`splitGgufInput: ${count} shards for ${input.tensors.length} tensors`);
  }
  const metadata = input.metadata.filter((e) => !e.key.startsWith("split."));
  const splitKeys = (index: number): GgufMetadataEntry[] => [
    gguf.u16(SPLIT_NO_KEY, index),
    gguf.u16(SPLIT_COUNT_KEY, count),
    gguf.i32(SPLIT_TENSORS_COUNT_KEY, input.tensors.length),
  ];
  // as evenly as possible: the first (tensors % count) shards take one more
  const base = Math.floor(input.tensors.length / count);
  const extra = input.tensors.length % count;
  const alignment = input.metadata.filter((e) => e.key === "general.alignment");
  let next = 0;
  return Array.from({ length: count }, (_, index) => {
    const take = base + (index < extra ? 1 : 0);
    const tensors = input.tensors.slice(next, next + take);
    next += take;
    // a later shard keeps the model's alignment, so its data section is laid out the same way
    return { ...input, metadata: [...(index === 0 ? metadata : alignment), ...splitKeys(index)], tensors };
  });
}

/** Splits a whole GGUF file in memory into `count` shards (`splitGgufInput` over its parsed header and bytes). */
export async function splitGgufBytes(bytes: Uint8Array, count: number): Promise<Uint8Array[]> {
  const file = await readGguf(bytes);
  if (splitInfo(file) !== undefined) throw new RangeError("splitGgufBytes: the file is already a shard of a split model");
  const input: GgufWriteInput = {
    version: file.version,
    metadata: [...file.metadata.values()].map(({ offset: _offset, ...entry }) => entry),
    tensors: file.tensors.map((t) => ({ name: t.name, type: t.type, ne: t.ne, data: bytes.subarray(t.offset, t.offset + t.byteLength) })),
  };
  return splitGgufInput(input, count).map((shard) => writeGguf(shard));
}
