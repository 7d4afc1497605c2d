/**
 * The load-time kernel probe of `llama` numerics: a native kernel that differs from llama.cpp's in
 * one bit moves its type to the exact TypeScript kernel (said in diagnostics); an exact one stays.
 */
import fs from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { readGguf, buildLoadPlan } from "@keepquant/gguf";
import { llamaUnavailableReason } from "@keepquant/oracle";
import { parityFixture } from "@keepquant/fixtures";
import { FIXTURE_CACHE_DIR, parityFixtureFile } from "@keepquant/fixtures/oracle";
import { probeExactKernels } from "./exact-probe.js";
import { loadQwen35Weights, readTensorSource } from "./load.js";
import type { MatmulProvider } from "./matmul.js";
import { allMatrices, typescriptProviders } from "./providers.js";
import type { PackedMatrix } from "./weights.js";

const fixture = parityFixture("tied-4l-q4_k_m");
const oracleReason = llamaUnavailableReason();
const reason =
  fs.existsSync(path.join(FIXTURE_CACHE_DIR, fixture.file)) || !oracleReason
    ? undefined
    : `fixture not cached and no quantizer: ${oracleReason}`;

async function q4kWeights() {
  const file = await parityFixtureFile(fixture);
  const header = await readGguf(file);
  return (await loadQwen35Weights(buildLoadPlan(header), readTensorSource(file), "llama")).weights;
}

describe("exact-kernel probe (llama numerics)", () => {
  it.skipIf(reason !== undefined)(
    "moves Q4_K to the exact kernel when the native one differs by one ulp, keeps it when exact",
    async () => {
      const weights = await q4kWeights();
      const exact = typescriptProviders("llama", [])[0]!;
      const oneUlpOff: MatmulProvider = {
        name: "fake-native-off",
        priority: 100,
        numerics: "llama",
        supports: (t) => exact.supports(t),
        matmulBTQuantGrouped(args) {
          const y = exact.matmulBTQuantGrouped(args);
          const bits = new Uint32Array(y.buffer, y.byteOffset, 1);
          bits[0] = bits[0]! + 1; // one ulp on one output
          return y;
        },
      };
      const sameBits: MatmulProvider = {
        name: "fake-native-exact",
        priority: 100,
        numerics: "llama",
        supports: (t) => exact.supports(t),
        matmulBTQuantGrouped: (args) => exact.matmulBTQuantGrouped(args),
      };
      const q4k = allMatrices(weights).filter((w) => w.typeName === "Q4_K");
      expect(q4k.length).toBeGreaterThan(0);
      for (const [fake, moved] of [
        [oneUlpOff, true],
        [sameBits, false],
      ] as const) {
        const byWeight = new Map<PackedMatrix, MatmulProvider>(allMatrices(weights).map((w) => [w, fake]));
        const opProviders: Record<string, string> = { "matmul:Q4_K": fake.name };
        const diagnostics: string[] = [];
        probeExactKernels(weights, byWeight, opProviders, [exact], diagnostics);
        expect(q4k.every((w) => byWeight.get(w) === (moved ? exact : fake))).toBe(true);
        expect(opProviders["matmul:Q4_K"]).toBe(moved ? exact.name : fake.name);
        expect(diagnostics.some((d) => d.includes("Q4_K") && d.includes("not bit-exact"))).toBe(moved);
        // other types are never touched
        expect(
          allMatrices(weights)
            .filter((w) => w.typeName !== "Q4_K")
            .every((w) => byWeight.get(w) === fake),
        ).toBe(true);
      }
    },
  );
});
