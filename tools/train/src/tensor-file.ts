/** Reader of the weights interchange file written by python/tensor_file.py (KQTW0001). */
import fs from "node:fs";

const MAGIC = "KQTW0001";

export interface TensorFileEntry {
  name: string;
  /** Row-major shape ([out, in] for matrices). */
  shape: number[];
  data: Float32Array;
}

export class TensorFileError extends Error {
  override name = "TensorFileError";
}

export function readTensorFile(file: string): { tensors: TensorFileEntry[]; meta: Record<string, unknown> } {
  const bytes = fs.readFileSync(file);
  if (bytes.length < 16 || bytes.subarray(0, 8).toString("latin1") !== MAGIC)
    throw new TensorFileError(`${file}: not a ${MAGIC} tensor file`);
  const headerLength = Number(bytes.readBigUInt64LE(8));
  if (16 + headerLength > bytes.length)
    throw new TensorFileError(`${file}: header length ${headerLength} runs past the end (${bytes.length} B)`);
  const header = JSON.parse(bytes.subarray(16, 16 + headerLength).toString("utf8")) as {
    tensors: { name: string; shape: number[]; offset: number }[];
    meta?: Record<string, unknown>;
  };
  const base = 16 + headerLength;
  const tensors = header.tensors.map((entry) => {
    const count = entry.shape.reduce((a, b) => a * b, 1);
    const start = base + entry.offset;
    if (start + 4 * count > bytes.length)
      throw new TensorFileError(`${file}: tensor ${entry.name} [${entry.shape}] at ${start} runs past the end`);
    const data = new Float32Array(count);
    new Uint8Array(data.buffer).set(bytes.subarray(start, start + 4 * count));
    return { name: entry.name, shape: entry.shape, data };
  });
  return { tensors, meta: header.meta ?? {} };
}
