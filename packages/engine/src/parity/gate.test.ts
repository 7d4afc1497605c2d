import { describe, expect, it } from "vitest";
import { comparePrompt, parityRules, summarize, formatParityReport, NEAR_TIE_NATS } from "./gate.js";
import { parseGoldens, serializeGoldens, topK, PARITY_GOLDENS_FORMAT, type ParityGoldens } from "./goldens.js";

/** A golden prompt whose oracle logits at every step are `rows[s]` (full vectors). */
function golden(tokens: number[], rows: number[][], k = 3): ParityGoldens["prompts"][number] {
  const steps = rows.map((row) => topK(Float32Array.from(row), k));
  return { ids: [1, 2], tokens, topIds: steps.map((s) => s.ids), topLogits: steps.map((s) => s.logits) };
}

describe("parity gate", () => {
  const rows = [
    [0, 5, 4.8, 1, -2], // step 0: oracle picks 1, token 2 is 0.2 nats behind
    [3, 0, 0, 0, 2], // step 1: oracle picks 0, token 4 is 1 nat behind, token 3 is outside top-3
  ];
  const g = golden([1, 0], rows);

  it("is STRICT when every token matches, and measures logit differences up to the end", () => {
    const r = comparePrompt(g, 0, { tokens: [1, 0], logits: rows.map((row) => Float32Array.from(row, (v) => v + 0.001)) });
    expect(r.status).toBe("strict");
    expect(r.maxLogitDiff).toBeCloseTo(0.001, 5);
  });

  it("classifies a divergence by the oracle's gap on our (identical) prefix", () => {
    const near = comparePrompt(g, 0, { tokens: [2, 0] });
    expect(near).toMatchObject({ status: "near-tie", divergedAt: 0, oracleToken: 1, ourToken: 2 });
    expect(near.gapNats).toBeCloseTo(0.2, 5);
    const far = comparePrompt(g, 0, { tokens: [1, 4] });
    expect(far).toMatchObject({ status: "forward-divergent", divergedAt: 1, gapNats: 1 });
    const outside = comparePrompt(g, 0, { tokens: [1, 3] });
    expect(outside).toMatchObject({ status: "forward-divergent", gapIsLowerBound: true });
    expect(outside.gapNats).toBeCloseTo(3 - 0, 5); // top1 - top3 at step 1
  });

  it("uses 500 mnats as the near-tie bound, inclusive", () => {
    expect(NEAR_TIE_NATS).toBe(0.5);
    const tie = golden([0], [[1, 0.5, 0]]);
    expect(comparePrompt(tie, 0, { tokens: [1] }).status).toBe("near-tie");
    const over = golden([0], [[1, 0.4990234375, 0]]);
    expect(comparePrompt(over, 0, { tokens: [1] }).status).toBe("forward-divergent");
  });

  it("applies the pass rules per weight type and numerics", () => {
    expect(parityRules("F32", "llama", 16)).toEqual({ minStrict: 16, maxForwardDivergent: 0 });
    expect(parityRules("Q4_K_M", "llama", 16)).toEqual({ minStrict: 14, maxForwardDivergent: 0 });
    expect(parityRules("Q8_0", "bf16", 16)).toEqual({ minStrict: 0, maxForwardDivergent: 0 });
    const strict = { index: 0, status: "strict" as const, tokens: [] };
    const nearTie = { index: 1, status: "near-tie" as const, gapNats: 0.3, tokens: [] };
    const divergent = { index: 2, status: "forward-divergent" as const, gapNats: 0.9, tokens: [] };
    const quantized = summarize("f", "Q4_K_M", "llama", [...Array(14).fill(strict), nearTie, nearTie]);
    expect(quantized).toMatchObject({ strict: 14, nearTie: 2, forwardDivergent: 0, passed: true, maxGapNats: 0.3 });
    expect(summarize("f", "Q4_K_M", "llama", [...Array(13).fill(strict), nearTie, nearTie, nearTie]).passed).toBe(false);
    expect(summarize("f", "F32", "llama", [...Array(15).fill(strict), nearTie]).passed).toBe(false);
    const bf16 = summarize("f", "F32", "bf16", [...Array(15).fill(nearTie), divergent]);
    expect(bf16.passed).toBe(false);
    expect(formatParityReport(bf16)).toMatch(/STRICT 0\/16 {2}NEAR-TIE 15 {2}FORWARD-DIVERGENT 1 {2}max gap 900 mnats {2}FAIL/);
  });

  it("round-trips goldens through JSON exactly", () => {
    const goldens: ParityGoldens = {
      format: PARITY_GOLDENS_FORMAT,
      fixture: "x",
      weightType: "F32",
      modelSha256: "00",
      modelBytes: 1,
      oracle: {
        package: "p",
        version: "v",
        llamaVersion: "l",
        cpuVariant: "haswell",
        settings: { kvType: "f32", repack: false, flashAttention: false, threads: 2 },
      },
      nTokens: 2,
      topK: 3,
      prompts: [g],
    };
    const back = parseGoldens(serializeGoldens(goldens));
    expect(back.prompts[0]!.topLogits.map((a) => Array.from(a))).toEqual(g.topLogits.map((a) => Array.from(a)));
    expect(back.prompts[0]!.topIds.map((a) => Array.from(a))).toEqual([
      [1, 2, 3],
      [0, 4, 1],
    ]);
    expect(() => parseGoldens("{}")).toThrow(/format/);
  });
});
