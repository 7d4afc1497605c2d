import { mkdtempSync, rmSync } from "node:fs";
import { open } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import {
  describeQwen3,
  encodeGgufHeader,
  GgmlType,
  type GgufFile,
  parseQwen3Config,
  QWEN3_0_6B_SHAPE,
  qwen3Metadata,
  readGguf,
} from "@keepquant/gguf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { customDevice, planResidency, type ResidencyPlan, type ResidencyPlanInput } from "./index.js";

const GB = 1e9;
const dir = mkdtempSync(path.join(tmpdir(), "kq-planner-qwen3-"));
const file = path.join(dir, "qwen3-0.6b-q8_0-class.gguf");
let header: GgufFile;

beforeAll(async () => {
  // a header-only (sparse) Qwen3-0.6B: the real shapes, matrices Q8_0, norms F32, tied head, no tensor bytes
  const metadata = qwen3Metadata(QWEN3_0_6B_SHAPE);
  const config = parseQwen3Config({ metadata: new Map(metadata.map((e) => [e.key, e])) });
  const d = describeQwen3(config, QWEN3_0_6B_SHAPE.vocab);
  const tensors = [...d.global, ...d.layers.flatMap((l) => l.tensors)]
    .filter((t) => t.name !== "output.weight")
    .map((t) => ({ name: t.name, type: t.ne.length > 1 ? GgmlType.Q8_0 : GgmlType.F32, ne: t.ne }));
  const encoded = encodeGgufHeader({ metadata, tensors });
  const handle = await open(file, "w");
  try {
    await handle.write(encoded.header, 0, encoded.header.length, 0);
    await handle.truncate(encoded.dataOffset + encoded.dataBytes);
  } finally {
    await handle.close();
  }
  header = await readGguf(file);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const planWith = (input: ResidencyPlanInput): ResidencyPlan => planResidency(header, { env: {}, ...input });

describe("qwen3 0.6B (header-only Q8_0-class file)", () => {
  it("counts 0.60 B matrix parameters (0.44 B without the tied embedding), 28 attention layers and no GDN state", () => {
    const plan = planWith({ device: customDevice(4 * GB), contextLength: 4096 });
    expect(plan.model).toMatchObject({ nLayer: 28, attentionLayers: 28, gdnLayers: 0, tiedHead: true, mtpLayers: 0 });
    expect(plan.model.matrixParameters / 1e9).toBeCloseTo(0.596, 3);
    expect((plan.model.matrixParameters - 151_936 * 1024) / 1e9).toBeCloseTo(0.44, 2);
    // 28 layers x 8 KV heads x 128 x (K + V) x f16 x 4096 tokens
    expect(plan.classes.find((c) => c.id === "kvCache")!.bytes).toBe(28 * 8 * 128 * 2 * 2 * 4096);
    expect(plan.classes.find((c) => c.id === "gdnState")?.bytes ?? 0).toBe(0);
    expect(plan.fits).toBe(true);
  });

  it("does not fit 0.5 GB, and says how much it needs", () => {
    const plan = planWith({ device: customDevice(0.5 * GB), contextLength: 4096 });
    expect(plan.fits).toBe(false);
    expect(plan.verdict).toMatch(/^does not fit: needs \d+\.\d\d GiB/);
  });
});
