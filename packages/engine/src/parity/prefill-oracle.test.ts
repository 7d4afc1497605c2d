/**
 * Long prompts against llama.cpp (the oracle build pinned to the haswell CPU variant, repacking off):
 * on the quantized parity fixtures, a 100-token prompt's logits at every position equal llama.cpp's
 * bit for bit, with flash attention (f16 K/V: 64 query rows or more take llama.cpp's tiled path) and
 * without it (f32 K/V: mul_mat, soft_max_ext, mul_mat). The parity goldens' prompts are shorter than
 * the tiled path's 64 rows; this covers it.
 */
import { describe, expect, it } from "vitest";
import { decodeF32, llamaUnavailableReason, runOracle } from "@keepquant/oracle";
import * as native from "@keepquant/tt-native";
import { Engine } from "../engine.js";
import { PARITY_FIXTURES } from "@keepquant/fixtures";
import { parityFixtureFile } from "@keepquant/fixtures/oracle";

const QUANTIZED = PARITY_FIXTURES.filter((f) => f.weightType !== "F32");

function skipReason(): string | undefined {
  const oracle = llamaUnavailableReason();
  if (oracle) return `llama.cpp (the oracle) is unavailable: ${oracle}`;
  if (!native.nativeAddon()) return `the native addon did not load: ${native.nativeStatus().cpu.reasons.join("; ")}`;
  return undefined;
}
const reason = skipReason();

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
            for (let p = 0; p < ids.length; p++) {
              const a = new Uint32Array(ours[p]!.buffer, ours[p]!.byteOffset, ours[p]!.length);
              const b = new Uint32Array(theirs[p]!.buffer, theirs[p]!.byteOffset, theirs[p]!.length);
              expect(a.length).toBe(b.length);
              const at = a.findIndex((bits, i) => bits !== b[i]);
              if (at >= 0) expect.fail(`position ${p}, logit ${at}: ${ours[p]![at]} vs llama.cpp's ${theirs[p]![at]}`);
            }
          } finally {
            engine.dispose();
          }
        });
      }
    }
  },
);
