import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import {
  GgmlType,
  GgufValueType,
  QWEN35_TEST_SHAPE,
  getMetadata,
  gpt2ByteSymbols,
  readGguf,
  readTensorBytes,
  synthesizeQwen35,
  writeSynthesizedQwen35,
  type GgufFile,
} from "../index.js";

const dir = mkdtempSync(join(tmpdir(), "kq-gguf-syn-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function f32(bytes: Uint8Array, file: GgufFile, name: string): Promise<Float32Array> {
  const tensor = file.tensors.find((t) => t.name === name);
  if (!tensor) throw new Error(`no tensor ${name}`);
  const raw = await readTensorBytes(bytes, tensor);
  return new Float32Array(raw.slice().buffer);
}

function stats(values: Float32Array): { mean: number; std: number; min: number; max: number } {
  let sum = 0;
  let min = Infinity;
  let max = -Infinity;
  for (const v of values) {
    sum += v;
    min = Math.min(min, v);
    max = Math.max(max, v);
  }
  const mean = sum / values.length;
  let sq = 0;
  for (const v of values) sq += (v - mean) ** 2;
  return { mean, std: Math.sqrt(sq / values.length), min, max };
}

describe("synthesizeQwen35", () => {
  const spec = { ...QWEN35_TEST_SHAPE, mtp: true };
  const bytes = synthesizeQwen35(spec);

  it("is deterministic for a seed and differs for another seed", () => {
    expect(Buffer.from(synthesizeQwen35(spec)).equals(Buffer.from(bytes))).toBe(true);
    expect(Buffer.from(synthesizeQwen35({ ...spec, seed: 2 })).equals(Buffer.from(bytes))).toBe(false);
  });

  it("streams the same bytes to a file", async () => {
    const path = join(dir, "stream.gguf");
    const size = await writeSynthesizedQwen35(path, spec);
    expect(size).toBe(bytes.length);
    expect(readFileSync(path).equals(Buffer.from(bytes))).toBe(true);
  });

  it("writes every required key with the type llama.cpp checks", async () => {
    const file = await readGguf(bytes);
    const type = (key: string) => file.metadata.get(key)?.type;
    for (const key of [
      "block_count", "context_length", "embedding_length", "feed_forward_length", "attention.head_count",
      "attention.head_count_kv", "attention.key_length", "attention.value_length", "rope.dimension_count",
      "ssm.conv_kernel", "ssm.state_size", "ssm.group_count", "ssm.time_step_rank", "ssm.inner_size", "nextn_predict_layers",
    ]) {
      expect(type(`qwen35.${key}`), key).toBe(GgufValueType.UINT32);
    }
    expect(type("qwen35.attention.layer_norm_rms_epsilon")).toBe(GgufValueType.FLOAT32);
    expect(type("qwen35.rope.freq_base")).toBe(GgufValueType.FLOAT32);
    const sections = file.metadata.get("qwen35.rope.dimension_sections")!;
    expect(sections.itemType).toBe(GgufValueType.INT32);
    expect(Array.from(sections.value as Int32Array)).toEqual([3, 3, 2, 0]);
    expect(getMetadata(file, "qwen35.block_count")).toBe(5);
    expect(getMetadata(file, "tokenizer.ggml.model")).toBe("gpt2");
    expect(getMetadata(file, "tokenizer.ggml.pre")).toBe("qwen35");
    const tokens = getMetadata(file, "tokenizer.ggml.tokens") as string[];
    expect(tokens.length).toBe(512);
    expect(new Set(tokens).size).toBe(512);
    expect(tokens.slice(0, 256)).toEqual(gpt2ByteSymbols());
    expect(tokens[32]).toBe("Ġ");
    const merges = getMetadata(file, "tokenizer.ggml.merges") as string[];
    for (const merge of merges) expect(tokens).toContain(merge.replace(" ", ""));
    const eos = getMetadata(file, "tokenizer.ggml.eos_token_id") as number;
    expect(tokens[eos]).toBe("<|im_end|>");
    expect((getMetadata(file, "tokenizer.ggml.token_type") as Int32Array)[eos]).toBe(3);
    expect(tokens[getMetadata(file, "tokenizer.ggml.bos_token_id") as number]).toBe("<|endoftext|>");
    expect(getMetadata(file, "tokenizer.ggml.add_bos_token")).toBe(false);
    expect(getMetadata(file, "tokenizer.chat_template")).toContain("<|im_start|>");
  });

  it("has the real layout: GDN at 0-2, attention at 3, MTP block 4, Hk < Hv shapes, tied head", async () => {
    const file = await readGguf(bytes);
    const names = new Set(file.tensors.map((t) => t.name));
    expect(names.has("output.weight")).toBe(false);
    expect(names.has("blk.0.ssm_a")).toBe(true);
    expect(names.has("blk.3.attn_q.weight")).toBe(true);
    expect(names.has("blk.3.ssm_a")).toBe(false);
    expect(names.has("blk.4.nextn.eh_proj.weight")).toBe(true);
    expect(names.has("blk.4.attn_q.weight")).toBe(true);
    const ne = (name: string) => file.tensors.find((t) => t.name === name)!.ne;
    // key_dim = 2*32 = 64, value_dim = 4*32 = 128, conv_dim = 256
    expect(ne("blk.0.attn_qkv.weight")).toEqual([256, 256]);
    expect(ne("blk.0.attn_gate.weight")).toEqual([256, 128]);
    expect(ne("blk.0.ssm_conv1d.weight")).toEqual([4, 256]);
    expect(ne("blk.0.ssm_beta.weight")).toEqual([256, 4]);
    expect(ne("blk.0.ssm_norm.weight")).toEqual([32]);
    expect(ne("blk.3.attn_q.weight")).toEqual([256, 2 * 4 * 64]);
    expect(ne("blk.4.nextn.eh_proj.weight")).toEqual([512, 256]);
    expect(file.tensors.every((t) => t.type === GgmlType.F32)).toBe(true);
    const untied = await readGguf(synthesizeQwen35({ ...QWEN35_TEST_SHAPE, tied: false }));
    expect(untied.tensors.find((t) => t.name === "output.weight")?.ne).toEqual([256, 512]);
  });

  it("has a calm init: norms near 1, ssm_a negative, embedding std 3/sqrt(D), scaled residual outputs", async () => {
    const file = await readGguf(bytes);
    const norm = stats(await f32(bytes, file, "blk.0.attn_norm.weight"));
    expect(norm.min).toBeGreaterThan(0.9);
    expect(norm.max).toBeLessThan(1.1);
    const a = stats(await f32(bytes, file, "blk.1.ssm_a"));
    expect(a.max).toBeLessThan(0);
    const dt = stats(await f32(bytes, file, "blk.1.ssm_dt.bias"));
    expect(dt.max).toBeLessThan(-2); // softplus^-1 of dt <= 0.1
    const embd = stats(await f32(bytes, file, "token_embd.weight"));
    expect(embd.std).toBeGreaterThan(0.9 * (3 / 16));
    expect(embd.std).toBeLessThan(1.1 * (3 / 16));
    const up = stats(await f32(bytes, file, "blk.0.ffn_up.weight"));
    const down = stats(await f32(bytes, file, "blk.0.ffn_down.weight"));
    // ffn_up: 1/sqrt(256); ffn_down: 4/sqrt(512 * 2 * 4)
    expect(up.std).toBeCloseTo(1 / 16, 2);
    expect(down.std).toBeCloseTo(4 / Math.sqrt(512 * 8), 2);
  });
});
