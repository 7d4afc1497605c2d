import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { encodeStepDescriptor, renderStepDescriptorHeader, STEP_DESCRIPTOR, stepDescriptorLength } from "./step-descriptor.js";

const header = path.join(path.dirname(fileURLToPath(import.meta.url)), "model", "step_descriptor.h");

describe("the step descriptor: one schema, a generated C++ header", () => {
  it("the committed header is what the schema generates (run `pnpm --filter @keepquant/tt-native gen:step`)", () => {
    expect(fs.readFileSync(header, "utf8")).toBe(renderStepDescriptorHeader());
  });

  it("the header names every field at its schema offset", () => {
    const text = renderStepDescriptorHeader();
    STEP_DESCRIPTOR.entry.forEach((field, i) => {
      expect(text).toContain(`constexpr int kEntry${field[0]!.toUpperCase()}${field.slice(1)} = ${i};`);
    });
    expect(text).toContain(`constexpr int kEntryLength = ${STEP_DESCRIPTOR.entry.length};`);
    expect(text).toContain(`constexpr int kKindDrafter = ${STEP_DESCRIPTOR.kinds.drafter};`);
  });

  it("encodes entries as the schema lays them out (decoded here by the schema alone)", () => {
    const entries = [
      {
        tokens: [7, 8, -1],
        startPos: 4,
        stateSlot: 2,
        logitRows: [0, 2],
        blockTable: [5, 6],
        keepHidden: true,
        snapshotRow: 1,
        ropePositions: Int32Array.of(4, 4, 4, 5, 5, 5, 6, 6, 7),
        embeddingRows: [2],
      },
      { tokens: Int32Array.of(3), startPos: 0, stateSlot: 0, logitRows: [0], blockTable: [1], keepHidden: false, snapshotRow: -1 },
    ];
    const out = new Int32Array(stepDescriptorLength(entries));
    expect(encodeStepDescriptor("drafter", entries, out)).toBe(out.length);
    const h = (f: (typeof STEP_DESCRIPTOR.header)[number]) => out[STEP_DESCRIPTOR.header.indexOf(f)];
    expect(h("kind")).toBe(STEP_DESCRIPTOR.kinds.drafter);
    expect(h("entryCount")).toBe(2);
    let p = STEP_DESCRIPTOR.header.length;
    const decoded = [];
    for (let e = 0; e < 2; e++) {
      const fields = Object.fromEntries(STEP_DESCRIPTOR.entry.map((f, i) => [f, out[p + i]!]));
      p += STEP_DESCRIPTOR.entry.length;
      const arrays: Record<string, number[]> = {};
      for (const [name, lengthField] of STEP_DESCRIPTOR.arrays) {
        const n = fields[lengthField]!;
        arrays[name] = Array.from(out.subarray(p, p + n));
        p += n;
      }
      decoded.push({ fields, arrays });
    }
    expect(decoded[0]).toEqual({
      fields: {
        nTokens: 3,
        startPos: 4,
        stateSlot: 2,
        nLogitRows: 2,
        blockCount: 2,
        flags: STEP_DESCRIPTOR.flags.keepHidden,
        snapshotRow: 1,
        nRopePositions: 9,
        nEmbeddingRows: 1,
      },
      arrays: {
        tokens: [7, 8, -1],
        logitRows: [0, 2],
        blockTable: [5, 6],
        ropePositions: [4, 4, 4, 5, 5, 5, 6, 6, 7],
        embeddingRows: [2],
      },
    });
    expect(decoded[1]).toEqual({
      fields: {
        nTokens: 1,
        startPos: 0,
        stateSlot: 0,
        nLogitRows: 1,
        blockCount: 1,
        flags: 0,
        snapshotRow: -1,
        nRopePositions: 0,
        nEmbeddingRows: 0,
      },
      arrays: { tokens: [3], logitRows: [0], blockTable: [1], ropePositions: [], embeddingRows: [] },
    });
  });
});
