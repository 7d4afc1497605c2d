import { describe, expect, it } from "vitest";
import { topK, PARITY_GOLDENS_FORMAT, type ParityGoldens } from "./goldens.js";
import { argmaxToken, medianAndMax, teacherForced, teacherForcedGate, topKDistances } from "./teacher-forced.js";

/** One-prompt goldens whose oracle logits at step s are `rows[s]`, top-3 stored. */
function goldens(tokens: number[], rows: number[][]): ParityGoldens {
  const steps = rows.map((row) => topK(Float32Array.from(row), 3));
  return {
    format: PARITY_GOLDENS_FORMAT,
    fixture: "toy",
    weightType: "Q4_K_M",
    modelSha256: "",
    modelBytes: 0,
    oracle: {
      package: "",
      version: "",
      llamaVersion: "",
      cpuVariant: "",
      settings: { kvType: "f32", repack: false, flashAttention: false, threads: 1 },
    },
    nTokens: tokens.length,
    topK: 3,
    prompts: [{ ids: [7, 8], tokens, topIds: steps.map((s) => s.ids), topLogits: steps.map((s) => s.logits) }],
  };
}

const rows = [
  [0, 5, 4.8, 1, -2], // step 0: oracle picks 1 (top-3 ids 1, 2, 3)
  [3, 0, 0, 0, 2], // step 1: oracle picks 0 (top-3 ids 0, 4, 1)
];
const g = goldens([1, 0], rows);

describe("teacher forcing on the goldens", () => {
  it("evaluates prompt + oracle continuation at the generation positions and keeps the stored top-K ids", async () => {
    const calls: { ids: readonly number[]; positions: number[] | undefined }[] = [];
    const ours = [
      [0, 4.9, 5, 1, 0], // our argmax 2: a near tie (0.2 nats in the oracle)
      [3.5, 0, 0, 0, 2],
    ];
    const engine = {
      async evaluate(ids: readonly number[], options?: { positions?: number[] }): Promise<Float32Array[]> {
        calls.push({ ids, positions: options?.positions });
        return ours.map((r) => Float32Array.from(r));
      },
    };
    const result = await teacherForced(g, engine);
    expect(calls).toEqual([{ ids: [7, 8, 1], positions: [1, 2] }]);
    expect(result[0]!.argmax).toEqual([2, 0]);
    expect(Array.from(result[0]!.topLogits[1]!)).toEqual([3.5, 2, 0]);
    const report = teacherForcedGate(g, result, "bf16");
    expect(report).toMatchObject({ nearTie: 1, forwardDivergent: 0, passed: true });
    expect(report.prompts[0]).toMatchObject({ divergedAt: 0, oracleToken: 1, ourToken: 2 });
    // distances to the oracle's stored values, per step: max over the top-3 ids
    const d = topKDistances(g, result, "oracle");
    expect(d[0]).toBeCloseTo(0.2, 5); // ids 1, 2, 3: |5 - 4.9|, |4.8 - 5|, |1 - 1|
    expect(d[1]).toBeCloseTo(0.5, 5);
    expect(topKDistances(g, result, result)).toEqual([0, 0]);
  });

  it("argmax takes the lowest id on ties; median is the upper median", () => {
    expect(argmaxToken(Float32Array.from([1, 3, 3, 2]))).toBe(1);
    expect(medianAndMax([4, 1, 3, 2])).toEqual({ median: 3, max: 4 });
    expect(medianAndMax([0.5])).toEqual({ median: 0.5, max: 0.5 });
  });
});
