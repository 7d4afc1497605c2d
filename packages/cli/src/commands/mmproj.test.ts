import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  GgmlType,
  PROJECTOR_TINY_SHAPE,
  QWEN35_0_8B_SHAPE,
  projectorSpecLayout,
  qwen35Q4KMClassMix,
  synthesizeProjector,
  tensorByteLength,
  writeGguf,
  writeQwen35HeaderOnly,
} from "@keepquant/gguf";
import { expectBuiltCli, spawnCli } from "./test-support.js";

const dir = mkdtempSync(path.join(tmpdir(), "kq-mmproj-"));
const files = {
  model: path.join(dir, "qwen35-0.8b-q4_k_m-class.gguf"),
  /** projection_dim 1024: the 0.8B's embedding_length */
  mmproj: path.join(dir, "mmproj-0.8b.gguf"),
  /** projection_dim 2048: another model's */
  otherMmproj: path.join(dir, "mmproj-other.gguf"),
  /** mm.2.weight misshaped */
  refused: path.join(dir, "mmproj-refused.gguf"),
  /** clip.projector_type "mlp" */
  unknown: path.join(dir, "mmproj-mlp.gguf"),
};
const SPEC = { ...PROJECTOR_TINY_SHAPE, projectionDim: QWEN35_0_8B_SHAPE.hidden };

