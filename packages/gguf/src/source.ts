import { open, type FileHandle } from "node:fs/promises";
import { GgufIoError } from "./errors.js";

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

  static async open(path: string): Promise<FileSource> {
    let handle: FileHandle;
    try {
      handle = await open(path, "r");
    } catch (error) {
      const reason = (error as NodeJS.ErrnoException).code ?? String(error);
      throw new GgufIoError(`cannot open ${path}: ${reason}`, { cause: error });
    }
    try {
      const stat = await handle.stat();
      if (!stat.isFile()) throw new GgufIoError(`${path} is not a regular file`);
      return new FileSource(path, stat.size, handle);
    } catch (error) {
      await handle.close();
      if (error instanceof GgufIoError) throw error;
      throw new GgufIoError(`cannot stat ${path}: ${String(error)}`, { cause: error });
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
