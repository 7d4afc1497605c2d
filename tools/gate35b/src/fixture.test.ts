/**
 * The 35B-A3B generator's recipe (the 27B gate's writer on a qwen35moe spec) on a small MoE model with
 * the 35B-A3B's block count (40 layers, attention every 4th): the file written directly in our Q4_K_M
 * mix has the per-tensor types AND bytes that llama.cpp's `llama_model_quantize` gives the same F32
 * weights (experts, router, shared expert included), and keepquant's greedy tokens on it equal llama.cpp's.
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { Engine } from "@keepquant/engine";
import { PARITY_ENGINE_OPTIONS } from "@keepquant/engine/parity";
import { GGML_TYPE_TRAITS, GgmlType, QWEN35_TEST_SHAPE, qwen35SpecLayout, readGguf, readTensorBytes, writeGguf } from "@keepquant/gguf";
import { llamaUnavailableReason, runOracle } from "@keepquant/oracle";
import { expandTensorF32, quantizedQwen35Layout, writeQuantizedQwen35, type PooledQwen35Spec } from "../../gate27b/src/quantized-qwen35.js";
import { GATE_35B_SPEC, gate35bFileSize } from "./fixture.js";

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kq-gate35b-"));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

/** 40 layers like the 35B-A3B, 16 experts (4 used) of width 256, every row a multiple of 256. */
const SMALL_MOE_40: PooledQwen35Spec = {
  ...QWEN35_TEST_SHAPE,
  layers: 40,
  ffn: 256,
  ssmHeads: 4,
  ssmStateSize: 64,
  tied: false,
  mtp: false,
  moe: { experts: 16, used: 4, ffnExp: 256, ffnShared: 256 },
  seed: 35,
  name: "synthetic-qwen35moe-small-40l",
  residualGain: GATE_35B_SPEC.residualGain,
  embeddingStd: GATE_35B_SPEC.embeddingStd,
};

const llamaReason = llamaUnavailableReason();
const typeName = (type: GgmlType): string => GGML_TYPE_TRAITS[type].name;

describe("the 35B-A3B gate's file (writeQuantizedQwen35 on qwen35moe)", () => {
  it("the full 35B-A3B layout: qwen35moe, 40 layers of routed + shared experts, ~21.7 GB, F32 routers", () => {
    const layout = quantizedQwen35Layout(GATE_35B_SPEC);
    expect(layout.config.architecture).toBe("qwen35moe");
    expect(layout.config.nLayer).toBe(40);
    expect(gate35bFileSize()).toBe(layout.fileSize);
    expect(layout.fileSize).toBeGreaterThan(20e9);
    expect(layout.fileSize).toBeLessThan(23e9);
    const byName = new Map(layout.tensors.map((t) => [t.tensor.name, t]));
    expect(byName.get("blk.0.ffn_gate_exps.weight")?.tensor.ne).toEqual([2048, 512, 256]);
    expect(byName.get("blk.0.ffn_down_exps.weight")?.tensor.ne).toEqual([512, 2048, 256]);
    expect(byName.get("blk.0.ffn_gate_inp.weight")?.type).toBe(GgmlType.F32);
    expect(byName.has("blk.0.ffn_up_shexp.weight")).toBe(true);
    expect(byName.has("blk.40.nextn.eh_proj.weight")).toBe(false);
  }, 600_000);

  describe.skipIf(llamaReason !== undefined)(`against llama.cpp (the oracle)${llamaReason ? ` (skipped: ${llamaReason})` : ""}`, () => {
    const direct = path.join(dir, "direct.gguf");

    it("a 40-layer MoE model written directly in our mix gets llama_model_quantize's types and bytes, tensor by tensor", async () => {
      const f32 = path.join(dir, "f32.gguf");
      const quantized = path.join(dir, "llama-q4km.gguf");
      await writeQuantizedQwen35(direct, SMALL_MOE_40);
      const layout = quantizedQwen35Layout(SMALL_MOE_40);
      const { metadata } = qwen35SpecLayout(SMALL_MOE_40);
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
      let experts = 0;
      for (const tensor of ours.tensors) {
        const other = theirs.get(tensor.name);
        expect(other, tensor.name).toBeDefined();
        expect(`${tensor.name} ${typeName(tensor.type)}`).toBe(`${tensor.name} ${typeName(other!.type)}`);
        const a = await readTensorBytes(direct, tensor);
        const b = await readTensorBytes(quantized, other!);
        expect(Buffer.compare(Buffer.from(a), Buffer.from(b)), `${tensor.name} bytes`).toBe(0);
        if (tensor.name.endsWith("_exps.weight")) experts++;
      }
      expect(experts).toBe(3 * 40);
      fs.rmSync(quantized);
    }, 1_800_000);

    it("keepquant's greedy tokens equal llama.cpp's on that file (4 prompts x 8 tokens, STRICT)", async () => {
      const prompts = [4, 8, 12, 16].map((length, p) => Array.from({ length }, (_, i) => (i * 37 + 5 + p * 101) % SMALL_MOE_40.vocab));
      const oracle = await runOracle(
        { kind: "greedy", model: direct, prompts, nTokens: 8, kvType: "f32", repack: false, threads: 1 },
        { timeoutMs: 600_000 },
      );
      const engine = await Engine.load(direct, { ...PARITY_ENGINE_OPTIONS, threads: 1, maxSequences: 1, kvCacheTokens: 256 });
      try {
        for (const [p, prompt] of prompts.entries()) {
          const result = await engine.generate(prompt, { maxTokens: 8, temperature: 0, stopAtEog: false }).result;
          expect(result.tokens, `prompt ${p}`).toEqual(oracle.tokens[p]);
        }
        expect(new Set(oracle.tokens.map((t) => t.join(","))).size).toBeGreaterThan(1);
      } finally {
        engine.dispose();
      }
    }, 600_000);
  });
});