beforeAll(async () => {
  expectBuiltCli();
  await writeQwen35HeaderOnly(files.model, QWEN35_0_8B_SHAPE, { types: qwen35Q4KMClassMix(24, true) });
  writeFileSync(files.mmproj, synthesizeProjector(SPEC).bytes);
  writeFileSync(files.otherMmproj, synthesizeProjector({ ...SPEC, projectionDim: 2048 }).bytes);
  const { metadata, tensors } = projectorSpecLayout(SPEC);
  const list = tensors.map((t) => ({ name: t.name, type: GgmlType.F32, ne: t.name === "mm.2.weight" ? [256, 1000] : [...t.ne] }));
  writeFileSync(files.refused, writeGguf({ metadata, tensors: list.map((t) => ({ ...t, data: new Uint8Array(tensorByteLength(t)) })) }));
  const mlp = metadata.map((e) => (e.key === "clip.projector_type" ? { ...e, value: "mlp" } : e));
  writeFileSync(files.unknown, writeGguf({ metadata: mlp, tensors: [] }));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function run(...args: string[]) {
  const env = { ...process.env, KEEPQUANT_DEBUG: "", CI: "1" } as Record<string, string | undefined>;
  delete env.KEEPQUANT_CHUNK_BYTES;
  delete env.KEEPQUANT_TT_TRACE_REGION_MB;
  return spawnCli(args, env);
}

describe("keepquant inspect <mmproj.gguf>", () => {
  it("shows the projector's hyperparameters, token limits and load plan", () => {
    const r = run("inspect", files.mmproj);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toBe("");
    expect(r.stdout).toMatch(/^architecture {2}clip$/m);
    expect(r.stdout).toMatch(/^vision projector \(qwen3vl_merger\)$/m);
    expect(r.stdout).toMatch(/^ {2}image {9}64 px, patch 16 \(a 4 x 4 position grid\), merge 2 x 2$/m);
    expect(r.stdout).toMatch(/^ {2}vit {11}2 blocks, width 64, ffn 128 \(gelu\), 4 heads of 16$/m);
    expect(r.stdout).toMatch(/^ {2}output {8}1024 per image token \(projection_dim 1024\)/m);
    expect(r.stdout).toMatch(/^ {2}image tokens {2}8 \.\. 4096 \(1024 pixels per token: 8192 \.\. 4194304 pixels\)$/m);
    expect(r.stdout).toMatch(/^ {2}used {8}34 tensors, \d+ B/m);
    expect(r.stdout).toMatch(/^ {2}refused {5}0 tensors, 0 B$/m);
    expect(r.stdout).not.toMatch(/NO_PLAN/);
  });

  it("--json: the config, the token limits and every tensor of the plan", () => {
    const r = run("inspect", files.mmproj, "--json");
    expect(r.code, r.stderr).toBe(0);
    const doc = JSON.parse(r.stdout);
    expect(doc.architecture).toBe("clip");
    expect(doc.plan).toBeNull();
    expect(doc.projector.config).toMatchObject({
      projectorType: "qwen3vl_merger",
      hiddenSize: 64,
      blockCount: 2,
      projectionDim: 1024,
      spatialMerge: 2,
    });
    expect(doc.projector.config.tokenLimits).toEqual({
      minTokens: 8,
      maxTokens: 4096,
      pixelsPerToken: 1024,
      minPixels: 8192,
      maxPixels: 4194304,
    });
    expect(doc.projector.outputWidth).toBe(1024);
    expect(doc.projector.plan.ok).toBe(true);
    expect(doc.projector.plan.used).toHaveLength(doc.tensorCount);
    expect(doc.projector.plan.usedBytes).toBe(doc.totalTensorBytes);
    expect(doc.projector.plan.totalBytes).toBe(doc.totalTensorBytes);
  });

  it("a refused tensor: the report, then one error line naming it and both shapes; exit 1", () => {
    const r = run("inspect", files.refused, "--json");
    expect(r.code).toBe(1);
    const doc = JSON.parse(r.stdout);
    expect(doc.projector.plan.refused).toEqual([
      { name: "mm.2.weight", reason: "wrong shape: ne [256, 1000], expected ne [256, 1024]", expectedNe: [256, 1024] },
    ]);
    expect(doc.error.code).toBe("CLIP_PLAN_REFUSED");
    expect(r.stderr.trim()).toBe(
      "error: CLIP_PLAN_REFUSED: 1 projector tensor(s) refused: mm.2.weight: wrong shape: ne [256, 1000], expected ne [256, 1024]",
    );
  });

  it("an unknown projector type: exit 1, the error names the type and the supported one", () => {
    const r = run("inspect", files.unknown);
    expect(r.code).toBe(1);
    expect(r.stderr.trim()).toMatch(
      /^error: CLIP_UNKNOWN_PROJECTOR: clip\.projector_type: projector type "mlp" is not supported \(supported: "qwen3vl_merger"\) \(at offset \d+\)$/,
    );
  });
});

describe("keepquant plan --mmproj", () => {
  it("adds the projector's weight bytes as one class and to the total", () => {
    const base = JSON.parse(run("plan", files.model, "--device", "tt-n150", "--json").stdout);
    const r = run("plan", files.model, "--device", "tt-n150", "--mmproj", files.mmproj, "--json");
    expect(r.code, r.stderr).toBe(0);
    const doc = JSON.parse(r.stdout);
    const projectorBytes = synthesizeProjector(SPEC).bytes.byteLength; // used tensors' bytes: the file minus its header
    const klass = doc.classes.find((c: { id: string }) => c.id === "projector");
    expect(klass).toMatchObject({ label: "vision projector (mmproj)" });
    expect(klass.bytes).toBe(doc.projector.bytes);
    expect(klass.bytes).toBeGreaterThan(0);
    expect(klass.bytes).toBeLessThan(projectorBytes);
    expect(doc.projector).toMatchObject({ file: files.mmproj, tensors: 34, outputWidth: 1024, types: { F32: 34 } });
    expect(doc.totalBytes).toBe(base.totalBytes + klass.bytes);
    expect(doc.totalBytes).toBe(doc.classes.reduce((sum: number, c: { bytes: number }) => sum + c.bytes, 0));
    expect(base.classes.some((c: { id: string }) => c.id === "projector")).toBe(false);

    const text = run("plan", files.model, "--device", "tt-n150", "--mmproj", files.mmproj);
    expect(text.code, text.stderr).toBe(0);
    expect(text.stdout).toMatch(/^mmproj {4}.*mmproj-0\.8b\.gguf: 34 tensors \(34 F32\), 1024-wide image tokens$/m);
    expect(text.stdout).toMatch(/^ {2}vision projector \(mmproj\)\s+0\.00\s+.*34 tensors \(34 F32\)$/m);
  });

  it("a projector of another model: exit 1, the error names both widths", () => {
    const r = run("plan", files.model, "--device", "tt-n150", "--mmproj", files.otherMmproj);
    expect(r.code).toBe(1);
    expect(r.stderr.trim()).toMatch(
      /^error: CLIP_LANGUAGE_MISMATCH: projector output width 2048 \(mm\.2 out features, clip\.vision\.projection_dim\) does not match the language model's embedding_length 1024 \(qwen35\)/,
    );
    expect(run("plan", files.model, "--mmproj", files.refused).stderr).toMatch(/^error: CLIP_PLAN_REFUSED: .*mm\.2\.weight/);
    expect(run("plan", files.model, "--mmproj", files.model).stderr).toMatch(
      /^error: CLIP_NOT_A_PROJECTOR: general\.architecture: is "qwen35"/,
    );
  });
});
