import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadGgmlOracle, oracleUnavailableReason } from "@keepquant/oracle";
import { afterAll, describe, expect, it } from "vitest";
import {
  ClipProjectorError,
  GgmlType,
  GgufError,
  GgufValueType,
  PROJECTOR_TINY_SHAPE,
  QWEN35_TINY_SHAPE,
  assertProjectorLoadable,
  describeProjector,
  gguf,
  isProjectorFile,
  parseProjector,
  projectorFallbackType,
  projectorLoadPlan,
  projectorMetadata,
  projectorSpecLayout,
  readGguf,
  readTensorBytes,
  synthesizeProjector,
  synthesizeQwen35,
  writeGguf,
  writeSynthesizedProjector,
  writeProjectorHeaderOnly,
  QWEN35_VISION_SHAPE,
  QWEN35_27B_SHAPE,
  ggmlTypeName,
  type GgufFile,
  type GgufMetadataEntry,
  type ProjectorSpec,
  type ProjectorWeightType,
} from "../index.js";

const dir = mkdtempSync(join(tmpdir(), "kq-gguf-clip-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** The tiny projector for a language model of width 64 (QWEN35_TINY_SHAPE's hidden). */
const SPEC: ProjectorSpec = { ...PROJECTOR_TINY_SHAPE, projectionDim: QWEN35_TINY_SHAPE.hidden };
const LM = { embeddingLength: QWEN35_TINY_SHAPE.hidden, architecture: "qwen35" };

/** The metadata of `spec` with `key` replaced (or removed when `entry` is undefined). */
function metadataWith(spec: ProjectorSpec, key: string, entry: GgufMetadataEntry | undefined): Pick<GgufFile, "metadata"> {
  const entries = projectorMetadata(spec).filter((e) => e.key !== key);
  if (entry) entries.push(entry);
  return { metadata: new Map(entries.map((e) => [e.key, e])) };
}

/** The f32 values of tensor bytes (copied: a Buffer's slice is a view of a shared pool). */
const f32Values = (bytes: Uint8Array): Float32Array => new Float32Array(Uint8Array.from(bytes).buffer);

function clipError(f: () => unknown): ClipProjectorError {
  try {
    f();
  } catch (error) {
    expect(error).toBeInstanceOf(ClipProjectorError);
    return error as ClipProjectorError;
  }
  throw new Error("expected a ClipProjectorError");
}

describe("a synthetic qwen3vl_merger projector", () => {
  it("parses: every hyperparameter, the token limits and the pixel budget", async () => {
    const file = await readGguf(synthesizeProjector(SPEC).bytes);
    expect(isProjectorFile(file)).toBe(true);
    const config = parseProjector(file);
    expect(config).toMatchObject({
      projectorType: "qwen3vl_merger",
      imageSize: 64,
      patchSize: 16,
      positionGrid: 4,
      positionCount: 16,
      spatialMerge: 2,
      hiddenSize: 64,
      feedForwardLength: 128,
      headCount: 4,
      headDim: 16,
      blockCount: 2,
      projectionDim: 64,
      imageMean: [0.5, 0.5, 0.5],
      imageStd: [0.5, 0.5, 0.5],
      useGelu: true,
      ffnOp: "gelu",
      deepstackLayers: [],
      mergedWidth: 256,
      fileType: 0,
      fileImageMinPixels: undefined,
      fileImageMaxPixels: undefined,
    });
    expect(config.layerNormEps).toBeCloseTo(1e-6, 12);
    // llama.cpp: set_limit_image_tokens(8, 4096) over (patch * merge)^2 pixels per token
    expect(config.tokenLimits).toEqual({ minTokens: 8, maxTokens: 4096, pixelsPerToken: 1024, minPixels: 8192, maxPixels: 4_194_304 });
  });

  it("the load plan uses every tensor in the real layout; bytes add up", async () => {
    const file = await readGguf(synthesizeProjector(SPEC).bytes);
    const plan = projectorLoadPlan(file, LM);
    expect(plan.ok).toBe(true);
    expect(plan.refused).toEqual([]);
    expect(plan.skipped).toEqual([]);
    expect(plan.used.map((t) => t.name).sort()).toEqual(file.tensors.map((t) => t.name).sort());
    // 4 embedding tensors, 12 per block, 2 post_ln, 4 merger
    expect(file.tensors.length).toBe(4 + 12 * 2 + 2 + 4);
    expect(plan.usedBytes).toBe(file.tensors.reduce((a, t) => a + t.byteLength, 0));
    expect(plan.usedBytes + plan.skippedBytes + plan.refusedBytes).toBe(plan.totalBytes);
    const ne = Object.fromEntries(file.tensors.map((t) => [t.name, t.ne]));
    expect(ne["v.patch_embd.weight"]).toEqual([16, 16, 3, 64]);
    expect(ne["v.patch_embd.weight.1"]).toEqual([16, 16, 3, 64]);
    expect(ne["v.position_embd.weight"]).toEqual([64, 16]);
    expect(ne["v.blk.1.attn_qkv.weight"]).toEqual([64, 192]);
    expect(ne["v.blk.1.attn_out.weight"]).toEqual([64, 64]);
    expect(ne["v.blk.1.ffn_up.weight"]).toEqual([64, 128]);
    expect(ne["v.blk.1.ffn_down.weight"]).toEqual([128, 64]);
    expect(ne["mm.0.weight"]).toEqual([256, 256]);
    expect(ne["mm.2.weight"]).toEqual([256, 64]);
    expect(ne["mm.2.bias"]).toEqual([64]);
    expect(plan.outputWidth).toBe(64);
    expect(plan.used.find((t) => t.name === "v.blk.1.ffn_down.weight")).toMatchObject({
      slot: "ffn_down.weight",
      kind: "matmul",
      layer: 1,
    });
  });

  it("is deterministic per seed, and a file on disk reads the same", async () => {
    const a = synthesizeProjector(SPEC).bytes;
    const same = (b: Uint8Array) => Buffer.from(b).equals(Buffer.from(a));
    expect(same(synthesizeProjector(SPEC).bytes)).toBe(true);
    expect(same(synthesizeProjector({ ...SPEC, seed: 2 }).bytes)).toBe(false);
    const path = join(dir, "tiny-mmproj.gguf");
    const written = await writeSynthesizedProjector(path, SPEC);
    expect(written.fileSize).toBe(a.byteLength);
    const file = await readGguf(path);
    const ln = file.tensors.find((t) => t.name === "v.blk.0.ln1.weight")!;
    const values = f32Values(await readTensorBytes(path, ln));
    expect(values.length).toBe(64);
    expect(Math.max(...values.map((v) => Math.abs(v - 1)))).toBeLessThan(0.0501);
    rmSync(path);
  });

  it("deepstack mergers: listed by the key or found by their tensors; the output width multiplies", async () => {
    const spec = { ...SPEC, projectionDim: 32, deepstackLayers: [1] };
    const file = await readGguf(synthesizeProjector(spec).bytes);
    const plan = projectorLoadPlan(file, { embeddingLength: 64 });
    expect(plan.ok).toBe(true);
    expect(plan.description.deepstackLayers).toEqual([1]);
    expect(plan.outputWidth).toBe(64);
    expect(plan.used.filter((t) => t.stage === "deepstack").map((t) => [t.name, t.ne])).toEqual([
      ["v.deepstack.1.norm.weight", [256]],
      ["v.deepstack.1.norm.bias", [256]],
      ["v.deepstack.1.fc1.weight", [256, 256]],
      ["v.deepstack.1.fc1.bias", [256]],
      ["v.deepstack.1.fc2.weight", [256, 32]],
      ["v.deepstack.1.fc2.bias", [32]],
    ]);
    expect(plan.diagnostics.map((d) => d.code)).toContain("DEEPSTACK");
    // without clip.vision.is_deepstack_layers, llama.cpp counts the blocks that have v.deepstack.N.fc1.weight
    const metadata = new Map([...file.metadata].filter(([key]) => key !== "clip.vision.is_deepstack_layers"));
    const counted = projectorLoadPlan({ ...file, metadata });
    expect(counted.ok).toBe(true);
    expect(counted.description.deepstackLayers).toEqual([1]);
    // flagged by the key but not present: refused as missing; present but not flagged: refused by name
    const unflagged = new Map(metadata).set("clip.vision.is_deepstack_layers", {
      ...gguf.arr("clip.vision.is_deepstack_layers", GgufValueType.BOOL, [true, false]),
    });
    const wrong = projectorLoadPlan({ ...file, metadata: unflagged });
    expect(wrong.ok).toBe(false);
    expect(wrong.refused.find((r) => r.name === "v.deepstack.0.fc1.weight")?.reason).toMatch(
      /^missing required tensor \(expected ne \[256, 256\]\)/,
    );
    expect(wrong.refused.find((r) => r.name === "v.deepstack.1.fc1.weight")?.reason).toMatch(
      /block 1 is not flagged in clip\.vision\.is_deepstack_layers/,
    );
  });

  it("the image_min_pixels / image_max_pixels keys are read and reported as not applied", async () => {
    const file = await readGguf(synthesizeProjector({ ...SPEC, imageMinPixels: 3136, imageMaxPixels: 12_845_056 }).bytes);
    const plan = projectorLoadPlan(file);
    expect(plan.config.fileImageMinPixels).toBe(3136);
    expect(plan.config.fileImageMaxPixels).toBe(12_845_056);
    expect(plan.diagnostics.find((d) => d.code === "FILE_PIXEL_KEYS_IGNORED")?.message).toMatch(
      /8 to 4096 tokens \(8192 to 4194304 pixels\)/,
    );
  });
});

describe("typed errors name the key or tensor", () => {
  it("not a projector, no vision encoder, an unknown projector type", async () => {
    const lm = await readGguf(synthesizeQwen35(QWEN35_TINY_SHAPE));
    const notClip = clipError(() => parseProjector(lm));
    expect(notClip.code).toBe("CLIP_NOT_A_PROJECTOR");
    expect(notClip.message).toMatch(/^general\.architecture: is "qwen35", expected "clip"/);
    expect(GgufError.isInstance(notClip)).toBe(true);

    const noVision = clipError(() =>
      parseProjector(metadataWith(SPEC, "clip.has_vision_encoder", gguf.bool("clip.has_vision_encoder", false))),
    );
    expect(noVision).toMatchObject({ code: "CLIP_NO_VISION_ENCODER", field: "clip.has_vision_encoder" });
    expect(clipError(() => parseProjector(metadataWith(SPEC, "clip.has_vision_encoder", undefined))).message).toMatch(/is missing/);

    const unknown = clipError(() =>
      parseProjector(metadataWith(SPEC, "clip.projector_type", gguf.str("clip.projector_type", "qwen2vl_merger"))),
    );
    expect(unknown.code).toBe("CLIP_UNKNOWN_PROJECTOR");
    expect(unknown.message).toBe('clip.projector_type: projector type "qwen2vl_merger" is not supported (supported: "qwen3vl_merger")');
  });

  it("missing and mistyped keys", () => {
    const missing = clipError(() => parseProjector(metadataWith(SPEC, "clip.vision.embedding_length", undefined)));
    expect(missing).toMatchObject({ code: "CLIP_MISSING_KEY", field: "clip.vision.embedding_length" });
    const mistyped = clipError(() => parseProjector(metadataWith(SPEC, "clip.vision.block_count", gguf.i32("clip.vision.block_count", 2))));
    expect(mistyped).toMatchObject({ code: "CLIP_BAD_KEY_TYPE", field: "clip.vision.block_count" });
    expect(mistyped.message).toBe("clip.vision.block_count: expected u32, found i32 2");
    const shortMean = clipError(() =>
      parseProjector(metadataWith(SPEC, "clip.vision.image_mean", gguf.arr("clip.vision.image_mean", GgufValueType.FLOAT32, [0.5, 0.5]))),
    );
    expect(shortMean.message).toBe("clip.vision.image_mean: expected f32[3] (at least three items), found f32[2]");
    const flags = clipError(() =>
      parseProjector(
        metadataWith(SPEC, "clip.vision.is_deepstack_layers", gguf.arr("clip.vision.is_deepstack_layers", GgufValueType.BOOL, [false])),
      ),
    );
    expect(flags.message).toBe("clip.vision.is_deepstack_layers: length must equal block_count (2), found 1");
  });

  it("bad hyperparameters: zero heads, width not a multiple of heads, image not a multiple of patch, head_dim not a multiple of 4", () => {
    const cases: [ProjectorSpec, string, RegExp][] = [
      [{ ...SPEC, heads: 0 }, "clip.vision.attention.head_count", /must be at least 1, found 0/],
      [{ ...SPEC, heads: 3 }, "clip.vision.attention.head_count", /embedding_length 64 is not a multiple of head_count 3/],
      [{ ...SPEC, imageSize: 72 }, "clip.vision.image_size", /72 is not a multiple of patch_size 16/],
      [
        { ...SPEC, imageSize: 48 },
        "clip.vision.image_size",
        /position grid \(image_size \/ patch_size = 3\) is not a multiple of spatial_merge_size 2/,
      ],
      [
        { ...SPEC, hidden: 24, heads: 4 },
        "clip.vision.attention.head_count",
        /head_dim = embedding_length \/ head_count = 6 must be a multiple of 4/,
      ],
      [{ ...SPEC, spatialMerge: 3 }, "clip.vision.spatial_merge_size", /qwen3vl_merger merges 2 x 2 patches, found 3/],
      [{ ...SPEC, eps: 0 }, "clip.vision.attention.layer_norm_epsilon", /must be a finite positive number, found 0/],
    ];
    for (const [spec, key, message] of cases) {
      const error = clipError(() => parseProjector({ metadata: new Map(projectorMetadata(spec).map((e) => [e.key, e])) }));
      expect(error.code, key).toBe("CLIP_BAD_VALUE");
      expect(error.field, key).toBe(key);
      expect(error.message, key).toMatch(message);
    }
  });

  it("absurd sizes hit the named limits", () => {
    const metadata = new Map(projectorMetadata({ ...SPEC, imageSize: 16_384 }).map((e) => [e.key, e]));
    expect(() => parseProjector({ metadata })).toThrow(
      /clip\.vision\.image_size \(CLIP_LIMITS\.maxImageSize\) 16384 exceeds the maximum allowed \(8192\)/,
    );
    const blocks = new Map(projectorMetadata({ ...SPEC, layers: 5000 }).map((e) => [e.key, e]));
    try {
      parseProjector({ metadata: blocks });
      expect.unreachable();
    } catch (error) {
      expect(error).toMatchObject({ code: "GGUF_LIMIT_EXCEEDED", field: "clip.vision.block_count", value: 5000, maximum: 1024 });
    }
  });

  it("the projector's output width must equal the language model's embedding_length (both numbers named)", async () => {
    const file = await readGguf(synthesizeProjector(SPEC).bytes);
    const error = clipError(() => projectorLoadPlan(file, { embeddingLength: 256, architecture: "qwen35" }));
    expect(error.code).toBe("CLIP_LANGUAGE_MISMATCH");
    expect(error.message).toMatch(
      /^projector output width 64 \(mm\.2 out features, clip\.vision\.projection_dim\) does not match the language model's embedding_length 256 \(qwen35\)/,
    );
    const deep = await readGguf(synthesizeProjector({ ...SPEC, deepstackLayers: [0, 1] }).bytes);
    expect(clipError(() => projectorLoadPlan(deep, LM)).message).toMatch(
      /^projector output width 192 \(mm\.2 out features 64 x \(1 \+ 2 deepstack mergers\)\) does not match the language model's embedding_length 64/,
    );
  });
});

describe("the load plan refuses tensors, with reasons and bytes", () => {
  it("a misshaped tensor in a written file: expected vs found shape; assertProjectorLoadable names it", async () => {
    const { metadata, tensors } = projectorSpecLayout(SPEC);
    const bytes = writeGguf({
      metadata,
      tensors: tensors.map((t) => {
        const ne = t.name === "mm.2.weight" ? [256, 48] : t.ne;
        return { name: t.name, type: GgmlType.F32, ne, data: new Uint8Array(4 * ne.reduce((a, b) => a * b, 1)) };
      }),
    });
    const file = await readGguf(bytes);
    const plan = projectorLoadPlan(file);
    expect(plan.ok).toBe(false);
    expect(plan.refused).toEqual([
      expect.objectContaining({ name: "mm.2.weight", reason: "wrong shape: ne [256, 48], expected ne [256, 64]", expectedNe: [256, 64] }),
    ]);
    expect(plan.refusedBytes).toBe(256 * 48 * 4);
    expect(plan.usedBytes + plan.skippedBytes + plan.refusedBytes).toBe(plan.totalBytes);
    const error = clipError(() => assertProjectorLoadable(plan));
    expect(error).toMatchObject({ code: "CLIP_PLAN_REFUSED", field: "mm.2.weight" });
    expect(error.message).toBe("1 projector tensor(s) refused: mm.2.weight: wrong shape: ne [256, 48], expected ne [256, 64]");
  });

  it("missing, duplicated, unknown (an ffn_gate) and wrongly typed tensors", async () => {
    const file = await readGguf(synthesizeProjector(SPEC).bytes);
    const byName = (name: string) => file.tensors.find((t) => t.name === name)!;
    const tensors = [
      ...file.tensors.filter((t) => t.name !== "v.post_ln.bias"),
      byName("v.blk.0.ln1.bias"),
      { ...byName("v.blk.0.ffn_up.weight"), name: "v.blk.0.ffn_gate.weight" },
      { ...byName("v.blk.7.ln1.weight".replace("7", "1")), name: "v.blk.7.ln1.weight" },
    ];
    tensors[tensors.findIndex((t) => t.name === "v.blk.1.ln2.weight")] = { ...byName("v.blk.1.ln2.weight"), type: GgmlType.F16 };
    const plan = projectorLoadPlan({ ...file, tensors });
    const reasons = Object.fromEntries(plan.refused.map((r) => [r.name, r.reason]));
    expect(reasons).toEqual({
      "v.blk.1.ln2.weight": "must be F32 (norms and biases are added to f32 activations), found F16",
      "v.blk.0.ln1.bias": "duplicated tensor name (the first one is planned)",
      "v.blk.0.ffn_gate.weight": "qwen3vl_merger's ViT MLP has no gate (ffn_up -> gelu -> ffn_down): a gated MLP is another projector",
      "v.blk.7.ln1.weight": "block 7 is beyond clip.vision.block_count (2)",
      "v.post_ln.bias": "missing required tensor (expected ne [64])",
    });
    expect(plan.used.length + plan.refused.filter((r) => r.tensor).length).toBe(tensors.length);
    expect(plan.usedBytes + plan.refusedBytes).toBe(plan.totalBytes);
    expect(plan.diagnostics.at(-1)).toMatchObject({ level: "error", code: "REFUSED" });
  });

  it("describeProjector: optional pre_ln, no ffn_gate, deepstack blocks given explicitly", () => {
    const config = projectorSpecLayout(SPEC).config;
    const description = describeProjector(config, [0]);
    const names = description.tensors.map((t) => t.name);
    expect(description.tensors.filter((t) => t.optional).map((t) => t.name)).toEqual(["v.pre_ln.weight", "v.pre_ln.bias"]);
    expect(names.some((n) => n.includes("ffn_gate"))).toBe(false);
    expect(names.filter((n) => n.startsWith("v.deepstack.0."))).toHaveLength(6);
    expect(description.outputWidth).toBe(128);
  });
});

describe("header-only projectors of the released shape (planning)", () => {
  it("the Qwen3.5 vision tower beside the 27B, F16: a sparse file whose plan uses every tensor", async () => {
    const path = join(dir, "mmproj-27b-f16-header-only.gguf");
    const spec = { ...QWEN35_VISION_SHAPE, projectionDim: QWEN35_27B_SHAPE.hidden };
    const size = await writeProjectorHeaderOnly(path, spec, { weightType: GgmlType.F16 });
    const file = await readGguf(path);
    expect(file.fileSize).toBe(size);
    const plan = projectorLoadPlan(file, { embeddingLength: QWEN35_27B_SHAPE.hidden, architecture: "qwen35" });
    expect(plan.ok).toBe(true);
    expect(plan.config).toMatchObject({ positionGrid: 48, positionCount: 2304, headDim: 72, mergedWidth: 4608 });
    expect(plan.config.tokenLimits.maxPixels).toBe(4096 * 32 * 32);
    // 27 blocks of F16 matrices (qkv 1152 x 3456, out 1152^2, up and down 1152 x 4304), the merger 4608^2 + 4608 x 5120
    const blockMatrices = 27 * (1152 * 3456 + 1152 * 1152 + 2 * 1152 * 4304) * 2;
    const merger = (4608 * 4608 + 4608 * 5120) * 2;
    const f32 = plan.used.filter((t) => t.type === GgmlType.F32).reduce((a, t) => a + t.byteLength, 0);
    expect(plan.usedBytes).toBe(blockMatrices + merger + f32);
    expect(plan.used.filter((t) => t.kind === "matmul").every((t) => ggmlTypeName(t.type) === "F16")).toBe(true);
    rmSync(path);
  });
});

describe("matmul weight types", () => {
  it("falls back per tensor as llama.cpp's quantizer does", () => {
    expect(projectorFallbackType(GgmlType.Q4_K, 256)).toBe(GgmlType.Q4_K);
    expect(projectorFallbackType(GgmlType.Q4_K, 128)).toBe(GgmlType.Q5_0);
    expect(projectorFallbackType(GgmlType.Q4_K, 48)).toBe(GgmlType.F16);
    expect(projectorFallbackType(GgmlType.Q8_0, 48)).toBe(GgmlType.F16);
    expect(projectorFallbackType(GgmlType.F16, 7)).toBe(GgmlType.F16);
    expect(() => synthesizeProjector(SPEC, { weightType: GgmlType.Q8_0 })).toThrow(/needs a quantize function/);
  });

  const skipReason = oracleUnavailableReason();
  describe.skipIf(skipReason !== undefined)(
    `quantized by llama.cpp's ggml_quantize_chunk${skipReason ? ` (skipped: ${skipReason})` : ""}`,
    () => {
      const quantize = (type: GgmlType, values: Float32Array, rows: number, rowLength: number): Uint8Array => {
        const ggml = loadGgmlOracle();
        const out = new Uint8Array(rows * ggml.rowSize(type, rowLength));
        ggml.quantizeChunk(type, values, out, rows, rowLength);
        return out;
      };
      const cases: [ProjectorWeightType, string, Record<string, GgmlType>][] = [
        [GgmlType.F16, "f16", { "mm.0.weight": GgmlType.F16, "v.blk.0.attn_qkv.weight": GgmlType.F16 }],
        [GgmlType.Q8_0, "q8_0", { "mm.2.weight": GgmlType.Q8_0, "v.blk.1.ffn_down.weight": GgmlType.Q8_0 }],
        [GgmlType.Q4_K, "q4_K", { "mm.0.weight": GgmlType.Q4_K, "mm.2.weight": GgmlType.Q4_K, "v.blk.1.ffn_down.weight": GgmlType.Q5_0 }],
      ];
      for (const [weightType, label, expected] of cases) {
        it(`${label}: written, read back, planned; bytes equal the quantizer's; values close to F32`, async () => {
          const f32 = await readGguf(synthesizeProjector(SPEC).bytes);
          const f32Bytes = synthesizeProjector(SPEC).bytes;
          const made = synthesizeProjector(SPEC, { weightType, quantize });
          const file = await readGguf(made.bytes);
          const plan = projectorLoadPlan(file, LM);
          expect(plan.ok, plan.refused.map((r) => r.reason).join("; ")).toBe(true);
          expect(plan.usedBytes).toBe(plan.totalBytes);
          for (const [name, type] of Object.entries(expected)) expect(file.tensors.find((t) => t.name === name)!.type, name).toBe(type);
          // vectors and the conv / table tensors stay F32
          expect(file.tensors.filter((t) => t.ne.length === 1 || t.name.startsWith("v.p")).every((t) => t.type === GgmlType.F32)).toBe(
            true,
          );
          if (weightType === GgmlType.Q4_K) {
            expect(made.fallbacks.map((f) => f.name).sort()).toEqual(
              ["attn_qkv", "attn_out", "ffn_up", "ffn_down"].flatMap((s) => [0, 1].map((il) => `v.blk.${il}.${s}.weight`)).sort(),
            );
          } else expect(made.fallbacks).toEqual([]);
          const ggml = loadGgmlOracle();
          for (const name of ["mm.0.weight", "v.blk.1.ffn_down.weight"]) {
            const source = f32.tensors.find((t) => t.name === name)!;
            const values = f32Values(await readTensorBytes(f32Bytes, source));
            const tensor = file.tensors.find((t) => t.name === name)!;
            const stored = await readTensorBytes(made.bytes, tensor);
            const rowLength = tensor.ne[0]!;
            expect(Buffer.from(stored).equals(Buffer.from(quantize(tensor.type, values, values.length / rowLength, rowLength)))).toBe(true);
            const back = new Float32Array(values.length);
            const rowBytes = ggml.rowSize(tensor.type, rowLength);
            const typeToken = { [GgmlType.F16]: "f16", [GgmlType.Q8_0]: "q8_0", [GgmlType.Q4_K]: "q4_K", [GgmlType.Q5_0]: "q5_0" }[
              tensor.type as number
            ];
            if (typeToken === "f16") {
              const half = new Uint16Array(Uint8Array.from(stored).buffer);
              for (let i = 0; i < back.length; i++) back[i] = ggml.fp16ToFp32(half[i]!);
            } else {
              for (let r = 0; r < values.length / rowLength; r++) {
                ggml.dequantizeRow(
                  typeToken!,
                  stored.subarray(r * rowBytes, (r + 1) * rowBytes),
                  back.subarray(r * rowLength, (r + 1) * rowLength),
                );
              }
            }
            const scale = Math.max(...values.map(Math.abs));
            const worst = Math.max(...values.map((v, i) => Math.abs(v - back[i]!)));
            expect(worst, name).toBeLessThan(scale * 0.15);
          }
        });
      }
    },
  );
});
