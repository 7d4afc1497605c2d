import { mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import {
  GgmlType,
  GgufValueType,
  QWEN35_0_8B_SHAPE,
  QWEN35_27B_SHAPE,
  QWEN35_TEST_SHAPE,
  QWEN35_TINY_SHAPE,
  buildLoadPlan,
  getMetadata,
  gpt2ByteSymbols,
  readGguf,
  readTensorBytes,
  qwen35Q4KMClassMix,
  synthesizeQwen35,
  useMoreBits,
  writeQwen35HeaderOnly,
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
      "block_count",
      "context_length",
      "embedding_length",
      "feed_forward_length",
      "attention.head_count",
      "attention.head_count_kv",
      "attention.key_length",
      "attention.value_length",
      "rope.dimension_count",
      "ssm.conv_kernel",
      "ssm.state_size",
      "ssm.group_count",
      "ssm.time_step_rank",
      "ssm.inner_size",
      "nextn_predict_layers",
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

describe("QWEN35_TINY_SHAPE", () => {
  it("is a loadable qwen35 (tied and untied): 4 layers with attention at 3, Hk 2 < Hv 4, its placeholder vocabulary", async () => {
    for (const tied of [true, false]) {
      const file = await readGguf(synthesizeQwen35({ ...QWEN35_TINY_SHAPE, tied }));
      const plan = buildLoadPlan(file);
      expect(plan.ok).toBe(true);
      expect(plan.tiedHead).toBe(tied);
      expect(plan.vocab).toBe(97);
      expect(plan.config.layerKinds).toEqual(["gdn", "gdn", "gdn", "attention"]);
      expect([plan.config.embeddingLength, plan.config.ssmGroupCount, plan.config.ssmTimeStepRank]).toEqual([64, 2, 4]);
      expect((getMetadata(file, "tokenizer.ggml.tokens") as string[])[96]).toBe("<t96>");
    }
  });
});

describe("header-only files with a Q4_K_M-class type mix", () => {
  it("useMoreBits is llama.cpp's rule: first and last eighth, every third layer in between", () => {
    const chosen = Array.from({ length: 64 }, (_, i) => i).filter((i) => useMoreBits(i, 64));
    expect(chosen).toEqual([
      0, 1, 2, 3, 4, 5, 6, 7, 10, 13, 16, 19, 22, 25, 28, 31, 34, 37, 40, 43, 46, 49, 52, 55, 56, 57, 58, 59, 60, 61, 62, 63,
    ]);
    expect(Array.from({ length: 24 }, (_, i) => i).filter((i) => useMoreBits(i, 24))).toEqual([0, 1, 2, 5, 8, 11, 14, 17, 20, 21, 22, 23]);
  });

  it("27B: F32 exactly for the 353 norms and ssm_{a,dt,conv1d,norm} (qwen35.md 13.2), Q6_K head and more-bits layers, Q4_K elsewhere", async () => {
    const path = join(dir, "27b-q4km-header-only.gguf");
    const size = await writeQwen35HeaderOnly(path, QWEN35_27B_SHAPE, { types: qwen35Q4KMClassMix(64, false) });
    const file = await readGguf(path);
    expect(file.fileSize).toBe(size);
    const typeOf = (name: string) => file.tensors.find((t) => t.name === name)?.type;
    const count = (type: GgmlType) => file.tensors.filter((t) => t.type === type).length;
    expect(count(GgmlType.F32)).toBe(353);
    // output + (attn_v or attn_qkv) and ffn_down in the 32 more-bits layers
    expect(count(GgmlType.Q6_K)).toBe(1 + 32 + 32);
    expect(count(GgmlType.Q4_K)).toBe(file.tensors.length - 353 - 65);
    expect(typeOf("output.weight")).toBe(GgmlType.Q6_K);
    expect(typeOf("token_embd.weight")).toBe(GgmlType.Q4_K);
    expect(typeOf("blk.0.attn_qkv.weight")).toBe(GgmlType.Q6_K);
    expect(typeOf("blk.3.attn_v.weight")).toBe(GgmlType.Q6_K);
    expect(typeOf("blk.11.attn_v.weight")).toBe(GgmlType.Q4_K);
    expect(typeOf("blk.8.ffn_down.weight")).toBe(GgmlType.Q4_K);
    expect(typeOf("blk.10.ffn_down.weight")).toBe(GgmlType.Q6_K);
    expect(typeOf("blk.10.ffn_up.weight")).toBe(GgmlType.Q4_K);
    expect(typeOf("blk.0.ssm_conv1d.weight")).toBe(GgmlType.F32);
    expect(typeOf("blk.0.ssm_alpha.weight")).toBe(GgmlType.Q4_K);
    // Sparse: the whole 27B layout, only the header (its 248,320-token vocabulary) on disk.
    expect(file.fileSize).toBeGreaterThan(15e9);
    expect(statSync(path).blocks * 512).toBeLessThan(file.dataOffset + 1024 * 1024);
    // The head [248320, 5120] as Q6_K: 210 bytes per 256 values.
    expect(file.tensors.find((t) => t.name === "output.weight")!.byteLength).toBe((248_320 * 5120 * 210) / 256);
  });

  it("0.8B (tied): token_embd takes the head's Q6_K", async () => {
    const path = join(dir, "0.8b-q4km-header-only.gguf");
    await writeQwen35HeaderOnly(path, QWEN35_0_8B_SHAPE, { types: qwen35Q4KMClassMix(24, true) });
    const file = await readGguf(path);
    expect(file.tensors.find((t) => t.name === "token_embd.weight")!.type).toBe(GgmlType.Q6_K);
    expect(file.tensors.some((t) => t.name === "output.weight")).toBe(false);
  });
});
