import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { GgmlType, QWEN35_TEST_SHAPE, readGguf, synthesizeQwen35, writeGguf, gguf, type Qwen35Spec } from "@keepquant/gguf";
import { llamaUnavailableReason, runOracle } from "@keepquant/oracle";
import {
  LLAMA_FILE_TYPE_IDS,
  QuantArgumentError,
  llamaTensorOrder,
  planLlamaQuantization,
  quantizeGgufModel,
  quantizeTensor,
  type LlamaFileType,
} from "./index.js";

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kq-llama-quantize-"));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

const llamaReason = llamaUnavailableReason();

/** Shapes that exercise every rule: tied / untied head, MTP, 10 layers (use_more_bits pattern), rows that need fallbacks. */
const SHAPES: Record<string, Qwen35Spec> = {
  "tied-mtp": { ...QWEN35_TEST_SHAPE, mtp: true, seed: 3 },
  "untied-10l": { ...QWEN35_TEST_SHAPE, tied: false, layers: 10, seed: 4 },
  // ffn 320 (ffn_down rows fall back Q4_K -> Q5_0 and Q6_K -> Q8_0), vocab rows of 256
  "fallback-rows": { ...QWEN35_TEST_SHAPE, ffn: 320, layers: 8, fullAttentionInterval: 2, seed: 5 },
};

describe("planLlamaQuantization (llama.cpp's llama_tensor_get_type rules)", () => {
  it("orders tensors as llama.cpp: non-block tensors first, then by layer number, by name within a layer", () => {
    const names = ["blk.10.ffn_up.weight", "token_embd.weight", "blk.2.attn_norm.weight", "output_norm.weight", "blk.2.attn_k.weight"];
    expect(names.sort(llamaTensorOrder)).toEqual([
      "output_norm.weight",
      "token_embd.weight",
      "blk.2.attn_k.weight",
      "blk.2.attn_norm.weight",
      "blk.10.ffn_up.weight",
    ]);
  });

  it("Q4_K_M: Q6_K for the tied head and for V-like / ffn_down tensors where use_more_bits holds; norms, ssm_a, ssm_dt, conv stay F32", () => {
    const tensors = [
      { name: "token_embd.weight", ne: [256, 512], type: GgmlType.F32 },
      { name: "output_norm.weight", ne: [256], type: GgmlType.F32 },
      ...Array.from({ length: 16 }, (_, i) => [
        { name: `blk.${i}.attn_qkv.weight`, ne: [256, 512], type: GgmlType.F32 },
        { name: `blk.${i}.ffn_down.weight`, ne: [512, 256], type: GgmlType.F32 },
        { name: `blk.${i}.ssm_conv1d.weight`, ne: [4, 512], type: GgmlType.F32 },
        { name: `blk.${i}.ssm_a`, ne: [4], type: GgmlType.F32 },
        { name: `blk.${i}.ssm_out.weight`, ne: [256, 256], type: GgmlType.F32 },
      ]).flat(),
    ];
    const plan = new Map(planLlamaQuantization(tensors, { fileType: "Q4_K_M", blockCount: 16 }).map((p) => [p.name, p.to]));
    expect(plan.get("token_embd.weight")).toBe(GgmlType.Q6_K);
    expect(plan.get("output_norm.weight")).toBe(GgmlType.F32);
    // use_more_bits(i, 16): i < 2, i >= 14, (i - 2) % 3 == 2
    const more = [0, 1, 4, 7, 10, 13, 14, 15];
    for (let i = 0; i < 16; i++) {
      const expected = more.includes(i) ? GgmlType.Q6_K : GgmlType.Q4_K;
      expect(plan.get(`blk.${i}.attn_qkv.weight`), `blk.${i}.attn_qkv`).toBe(expected);
      expect(plan.get(`blk.${i}.ffn_down.weight`), `blk.${i}.ffn_down`).toBe(expected);
      expect(plan.get(`blk.${i}.ssm_out.weight`)).toBe(GgmlType.Q4_K);
      expect(plan.get(`blk.${i}.ssm_conv1d.weight`)).toBe(GgmlType.F32);
      expect(plan.get(`blk.${i}.ssm_a`)).toBe(GgmlType.F32);
    }
  });

  it("falls back when rows do not divide the block: Q4_K -> Q5_0, Q6_K -> Q8_0, then F16", () => {
    const plan = planLlamaQuantization(
      [
        { name: "token_embd.weight", ne: [96, 64], type: GgmlType.F32 },
        { name: "blk.0.ffn_down.weight", ne: [96, 64], type: GgmlType.F32 },
        { name: "blk.0.ffn_up.weight", ne: [96, 64], type: GgmlType.F32 },
        { name: "blk.0.ffn_gate.weight", ne: [40, 64], type: GgmlType.F32 },
      ],
      { fileType: "Q4_K_M", blockCount: 1 },
    );
    expect(Object.fromEntries(plan.map((p) => [p.name, p.to]))).toEqual({
      "token_embd.weight": GgmlType.Q8_0,
      "blk.0.ffn_down.weight": GgmlType.Q8_0,
      "blk.0.ffn_up.weight": GgmlType.Q5_0,
      "blk.0.ffn_gate.weight": GgmlType.F16,
    });
  });

  it("refuses a source that is already quantized, naming the tensor", async () => {
    const file = writeGguf({
      metadata: [gguf.str("general.architecture", "qwen35"), gguf.u32("qwen35.block_count", 1)],
      tensors: [{ name: "blk.0.ffn_up.weight", type: GgmlType.Q8_0, ne: [32, 2], data: new Uint8Array(68) }],
    });
    await expect(quantizeGgufModel(file, "Q4_K_M")).rejects.toThrow(QuantArgumentError);
    await expect(quantizeGgufModel(file, "Q4_K_M")).rejects.toThrow(/blk\.0\.ffn_up\.weight.*Q8_0/);
  });

  it("a small tensor read from a file (inside Node's Buffer pool) is quantized from its own bytes only", async () => {
    // 32 x 4 F32 = 512 bytes: a positioned read of that size lands in Buffer.allocUnsafe's shared pool
    // (8 KiB up to Node 22, 64 KiB from Node 24), whose other bytes must not be read as the tensor's
    const values = Float32Array.from({ length: 128 }, (_, i) => Math.sin(i) * (1 + (i % 7)));
    const file = writeGguf({
      metadata: [gguf.str("general.architecture", "qwen35"), gguf.u32("qwen35.block_count", 1)],
      tensors: [{ name: "blk.0.ffn_up.weight", type: GgmlType.F32, ne: [32, 4], data: new Uint8Array(values.buffer) }],
    });
    const input = path.join(dir, "small-f32.gguf");
    fs.writeFileSync(input, file);
    const fromFile = await quantizeGgufModel(input, "Q8_0");
    const fromBytes = await quantizeGgufModel(file, "Q8_0");
    expect(Buffer.from(fromFile.bytes).equals(Buffer.from(fromBytes.bytes))).toBe(true);
    const header = await readGguf(fromFile.bytes);
    const tensor = header.tensors[0]!;
    expect(tensor.type).toBe(GgmlType.Q8_0);
    const written = fromFile.bytes.subarray(tensor.offset, tensor.offset + tensor.byteLength);
    expect(Buffer.from(written).equals(Buffer.from(quantizeTensor(GgmlType.Q8_0, values)))).toBe(true);
  });

  it("refuses a file without <arch>.block_count", async () => {
    const file = writeGguf({ metadata: [gguf.str("general.architecture", "qwen35")], tensors: [] });
    await expect(quantizeGgufModel(file, "Q8_0")).rejects.toThrow(/qwen35\.block_count/);
  });
});

