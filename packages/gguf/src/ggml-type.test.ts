import { describe, expect, it } from "vitest";
import { GGML_TYPE_TRAITS, GGML_TYPES, GgmlType, ggmlTypeLabel, ggmlVecDotType, isGgmlType } from "./index.js";

describe("ggml type ids", () => {
  it("labels live ids by ggml's name and anything else as unknown, naming the id", () => {
    expect(ggmlTypeLabel(GgmlType.Q4_K)).toBe("Q4_K");
    expect(ggmlTypeLabel(GgmlType.F32)).toBe("F32");
    for (const id of Object.keys(GGML_TYPE_TRAITS).map(Number) as GgmlType[]) expect(ggmlTypeLabel(id)).toBe(GGML_TYPE_TRAITS[id].name);
    // 4 and 5 are retired (Q4_2, Q4_3): never live again
    for (const id of [4, 5, -1, 1.5, 1000]) {
      expect(isGgmlType(id)).toBe(false);
      expect(ggmlTypeLabel(id)).toBe(`<unknown ggml type id ${id}>`);
    }
  });
});

describe("the per-type table", () => {
  const types = Object.keys(GGML_TYPE_TRAITS).map(Number) as GgmlType[];
  const activationEncodings = [GgmlType.F32, GgmlType.F16, GgmlType.BF16, GgmlType.Q8_0, GgmlType.Q8_1, GgmlType.Q8_K];

  it("GGML_TYPES lists every live id once, ascending", () => {
    expect(GGML_TYPES).toEqual([...types].sort((a, b) => a - b));
  });

  it("registers exactly Q4_K, Q5_K, Q6_K and Q8_0 for the keep-quant contract", () => {
    expect(types.filter((t) => GGML_TYPE_TRAITS[t].keepQuantRegistered).map(ggmlTypeLabel)).toEqual(["Q8_0", "Q4_K", "Q5_K", "Q6_K"]);
  });

  it("vecDotType names an activation encoding whose blocks tile the weight's, and activation encodings dot with themselves", () => {
    for (const t of types) {
      const act = ggmlVecDotType(t);
      if (act === undefined) continue;
      expect(activationEncodings, ggmlTypeLabel(t)).toContain(act);
      expect(GGML_TYPE_TRAITS[t].blockSize % GGML_TYPE_TRAITS[act].blockSize, ggmlTypeLabel(t)).toBe(0);
      // float weights dot against their own encoding; every quantized weight against a quantized one
      expect(GGML_TYPE_TRAITS[act].isQuantized, ggmlTypeLabel(t)).toBe(GGML_TYPE_TRAITS[t].isQuantized);
    }
    for (const t of [GgmlType.F32, GgmlType.F16, GgmlType.BF16, GgmlType.Q8_0]) expect(ggmlVecDotType(t)).toBe(t);
    // ggml-cpu has no vec_dot for these
    for (const t of [GgmlType.Q8_1, GgmlType.Q8_K, GgmlType.I8, GgmlType.I16, GgmlType.I32, GgmlType.I64, GgmlType.F64])
      expect(ggmlVecDotType(t), ggmlTypeLabel(t)).toBeUndefined();
  });

  it("gives ggml-cpu's vec_dot_type of the K-quants, IQ and legacy quants", () => {
    const byAct = (act: GgmlType) => types.filter((t) => ggmlVecDotType(t) === act).map(ggmlTypeLabel);
    expect(byAct(GgmlType.Q8_0)).toEqual(["Q4_0", "Q5_0", "Q8_0", "IQ4_NL", "MXFP4", "NVFP4", "Q1_0", "Q2_0"]);
    expect(byAct(GgmlType.Q8_1)).toEqual(["Q4_1", "Q5_1"]);
    expect(byAct(GgmlType.Q8_K)).toEqual([
      "Q2_K",
      "Q3_K",
      "Q4_K",
      "Q5_K",
      "Q6_K",
      "IQ2_XXS",
      "IQ2_XS",
      "IQ3_XXS",
      "IQ1_S",
      "IQ3_S",
      "IQ2_S",
      "IQ4_XS",
      "IQ1_M",
      "TQ1_0",
      "TQ2_0",
    ]);
  });
});
