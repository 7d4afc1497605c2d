/** A GGUF file's tensors dequantized to f32 (bit-exact ggml dequantization), as a KQTW tensor file for the PyTorch side. */
import fs from "node:fs";
import { readGguf, readTensorBytes } from "@keepquant/gguf";
import { dequantizeRow } from "@keepquant/quant";

export async function dequantizedTensors(file: string): Promise<{ name: string; shape: number[]; data: Float32Array }[]> {
  const header = await readGguf(file);
  const out = [];
  for (const tensor of header.tensors) {
    const data = new Float32Array(tensor.elements);
    dequantizeRow(tensor.type, await readTensorBytes(file, tensor), data);
    out.push({ name: tensor.name, shape: tensor.shape, data });
  }
  return out;
}

/** Writes tensors in the KQTW0001 layout of python/tensor_file.py. */
export function writeTensorFile(file: string, tensors: readonly { name: string; shape: number[]; data: Float32Array }[]): void {
  let offset = 0;
  const entries = tensors.map((t) => {
    const entry = { name: t.name, shape: t.shape, offset };
    offset += t.data.byteLength;
    return entry;
  });
  const header = Buffer.from(JSON.stringify({ tensors: entries, meta: {} }), "utf8");
  const length = Buffer.alloc(8);
  length.writeBigUInt64LE(BigInt(header.length));
  const temporary = `${file}.tmp-${process.pid}`;
  fs.writeFileSync(
    temporary,
    Buffer.concat([
      Buffer.from("KQTW0001", "latin1"),
      length,
      header,
      ...tensors.map((t) => Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength)),
    ]),
  );
  fs.renameSync(temporary, file);
}
