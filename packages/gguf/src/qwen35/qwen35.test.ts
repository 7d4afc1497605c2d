import { mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import {
  GgmlType,
  GgufError,
  GgufValueType,
  QWEN35_0_8B_SHAPE,
  QWEN35_27B_SHAPE,
  QWEN35_TEST_SHAPE,
  Qwen35ConfigError,
  assertLoadable,
  buildLoadPlan,
  gguf,
  parseQwen35Config,
  qwen35Metadata,
  qwen35SpecLayout,
  readGguf,
  synthesizeQwen35HeaderSource,
  writeQwen35HeaderOnly,
  tensorByteLength,
  writeGguf,
  type GgufMetadataEntry,
  type Qwen35Spec,
} from "../index.js";

/** A small qwen35 file with zero-filled tensors, edited by `edit` before writing. */
async function smallFile(
  spec: Qwen35Spec,
  edit: (tensors: { name: string; type: GgmlType; ne: number[] }[]) => void = () => {},
  editMetadata: (m: GgufMetadataEntry[]) => GgufMetadataEntry[] = (m) => m,
) {
  const { metadata, tensors } = qwen35SpecLayout(spec);
  const list = tensors.map((t) => ({ name: t.name, type: GgmlType.F32, ne: [...t.ne] }));
  edit(list);
  const bytes = writeGguf({
    metadata: editMetadata(metadata),
    tensors: list.map((t) => ({ ...t, data: new Uint8Array(tensorByteLength(t)) })),
  });
  return readGguf(bytes);
}

function errorOf(fn: () => unknown): GgufError {
  try {
    fn();
  } catch (error) {
    if (GgufError.isInstance(error)) return error;
    throw error;
  }
  throw new Error("expected a GgufError");
}

describe("parseQwen35Config on header-only files of the real shapes (qwen35.md 13)", () => {
  it("0.8B: 24 layers, attention at 3,7,...,23, Hk = Hv = 16, conv_dim 6144", async () => {
    const file = await readGguf(synthesizeQwen35HeaderSource(QWEN35_0_8B_SHAPE));
    const c = parseQwen35Config(file);
    expect(c.nLayer).toBe(24);
    expect(c.blockCount).toBe(24);
    expect(c.nextnPredictLayers).toBe(0);
    expect(c.layerKinds.flatMap((k, i) => (k === "attention" ? [i] : []))).toEqual([3, 7, 11, 15, 19, 23]);
    expect([c.keyDim, c.valueDim, c.convDim, c.headVDim]).toEqual([2048, 2048, 6144, 128]);
    expect([c.embeddingLength, c.headCount, c.headCountKv, c.headDim, c.feedForwardLength]).toEqual([1024, 8, 2, 256, 3584]);
    expect(c.ropeSections).toEqual([11, 11, 10, 0]);
    expect(c.ropeDimensionCount).toBe(64);
    expect(c.rmsEps).toBeCloseTo(1e-6, 12);
    expect(c.ropeFreqBase).toBe(1e7);
    expect(c.vocabSize).toBe(248_320);
    const plan = buildLoadPlan(file);
    expect(plan.ok).toBe(true);
    expect(plan.tiedHead).toBe(true);
    expect(plan.used.length).toBe(file.tensors.length);
    const ne = (n: string) => plan.used.find((t) => t.name === n)!.ne;
    expect(ne("token_embd.weight")).toEqual([1024, 248_320]);
    expect(ne("blk.3.attn_q.weight")).toEqual([1024, 4096]);
    expect(ne("blk.3.attn_k.weight")).toEqual([1024, 512]);
    expect(ne("blk.3.attn_output.weight")).toEqual([2048, 1024]);
    expect(ne("blk.0.attn_qkv.weight")).toEqual([1024, 6144]);
    expect(ne("blk.0.ssm_conv1d.weight")).toEqual([4, 6144]);
    expect(ne("blk.0.ssm_out.weight")).toEqual([2048, 1024]);
    expect(ne("blk.0.ffn_down.weight")).toEqual([3584, 1024]);
    // 18 GDN layers x 14 tensors + 6 attention layers x 11 + token_embd + output_norm = 320,
    // the tensor count ORACLE.md reports for llama.cpp's Q4_K_M of this shape (162 + 25 + 133).
    expect(plan.used.length).toBe(18 * 14 + 6 * 11 + 2);
    expect(plan.used.length).toBe(162 + 25 + 133);
    // the plan carries what the engine binds by: the slot, the layer, and the F32 rule of the conv kernel
    const conv = plan.used.find((t) => t.name === "blk.0.ssm_conv1d.weight")!;
    expect(conv).toMatchObject({ slot: "ssm_conv1d", layer: 0, requiresF32: true });
    expect(plan.used.filter((t) => t.requiresF32).map((t) => t.slot)).toEqual(new Array(18).fill("ssm_conv1d"));
    expect(plan.used.find((t) => t.name === "token_embd.weight")).toMatchObject({ slot: "token_embd", role: "global" });
  });

  it("27B with MTP: block_count 65, nextn 1, Hv 48 > Hk 16, untied, MTP skipped loudly by name and bytes", async () => {
    const file = await readGguf(synthesizeQwen35HeaderSource({ ...QWEN35_27B_SHAPE, mtp: true }));
    const c = parseQwen35Config(file);
    expect([c.blockCount, c.nextnPredictLayers, c.nLayer]).toEqual([65, 1, 64]);
    expect(c.layerKinds.filter((k) => k === "attention").length).toBe(16);
    expect([c.keyDim, c.valueDim, c.convDim]).toEqual([2048, 6144, 10240]);
    const plan = buildLoadPlan(file);
    expect(plan.ok).toBe(true);
    expect(plan.tiedHead).toBe(false);
    expect(plan.used.find((t) => t.name === "output.weight")?.ne).toEqual([5120, 248_320]);
    expect(plan.used.find((t) => t.name === "blk.0.ssm_beta.weight")?.ne).toEqual([5120, 48]);
    expect(plan.used.find((t) => t.name === "blk.3.attn_q.weight")?.ne).toEqual([5120, 12288]);
    expect(plan.skipped.length).toBe(15);
    expect(plan.skipped.every((t) => t.name.startsWith("blk.64.") && t.reason?.includes("mtp"))).toBe(true);
    expect(plan.skipped.find((t) => t.name === "blk.64.nextn.eh_proj.weight")?.ne).toEqual([10240, 5120]);
    const bytes = plan.skipped.reduce((a, t) => a + t.byteLength, 0);
    expect(plan.skippedBytes).toBe(bytes);
    const loud = plan.diagnostics.filter((d) => d.code === "MTP_SKIPPED");
    expect(loud.length).toBe(1);
    expect(loud[0]!.level).toBe("warning");
    expect(loud[0]!.bytes).toBe(bytes);
    expect(loud[0]!.message).toContain(String(bytes));
    for (const t of plan.skipped) expect(loud[0]!.message).toContain(t.name);
    expect(plan.used.length + plan.skipped.length).toBe(file.tensors.length);

    const withMtp = buildLoadPlan(file, { speculative: "mtp" });
    expect(withMtp.skipped).toEqual([]);
    expect(withMtp.used.length).toBe(file.tensors.length);
    expect(withMtp.used.filter((t) => t.role === "mtp").length).toBe(15);
    expect(withMtp.diagnostics.some((d) => d.code === "MTP_USED")).toBe(true);
  });

  it("27B with MTP as a header-only (sparse) file on disk: parsed by path without reading tensor data", async () => {
    const dir = mkdtempSync(join(tmpdir(), "kq-gguf-27b-"));
    try {
      const path = join(dir, "qwen35-27b-mtp.gguf");
      const size = await writeQwen35HeaderOnly(path, { ...QWEN35_27B_SHAPE, mtp: true });
      expect(statSync(path).size).toBe(size);
      expect(size).toBeGreaterThan(50e9); // ~54 GB of F32 that is never written or read
      const file = await readGguf(path);
      expect(file.fileSize).toBe(size);
      const plan = buildLoadPlan(file);
      expect(plan.ok).toBe(true);
      expect(plan.skipped.length).toBe(15);
      expect(plan.usedBytes + plan.skippedBytes).toBe(file.tensors.reduce((a, t) => a + t.byteLength, 0));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("27B without MTP (block_count 64, no nextn key): nothing skipped; mtp configured is refused", async () => {
    const file = await readGguf(synthesizeQwen35HeaderSource(QWEN35_27B_SHAPE));
    expect(file.metadata.has("qwen35.nextn_predict_layers")).toBe(false);
    const plan = buildLoadPlan(file);
    expect(plan.ok).toBe(true);
    expect(plan.skipped).toEqual([]);
    expect(plan.diagnostics.some((d) => d.code === "MTP_SKIPPED")).toBe(false);
    const mtp = buildLoadPlan(file, { speculative: "mtp" });
    expect(mtp.ok).toBe(false);
    expect(mtp.refused[0]!.name).toBe("qwen35.nextn_predict_layers");
  });
});

describe("parseQwen35Config errors name the key, the expected type and what was found", () => {
  const base = qwen35Metadata(QWEN35_TEST_SHAPE);
  const parse = (edit: (m: GgufMetadataEntry[]) => GgufMetadataEntry[]) => () =>
    parseQwen35Config({ metadata: new Map(edit([...base]).map((e) => [e.key, e])) });
  const replace = (key: string, entry: GgufMetadataEntry | undefined) => (m: GgufMetadataEntry[]) =>
    m.flatMap((e) => (e.key === key ? (entry ? [entry] : []) : [e]));

  it("missing key", () => {
    const e = errorOf(parse(replace("qwen35.embedding_length", undefined)));
    expect(e.code).toBe("QWEN35_MISSING_KEY");
    expect(e.message).toContain("qwen35.embedding_length");
    expect(e.message).toContain("u32");
  });
  it("wrong scalar type", () => {
    const e = errorOf(parse(replace("qwen35.block_count", gguf.i32("qwen35.block_count", 4))));
    expect(e.code).toBe("QWEN35_BAD_KEY_TYPE");
    expect(e.message).toContain("expected u32, found i32 4");
    const f = errorOf(parse(replace("qwen35.rope.freq_base", gguf.f64("qwen35.rope.freq_base", 1e7))));
    expect(f.message).toContain("expected f32, found f64");
  });
  it("wrong array type or length", () => {
    const e = errorOf(
      parse(replace("qwen35.rope.dimension_sections", gguf.arr("qwen35.rope.dimension_sections", GgufValueType.INT32, [11, 11, 10]))),
    );
    expect(e.code).toBe("QWEN35_BAD_KEY_TYPE");
    expect(e.message).toContain("expected i32[4], found i32[3]");
    const u = errorOf(
      parse(replace("qwen35.rope.dimension_sections", gguf.arr("qwen35.rope.dimension_sections", GgufValueType.UINT32, [1, 1, 1, 0]))),
    );
    expect(u.message).toContain("found u32[4]");
  });
  it("inconsistent values", () => {
    expect(errorOf(parse(replace("qwen35.attention.value_length", gguf.u32("qwen35.attention.value_length", 32)))).code).toBe(
      "QWEN35_BAD_VALUE",
    );
    expect(errorOf(parse(replace("qwen35.ssm.time_step_rank", gguf.u32("qwen35.ssm.time_step_rank", 3)))).message).toContain(
      "not a multiple",
    );
    expect(errorOf(parse((m) => [...m, gguf.u32("qwen35.nextn_predict_layers", 2)])).message).toContain("only 0 or 1");
    expect(errorOf(parse((m) => [...m, gguf.u32("qwen35.full_attention_interval", 1)])).message).toContain("GDN");
    expect(errorOf(parse((m) => [...m, gguf.u32("qwen35.full_attention_interval", 9)])).message).toContain("full-attention");
  });
  it("wrong architecture", () => {
    const e = errorOf(parse(replace("general.architecture", gguf.str("general.architecture", "llama"))));
    expect(e.code).toBe("QWEN35_WRONG_ARCHITECTURE");
    expect(e).toBeInstanceOf(Qwen35ConfigError);
    // qwen35moe is read under its own key prefix: qwen35.* keys do not configure it
    const moe = errorOf(parse(replace("general.architecture", gguf.str("general.architecture", "qwen35moe"))));
    expect(moe).toMatchObject({ code: "QWEN35_MISSING_KEY", field: "qwen35moe.block_count" });
  });
  it("recurrent_layers overrides the interval", () => {
    const c = parseQwen35Config({
      metadata: new Map(
        [
          ...base,
          gguf.arr("qwen35.attention.recurrent_layers", GgufValueType.BOOL, [false, true, true, false]),
          gguf.u32("qwen35.full_attention_interval", 2),
        ].map((e) => [e.key, e]),
      ),
    });
    expect(c.layerKinds).toEqual(["attention", "gdn", "gdn", "attention"]);
    expect(
      errorOf(parse((m) => [...m, gguf.arr("qwen35.attention.recurrent_layers", GgufValueType.BOOL, [true, false])])).message,
    ).toContain("length");
  });
});

describe("load plan refusals", () => {
  it("refuses unknown names, wrong shapes, missing tensors and non-F32 conv1d, with names and expected shapes", async () => {
    const file = await smallFile(QWEN35_TEST_SHAPE, (list) => {
      list.push({ name: "blk.0.mystery.weight", type: GgmlType.F32, ne: [4] });
      list.find((t) => t.name === "blk.1.attn_gate.weight")!.ne = [256, 64];
      list.find((t) => t.name === "blk.2.ssm_conv1d.weight")!.type = GgmlType.F16;
      list.splice(
        list.findIndex((t) => t.name === "blk.3.attn_k_norm.weight"),
        1,
      );
    });
    const plan = buildLoadPlan(file);
    expect(plan.ok).toBe(false);
    const reason = (n: string) => plan.refused.find((r) => r.name === n)?.reason;
    expect(reason("blk.0.mystery.weight")).toContain("unknown tensor name");
    expect(reason("blk.1.attn_gate.weight")).toBe("wrong shape: ne [256, 64], expected ne [256, 128]");
    expect(reason("blk.2.ssm_conv1d.weight")).toContain("must be F32");
    expect(reason("blk.3.attn_k_norm.weight")).toBe("missing required tensor (expected ne [64])");
    expect(plan.refused.length).toBe(4);
    expect(plan.used.length + plan.skipped.length + plan.refused.length).toBe(file.tensors.length + 1);
    const e = errorOf(() => assertLoadable(plan));
    expect(e.code).toBe("QWEN35_PLAN_REFUSED");
    expect(e.message).toContain("blk.1.attn_gate.weight");
  });

  it("refuses a token_embd whose height differs from the tokenizer vocabulary", async () => {
    const file = await smallFile(QWEN35_TEST_SHAPE, (list) => {
      list.find((t) => t.name === "token_embd.weight")!.ne = [256, 500];
    });
    const plan = buildLoadPlan(file);
    expect(plan.refused.map((r) => r.name)).toEqual(["token_embd.weight"]);
    expect(plan.refused[0]!.reason).toContain("expected ne [256, 512]");
  });

  it("a trunk file with a stray blk.{n_layer} tensor and no nextn key refuses it as unknown", async () => {
    const file = await smallFile(QWEN35_TEST_SHAPE, (list) => list.push({ name: "blk.4.attn_norm.weight", type: GgmlType.F32, ne: [256] }));
    expect(buildLoadPlan(file).refused.map((r) => r.name)).toEqual(["blk.4.attn_norm.weight"]);
  });

  it("a small file with MTP: skipped without mtp, used with mtp; missing MTP tensors warn or refuse", async () => {
    const spec = { ...QWEN35_TEST_SHAPE, mtp: true };
    const file = await smallFile(spec);
    const plan = buildLoadPlan(file);
    expect(plan.ok).toBe(true);
    expect(plan.skipped.map((t) => t.name).sort()).toEqual(
      file.tensors
        .filter((t) => t.name.startsWith("blk.4."))
        .map((t) => t.name)
        .sort(),
    );
    expect(buildLoadPlan(file, { speculative: "mtp" }).skipped.length).toBe(0);
    const partial = await smallFile(spec, (list) =>
      list.splice(
        list.findIndex((t) => t.name === "blk.4.nextn.hnorm.weight"),
        1,
      ),
    );
    const warned = buildLoadPlan(partial);
    expect(warned.ok).toBe(true);
    expect(warned.diagnostics.find((d) => d.code === "MTP_MISSING")?.tensors).toEqual(["blk.4.nextn.hnorm.weight"]);
    expect(buildLoadPlan(partial, { speculative: "mtp" }).refused.map((r) => r.name)).toEqual(["blk.4.nextn.hnorm.weight"]);
  });
});
