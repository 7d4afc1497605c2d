/**
 * The addon's kernel menu (kernelMenu(): per ISA level, the weight types with decode row kernels and with the
 * block kernels' register form), which the decode tuner reads instead of listing kernels itself. The addon
 * reads it from the same per-level kernel tables (CpuTypeTraits' vec_dot_rows, vec_dot_block_regs) its matmul
 * dispatches on; these tests hold it to the x86 build's kernels (the tuner tests' fixture) and check that the
 * tuner's candidates follow it.
 */
import fs from "node:fs";
import { createRequire } from "node:module";
import { GgmlType } from "@keepquant/gguf";
import { describe, expect, it } from "vitest";
import { nativeAddon } from "./index.js";
import type { NativeAddon } from "./native-types.js";
import { EMULATED, X86_KERNEL_MENU } from "./test-support.js";
import { candidateStages, DEFAULT_VARIANT, kernelMenuOf, tuneGroups } from "./tuner.js";

const addon = nativeAddon();

describe.skipIf(!addon)("the addon's kernel menu", () => {
  it("lists every level this CPU runs, in order, and only types with a matmul kernel", () => {
    const menu = addon!.kernelMenu();
    expect(menu.map((l) => l.isa)).toEqual(addon!.buildInfo().isaAvailable);
    const vecDot = new Set(
      addon!
        .supportedTypes()
        .filter((t) => t.vecDot)
        .map((t) => t.type),
    );
    for (const level of menu) {
      for (const type of [...level.rows, ...level.registers]) expect(vecDot.has(type), `${level.isa} ${type}`).toBe(true);
      expect([...level.rows]).toEqual([...level.rows].sort((a, b) => a - b));
      expect([...level.registers]).toEqual([...level.registers].sort((a, b) => a - b));
    }
  });

  it.skipIf(process.arch !== "x64")(
    "on x86-64: the row kernels of Q4_K, Q6_K and Q8_0 at avx2 and avx512, their register form at avx512",
    () => {
      const menu = addon!.kernelMenu();
      for (const level of menu) expect(level).toEqual(X86_KERNEL_MENU.find((l) => l.isa === level.isa));
      // the AVX-512 level, on a CPU without it: the emulated build's (emulated-avx512.test.ts)
      if (!menu.some((l) => l.isa === "avx512") && fs.existsSync(EMULATED)) {
        const emulated = createRequire(import.meta.url)(EMULATED) as NativeAddon;
        for (const level of emulated.kernelMenu()) expect(level).toEqual(X86_KERNEL_MENU.find((l) => l.isa === level.isa));
        expect(emulated.kernelMenu().map((l) => l.isa)).toContain("avx512");
      }
    },
  );

  it("the tuner times weight rows and prefetch only for the types the best level lists", () => {
    const levels = addon!.buildInfo().isaAvailable;
    const menu = kernelMenuOf(addon!);
    const best = addon!.kernelMenu().at(-1)!;
    for (const [type, rowBytes] of [
      [GgmlType.Q4_K, 576],
      [GgmlType.Q5_K, 704],
      [GgmlType.Q8_0, 1088],
    ] as const) {
      const group = tuneGroups([{ role: "layer", type, rows: 8192, cols: 1024, rowBytes, data: new Uint8Array(8192 * rowBytes) }])[0]!;
      const candidates = candidateStages(group, levels, 2, menu).flatMap((stage) => stage(DEFAULT_VARIANT));
      expect(
        candidates.some((v) => v.prefetch !== 0),
        group.typeName,
      ).toBe(best.rows.includes(type));
    }
  });
});
