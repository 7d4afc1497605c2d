import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { llamaUnavailableReason, runOracle } from "@keepquant/oracle";
import { afterAll, describe, expect, it } from "vitest";
import {
  GgmlType,
  QWEN35_TEST_SHAPE,
  buildLoadPlan,
  getMetadata,
  ggmlTypeName,
  readGguf,
  synthesizeQwen35,
  type Qwen35Spec,
} from "./index.js";

const skipReason = llamaUnavailableReason();

const dir = mkdtempSync(join(tmpdir(), "kq-gguf-moe-llama-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** The test shape as qwen35moe: 4 experts (top 2) of width 256 and a 256-wide shared expert, with an MTP block. */
const SPEC: Qwen35Spec = {
  ...QWEN35_TEST_SHAPE,
  mtp: true,
  moe: { experts: 4, used: 2, ffnExp: 256, ffnShared: 256 },
  name: "synthetic-qwen35moe-test",
  seed: 7,
};

describe.skipIf(skipReason !== undefined)(
  `llama.cpp reads our qwen35moe files (llama_model_qwen35moe)${skipReason ? ` (skipped: ${skipReason})` : ""}`,
  () => {
    it("loads the synthesized F32 file and its own Q4_K_M of it, decodes greedily, and our load plan accepts what its quantizer wrote", async () => {
      const f32 = join(dir, "moe-f32.gguf");
      const q4 = join(dir, "moe-q4_k_m.gguf");
      writeFileSync(f32, synthesizeQwen35(SPEC));
      const info = await runOracle({ kind: "info", model: f32 }, { timeoutMs: 120_000 });
      // llama.cpp's loader checks every tensor name and shape of the architecture: ours are its
      expect(info).toMatchObject({ nEmbd: SPEC.hidden, nVocab: SPEC.vocab });
      expect(info.nLayer).toBe(SPEC.layers); // llama_model_n_layer: the trunk (the MTP block is extra)
      await runOracle({ kind: "quantize", input: f32, output: q4, ftype: "Q4_K_M" }, { timeoutMs: 120_000 });
      for (const model of [f32, q4]) {
        const runs = await Promise.all(
          [0, 1].map(() => runOracle({ kind: "greedy", model, prompts: [[1, 2, 3, 4, 5]], nTokens: 6 }, { timeoutMs: 120_000 })),
        );
        expect(runs[0]!.tokens[0]).toHaveLength(6);
        expect(runs[1]!.tokens).toEqual(runs[0]!.tokens);
      }

      const quantized = await readGguf(q4);
      expect(getMetadata(quantized, "general.architecture")).toBe("qwen35moe");
      const plan = buildLoadPlan(quantized, { speculative: "mtp" });
      expect(plan.refused).toEqual([]);
      expect(plan.config.moe).toEqual({ expertCount: 4, expertUsedCount: 2, expertFeedForwardLength: 256, sharedFeedForwardLength: 256 });
      const typeOf = (name: string) => ggmlTypeName(quantized.tensors.find((t) => t.name === name)!.type);
      // the router stays F32 (llama.cpp never quantizes ffn_gate_inp), the shared gate is a 1-D F32 vector,
      // and the stacked experts are K-quants
      expect(typeOf("blk.0.ffn_gate_inp.weight")).toBe("F32");
      expect(typeOf("blk.0.ffn_gate_inp_shexp.weight")).toBe("F32");
      for (const slot of ["ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"]) {
        expect([GgmlType.Q4_K, GgmlType.Q5_K, GgmlType.Q6_K].map(ggmlTypeName), slot).toContain(typeOf(`blk.1.${slot}.weight`));
      }
    });
  },
);
