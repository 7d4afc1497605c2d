import { constants, type Stats } from "node:fs";
import { open, stat, type FileHandle } from "node:fs/promises";
import { GgufError, GgufIoError, GgufNotAFileError, type NonRegularFileKind } from "./errors.js";

/** The part of a stat result the file-type check reads (structural: the package's types need no @types/node). */
export interface FileKindStats {
  size: number;
  isFile(): boolean;
  isDirectory(): boolean;
  isFIFO(): boolean;
  isCharacterDevice(): boolean;
  isBlockDevice(): boolean;
  isSocket(): boolean;
}

/** What a stat says a non-regular file is (undefined for a regular file). */
export function nonRegularKind(stats: FileKindStats): NonRegularFileKind | undefined {
  if (stats.isFile()) return undefined;
  if (stats.isDirectory()) return "a directory";
  if (stats.isFIFO()) return "a FIFO (named pipe)";
  if (stats.isCharacterDevice()) return "a character device";
  if (stats.isBlockDevice()) return "a block device";
  if (stats.isSocket()) return "a socket";
  return "not a regular file";
}

/**
 * Checks that `path` is a regular file from a stat (follows symlinks), without opening it: a
 * directory, FIFO, device or socket is a GgufNotAFileError (GGUF_NOT_A_FILE), a path that cannot
 * be stat'ed a GgufIoError (GGUF_IO). Opening a FIFO would block until a writer appears.
 */
export async function assertRegularFile(path: string): Promise<FileKindStats> {
  let stats: Stats;
  try {
    stats = await stat(path);
  } catch (error) {
    const reason = (error as NodeJS.ErrnoException).code ?? String(error);
    throw new GgufIoError(`cannot open ${path}: ${reason}`, { cause: error, field: path });
  }
  const kind = nonRegularKind(stats);
  if (kind !== undefined) throw new GgufNotAFileError(path, kind);
  return stats;
}

/**
 * Random-access bytes: a file read with positioned reads, or a buffer. The reader only ever asks
 * for the ranges it needs; a file is never read whole.
 */
export interface GgufByteSource {
  /** Human-readable origin (a path or "buffer"), used in messages. */
  readonly description: string;
  /** Total size in bytes. */
  readonly size: number;
  /** Exactly `length` bytes at `position` (a short read is an error). */
  read(position: number, length: number): Promise<Uint8Array>;
  close(): Promise<void>;
}

export class BufferSource implements GgufByteSource {
  readonly description = "buffer";
  readonly size: number;
  constructor(readonly bytes: Uint8Array) {
    this.size = bytes.byteLength;
  }
  async read(position: number, length: number): Promise<Uint8Array> {
    if (position < 0 || length < 0 || position + length > this.size) {
      throw new GgufIoError(`read of ${length} bytes at offset ${position} is beyond the buffer end (${this.size})`, {
        offset: position,
      });
    }
    return this.bytes.subarray(position, position + length);
  }
  async close(): Promise<void> {}
}

export class FileSource implements GgufByteSource {
  private constructor(
    readonly description: string,
    readonly size: number,
    private readonly handle: FileHandle,
  ) {}

  /**
   * Stats `path` first (a directory, FIFO, device or socket is GGUF_NOT_A_FILE before anything is
   * opened), then opens it non-blocking (a FIFO swapped in after the stat cannot block the open)
   * and checks the opened handle again.
   */
  static async open(path: string): Promise<FileSource> {
    await assertRegularFile(path);
    let handle: FileHandle;
    try {
      // O_NONBLOCK has no effect on regular files; on a FIFO it makes open() return at once
      handle = await open(path, constants.O_RDONLY | (constants.O_NONBLOCK ?? 0));
    } catch (error) {
      const reason = (error as NodeJS.ErrnoException).code ?? String(error);
      throw new GgufIoError(`cannot open ${path}: ${reason}`, { cause: error, field: path });
    }
    try {
      const opened = await handle.stat();
      const kind = nonRegularKind(opened);
      if (kind !== undefined) throw new GgufNotAFileError(path, kind);
      return new FileSource(path, opened.size, handle);
    } catch (error) {
      await handle.close();
      if (GgufError.isInstance(error)) throw error;
      throw new GgufIoError(`cannot stat ${path}: ${String(error)}`, { cause: error, field: path });
    }
  }

  async read(position: number, length: number): Promise<Uint8Array> {
    if (position < 0 || length < 0 || position + length > this.size) {
      throw new GgufIoError(`read of ${length} bytes at offset ${position} is beyond the end of ${this.description} (${this.size} bytes)`, {
        offset: position,
      });
    }
    const out = Buffer.allocUnsafe(length);
    let done = 0;
    while (done < length) {
      const { bytesRead } = await this.handle.read(out, done, length - done, position + done);
      if (bytesRead === 0) {
        throw new GgufIoError(`unexpected end of ${this.description} at offset ${position + done}`, {
          offset: position + done,
        });
      }
      done += bytesRead;
    }
    return out;
  }

  async close(): Promise<void> {
    await this.handle.close();
  }
}

/** Opens a path as a FileSource or wraps a buffer; `owned` says whether the caller must close it. */
export async function toByteSource(source: string | Uint8Array | GgufByteSource): Promise<{ source: GgufByteSource; owned: boolean }> {
  if (typeof source === "string") return { source: await FileSource.open(source), owned: true };
  if (source instanceof Uint8Array) return { source: new BufferSource(source), owned: true };
  return { source, owned: false };
}
