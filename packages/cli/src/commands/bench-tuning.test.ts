/**
 * `keepquant bench`'s table says what the decode tuner chose per (role, type): every field of the variant,
 * the batched step's and the prefill's kernels included, and the tuner's notes.
 */
import { describe, expect, it } from "vitest";
import { tuningRows } from "./bench.js";

const variant = { isa: "avx2" as const, weightRows: 0, prefetch: 16, rowsPerTask: 4096, threads: 0, batchKernel: 1, prefillKernel: 0 };

describe("bench's tuning rows", () => {
  it("one line per choice with every field, the kernels by name, the gain over the default, then the notes", () => {
    const rows = tuningRows({
      tuning: {
        source: "measured",
        reason: "no cache entry for this CPU, addon and model shape",
        key: "k",
        choices: [
          {
            role: "layer",
            type: "Q4_K",
            variant: { ...variant, prefillKernel: 1 },
            chosenNs: 1_000_000,
            defaultNs: 1_500_000,
            timed: 12,
            passBytes: 1,
          },
          { role: "head", type: "Q6_K", variant: { ...variant, batchKernel: 0 }, chosenNs: 0, defaultNs: 0, timed: 0, passBytes: 1 },
        ],
        notes: ["the tuning budget (300 ms) was reached: untimed fields keep their defaults"],
        measureMs: 301,
        budgetMs: 300,
      },
    });
    expect(rows[0]).toEqual(["decode tuning", "measured: no cache entry for this CPU, addon and model shape (301 ms)"]);
    expect(rows[1]).toEqual([
      "  layer Q4_K",
      "isa avx2, weightRows 0, prefetch 16, rowsPerTask 4096, threads 0, batch kernel registers, prefill kernel registers, 1.50x the default",
    ]);
    expect(rows[2]).toEqual([
      "  head Q6_K",
      "isa avx2, weightRows 0, prefetch 16, rowsPerTask 4096, threads 0, batch kernel block, prefill kernel block",
    ]);
    expect(rows[3]).toEqual(["  note", "the tuning budget (300 ms) was reached: untimed fields keep their defaults"]);
  });
  it("off without a report", () => {
    expect(tuningRows({ tuning: undefined })).toEqual([["decode tuning", "off"]]);
  });
});
