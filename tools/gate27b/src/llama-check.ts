/**
 * Test support for the gates' generator tests: a file written directly in our Q4_K_M mix, held against
 * llama.cpp (the oracle) on the same weights: its quantizer's types and bytes, and its greedy tokens.
 */
import fs from "node:fs";
import path from "node:path";
import { expect } from "vitest";
import { Engine } from "@keepquant/engine";
import { PARITY_ENGINE_OPTIONS } from "@keepquant/engine/parity";
import { GGML_TYPE_TRAITS, GgmlType, qwen35SpecLayout, readGguf, readTensorBytes, writeGguf } from "@keepquant/gguf";
import { runOracle } from "@keepquant/oracle";
import { expandTensorF32, quantizedQwen35Layout, type PooledQwen35Spec } from "./quantized-qwen35.js";

export const typeName = (type: GgmlType): string => GGML_TYPE_TRAITS[type].name;

/**
 * Expects `direct` (written by `writeQuantizedQwen35(direct, spec)`) to hold, tensor by tensor, the types
 * and bytes llama_model_quantize gives `spec`'s F32 weights in Q4_K_M (its files are written in `dir` and
 * removed). Returns our tensors' names and type names.
 */
export async function expectLlamaQuantizeBytes(
  direct: string,
  spec: PooledQwen35Spec,
  dir: string,
): Promise<{ name: string; type: string }[]> {
  const f32 = path.join(dir, "f32.gguf");
  const quantized = path.join(dir, "llama-q4km.gguf");
  const layout = quantizedQwen35Layout(spec);
  const { metadata } = qwen35SpecLayout(spec);
  const tensors = layout.tensors.map((t) => ({
    name: t.tensor.name,
    type: GgmlType.F32,
    ne: t.tensor.ne,
    data: new Uint8Array(expandTensorF32(layout, t.tensor.name).buffer),
  }));
  fs.writeFileSync(f32, writeGguf({ metadata, tensors }));
  await runOracle({ kind: "quantize", input: f32, output: quantized, ftype: "Q4_K_M", nthread: 2 }, { timeoutMs: 600_000 });
  fs.rmSync(f32);

  const ours = await readGguf(direct);
  const theirs = new Map((await readGguf(quantized)).tensors.map((t) => [t.name, t]));
  expect(ours.tensors.length).toBe(theirs.size);
  const seen: { name: string; type: string }[] = [];
  for (const tensor of ours.tensors) {
    const other = theirs.get(tensor.name);
    expect(other, tensor.name).toBeDefined();
    expect(`${tensor.name} ${typeName(tensor.type)}`).toBe(`${tensor.name} ${typeName(other!.type)}`);
    const a = await readTensorBytes(direct, tensor);
    const b = await readTensorBytes(quantized, other!);
    expect(Buffer.compare(Buffer.from(a), Buffer.from(b)), `${tensor.name} bytes`).toBe(0);
    seen.push({ name: tensor.name, type: typeName(tensor.type) });
  }
  fs.rmSync(quantized);
  return seen;
}

/**
 * Expects keepquant's greedy tokens on `file` to equal llama.cpp's (4 prompts x 8 tokens over `vocab`,
 * one thread, KV f32); returns llama.cpp's tokens.
 */
export async function expectGreedyMatchesLlama(file: string, vocab: number): Promise<number[][]> {
  const prompts = [4, 8, 12, 16].map((length, p) => Array.from({ length }, (_, i) => (i * 37 + 5 + p * 101) % vocab));
  const oracle = await runOracle(
    { kind: "greedy", model: file, prompts, nTokens: 8, kvType: "f32", repack: false, threads: 1 },
    { timeoutMs: 600_000 },
  );
  const engine = await Engine.load(file, { ...PARITY_ENGINE_OPTIONS, threads: 1, maxSequences: 1, kvCacheTokens: 256 });
  try {
    for (const [p, prompt] of prompts.entries()) {
      const result = await engine.generate(prompt, { maxTokens: 8, temperature: 0, stopAtEog: false }).result;
      expect(result.tokens, `prompt ${p}`).toEqual(oracle.tokens[p]);
    }
  } finally {
    engine.dispose();
  }
  return oracle.tokens;
}
