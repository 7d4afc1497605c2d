import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import {
  GgmlType,
  QWEN35_35B_A3B_SHAPE,
  QWEN35_122B_A10B_SHAPE,
  QWEN35_397B_A17B_SHAPE,
  qwen35Q4KMClassMix,
  readGguf,
  writeQwen35HeaderOnly,
  type GgufFile,
} from "@keepquant/gguf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { customDevice, planResidency, ttDevice, type ResidencyPlan, type ResidencyPlanInput } from "./index.js";

const GB = 1e9;
const dir = mkdtempSync(path.join(tmpdir(), "kq-planner-moe-"));
const file = path.join(dir, "qwen35moe-35b-a3b-q4_k_m-class.gguf");
let header: GgufFile;

beforeAll(async () => {
  // a header-only (sparse) 35B-A3B: the real per-layer shapes, a Q4_K_M-class type mix, no tensor bytes
  await writeQwen35HeaderOnly(file, QWEN35_35B_A3B_SHAPE, { types: qwen35Q4KMClassMix(41, false) });
  header = await readGguf(file);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const planWith = (input: ResidencyPlanInput): ResidencyPlan => planResidency(header, { env: {}, ...input });

describe("qwen35moe 35B-A3B (header-only Q4_K_M-class file)", () => {
  it("is 21.7 GB; the planner counts its expert tower as packed words, and its KV and GDN state as for qwen35", () => {
    expect(header.fileSize / GB).toBeCloseTo(21.71, 1);
    const plan = planWith({ device: customDevice(24 * GB), contextLength: 4096 });
    const packed = plan.classes.find((c) => c.id === "packed")!;
    // every routed and shared expert tensor of the 40 trunk layers is kept packed
    const experts = header.tensors.filter((t) => /^blk\.(\d|[1-3]\d)\.ffn_(gate|up|down)_(exps|shexp)\.weight$/.test(t.name));
    expect(experts).toHaveLength(40 * 6);
    expect(packed.bytes).toBeGreaterThan(experts.reduce((a, t) => a + t.byteLength, 0));
    // 10 attention layers x 2 KV heads x 256 x (K + V) x f16
    expect(plan.classes.find((c) => c.id === "kvCache")!.bytes).toBe(10 * 2 * 256 * 2 * 2 * 4096);
  });

  it("fits a 24 GB CPU and a tt-p150, not a tt-n150 (with the device and quantization that would make it fit)", () => {
    expect(planWith({ device: customDevice(24 * GB), contextLength: 4096 }).fits).toBe(true);
    const p150 = planWith({ device: ttDevice("tt-p150"), contextLength: 4096 });
    expect(p150.fits).toBe(true);
    const n150 = planWith({ device: ttDevice("tt-n150"), contextLength: 4096 });
    expect(n150.fits).toBe(false);
    expect(n150.verdict).toMatch(/^does not fit: needs \d+\.\d\d GiB, tt-n150 has 11\.18 GiB; largest items: packed matmul weights/);
    expect(n150.suggestions.map((s) => s.kind)).toEqual(["device", "quantization"]);
  });
});

describe("qwen35moe on a TT device: the F32 routers are not outside the contract", () => {
  it("a Q4_K_M-class 35B-A3B on tt-p150 has no OUTSIDE_CONTRACT warning (its F32 ffn_gate_inp matrices are plain f32, not packed words)", () => {
    const plan = planWith({ device: ttDevice("tt-p150"), contextLength: 4096 });
    expect(header.tensors.filter((t) => t.name.endsWith(".ffn_gate_inp.weight")).every((t) => t.type === GgmlType.F32)).toBe(true);
    expect(plan.warnings.map((w) => w.code)).not.toContain("OUTSIDE_CONTRACT");
  });

  it("a packed encoding the contract does not register still warns, and the warning names it, not F32", async () => {
    const other = path.join(dir, "qwen35moe-35b-a3b-q3_k-experts.gguf");
    const mix = qwen35Q4KMClassMix(41, false);
    await writeQwen35HeaderOnly(other, QWEN35_35B_A3B_SHAPE, {
      types: (t) => (t.name.endsWith("_exps.weight") ? GgmlType.Q3_K : mix(t)),
    });
    const plan = planResidency(await readGguf(other), { env: {}, device: ttDevice("tt-p150"), contextLength: 4096 });
    const warning = plan.warnings.find((w) => w.code === "OUTSIDE_CONTRACT");
    expect(warning?.message).toMatch(/Q3_K/);
    expect(warning?.message).not.toMatch(/F32/);
    rmSync(other);
  });
});

describe("the 122B-A10B and 397B-A17B presets (header-only Q4_K_M-class files): honest does-not-fit answers", () => {
  const presets = [
    { name: "122B-A10B", shape: QWEN35_122B_A10B_SHAPE, params: 122e9 },
    { name: "397B-A17B", shape: QWEN35_397B_A17B_SHAPE, params: 397e9 },
  ];
  for (const preset of presets) {
    it(`${preset.name}: about ${preset.params / 1e9}e9 weights; does not fit a 24 GB CPU nor any TT device, with suggestions`, async () => {
      const file = path.join(dir, `qwen35moe-${preset.name}.gguf`);
      const layers = preset.shape.layers + (preset.shape.mtp ? 1 : 0);
      await writeQwen35HeaderOnly(file, preset.shape, { types: qwen35Q4KMClassMix(layers, false) });
      const big = await readGguf(file);
      const weights = big.tensors.reduce((a, t) => a + t.elements, 0);
      expect(weights / preset.params).toBeGreaterThan(0.95);
      expect(weights / preset.params).toBeLessThan(1.05);
      const cpu = planResidency(big, { env: {}, device: customDevice(24 * GB), contextLength: 4096 });
      expect(cpu.fits).toBe(false);
      expect(cpu.verdict).toMatch(/^does not fit: needs \d+\.\d\d GiB/);
      expect(cpu.suggestions.map((s) => s.kind)).toContain("memory");
      for (const device of ["tt-n150", "tt-n300", "tt-p150"] as const) {
        const tt = planResidency(big, { env: {}, device: ttDevice(device), contextLength: 4096 });
        expect(tt.fits, device).toBe(false);
        expect(tt.suggestions.length, device).toBeGreaterThan(0);
      }
      rmSync(file);
    });
  }
});

describe("qwen35moe on a TT device: the E = N arm in the trace region", () => {
  it("a decode step's programs count each routed-expert matmul once per selected expert, and the MoE FFN's own programs", async () => {
    const one = path.join(dir, "qwen35moe-35b-a3b-top1.gguf");
    await writeQwen35HeaderOnly(
      one,
      { ...QWEN35_35B_A3B_SHAPE, moe: { ...QWEN35_35B_A3B_SHAPE.moe!, used: 1 } },
      {
        types: qwen35Q4KMClassMix(41, false),
      },
    );
    const top8 = planWith({ device: ttDevice("tt-p150"), contextLength: 4096 }).traceRegion;
    const top1 = planResidency(await readGguf(one), { env: {}, device: ttDevice("tt-p150"), contextLength: 4096 }).traceRegion;
    expect(top8.policy).toBe("dynamic");
    // 40 layers x (3 expert matmuls (gate, up, down; each 512 x 2048 expert matrix one chunk) + 1 SwiGLU) x 7 more experts
    expect(top8.programs - top1.programs).toBe(40 * (3 + 1) * 7);
    expect(top8.bytes).toBeGreaterThan(top1.bytes);
    rmSync(one);
  });
});
