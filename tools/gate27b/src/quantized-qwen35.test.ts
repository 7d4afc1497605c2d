/**
 * The 27B generator's recipe on a small model with the 27B's block count (64 layers, untied head,
 * so the same use_more_bits layer pattern): the file written directly in our Q4_K_M mix has the
 * per-tensor types AND bytes that llama.cpp's `llama_model_quantize` gives the same F32 weights, and
 * the weights are calm enough that keepquant's greedy tokens equal llama.cpp's (STRICT).
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { QWEN35_TEST_SHAPE } from "@keepquant/gguf";
import { llamaUnavailableReason } from "@keepquant/oracle";
import { GATE_27B_SPEC } from "./fixture.js";
import { expectGreedyMatchesLlama, expectLlamaQuantizeBytes } from "./llama-check.js";
import {
  quantizedQwen35Layout,
  SyntheticModelError,
  writeQuantizedQwen35,
  type PooledQwen35Spec,
  type WriteProgress,
} from "./quantized-qwen35.js";

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kq-gate27b-"));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

/** 64 layers like the 27B (attention every 4th), every row a multiple of 256 (no fallback types). */
const SMALL_64: PooledQwen35Spec = {
  ...QWEN35_TEST_SHAPE,
  layers: 64,
  ffn: 256,
  ssmHeads: 4,
  ssmStateSize: 64,
  tied: false,
  seed: 27,
  name: "synthetic-qwen35-small-64l",
  // the 27B gate's scales (fixture.ts)
  residualGain: GATE_27B_SPEC.residualGain,
  embeddingStd: GATE_27B_SPEC.embeddingStd,
};

const llamaReason = llamaUnavailableReason();

/** The 4-layer spec of the generator's own tests, and its file written once, uninterrupted (with its progress events). */
const SMALL_4: PooledQwen35Spec = { ...SMALL_64, layers: 4 };
let wholeRun: Promise<{ file: string; bytes: number; sha256: string; events: WriteProgress[] }> | undefined;
function wholeFile(): Promise<{ file: string; bytes: number; sha256: string; events: WriteProgress[] }> {
  wholeRun ??= (async () => {
    const file = path.join(dir, "whole.gguf");
    const events: WriteProgress[] = [];
    const written = await writeQuantizedQwen35(file, SMALL_4, { onProgress: (p) => events.push(p) });
    return { file, ...written, events };
  })();
  return wholeRun;
}

describe("writeQuantizedQwen35 (the 27B generator's recipe)", () => {
  it("writes the layout's size, reports progress per tensor and leaves no partial file", async () => {
    const { file, bytes, events } = await wholeFile();
    const layout = quantizedQwen35Layout(SMALL_4);
    expect(bytes).toBe(layout.fileSize);
    expect(fs.statSync(file).size).toBe(layout.fileSize);
    expect(events.at(-1)).toMatchObject({ tensorsDone: layout.tensors.length, bytesDone: layout.fileSize });
    expect(fs.readdirSync(dir).filter((name) => name.includes("partial"))).toEqual([]);
  });

  it("resumes an interrupted partial file to the same bytes as an uninterrupted run", async () => {
    const spec = SMALL_4;
    const resumed = path.join(dir, "resumed.gguf");
    // the uninterrupted run (shared with the test above: the generator is deterministic, so one write serves both)
    const reference = await wholeFile();
    // Interrupt after 10 tensors: the progress callback throws.
    await expect(
      writeQuantizedQwen35(resumed, spec, {
        onProgress: (p) => {
          if (p.tensorsDone === 10) throw new Error("interrupted");
        },
      }),
    ).rejects.toThrow("interrupted");
    expect(fs.existsSync(`${resumed}.partial`)).toBe(true);
    expect(fs.existsSync(resumed)).toBe(false);
    // Garbage after the last finished tensor is cut off.
    fs.appendFileSync(`${resumed}.partial`, new Uint8Array(1000).fill(7));
    const events: WriteProgress[] = [];
    const again = await writeQuantizedQwen35(resumed, spec, { onProgress: (p) => events.push(p) });
    expect(events[0]).toMatchObject({ resumed: true, tensorsDone: 10 });
    expect(again.sha256).toBe(reference.sha256);
    expect(Buffer.compare(fs.readFileSync(resumed), fs.readFileSync(reference.file))).toBe(0);
    fs.rmSync(resumed);
  });

  it("refuses a shape whose rows llama.cpp would not quantize as Q4_K/Q6_K", () => {
    expect(() => quantizedQwen35Layout({ ...SMALL_64, layers: 4, ffn: 320 })).toThrow(SyntheticModelError);
    expect(() => quantizedQwen35Layout({ ...SMALL_64, layers: 4, ffn: 320 })).toThrow(/ffn_down.weight: rows of 320 values/);
  });

  describe.skipIf(llamaReason !== undefined)(`against llama.cpp (the oracle)${llamaReason ? ` (skipped: ${llamaReason})` : ""}`, () => {
    const direct = path.join(dir, "direct.gguf");

    it("a 64-layer model written directly in our mix gets llama_model_quantize's types and bytes, tensor by tensor", async () => {
      await writeQuantizedQwen35(direct, SMALL_64);
      const tensors = await expectLlamaQuantizeBytes(direct, SMALL_64, dir);
      // 64 layers: use_more_bits holds for 8 + 8 + 16 layers -> 32 attn_v/attn_qkv + 32 ffn_down, plus the head.
      expect(tensors.filter((t) => t.type === "Q6_K").length).toBe(65);
    });

    it("keepquant's greedy tokens equal llama.cpp's on that file (4 prompts x 8 tokens, STRICT)", async () => {
      const oracleTokens = await expectGreedyMatchesLlama(direct, SMALL_64.vocab);
      // Not a constant model: the 4 prompts do not all continue with the same tokens.
      expect(new Set(oracleTokens.map((t) => t.join(","))).size).toBeGreaterThan(1);
    });
  });
});
