import { describe, expect, it } from "vitest";
import {
  ARCHITECTURES,
  GgmlType,
  Qwen35ConfigError,
  QWEN3_0_6B_SHAPE,
  QWEN3_TEST_SHAPE,
  architectureOf,
  buildLoadPlan,
  describeQwen3,
  gguf,
  parseQwen3Config,
  qwen3Metadata,
  readGguf,
  synthesizeQwen3,
  tensorByteLength,
  writeGguf,
  type GgufMetadataEntry,
  type Qwen3Spec,
} from "../index.js";
import { qwen3SpecLayout } from "./synthetic.js";

const TINY: Qwen3Spec = { ...QWEN3_TEST_SHAPE, vocab: 300, hidden: 64, ffn: 96, headDim: 32, name: "tiny-qwen3" };

const entries = (m: GgufMetadataEntry[]) => ({ metadata: new Map(m.map((e) => [e.key, e])) });
const without = (key: string) => qwen3Metadata(TINY).filter((e) => e.key !== key);
const replaced = (entry: GgufMetadataEntry) => [...without(entry.key), entry];

/** A zero-filled file of the spec, its tensor list edited before writing. */
async function file(spec: Qwen3Spec, edit: (tensors: { name: string; type: GgmlType; ne: number[] }[]) => void = () => {}) {
  const { metadata, tensors } = qwen3SpecLayout(spec);
  const list = tensors.map((t) => ({ name: t.name, type: GgmlType.F32, ne: [...t.ne] }));
  edit(list);
  return readGguf(writeGguf({ metadata, tensors: list.map((t) => ({ ...t, data: new Uint8Array(tensorByteLength(t)) })) }));
}

function configError(m: GgufMetadataEntry[]): Qwen35ConfigError {
  try {
    parseQwen3Config(entries(m));
  } catch (error) {
    expect(error).toBeInstanceOf(Qwen35ConfigError);
    return error as Qwen35ConfigError;
  }
  return expect.fail("parseQwen3Config accepted the metadata");
}

