import { describe, expect, it } from "vitest";
import { GGML_TYPE_TRAITS, GgmlType, ggmlTypeLabel, isGgmlType } from "./index.js";

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
