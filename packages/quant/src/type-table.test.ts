import { describe, expect, it } from "vitest";
import { GGML_TYPE_TRAITS, GGML_TYPES, GgmlType, ggmlTypeLabel } from "@keepquant/gguf";
import {
  isKeepQuantEncoding,
  KEEPQUANT_ENCODINGS,
  LLAMA_VEC_DOT_TYPES,
  LLAMA_WEIGHT_TYPES,
  llamaVecDotType,
  UnsupportedGgmlTypeError,
  vecDotLlamaReference,
} from "./index.js";

// Every list of types in this package is derived from gguf's GGML_TYPE_TRAITS: these fail when one
// drifts from the table.
describe("lists derived from gguf's type table", () => {
  it("KEEPQUANT_ENCODINGS is exactly the table's keepQuantRegistered types, by name", () => {
    const registered = GGML_TYPES.filter((t) => GGML_TYPE_TRAITS[t].keepQuantRegistered);
    expect([...KEEPQUANT_ENCODINGS].sort((a, b) => a - b)).toEqual(registered);
    expect(KEEPQUANT_ENCODINGS.map(ggmlTypeLabel)).toEqual(registered.map(ggmlTypeLabel).sort());
    for (const t of GGML_TYPES) expect(isKeepQuantEncoding(t), ggmlTypeLabel(t)).toBe(GGML_TYPE_TRAITS[t].keepQuantRegistered);
  });

  it("LLAMA_VEC_DOT_TYPES gives every weight type with a dot kernel the table's vecDotType", () => {
    expect(Object.keys(LLAMA_VEC_DOT_TYPES).map(Number)).toEqual(LLAMA_WEIGHT_TYPES);
    for (const t of LLAMA_WEIGHT_TYPES) {
      expect(GGML_TYPE_TRAITS[t].vecDotType, ggmlTypeLabel(t)).toBeDefined();
      expect(LLAMA_VEC_DOT_TYPES[t], ggmlTypeLabel(t)).toBe(GGML_TYPE_TRAITS[t].vecDotType);
      expect(llamaVecDotType(t)).toBe(GGML_TYPE_TRAITS[t].vecDotType);
    }
  });

  it("the reference's dot kernels are exactly LLAMA_WEIGHT_TYPES (ascending); every other type is refused", () => {
    expect([...LLAMA_WEIGHT_TYPES]).toEqual([...LLAMA_WEIGHT_TYPES].sort((a, b) => a - b));
    const bytes = new Uint8Array(4096);
    for (const t of GGML_TYPES) {
      if (LLAMA_WEIGHT_TYPES.includes(t)) {
        const act = llamaVecDotType(t);
        const k = Math.max(GGML_TYPE_TRAITS[t].blockSize, GGML_TYPE_TRAITS[act].blockSize);
        expect(vecDotLlamaReference(t, k, bytes, 0, bytes, 0), ggmlTypeLabel(t)).toBe(0);
      } else {
        expect(() => llamaVecDotType(t), ggmlTypeLabel(t)).toThrow(UnsupportedGgmlTypeError);
        expect(() => vecDotLlamaReference(t, 256, bytes, 0, bytes, 0), ggmlTypeLabel(t)).toThrow(UnsupportedGgmlTypeError);
      }
    }
    // the ones llama.cpp's CPU backend dots that the reference does not implement (yet)
    expect(
      GGML_TYPES.filter((t) => GGML_TYPE_TRAITS[t].vecDotType !== undefined && !LLAMA_WEIGHT_TYPES.includes(t)).length,
    ).toBeGreaterThan(0);
    expect(LLAMA_WEIGHT_TYPES).toContain(GgmlType.Q4_K);
  });
});