describe.skipIf(llamaReason !== undefined)(
  `quantizeGgufModel vs llama_model_quantize (the oracle)${llamaReason ? ` (skipped: ${llamaReason})` : ""}`,
  () => {
    for (const [shape, spec] of Object.entries(SHAPES)) {
      for (const fileType of ["Q8_0", "Q4_K_M"] as LlamaFileType[]) {
        it(`${shape} ${fileType}: the whole file is byte-identical`, async () => {
          const input = path.join(dir, `${shape}-f32.gguf`);
          if (!fs.existsSync(input)) fs.writeFileSync(input, synthesizeQwen35(spec));
          const reference = path.join(dir, `${shape}-${fileType}.gguf`);
          await runOracle({ kind: "quantize", input, output: reference, ftype: fileType, nthread: 1 });
          const ours = await quantizeGgufModel(input, fileType);
          const theirs = fs.readFileSync(reference);
          expect(ours.bytes.length).toBe(theirs.length);
          expect(Buffer.from(ours.bytes).equals(theirs)).toBe(true);
          const header = await readGguf(ours.bytes);
          expect(header.metadata.get("general.file_type")?.value).toBe(LLAMA_FILE_TYPE_IDS[fileType]);
          // the plan is the file's tensor list, in order, with the written types
          expect(header.tensors.map((t) => [t.name, t.type])).toEqual(ours.plan.map((p) => [p.name, p.to]));
        });
      }
    }
  },
);
