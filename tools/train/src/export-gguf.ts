/**
 * Tensor file (GGUF names, row-major f32) + vocabulary + model shape -> an F32 qwen35 GGUF written
 * with @keepquant/gguf. Every tensor the loader expects must be present with its shape (the same
 * table our load plan checks files against), and nothing else.
 */
import fs from "node:fs";
import { GgmlType, gguf, qwen35Metadata, qwen35SpecLayout, writeGguf, type Qwen35Spec } from "@keepquant/gguf";
import { fixtureTokenizerFromJson } from "@keepquant/fixtures";
import type { ModelShape } from "./recipe.js";
import { TensorFileError, type TensorFileEntry } from "./tensor-file.js";

export interface ExportInput {
  name: string;
  shape: ModelShape;
  /** A keepquant-bpe-vocab/1 JSON value. */
  vocab: unknown;
  tensors: readonly TensorFileEntry[];
  /** Extra `general.*` / `keepquant.*` metadata (provenance). */
  extraMetadata?: Record<string, string>;
}

export function exportSpec(input: Pick<ExportInput, "name" | "shape" | "vocab" | "extraMetadata">): Qwen35Spec {
  const tokenizer = fixtureTokenizerFromJson(input.vocab);
  return {
    ...input.shape,
    vocab: tokenizer.tokens.length,
    tokenizer,
    name: input.name,
    extraMetadata: Object.entries(input.extraMetadata ?? {}).map(([key, value]) => gguf.str(key, value)),
  };
}

/** The F32 GGUF bytes; throws TensorFileError naming a missing, extra or misshapen tensor. */
export function exportGguf(input: ExportInput): Uint8Array {
  const spec = exportSpec(input);
  const { tensors: expected } = qwen35SpecLayout(spec);
  const byName = new Map(input.tensors.map((t) => [t.name, t]));
  const expectedNames = new Set(expected.map((t) => t.name));
  for (const t of input.tensors) {
    if (!expectedNames.has(t.name)) throw new TensorFileError(`tensor ${t.name} is not part of a qwen35 model of this shape`);
  }
  return writeGguf({
    metadata: qwen35Metadata(spec),
    tensors: expected.map((e) => {
      const t = byName.get(e.name);
      if (!t) throw new TensorFileError(`tensor ${e.name} (ne ${JSON.stringify(e.ne)}) is missing from the tensor file`);
      const ne = [...t.shape].reverse();
      if (JSON.stringify(ne) !== JSON.stringify(e.ne)) {
        throw new TensorFileError(`tensor ${e.name}: ne ${JSON.stringify(ne)} but the loader expects ${JSON.stringify(e.ne)}`);
      }
      return { name: e.name, type: GgmlType.F32, ne, data: new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength) };
    }),
  });
}

export function writeFileAtomic(file: string, data: Uint8Array | string): void {
  const temporary = `${file}.tmp-${process.pid}`;
  try {
    fs.writeFileSync(temporary, data);
    fs.renameSync(temporary, file);
  } finally {
    fs.rmSync(temporary, { force: true });
  }
}
