/**
 * Long prompts against llama.cpp (the oracle build pinned to the haswell CPU variant, repacking off):
 * on the quantized parity fixtures, a 100-token prompt's logits at every position equal llama.cpp's
 * bit for bit, with flash attention (f16 K/V: 64 query rows or more take llama.cpp's tiled path) and
 * without it (f32 K/V: mul_mat, soft_max_ext, mul_mat). The parity goldens' prompts are shorter than
 * the tiled path's 64 rows; this covers it.
 */
import { describe, expect, it } from "vitest";
import { decodeF32, runOracle } from "@keepquant/oracle";
import * as native from "@keepquant/tt-native";
import { Engine } from "../engine.js";
import { expectSameBits } from "./test-support.js";
import { PARITY_FIXTURES } from "@keepquant/fixtures";
import { oracleAndNativeSkipReason, parityFixtureFile } from "@keepquant/fixtures/oracle";

const QUANTIZED = PARITY_FIXTURES.filter((f) => f.weightType !== "F32");

const reason = oracleAndNativeSkipReason(native);

describe.skipIf(reason !== undefined)(
  `a 100-token prompt's logits equal llama.cpp's bit for bit${reason ? ` (skipped: ${reason})` : ""}`,
  () => {
    for (const fixture of QUANTIZED) {
      for (const flashAttention of [true, false]) {
        it(`${fixture.name}, flash attention ${flashAttention ? "on (tiled path)" : "off"}`, async () => {
          const file = await parityFixtureFile(fixture);
          const kvType = flashAttention ? "f16" : "f32";
          const engine = await Engine.load(file, { kvType, flashAttention, maxBatchTokens: 128 });
          try {
            const ids = Array.from({ length: 100 }, (_, i) => (i * 7919 + 13) % engine.weights.vocab);
            const ours = await engine.evaluate(ids);
            const oracle = await runOracle({ kind: "logits", model: file, sequences: [ids], kvType, flashAttention });
            const theirs = oracle.logits[0]!.map(decodeF32);
            expect(theirs.length).toBe(ids.length);
            expect(ours.map((row) => row.length)).toEqual(theirs.map((row) => row.length));
            expectSameBits(ours, theirs, (p, at) => `position ${p}, logit ${at}: ${ours[p]![at]} vs llama.cpp's ${theirs[p]![at]}`);
          } finally {
            engine.dispose();
          }
        });
      }
    }
  },
);
