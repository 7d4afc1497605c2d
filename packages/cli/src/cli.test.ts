import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  GgmlType,
  gguf,
  QWEN35_27B_SHAPE,
  QWEN35_35B_A3B_SHAPE,
  QWEN35_TEST_SHAPE,
  qwen35Q4KMClassMix,
  qwen35SpecLayout,
  synthesizeQwen35,
  tensorByteLength,
  writeGguf,
  writeQwen35HeaderOnly,
} from "@keepquant/gguf";
import { spawnCli, expectBuiltCli, CLI_BIN } from "./commands/test-support.js";

const _bin = CLI_BIN;
const dir = mkdtempSync(join(tmpdir(), "kq-cli-"));
const files = {
  good: join(dir, "good.gguf"),
  mtp: join(dir, "mtp.gguf"),
  truncated: join(dir, "truncated.gguf"),
  badMagic: join(dir, "bad-magic.gguf"),
  refused: join(dir, "refused.gguf"),
  badConfig: join(dir, "bad-config.gguf"),
  other: join(dir, "other-arch.gguf"),
  big: join(dir, "qwen35-27b-mtp-header-only.gguf"),
  moe: join(dir, "qwen35moe-35b-a3b-header-only.gguf"),
};

beforeAll(async () => {
  await writeQwen35HeaderOnly(files.big, { ...QWEN35_27B_SHAPE, mtp: true });
  await writeQwen35HeaderOnly(files.moe, QWEN35_35B_A3B_SHAPE, { types: qwen35Q4KMClassMix(41, false) });
  expectBuiltCli();
  const good = synthesizeQwen35(QWEN35_TEST_SHAPE);
  writeFileSync(files.good, good);
  writeFileSync(files.mtp, synthesizeQwen35({ ...QWEN35_TEST_SHAPE, mtp: true }));
  writeFileSync(files.truncated, good.subarray(0, 3000));
  writeFileSync(files.badMagic, Buffer.concat([Buffer.from("GGML"), Buffer.from(good.subarray(4))]));
  const { metadata, tensors } = qwen35SpecLayout(QWEN35_TEST_SHAPE);
  const list = tensors.map((t) => ({ name: t.name, type: GgmlType.F32, ne: [...t.ne] }));
  list.find((t) => t.name === "blk.0.ssm_out.weight")!.ne = [64, 256];
  writeFileSync(files.refused, writeGguf({ metadata, tensors: list.map((t) => ({ ...t, data: new Uint8Array(tensorByteLength(t)) })) }));
  writeFileSync(files.badConfig, writeGguf({ metadata: metadata.filter((e) => e.key !== "qwen35.embedding_length"), tensors: [] }));
  writeFileSync(
    files.other,
    writeGguf({
      metadata: [gguf.str("general.architecture", "llama")],
      tensors: [{ name: "w", type: GgmlType.F32, ne: [4], data: new Uint8Array(16) }],
    }),
  );
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function run(...args: string[]) {
  return spawnCli(args, { ...process.env, KEEPQUANT_DEBUG: "" });
}

function expectNoStack(text: string): void {
  expect(text).not.toMatch(/^\s+at /m);
  expect(text).not.toContain("node:internal");
}

describe("keepquant inspect", () => {
  it("prints architecture, hyperparameters, tensor counts, bytes and the plan", () => {
    const r = run("inspect", files.good);
    expect(r.code).toBe(0);
    expect(r.stderr).toBe("");
    expect(r.stdout).toMatch(/architecture\s+qwen35/);
    expect(r.stdout).toContain("3 GDN + 1 attention (attention at 3)");
    expect(r.stdout).toContain("Hk 2, Hv 4");
    expect(r.stdout).toMatch(/rms eps\s+0\.000001$/m);
    expect(r.stdout).toMatch(/tensors\s+\d+ \(\d+ F32\)/);
    expect(r.stdout).toMatch(/used\s+\d+ tensors/);
  });

  it("--json: one document with version, architecture, metadata, tensors, plan, diagnostics", async () => {
    const r = run("inspect", files.mtp, "--json");
    expect(r.code).toBe(0);
    const doc = JSON.parse(r.stdout);
    expect(doc.version).toBe(3);
    expect(doc.architecture).toBe("qwen35");
    expect(doc.metadata["qwen35.block_count"]).toEqual({ type: "u32", value: 5 });
    expect(doc.metadata["tokenizer.ggml.tokens"]).toMatchObject({ type: "arr", itemType: "str", length: 512, truncated: true });
    expect(doc.tensors[0]).toEqual({
      name: "token_embd.weight",
      type: "F32",
      ne: [256, 512],
      shape: [512, 256],
      offset: expect.any(Number),
      byteLength: 512 * 256 * 4,
    });
    const skipped = doc.plan.skipped as { name: string; byteLength: number }[];
    expect(skipped.length).toBe(15);
    expect(skipped.every((s) => s.name.startsWith("blk.4."))).toBe(true);
    const loud = doc.diagnostics.find((d: { code: string }) => d.code === "MTP_SKIPPED");
    expect(loud.bytes).toBe(skipped.reduce((a, s) => a + s.byteLength, 0));
    expect(doc.plan.used.length + skipped.length).toBe(doc.tensors.length);
    const withMtp = JSON.parse(run("inspect", files.mtp, "--json", "--mtp").stdout);
    expect(withMtp.plan.skipped).toEqual([]);
  });

  it("--tensors lists every tensor; --sha256 hashes the file", () => {
    const r = run("inspect", files.good, "--tensors", "--sha256");
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/blk\.0\.ssm_a\s+F32\s+\[4\]/);
    expect(r.stdout).toMatch(/token_embd\.weight\s+F32\s+\[512, 256\]/);
    const sha = createHash("sha256").update(readFileSync(files.good)).digest("hex");
    expect(r.stdout).toContain(`sha256        ${sha}`);
    expect(JSON.parse(run("inspect", files.good, "--json", "--sha256").stdout).sha256).toBe(sha);
  });

  it("a 27B header-only (sparse, ~54 GB) file with MTP: plan lists the 15 skipped MTP tensors with bytes", () => {
    const r = run("inspect", files.big);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain("block_count 65 (trunk 64 + MTP 1)");
    expect(r.stdout).toContain("48 GDN + 16 attention");
    expect(r.stdout).toMatch(/skipped\s+15 tensors/);
    expect(r.stdout).toMatch(/blk\.64\.nextn\.eh_proj\.weight\s+209715200 B/); // 10240 x 5120 f32
    expect(r.stdout).toContain("warning: MTP_SKIPPED");
  });

  it("a qwen35moe (35B-A3B header-only) file: the experts, their widths and the expert tower's bytes by type", () => {
    const r = run("inspect", files.moe);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain("hyperparameters (qwen35moe)");
    expect(r.stdout).toMatch(/routed\s+256 experts, 8 used per token, width 512/);
    expect(r.stdout).toMatch(/shared\s+1 expert, width 512, sigmoid-gated/);
    expect(r.stdout).toMatch(/tower\s+\d+ B \(\d+\.\d\d GiB\) \(Q4_K \d+ B .*Q6_K \d+ B/);
    const doc = JSON.parse(run("inspect", files.moe, "--json").stdout);
    expect(doc.experts).toMatchObject({ count: 256, usedPerToken: 8, expertWidth: 512, sharedWidth: 512 });
    const tower = doc.tensors
      .filter((t: { name: string }) => /^blk\.\d+\.ffn_(gate|up|down)_exps\.weight$/.test(t.name) && !t.name.startsWith("blk.40."))
      .reduce((a: number, t: { byteLength: number }) => a + t.byteLength, 0);
    expect(doc.experts.towerBytes).toBe(tower);
    expect(doc.plan.ok).toBe(true);
  });

  it("a non-qwen35 file is inspected without a plan", () => {
    const r = run("inspect", files.other, "--json");
    expect(r.code).toBe(0);
    const doc = JSON.parse(r.stdout);
    expect(doc.architecture).toBe("llama");
    expect(doc.plan).toBeNull();
    expect(doc.diagnostics[0].code).toBe("NO_PLAN");
  });

  for (const [label, file, code] of [
    ["truncated file", "truncated", "GGUF_TRUNCATED"],
    ["bad magic", "badMagic", "GGUF_BAD_MAGIC"],
    ["missing file", "missing", "MODEL_NOT_FOUND"],
  ] as const) {
    it(`${label}: exit 1, one error line, JSON error document, no stack`, () => {
      const path = file === "missing" ? join(dir, "nope.gguf") : files[file];
      const r = run("inspect", path);
      expect(r.code).toBe(1);
      expect(r.stdout).toBe("");
      expect(r.stderr.trimEnd().split("\n")).toHaveLength(1);
      expect(r.stderr).toMatch(new RegExp(`^error: ${code}: .+`));
      expectNoStack(r.stderr);
      const j = run("inspect", path, "--json");
      expect(j.code).toBe(1);
      const doc = JSON.parse(j.stdout);
      expect(doc.error.code).toBe(code);
      expect(typeof doc.error.message).toBe("string");
      expect("offset" in doc.error).toBe(true);
      if (code === "GGUF_BAD_MAGIC") expect(doc.error.offset).toBe(0);
    });
  }

  it("a qwen35 file with refused tensors: report printed, exit 1, error line names the tensor", () => {
    const r = run("inspect", files.refused, "--json");
    expect(r.code).toBe(1);
    const doc = JSON.parse(r.stdout);
    expect(doc.plan.refused).toEqual([
      { name: "blk.0.ssm_out.weight", reason: "wrong shape: ne [64, 256], expected ne [128, 256]", expectedNe: [128, 256] },
    ]);
    expect(r.stderr).toMatch(/^error: QWEN35_PLAN_REFUSED: .*blk\.0\.ssm_out\.weight/);
  });

  it("--json on a file the engine cannot load: stdout's document carries the same error as stderr's line", () => {
    for (const [file, code] of [
      [files.refused, "QWEN35_PLAN_REFUSED"],
      [files.badConfig, "QWEN35_MISSING_KEY"],
    ] as const) {
      const r = run("inspect", file, "--json");
      expect(r.code, file).toBe(1);
      const doc = JSON.parse(r.stdout) as { error: { code: string; message: string; offset: number | null }; tensorCount: number };
      expect(doc.error.code).toBe(code);
      expect("offset" in doc.error).toBe(true);
      expect(typeof doc.tensorCount).toBe("number"); // the partial report is still there
      expect(r.stderr.trim()).toBe(`error: ${doc.error.code}: ${doc.error.message}`);
    }
    // a loadable file has no error object
    expect("error" in JSON.parse(run("inspect", files.good, "--json").stdout)).toBe(false);
  });

  it("parity on a directory or a non-GGUF file gives the typed error inspect gives", () => {
    for (const target of [dir, files.badMagic]) {
      const inspected = run("inspect", target);
      const parity = run("parity", target, "--goldens", dir);
      expect(inspected.code).toBe(1);
      expect(parity.code).toBe(1);
      expect(parity.stderr).toMatch(/^error: GGUF_[A-Z_]+: /);
      expect(parity.stderr).toBe(inspected.stderr);
      expectNoStack(parity.stderr);
    }
  });

  it("a qwen35 file with a missing key: exit 1 naming the key", () => {
    const r = run("inspect", files.badConfig);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^error: QWEN35_MISSING_KEY: qwen35\.embedding_length/m);
    expectNoStack(r.stderr);
  });

  it("usage errors exit 2; help exits 0", () => {
    expect(run().code).toBe(2);
    expect(run("--help").code).toBe(0);
    expect(run("inspect", "--help").stdout).toContain("--sha256");
    const unknown = run("frobnicate");
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toMatch(/^error: USAGE: unknown command "frobnicate"/);
    expect(run("inspect").code).toBe(2);
    expect(run("inspect", files.good, "--bogus").code).toBe(2);
  });
});
