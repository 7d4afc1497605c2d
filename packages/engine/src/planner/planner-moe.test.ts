import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { QWEN35_35B_A3B_SHAPE, qwen35Q4KMClassMix, readGguf, writeQwen35HeaderOnly, type GgufFile } from "@keepquant/gguf";
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
