import { describe, expect, it } from "vitest";
import { EngineLoadError } from "../errors.js";
import { planMappedRanges, rangedTensorBytes } from "./load.js";

const tensor = (name: string, offset: number, byteLength: number) => ({ name, offset, byteLength });

describe("planMappedRanges / rangedTensorBytes (files over one mapping)", () => {
  it("packs whole tensors, in file order, into ranges of at most maxBytes", () => {
    const tensors = [tensor("c", 250, 100), tensor("a", 32, 100), tensor("b", 160, 80), tensor("d", 352, 10), tensor("empty", 400, 0)];
    expect(planMappedRanges(tensors, 220)).toEqual([
      { offset: 32, length: 208 }, // a [32, 132) + b [160, 240)
      { offset: 250, length: 112 }, // c [250, 350) + d [352, 362)
    ]);
  });

  it("refuses a tensor larger than one range", () => {
    expect(() => planMappedRanges([tensor("huge", 0, 300)], 200)).toThrow(EngineLoadError);
    expect(() => planMappedRanges([tensor("huge", 0, 300)], 200)).toThrow(/huge is 300 B/);
  });

  it("serves each tensor as a view of its range's buffer at the right place", async () => {
    const file = new Uint8Array(400).map((_, i) => i & 0xff);
    const tensors = [tensor("a", 32, 100), tensor("b", 160, 80), tensor("c", 250, 100)];
    const ranges = planMappedRanges(tensors, 220);
    const bytes = rangedTensorBytes(ranges.map((r) => ({ ...r, buffer: file.slice(r.offset, r.offset + r.length).buffer })));
    for (const t of tensors) {
      const view = await bytes({ ...t, type: 0, ne: [t.byteLength / 4], infoOffset: 0 } as never);
      expect([...view]).toEqual([...file.subarray(t.offset, t.offset + t.byteLength)]);
    }
    expect(() => bytes({ ...tensor("stray", 390, 20), type: 0, ne: [5], infoOffset: 0 } as never)).toThrow(/in no mapped range/);
  });
});
