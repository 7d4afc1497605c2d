/**
 * qwen3 (dense; llama.cpp's LLM_ARCH_QWEN3) against llama.cpp, pinned to the haswell CPU variant: the
 * qwen3 fixtures (our synthesizer, quantized by llama.cpp's own quantizer to Q8_0 and Q4_K_M). Greedy
 * tokens equal llama.cpp's own greedy run (STRICT, every token, f32 K/V, repacking off, one thread) on
 * every fixture with the native step and, on one fixture, with the TypeScript forward; prompt logits
 * equal llama.cpp's bit for bit at every position on the Q4_K_M files (flash attention, f16 K/V).
 */
import fs from "node:fs";
import { QWEN3_FIXTURE_MODELS, qwen3FixtureFile } from "@keepquant/fixtures/qwen3";
import { decodeF32, llamaUnavailableReason, ORACLE_CPU_VARIANT, runOracle } from "@keepquant/oracle";
import * as native from "@keepquant/tt-native";
import { describe, expect, it } from "vitest";
import { Engine } from "../engine.js";
import { pinNativeLibm } from "../model/test-support.js";
import { expectSameBits } from "./test-support.js";

function skipReason(): string | undefined {
  const oracle = llamaUnavailableReason();
  if (oracle) return `llama.cpp (the oracle) is unavailable: ${oracle}`;
  if (!native.nativeAddon()) return `the native addon did not load: ${native.nativeStatus().cpu.reasons.join("; ")}`;
  return undefined;
}
const reason = skipReason();

/** The CPU's flags (/proc/cpuinfo), "" where it cannot be read. */
function cpuFlags(): string {
  try {
    return /^flags\s*:\s*(.*)$/m.exec(fs.readFileSync("/proc/cpuinfo", "utf8"))?.[1] ?? "";
  } catch {
    return "";
  }
}

const WEIGHT_TYPES = ["F32", "Q8_0", "Q4_K_M"] as const;
const PROMPTS = [[13, 3836, 3755, 1582, 3505, 1432, 3455], [5, 99, 1234], [42]];

describe.skipIf(reason !== undefined)(`qwen3 against llama.cpp${reason ? ` (skipped: ${reason})` : ""}`, () => {
  // the TypeScript forward computes with the C library's libm here, as llama.cpp does
  pinNativeLibm();

  // the oracle pins haswell where the CPU runs it (AVX2, FMA, F16C), as the tools/oracle loader does
  const pinnable = ["avx2", "fma", "f16c"].every((flag) => cpuFlags().split(/\s+/).includes(flag));
  it.skipIf(!process.env.KEEPQUANT_ORACLE_CPU_VARIANT && !pinnable)(
    "the oracle runs llama.cpp's pinned CPU variant (haswell) and knows the file as qwen3",
    async () => {
      const file = await qwen3FixtureFile("qwen3-tied-4l", "F32");
      const info = await runOracle({ kind: "info", model: file }, { timeoutMs: 120_000 });
      expect(info.cpuVariant).toBe(process.env.KEEPQUANT_ORACLE_CPU_VARIANT || ORACLE_CPU_VARIANT);
      expect(info).toMatchObject({ nLayer: 4, nEmbd: 256 });
    },
  );

  for (const model of Object.keys(QWEN3_FIXTURE_MODELS)) {
    for (const weightType of WEIGHT_TYPES) {
      it(`${model} (${weightType}): 16 greedy tokens equal llama.cpp's greedy run on 3 prompts (STRICT)`, async () => {
        const file = await qwen3FixtureFile(model, weightType);
        const oracle = await runOracle(
          { kind: "greedy", model: file, prompts: PROMPTS, nTokens: 16, kvType: "f32", repack: false, threads: 1 },
          { timeoutMs: 120_000 },
        );
        // a fixture that only repeats one token would prove little
        expect(new Set(oracle.tokens.flat()).size).toBeGreaterThan(4);
        const engine = await Engine.load(file, { flashAttention: false, kvType: "f32" });
        try {
          expect(engine.stats().providers.step).toMatch(/^native-step-/);
          for (const [p, prompt] of PROMPTS.entries()) {
            const mine = (await engine.generateToEnd(prompt, { maxTokens: 16, stopAtEog: false })).tokens;
            expect(mine, `prompt ${p}`).toEqual(oracle.tokens[p]);
          }
        } finally {
          engine.dispose();
        }
      });
    }

    it(`${model} (Q4_K_M): a 40-token prompt's logits at every position are llama.cpp's bit for bit (flash attention, f16 K/V)`, async () => {
      const file = await qwen3FixtureFile(model, "Q4_K_M");
      const engine = await Engine.load(file, { maxBatchTokens: 64 });
      try {
        const ids = Array.from({ length: 40 }, (_, i) => (i * 7919 + 13) % engine.weights.vocab);
        const ours = await engine.evaluate(ids);
        const oracle = await runOracle({ kind: "logits", model: file, sequences: [ids], flashAttention: true }, { timeoutMs: 120_000 });
        const theirs = oracle.logits[0]!.map(decodeF32);
        expectSameBits(ours, theirs, (p, at) => `position ${p}, logit ${at}: ${ours[p]![at]} vs llama.cpp's ${theirs[p]![at]}`);
      } finally {
        engine.dispose();
      }
    });
  }

  it("qwen3-tied-4l (Q8_0): the TypeScript forward's greedy tokens are llama.cpp's too (STRICT)", async () => {
    const file = await qwen3FixtureFile("qwen3-tied-4l", "Q8_0");
    const oracle = await runOracle(
      { kind: "greedy", model: file, prompts: PROMPTS, nTokens: 16, kvType: "f32", repack: false, threads: 1 },
      { timeoutMs: 120_000 },
    );
    const engine = await Engine.load(file, { nativeStep: false, flashAttention: false, kvType: "f32" });
    try {
      expect(engine.stats().providers.step).toBe("ts-forward");
      for (const [p, prompt] of PROMPTS.entries()) {
        const mine = (await engine.generateToEnd(prompt, { maxTokens: 16, stopAtEog: false })).tokens;
        expect(mine, `prompt ${p}`).toEqual(oracle.tokens[p]);
      }
    } finally {
      engine.dispose();
    }
  });
});