describe("qwen3: config, description and load plan", () => {
  it("is registered: general.architecture qwen3 chooses its entry", () => {
    expect(ARCHITECTURES["qwen3"]!.name).toBe("qwen3");
    expect(architectureOf(entries(qwen3Metadata(TINY))).name).toBe("qwen3");
  });

  it("parses the hyperparameters: every layer attention, no GDN, no MoE, no MTP", () => {
    const c = parseQwen3Config(entries(qwen3Metadata(QWEN3_0_6B_SHAPE)));
    expect(c).toMatchObject({
      architecture: "qwen3",
      blockCount: 28,
      nLayer: 28,
      nextnPredictLayers: 0,
      embeddingLength: 1024,
      feedForwardLength: 3072,
      headCount: 16,
      headCountKv: 8,
      headDim: 128,
      ropeDimensionCount: 128,
      ropeFreqBase: 1_000_000,
      moe: undefined,
      vocabSize: 151_936,
    });
    expect(c.layerKinds.every((k) => k === "attention")).toBe(true);
  });

  it("takes llama.cpp's defaults for the optional keys", () => {
    const m = qwen3Metadata({ ...TINY, headDim: 16, headsKv: 4 }).filter(
      (e) => !/attention\.(head_count_kv|key_length|value_length)$|rope\.(dimension_count|freq_base)$/.test(e.key),
    );
    const c = parseQwen3Config(entries(m));
    expect(c).toMatchObject({ headCountKv: 4, headDim: 16, ropeDimensionCount: 16, ropeFreqBase: 10_000 });
  });

  it("refuses missing and bad keys with typed errors naming the key", () => {
    expect(configError(without("qwen3.block_count"))).toMatchObject({ code: "QWEN35_MISSING_KEY", field: "qwen3.block_count" });
    expect(configError(without("qwen3.attention.layer_norm_rms_epsilon")).code).toBe("QWEN35_MISSING_KEY");
    expect(configError(replaced(gguf.f32("qwen3.embedding_length", 64)))).toMatchObject({
      code: "QWEN35_BAD_KEY_TYPE",
      field: "qwen3.embedding_length",
    });
    expect(configError(replaced(gguf.u32("qwen3.attention.head_count_kv", 3)))).toMatchObject({
      code: "QWEN35_BAD_VALUE",
      field: "qwen3.attention.head_count_kv",
    });
    expect(configError(replaced(gguf.u32("qwen3.attention.value_length", 16))).field).toBe("qwen3.attention.value_length");
    expect(configError(replaced(gguf.u32("qwen3.rope.dimension_count", 33))).field).toBe("qwen3.rope.dimension_count");
    expect(configError(replaced(gguf.u32("qwen3.feed_forward_length", 0))).code).toBe("QWEN35_BAD_VALUE");
    expect(configError(replaced(gguf.f32("qwen3.rope.freq_base", -1))).code).toBe("QWEN35_BAD_VALUE");
    expect(configError(replaced(gguf.str("general.architecture", "llama"))).code).toBe("QWEN35_WRONG_ARCHITECTURE");
    const m = without("qwen3.attention.key_length").filter((e) => e.key !== "qwen3.attention.value_length");
    expect(configError([...m.filter((e) => e.key !== "qwen3.embedding_length"), gguf.u32("qwen3.embedding_length", 65)]).field).toBe(
      "qwen3.embedding_length",
    );
  });

  it("describes every layer as the ungated attention mixer with the dense FFN, attn_q [D, H Dh]", () => {
    const c = parseQwen3Config(entries(qwen3Metadata(QWEN3_0_6B_SHAPE)));
    const d = describeQwen3(c, 151_936);
    expect(d.architecture).toBe("qwen3");
    expect(d.dims).toMatchObject({ qDim: 2048, attnOutDim: 2048, kvDim: 1024, nRot: 128, convDim: 0, ssmStateElements: 0 });
    expect(d.attentionLayers).toBe(28);
    expect(d.gdnLayers).toBe(0);
    expect(d.layers.every((l) => l.mixer === "attention_ungated" && l.ffn === "dense_ffn_norm" && l.role === "trunk")).toBe(true);
    expect(d.layers.map((l) => l.cacheIndex)).toEqual(Array.from({ length: 28 }, (_, i) => i));
    expect(d.layers[3]!.tensors.map((t) => [t.name, t.ne])).toEqual([
      ["blk.3.attn_norm.weight", [1024]],
      ["blk.3.attn_q.weight", [1024, 2048]],
      ["blk.3.attn_k.weight", [1024, 1024]],
      ["blk.3.attn_v.weight", [1024, 1024]],
      ["blk.3.attn_q_norm.weight", [128]],
      ["blk.3.attn_k_norm.weight", [128]],
      ["blk.3.attn_output.weight", [2048, 1024]],
      ["blk.3.ffn_norm.weight", [1024]],
      ["blk.3.ffn_gate.weight", [1024, 3072]],
      ["blk.3.ffn_up.weight", [1024, 3072]],
      ["blk.3.ffn_down.weight", [3072, 1024]],
    ]);
  });

  it("load plan, tied head: every tensor used, the head is token_embd", async () => {
    const plan = buildLoadPlan(await file(TINY));
    expect(plan.ok).toBe(true);
    expect(plan.tiedHead).toBe(true);
    expect(plan.config.architecture).toBe("qwen3");
    expect(plan.skipped).toEqual([]);
    expect(plan.used).toHaveLength(2 + 4 * 11);
    expect(plan.diagnostics.map((d) => d.code)).toContain("TIED_HEAD");
  });

  it("load plan, untied head: output.weight used", async () => {
    const plan = buildLoadPlan(await file({ ...TINY, tied: false }));
    expect(plan.ok).toBe(true);
    expect(plan.tiedHead).toBe(false);
    expect(plan.used.map((t) => t.name)).toContain("output.weight");
  });

  it("load plan refuses a gated attn_q (qwen35's [D, 2 H Dh]) and a missing q norm, naming them", async () => {
    const plan = buildLoadPlan(
      await file(TINY, (list) => {
        list.find((t) => t.name === "blk.1.attn_q.weight")!.ne = [64, 256];
        list.splice(
          list.findIndex((t) => t.name === "blk.2.attn_q_norm.weight"),
          1,
        );
      }),
    );
    expect(plan.ok).toBe(false);
    expect(plan.refused.map((r) => r.name).sort()).toEqual(["blk.1.attn_q.weight", "blk.2.attn_q_norm.weight"]);
  });

  it("the synthesizer is deterministic per seed", async () => {
    const a = synthesizeQwen3(TINY);
    expect(synthesizeQwen3(TINY)).toEqual(a);
    expect(synthesizeQwen3({ ...TINY, seed: 2 })).not.toEqual(a);
    const plan = buildLoadPlan(await readGguf(a));
    expect(plan.ok).toBe(true);
  });
});
