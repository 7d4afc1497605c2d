/**
 * Where a loaded model's weight bytes live: read into (huge-page) anonymous memory, memory-mapped from the page
 * cache, or read tensor by tensor when the native addon is absent. A split model's shards are each placed so,
 * and every tensor is read from the shard that holds it.
 */
import fs from "node:fs";
import type { GgufFile, GgufTensorInfo } from "@keepquant/gguf";
import type { WeightMemory } from "../engine-types.js";
import { cpuAvailableMemory } from "../planner/devices.js";
import { mappedTensorBytes, planMappedRanges, rangedTensorBytes, readTensorSource, type TensorBytes } from "./load.js";
import type { TtNative } from "./native-module.js";

/** The kernel's transparent huge page mode (`always`, `madvise`, `never`), or undefined where it cannot be read. */
function transparentHugePages(): string | undefined {
  try {
    return /\[(\w+)\]/.exec(fs.readFileSync("/sys/kernel/mm/transparent_hugepage/enabled", "utf8"))?.[1];
  } catch {
    return undefined;
  }
}

/** One file of the model: its path, size and the tensors whose bytes it holds. */
interface ModelFile {
  path: string;
  size: number;
  tensors: GgufTensorInfo[];
}

/** The model's files: the one file, or every shard of a split model with its tensors. */
export function modelFiles(file: GgufFile, path: string): ModelFile[] {
  if (!file.shards) return [{ path, size: file.fileSize, tensors: file.tensors }];
  return file.shards.map((shard, index) => ({
    path: shard.source,
    size: shard.fileSize,
    tensors: file.tensors.filter((t) => t.shard === index),
  }));
}

/** The bytes of every tensor, each read from its own shard (`tensor.shard`; a file that is a whole model has one). */
export function shardedTensorBytes(perShard: readonly TensorBytes[]): TensorBytes {
  if (perShard.length === 1) return perShard[0]!;
  return (tensor) => perShard[tensor.shard ?? 0]!(tensor);
}

/** Least to most: a model whose shards were placed differently reports the least of them. */
const PLACEMENT_ORDER: readonly WeightMemory[] = ["read", "mapped", "anonymous", "huge-pages"];

export interface WeightSource {
  bytes: TensorBytes;
  weightMemory: WeightMemory;
}

/**
 * Places the weights as `EngineOptions.weightMemory` asks (`auto` reads a model of at most a quarter of the
 * available memory into anonymous memory where transparent huge pages are on, and maps a larger one), falling back
 * to a mapping, then to reads, with a diagnostic for each fallback.
 */
export function openWeightSource(
  file: GgufFile,
  path: string,
  native: TtNative | undefined,
  requested: "auto" | "huge-pages" | "mapped",
  diagnostics: string[],
): WeightSource {
  const files = modelFiles(file, path);
  if (!native) return { bytes: shardedTensorBytes(files.map((f) => readTensorSource(f.path))), weightMemory: "read" };
  // every shard together for a split model
  const size = file.fileSize;
  // faulting in (or reading) more than the memory available would only evict what it read: map lazily then
  const available = cpuAvailableMemory().bytes;
  const fits = size <= available;
  // auto reads only a model of at most a quarter of the available memory: a 16.5 GB file read so with 22 GB
  // available decoded 0.85x its mapping (the kernel fell back to small pages, and compacted memory at length)
  const small = size <= available / 4;
  let readIntoMemory = requested === "huge-pages" || (requested === "auto" && small && transparentHugePages() !== "never");
  if (requested === "huge-pages" && !fits) {
    diagnostics.push(
      `weightMemory "huge-pages": ${path} (${size} B) is larger than the available memory (${available} B); it is memory-mapped instead`,
    );
    readIntoMemory = false;
  }
  const placed = files.map((f) => placeFile(f, native, readIntoMemory, fits, diagnostics));
  const weightMemory = PLACEMENT_ORDER.find((m) => placed.some((p) => p.weightMemory === m))!;
  return { bytes: shardedTensorBytes(placed.map((p) => p.bytes)), weightMemory };
}

function placeFile(file: ModelFile, native: TtNative, readIntoMemory: boolean, fits: boolean, diagnostics: string[]): WeightSource {
  const { path, size } = file;
  // the file's bytes from `get(offset, length)`: one buffer when one holds the file, else whole-tensor ranges
  const fileBytes = (get: (offset: number, length: number) => ArrayBuffer): TensorBytes =>
    size <= native.MAX_MAPPED_RANGE_BYTES
      ? mappedTensorBytes(get(0, size))
      : rangedTensorBytes(
          planMappedRanges(file.tensors, native.MAX_MAPPED_RANGE_BYTES).map((r) => ({ ...r, buffer: get(r.offset, r.length) })),
        );
  if (readIntoMemory) {
    try {
      let huge = true;
      const bytes = fileBytes((offset, length) => {
        const range = native.readFileRange(path, offset, length);
        huge &&= range.hugePages;
        return range.buffer;
      });
      return { bytes, weightMemory: huge ? "huge-pages" : "anonymous" };
    } catch (error) {
      diagnostics.push(`reading ${path} into memory failed (${(error as Error).message}); it is memory-mapped instead`);
    }
  }
  try {
    return { bytes: fileBytes((offset, length) => native.mapFileRange(path, offset, length, { populate: fits })), weightMemory: "mapped" };
  } catch (error) {
    diagnostics.push(`memory-mapping ${path} failed (${(error as Error).message}); tensors are read instead`);
  }
  return { bytes: readTensorSource(path), weightMemory: "read" };
}
