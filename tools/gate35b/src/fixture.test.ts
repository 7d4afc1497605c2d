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
import { GgmlType, QWEN35_TEST_SHAPE } from "@keepquant/gguf";
import { llamaUnavailableReason } from "@keepquant/oracle";
import { expectGreedyMatchesLlama, expectLlamaQuantizeBytes } from "../../gate27b/src/llama-check.js";
import { quantizedQwen35Layout, writeQuantizedQwen35, type PooledQwen35Spec } from "../../gate27b/src/quantized-qwen35.js";
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
      await writeQuantizedQwen35(direct, SMALL_MOE_40);
      const tensors = await expectLlamaQuantizeBytes(direct, SMALL_MOE_40, dir);
      expect(tensors.filter((t) => t.name.endsWith("_exps.weight")).length).toBe(3 * 40);
    }, 1_800_000);

    it("keepquant's greedy tokens equal llama.cpp's on that file (4 prompts x 8 tokens, STRICT)", async () => {
      const oracleTokens = await expectGreedyMatchesLlama(direct, SMALL_MOE_40.vocab);
      expect(new Set(oracleTokens.map((t) => t.join(","))).size).toBeGreaterThan(1);
    }, 600_000);
  });
});
