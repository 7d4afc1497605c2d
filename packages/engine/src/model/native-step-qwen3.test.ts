/**
 * qwen3's native step against its specification, the TypeScript forward (the same native matmul
 * kernels, the C library's libm): bit-identical logits on the qwen3 fixtures (F32, Q8_0, Q4_K_M; tied
 * and untied head) in prefill (tiled and one-chunk flash attention, the standard path), batched prefill
 * beside decode, and batched decode; f16 and f32 KV; llama and bf16 numerics; image embedding rows and
 * (t, h, w) rotary positions among text.
 */
import { QWEN3_FIXTURE_MODELS, qwen3FixtureFile } from "@keepquant/fixtures/qwen3";
import { llamaUnavailableReason } from "@keepquant/oracle";
import * as native from "@keepquant/tt-native";
import { describe, expect, it } from "vitest";
import { type KvType, PagedKvCache } from "../kv/paged-kv.js";
import { GdnStatePool } from "../kv/state-pool.js";
import { expectNativeEqualsSpec, loadFileWeights, pinNativeLibm, stepCasesFor } from "./test-support.js";
import type { ModelWeights } from "./weights.js";

function skipReason(): string | undefined {
  if (!native.nativeAddon()) return `the native addon did not load: ${native.nativeStatus().cpu.reasons.join("; ")}`;
  const oracle = llamaUnavailableReason();
  if (oracle) return `the qwen3 fixtures need llama.cpp's quantizer: ${oracle}`;
  return undefined;
}
const reason = skipReason();

function pools(weights: ModelWeights, kvType: KvType) {
  const storage = (bytes: number) => native.allocNativeBuffer(bytes);
  const description = weights.description!;
  return { kv: PagedKvCache.forModel(description, 48, 8, kvType, storage), states: GdnStatePool.forModel(description, 4, storage) };
}

describe.skipIf(reason !== undefined)(
  `qwen3: native step == TypeScript forward, bit for bit${reason ? ` (skipped: ${reason})` : ""}`,
  () => {
    pinNativeLibm();

    for (const model of Object.keys(QWEN3_FIXTURE_MODELS)) {
      for (const weightType of ["F32", "Q8_0", "Q4_K_M"] as const) {
        // the Q4_K_M file runs every case; F32 and Q8_0 two that cover both numerics, KV types and flash on/off
        const cases = stepCasesFor(weightType);
        it(`${model} (${weightType}): prefill, batched prefill + decode, batched decode; ${cases.length} cases`, async () => {
          const file = await qwen3FixtureFile(model, weightType);
          for (const stepCase of cases) {
            const weights = await loadFileWeights(file, stepCase.numerics);
            expect(weights.layers.every((l) => l.kind === "attention_ungated")).toBe(true);
            await expectNativeEqualsSpec(weights, stepCase, (kvType) => pools(weights, kvType));
          }
        });
      }
    }
  },
);
