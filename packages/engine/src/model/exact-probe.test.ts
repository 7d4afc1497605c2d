/**
 * The load-time kernel probe of `llama` numerics: a native kernel that differs from llama.cpp's in
 * one bit moves its type to the exact TypeScript kernel (said in diagnostics); an exact one stays.
 */
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { readGguf, buildLoadPlan } from "@keepquant/gguf";
import { llamaUnavailableReason, runOracle } from "@keepquant/oracle";
import { ensureFixture, fixtureTokenizerFromJson, parityFixture } from "@keepquant/fixtures";
import { readParityManifest } from "../parity/manifest.js";
import { probeExactKernels } from "./exact-probe.js";
import { loadQwen35Weights, readTensorSource } from "./load.js";
import type { MatmulProvider } from "./matmul.js";
import { allMatrices, typescriptProviders } from "./providers.js";
import type { PackedMatrix } from "./weights.js";

const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "..");
const CACHE_DIR = process.env.KEEPQUANT_FIXTURE_CACHE ?? path.join(REPO_ROOT, ".cache", "fixtures");
const manifest = readParityManifest(path.join(REPO_ROOT, "goldens", "parity", "manifest.json"));
const fixture = parityFixture("tied-4l-q4_k_m");
const oracleReason = llamaUnavailableReason();
const reason =
  fs.existsSync(path.join(CACHE_DIR, fixture.file)) || !oracleReason ? undefined : `fixture not cached and no quantizer: ${oracleReason}`;

async function q4kWeights() {
  const tokenizer = fixtureTokenizerFromJson(JSON.parse(fs.readFileSync(path.join(REPO_ROOT, manifest.tokenizer.file), "utf8")));
  const file = await ensureFixture(fixture, {
    cacheDir: CACHE_DIR,
    tokenizer,
    quantize: async (input, output, weightType) =>
      void (await runOracle({ kind: "quantize", input, output, ftype: weightType, nthread: 2 })),
    expectedSha256: Object.fromEntries(manifest.fixtures.map((f) => [f.name, f.sha256])),
  });
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
