/**
 * The property every reader input must have, shared by the property tests and the coverage-guided
 * fuzz target (fuzz/reader.fuzz.ts): parsing arbitrary bytes either succeeds with a file whose
 * tensors lie inside it, or throws a GgufError (typed, with a code). Anything else (another error
 * type, a tensor outside the bytes, a plan that throws untyped) is a finding. checkFileInput holds
 * the chunked file path the CLI uses (FileSource) to the same property, with files that change
 * size between stat and read and sources that return short reads (fuzz/file-source.fuzz.ts).
 */
import { appendFile, truncate, writeFile } from "node:fs/promises";
import { GgufError } from "./errors.js";
import { getArchitecture } from "./metadata.js";
import { buildLoadPlan } from "./qwen35/load-plan.js";
import { readGguf, readTensorBytes } from "./reader.js";
import { BufferSource, FileSource, type GgufByteSource } from "./source.js";
import type { GgufFile } from "./types.js";

/** An input the reader handled wrongly. */
export class ReaderFinding extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "ReaderFinding";
  }
}

function mustBeTyped(error: unknown, where: string): void {
  if (!GgufError.isInstance(error)) {
    throw new ReaderFinding(`${where} threw an untyped ${error instanceof Error ? error.name : typeof error}: ${String(error)}`, {
      cause: error,
    });
  }
}

/** Returns "parsed" or the typed error code; throws ReaderFinding otherwise. */
export async function checkReaderInput(bytes: Uint8Array): Promise<string> {
  let file: GgufFile;
  try {
    file = await readGguf(bytes);
  } catch (error) {
    mustBeTyped(error, "readGguf");
    return (error as GgufError).code;
  }
  for (const tensor of file.tensors) {
    if (tensor.offset < file.dataOffset || tensor.offset + tensor.byteLength > file.fileSize) {
      throw new ReaderFinding(`tensor ${tensor.name} [${tensor.offset}, +${tensor.byteLength}) lies outside the ${file.fileSize} bytes`);
    }
    const data = await readTensorBytes(bytes, tensor).catch((error: unknown) => {
      mustBeTyped(error, `readTensorBytes(${tensor.name})`);
      return undefined;
    });
    if (data && data.length !== tensor.byteLength)
      throw new ReaderFinding(`tensor ${tensor.name}: ${data.length} bytes read, ${tensor.byteLength} expected`);
  }
  if (getArchitecture(file) === "qwen35") {
    try {
      buildLoadPlan(file);
    } catch (error) {
      mustBeTyped(error, "buildLoadPlan");
    }
  }
  return "parsed";
}

/**
 * How a byte source misbehaves in checkSourceInput (derived from the input, so a case replays):
 * `short` returns `by` fewer bytes than asked from read number `after` on; `shrink` and `grow` change
 * the reported size by `by` bytes after `after` size queries (reads past the real bytes come back short).
 */
export interface SourceFault {
  kind: "short" | "shrink" | "grow";
  after: number;
  by: number;
}

/** A deterministic fault for an input: FNV-1a of the bytes picks the kind and its numbers. */
export function faultFor(bytes: Uint8Array): SourceFault {
  let h = 0x811c9dc5;
  for (let i = 0; i < bytes.length; i++) h = Math.imul(h ^ bytes[i]!, 0x01000193) >>> 0;
  const kinds = ["short", "shrink", "grow"] as const;
  return { kind: kinds[h % 3]!, after: (h >>> 2) % 8, by: 1 + ((h >>> 5) % Math.max(1, Math.min(bytes.length, 4096))) };
}

