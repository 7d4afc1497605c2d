import { describe, expect, it } from "vitest";
import {
  QWEN35_0_8B_SHAPE,
  QWEN35_27B_SHAPE,
  describeQwen35,
  parseQwen35Config,
  qwen35ExpectedTensors,
  readGguf,
  synthesizeQwen35HeaderSource,
} from "../index.js";

async function configOf(spec: typeof QWEN35_0_8B_SHAPE) {
  return parseQwen35Config(await readGguf(synthesizeQwen35HeaderSource(spec)));
}

describe("the model description (describeQwen35)", () => {
  it("0.8B: named dimensions are the hyperparameters and the sizes derived from them once", async () => {
    const c = await configOf(QWEN35_0_8B_SHAPE);
    const d = describeQwen35(c, 248320);
    expect(d.dims).toMatchObject({
      nEmbd: 1024,
      nVocab: 248320,
      qDim: 2 * c.headCount * c.headDim,
      kvDim: c.headCountKv * c.headDim,
      attnOutDim: c.headCount * c.headDim,
      convDim: 6144,
      ehProjIn: 2048,
      convStateElements: 6144 * (c.ssmConvKernel - 1),
      ssmStateElements: c.ssmTimeStepRank * c.headVDim * c.ssmStateSize,
    });
    expect(d.attentionLayers).toBe(6);
    expect(d.gdnLayers).toBe(18);
  });

  it("every layer is a token mixer plus an FFN, and the cache planes follow the mixers", async () => {
    const c = await configOf({ ...QWEN35_0_8B_SHAPE, mtp: true });
    const d = describeQwen35(c, 1000);
    expect(d.layers.map((l) => l.mixer)).toEqual([...c.layerKinds, "attention"]);
    expect(d.layers.every((l) => l.ffn === "dense")).toBe(true);
    const attention = d.layers.filter((l) => l.mixer === "attention").map((l) => l.cacheIndex);
    expect(attention).toEqual(attention.map((_, i) => i)); // the MTP block's KV plane follows the trunk's
    const gdn = d.layers.filter((l) => l.mixer === "gdn").map((l) => l.cacheIndex);
    expect(gdn).toEqual(gdn.map((_, i) => i));
    const mtp = d.layers.at(-1)!;
    expect(mtp.role).toBe("mtp");
    expect(mtp.tensors.find((t) => t.slot === "nextn.shared_head_head")).toMatchObject({ optional: true, fallback: "output" });
    // a mixer's tensors are its own: no GDN slot in an attention layer and the reverse
    for (const l of d.layers) {
      const slots = l.tensors.map((t) => t.slot);
      expect(slots.includes("attn_q"), `blk.${l.index}`).toBe(l.mixer === "attention");
      expect(slots.includes("ssm_a"), `blk.${l.index}`).toBe(l.mixer === "gdn");
    }
  });

  it("each tensor's ne is the value of its named dims, and the expected tensors are the description flattened", async () => {
    const c = await configOf(QWEN35_27B_SHAPE);
    const d = describeQwen35(c, 248320);
    const all = [...d.global, ...d.layers.flatMap((l) => l.tensors)];
    for (const t of all) expect(t.ne, t.name).toEqual(t.dims.map((name) => d.dims[name]));
    expect(qwen35ExpectedTensors(c, 248320)).toEqual(all);
    const q = all.find((t) => t.name === "blk.3.attn_q.weight")!;
    expect(q).toMatchObject({ field: "q", dims: ["nEmbd", "qDim"], ne: [5120, 2 * 24 * 256] });
    const conv = all.find((t) => t.name === "blk.0.ssm_conv1d.weight")!;
    expect(conv).toMatchObject({ field: "conv", requiresF32: true, ne: [4, c.convDim] });
    expect(all.find((t) => t.name === "blk.0.ssm_dt.bias")?.slot).toBe("ssm_dt");
    expect(all.find((t) => t.name === "blk.0.ssm_a")?.slot).toBe("ssm_a");
  });
});
