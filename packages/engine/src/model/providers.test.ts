/** Provider selection of the engine: quant's one interface, ranked by priority then name, per weight numerics. */
import { GgmlType, GGML_TYPE_TRAITS } from "@keepquant/gguf";
import type { MatmulNumerics, MatmulProvider } from "@keepquant/quant";
import { describe, expect, it } from "vitest";
import { syntheticWeights, TINY_SPEC } from "../testing/synthetic-model.js";
import { allMatrices, selectProviders, typescriptProviders } from "./providers.js";
import type { PackedMatrix } from "./weights.js";

function fake(name: string, priority: number, numerics: MatmulNumerics, types: readonly GgmlType[]): MatmulProvider {
  return {
    name,
    priority,
    numerics,
    supports: (type) => types.includes(type),
    matmulBTQuantGrouped: () => {
      throw new Error("not called");
    },
  };
}

/** The tiny model with ffn_up of every layer pretending to be Q8_0 (a registered encoding). */
async function mixedWeights() {
  const weights = await syntheticWeights(TINY_SPEC, { seed: 11 });
  for (const layer of weights.layers) {
    const up = layer.ffnUp;
    const rowBytes = (up.cols / 32) * GGML_TYPE_TRAITS[GgmlType.Q8_0].typeSize;
    const q8: PackedMatrix = { ...up, type: GgmlType.Q8_0, typeName: "Q8_0", rowBytes, data: new Uint8Array(up.rows * rowBytes) };
    (layer as { ffnUp: PackedMatrix }).ffnUp = q8;
  }
  return weights;
}

describe("selectProviders", () => {
  it("takes the highest priority, then the first name, whatever order the candidates come in", async () => {
    const weights = await mixedWeights();
    const all = [GgmlType.F32, GgmlType.Q8_0];
    const candidates = [
      fake("ts", 0, "llama", all),
      fake("native-b", 100, "llama", all),
      fake("native-a", 100, "llama", all),
      fake("wasm", 10, "llama", all),
    ];
    for (const order of [candidates, [...candidates].reverse()]) {
      const { byWeight, opProviders } = selectProviders(weights, order, "llama");
      expect(opProviders).toEqual({ "matmul:F32": "native-a", "matmul:Q8_0": "native-a" });
      expect(allMatrices(weights).every((w) => byWeight.get(w)!.name === "native-a")).toBe(true);
    }
  });

  it("a bf16 model runs registered encodings on a bf16 provider and every other type on a llama provider", async () => {
    const weights = await mixedWeights();
    const candidates = [
      fake("contract", 100, "bf16", [GgmlType.Q8_0, GgmlType.F32]),
      fake("llama", 50, "llama", [GgmlType.Q8_0, GgmlType.F32]),
    ];
    const { byWeight, opProviders } = selectProviders(weights, candidates, "bf16");
    expect(opProviders).toEqual({ "matmul:F32": "llama", "matmul:Q8_0": "contract" });
    for (const w of allMatrices(weights)) expect(byWeight.get(w)!.name).toBe(w.type === GgmlType.Q8_0 ? "contract" : "llama");
    // the TypeScript tier offers exactly that split
    const ts = selectProviders(weights, typescriptProviders("bf16", []), "bf16").opProviders;
    expect(ts).toEqual({ "matmul:F32": "ts-reference-llama", "matmul:Q8_0": "ts-reference-bf16" });
  });

  it("refuses a type nobody computes in its numerics, naming the weight and every provider tried", async () => {
    const weights = await mixedWeights();
    const candidates = [fake("f32-only", 100, "llama", [GgmlType.F32]), fake("q8-bf16", 100, "bf16", [GgmlType.Q8_0])];
    let error: unknown;
    try {
      selectProviders(weights, candidates, "llama");
    } catch (caught) {
      error = caught;
    }
    expect(error).toMatchObject({ code: "ENGINE_UNSUPPORTED_TYPE", field: "blk.0.ffn_up.weight" });
    expect((error as Error).message).toContain(
      "Q8_0 (blk.0.ffn_up.weight, blk.1.ffn_up.weight, blk.2.ffn_up.weight, ...) in llama numerics",
    );
    expect((error as Error).message).toContain("providers tried: f32-only (llama, priority 100), q8-bf16 (bf16, priority 100)");
    expect(() => selectProviders(weights, [...candidates, fake("f32-only", 0, "llama", [])], "llama")).toThrow(
      /two providers are named "f32-only"/,
    );
  });
});