/** A GgufByteSource over `bytes` that breaks its contract as `fault` says (a file changing under the reader, a short read). */
export class FaultySource implements GgufByteSource {
  readonly description = "faulty source";
  private reads = 0;
  private sizeQueries = 0;
  constructor(
    private readonly bytes: Uint8Array,
    private readonly fault: SourceFault,
  ) {}
  get size(): number {
    const n = this.bytes.length;
    if (this.sizeQueries++ < this.fault.after) return n;
    if (this.fault.kind === "shrink") return Math.max(0, n - this.fault.by);
    if (this.fault.kind === "grow") return n + this.fault.by;
    return n;
  }
  async read(position: number, length: number): Promise<Uint8Array> {
    const end = Math.max(position, Math.min(position + Math.max(0, length), this.bytes.length));
    const data = this.bytes.subarray(Math.min(position, this.bytes.length), end);
    if (this.fault.kind === "short" && this.reads++ >= this.fault.after && data.length > 0)
      return data.subarray(0, Math.max(0, data.length - this.fault.by));
    return data;
  }
  async close(): Promise<void> {}
}

/** The header and every tensor through `source`: parsed or a typed error; returns the outcome. */
async function readThrough(source: string | GgufByteSource, where: string): Promise<{ code: string; file?: GgufFile }> {
  let file: GgufFile;
  try {
    file = await readGguf(source);
  } catch (error) {
    mustBeTyped(error, `readGguf(${where})`);
    return { code: (error as GgufError).code };
  }
  for (const tensor of file.tensors) {
    const data = await readTensorBytes(source, tensor).catch((error: unknown) => {
      mustBeTyped(error, `readTensorBytes(${where}, ${tensor.name})`);
      return undefined;
    });
    if (data && data.length !== tensor.byteLength)
      throw new ReaderFinding(`${where}: tensor ${tensor.name}: ${data.length} bytes read, ${tensor.byteLength} expected`);
  }
  return { code: "parsed", file };
}

/**
 * The chunked file path the CLI uses, for one input: (1) written to `file` and read by path
 * (FileSource: stat, open, positioned reads) it gives the same outcome as the buffer, with the same
 * tensors and bytes; (2) the file truncated or extended after FileSource.open stat'ed it, and (3) a
 * source with short reads or a drifting size, give a parse or a typed error, nothing else.
 * Returns the outcome codes; throws ReaderFinding on a violation.
 */
export async function checkFileInput(bytes: Uint8Array, file: string): Promise<string[]> {
  await writeFile(file, bytes);
  const byPath = await readThrough(file, "path");
  const inBuffer = await readThrough(new BufferSource(bytes), "buffer");
  if (byPath.code !== inBuffer.code) throw new ReaderFinding(`the file gives ${byPath.code}, the same bytes in a buffer ${inBuffer.code}`);
  if (byPath.file && inBuffer.file) {
    const a = byPath.file.tensors.map((t) => `${t.name}@${t.offset}+${t.byteLength}`).join(",");
    const b = inBuffer.file.tensors.map((t) => `${t.name}@${t.offset}+${t.byteLength}`).join(",");
    if (a !== b) throw new ReaderFinding(`the file's tensors [${a}] differ from the buffer's [${b}]`);
    for (const t of byPath.file.tensors) {
      const [x, y] = await Promise.all([readTensorBytes(file, t), readTensorBytes(bytes, t)]);
      if (Buffer.compare(Buffer.from(x), Buffer.from(y)) !== 0)
        throw new ReaderFinding(`tensor ${t.name}: the file's bytes differ from the buffer's`);
    }
  }
  const fault = faultFor(bytes);
  // the file changes size between FileSource.open's stat and the reads
  const source = await FileSource.open(file);
  try {
    if (fault.kind === "grow") await appendFile(file, new Uint8Array(fault.by));
    else await truncate(file, Math.max(0, bytes.length - fault.by));
    await readThrough(source, `file changed by ${fault.kind === "grow" ? "+" : "-"}${fault.by} bytes`);
  } finally {
    await source.close();
  }
  const faulty = await readThrough(new FaultySource(bytes, fault), `${fault.kind} after ${fault.after} by ${fault.by}`);
  return [byPath.code, faulty.code];
}
