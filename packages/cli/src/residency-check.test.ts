import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { cpuAvailableMemory } from "@keepquant/engine";
import {
  GgmlType,
  QWEN35_27B_SHAPE,
  QWEN35_TEST_SHAPE,
  qwen35SpecLayout,
  tensorByteLength,
  writeGguf,
  writeQwen35HeaderOnly,
  type Qwen35Spec,
} from "@keepquant/gguf";
import { spawnCli, expectBuiltCli, CLI_BIN } from "./commands/test-support.js";

const _bin = CLI_BIN;
const dir = mkdtempSync(path.join(tmpdir(), "kq-residency-"));
const huge = path.join(dir, "too-big-for-this-machine.gguf");

beforeAll(async () => {
  expectBuiltCli();
  // An F32 27B-shaped model with enough layers to be four times this machine's available memory:
  // a sparse header-only file (tensor bytes are never written). Its first tensor read, blk.0's
  // attention norm, is stored in a type nothing decodes, so a forced load fails at once instead of
  // reading the file.
  const available = cpuAvailableMemory().bytes;
  const base: Qwen35Spec = { ...QWEN35_27B_SHAPE, vocab: 4096, layers: 4 };
  const perFourLayers = qwen35SpecLayout(base).tensors.reduce((sum, t) => sum + t.ne.reduce((a, b) => a * b, 1) * 4, 0);
  const layers = 4 * Math.max(16, Math.ceil((4 * available) / perFourLayers));
  await writeQwen35HeaderOnly(
    huge,
    { ...base, layers },
    { types: (t) => (t.name === "blk.0.attn_norm.weight" ? GgmlType.IQ2_XXS : GgmlType.F32) },
  );
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function cli(args: string[], input = "") {
  return spawnCli(args, { ...process.env, KEEPQUANT_DEBUG: "", CI: "1" }, input);
}

describe("run and chat consult the planner for cpu before loading", () => {
  it("run refuses a model that cannot fit available memory, with the planner's explanation", () => {
    const r = cli(["run", huge, "--prompt-ids", "1,2,3", "--json"]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^error: PLAN_DOES_NOT_FIT: .*too-big-for-this-machine\.gguf on this machine: does not fit: needs /);
    expect(r.stderr).toContain("Available memory from ");
    expect(r.stderr).toContain("largest items: packed matmul weights (memory-mapped)");
    expect(r.stderr).toContain("Pass --force to load anyway");
    expect(JSON.parse(r.stdout)).toMatchObject({ error: { code: "PLAN_DOES_NOT_FIT" } });
  });

  it("chat refuses it too", () => {
    const r = cli(["chat", huge], "hello\n");
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^error: PLAN_DOES_NOT_FIT: /);
  });

  it("serve refuses it before opening its port", () => {
    const r = cli(["serve", huge, "--port", "0"]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^error: PLAN_DOES_NOT_FIT: /m);
    expect(r.stderr).not.toMatch(/listening on/);
  });

  it("--force overrides: the refusal becomes a warning and the load goes on (here to the undecodable norm)", () => {
    const r = cli(["run", huge, "--prompt-ids", "1,2,3", "--force"]);
    expect(r.stderr).toMatch(/^warning: PLAN_DOES_NOT_FIT: .*Loading anyway \(--force\)$/m);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^error: KEEPQUANT_UNSUPPORTED_GGML_TYPE: .*IQ2_XXS/m);
  });

  it("a file the load plan refuses is left to Engine.load, which names the tensor", () => {
    const { metadata, tensors } = qwen35SpecLayout(QWEN35_TEST_SHAPE);
    const list = tensors.filter((t) => t.name !== "blk.0.ssm_a").map((t) => ({ name: t.name, type: GgmlType.F32, ne: [...t.ne] }));
    const refused = path.join(dir, "missing-ssm-a.gguf");
    writeFileSync(refused, writeGguf({ metadata, tensors: list.map((t) => ({ ...t, data: new Uint8Array(tensorByteLength(t)) })) }));
    const r = cli(["run", refused, "--prompt-ids", "1,2,3"]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^error: ENGINE_LOAD_REFUSED: .*blk\.0\.ssm_a/);
  });
});
