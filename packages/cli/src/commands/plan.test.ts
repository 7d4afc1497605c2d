import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { QWEN35_0_8B_SHAPE, QWEN35_27B_SHAPE, qwen35Q4KMClassMix, writeQwen35HeaderOnly } from "@keepquant/gguf";
import { parseByteSize } from "./plan.js";
import { expectBuiltCli, CLI_BIN } from "./test-support.js";

const bin = CLI_BIN;
const repoRoot = fileURLToPath(new URL("../../../../", import.meta.url));
const dir = mkdtempSync(path.join(tmpdir(), "kq-plan-"));
// The files docs/usage/cli-plan.md plans (scripts/planner/header-only-examples.ts writes the same).
const small = "qwen35-0.8b-q4_k_m-class.gguf";
const big = "qwen35-27b-q4_k_m-class.gguf";

beforeAll(async () => {
  expectBuiltCli();
  await writeQwen35HeaderOnly(path.join(dir, small), QWEN35_0_8B_SHAPE, { types: qwen35Q4KMClassMix(24, true) });
  await writeQwen35HeaderOnly(path.join(dir, big), QWEN35_27B_SHAPE, { types: qwen35Q4KMClassMix(64, false) });
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Runs keepquant in the test folder, without the planner's environment variables unless given. */
function plan(args: string[], env: Record<string, string> = {}) {
  const clean = { ...process.env, KEEPQUANT_DEBUG: "", CI: "1" } as Record<string, string | undefined>;
  delete clean.KEEPQUANT_CHUNK_BYTES;
  delete clean.KEEPQUANT_TT_TRACE_REGION_MB;
  const result = spawnSync(process.execPath, [bin, "plan", ...args], { cwd: dir, encoding: "utf8", env: { ...clean, ...env } });
  return { code: result.status, stdout: result.stdout, stderr: result.stderr };
}

interface PlanDocument {
  fits: boolean;
  totalBytes: number;
  capacityBytes: number;
  headroomBytes: number;
  classes: { id: string; label: string; bytes: number; detail: string }[];
  chunkPlane: { tensor: string; chunkRows: number; chunks: number; bytes: number } | null;
  verdict: string;
  suggestions: { kind: string; value: number | string }[];
  traceRegion: { policy: string; bytes: number };
  warnings: { code: string; variable?: string; value?: string }[];
  settings: { contextLength: number; sequences: number; policy: string; numerics: string };
}

describe("keepquant plan", () => {
  it("prints a table of classes, largest first, GiB with two decimals, the verdict last; exit 0 when it fits", () => {
    const r = plan([big, "--device", "tt-p150", "--ctx", "4096"]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toBe("");
    const lines = r.stdout.trimEnd().split("\n");
    expect(lines.at(-1)).toMatch(/^fits with \d+\.\d\d GiB headroom \(needs \d+\.\d\d GiB, tt-p150 has 29\.80 GiB\)$/);
    const header = lines.findIndex((l) => /^\s+class\s+GiB\s+detail$/.test(l));
    const total = lines.findIndex((l) => /^\s+total\s+\d+\.\d\d$/.test(l));
    const rows = lines.slice(header + 1, total).map((l) => Number(/\s(\d+\.\d\d)\s/.exec(l)![1]));
    expect(rows.length).toBe(8);
    expect([...rows].sort((a, b) => b - a)).toEqual(rows);
    expect(r.stdout).toMatch(/bf16 twins\s+2\.37\s+token_embd \(gathers\)/);
    expect(r.stdout).toMatch(/largest chunk plane\s+0\.59\s+output\.weight: 31040 of 248320 rows x 5120 f32, 8 chunks/);
  });

  it("--json: one document with every class in bytes", () => {
    const r = plan([big, "--device", "tt-p150", "--ctx", "4096", "--json"]);
    expect(r.code, r.stderr).toBe(0);
    const doc = JSON.parse(r.stdout) as PlanDocument;
    expect(doc.fits).toBe(true);
    expect(doc.capacityBytes).toBe(32e9);
    expect(doc.classes.find((c) => c.id === "twins")!.bytes).toBe(2_542_796_800);
    expect(doc.chunkPlane).toMatchObject({ tensor: "output.weight", chunkRows: 31_040, chunks: 8, bytes: 635_699_200 });
    expect(doc.totalBytes).toBe(doc.classes.reduce((sum, c) => sum + c.bytes, 0));
    expect(doc.headroomBytes).toBe(32e9 - doc.totalBytes);
    expect(doc.settings).toMatchObject({ contextLength: 4096, sequences: 1, policy: "packed", numerics: "bf16" });
  });

  it("exit 3 when it does not fit: twin-for-all on a tt-p150, anything on a tt-n150", () => {
    const twins = plan([big, "--device", "tt-p150", "--ctx", "4096", "--policy", "twin-for-all", "--json"]);
    expect(twins.code).toBe(3);
    const doc = JSON.parse(twins.stdout) as PlanDocument;
    expect(doc.fits).toBe(false);
    expect(doc.verdict).toMatch(/^does not fit: needs \d+\.\d\d GiB, tt-p150 has 29\.80 GiB; largest items: bf16 twins/);
    expect(doc.suggestions).toContainEqual(expect.objectContaining({ kind: "policy", value: "packed" }));
    for (const policy of ["packed", "twin-for-all", "packed-head-twin"]) {
      const r = plan([big, "--device", "tt-n150", "--policy", policy]);
      expect(r.code, policy).toBe(3);
      expect(r.stdout).toMatch(/^does not fit: .*largest items: /m);
    }
    expect(plan([small, "--device", "tt-n150"]).code).toBe(0);
  });

  it("--policy all: the three policies side by side, exit 0 when any fits and 3 when none does", () => {
    const r = plan([big, "--device", "tt-p150", "--policy", "all"]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/^\s+class \(GiB\)\s+packed\s+twin-for-all\s+packed-head-twin$/m);
    expect(r.stdout).toMatch(/^\s+bf16 twins\s+2\.37\s+50\.09\s+4\.74$/m);
    expect(r.stdout).toMatch(/^packed: fits with /m);
    expect(r.stdout).toMatch(/^twin-for-all: does not fit: /m);
    const doc = JSON.parse(plan([big, "--device", "tt-p150", "--policy", "all", "--json"]).stdout) as { plans: PlanDocument[] };
    expect(doc.plans.map((p) => [p.settings.policy, p.fits])).toEqual([
      ["packed", true],
      ["twin-for-all", false],
      ["packed-head-twin", true],
    ]);
    expect(plan([big, "--device", "tt-n150", "--policy", "all"]).code).toBe(3);
  });

  it("--memory SIZE plans any memory; --seqs and --ctx scale the KV cache and GDN state", () => {
    const one = JSON.parse(plan([big, "--memory", "1TB", "--json"]).stdout) as PlanDocument;
    const four = JSON.parse(plan([big, "--memory", "1TB", "--ctx", "8192", "--seqs", "4", "--json"]).stdout) as PlanDocument;
    const bytes = (doc: PlanDocument, id: string) => doc.classes.find((c) => c.id === id)!.bytes;
    expect(one.capacityBytes).toBe(1e12);
    expect(bytes(four, "kvCache")).toBe(8 * bytes(one, "kvCache"));
    expect(bytes(four, "gdnState")).toBe(4 * bytes(one, "gdnState"));
    expect(one.traceRegion).toMatchObject({ policy: "none", bytes: 0 });
  });

  it("an unusable KEEPQUANT_TT_TRACE_REGION_MB falls back to dynamic with a warning naming the variable and value", () => {
    const r = plan([small, "--device", "tt-n150", "--json"], { KEEPQUANT_TT_TRACE_REGION_MB: "lots" });
    expect(r.code).toBe(0);
    expect(r.stderr).toMatch(/^warning: TRACE_REGION_FALLBACK: KEEPQUANT_TT_TRACE_REGION_MB="lots" is unusable \(it is not a number\)/);
    const doc = JSON.parse(r.stdout) as PlanDocument;
    expect(doc.traceRegion.policy).toBe("dynamic");
    expect(doc.warnings).toEqual([expect.objectContaining({ variable: "KEEPQUANT_TT_TRACE_REGION_MB", value: "lots" })]);
    const fixed = JSON.parse(
      plan([small, "--device", "tt-n150", "--json"], { KEEPQUANT_TT_TRACE_REGION_MB: "100" }).stdout,
    ) as PlanDocument;
    expect(fixed.traceRegion).toMatchObject({ policy: "fixed", bytes: 100 * 1024 * 1024 });
  });

  it("exit 1 with one error line for a bad file or bad arguments", () => {
    writeFileSync(path.join(dir, "not-gguf.gguf"), "hello");
    const cases: [string[], RegExp][] = [
      [["not-gguf.gguf"], /^error: GGUF_\w+: /],
      [["missing.gguf"], /^error: MODEL_NOT_FOUND: model file not found: missing\.gguf/],
      [[big, "--device", "tt-x1"], /^error: USAGE: --device "tt-x1": expected cpu, tt-n150, tt-n300, tt-p100a, tt-p150/],
      [[big, "--ctx", "0"], /^error: USAGE: --ctx "0": expected an integer >= 1/],
      [[big, "--memory", "lots"], /^error: USAGE: --memory "lots": expected a size/],
      [[big, "--policy", "twins"], /^error: USAGE: --policy "twins": expected packed, twin-for-all, packed-head-twin, all/],
      [[big, "--device", "tt-n150", "--numerics", "llama"], /^error: PLAN_BAD_INPUT: numerics "llama" has no Tenstorrent arm/],
      [[big, "--bogus"], /^error: USAGE: Unknown option '--bogus'/],
      [[big, "--speculative", "mtp", "--draft-tokens", "9"], /^error: USAGE: --draft-tokens "9": expected an integer in \[1, 8\]/],
      [[big, "--draft-tokens", "2"], /^error: USAGE: --draft-tokens needs --speculative mtp/],
    ];
    for (const [args, pattern] of cases) {
      const r = plan(args);
      expect(r.code, args.join(" ")).toBe(1);
      expect(r.stderr, args.join(" ")).toMatch(pattern);
      expect(r.stderr.trim().split("\n")).toHaveLength(1);
    }
  });

  it("parseByteSize: decimal and binary units, plain bytes", () => {
    expect(parseByteSize("32GB")).toBe(32e9);
    expect(parseByteSize("24g")).toBe(24e9);
    expect(parseByteSize("1.5TB")).toBe(1.5e12);
    expect(parseByteSize("512MiB")).toBe(512 * 2 ** 20);
    expect(parseByteSize("2GiB")).toBe(2 ** 31);
    expect(parseByteSize("12e9")).toBe(12e9);
    expect(parseByteSize("4096")).toBe(4096);
    for (const bad of ["", "0", "-1GB", "12 parsecs", "GB"]) expect(() => parseByteSize(bad), bad).toThrow(/--memory/);
  });
});

describe("docs/usage/cli-plan.md", () => {
  it("shows exactly what the command prints and returns on the 0.8B and 27B header-only files", () => {
    const doc = readFileSync(path.join(repoRoot, "docs", "usage", "cli-plan.md"), "utf8");
    const blocks = [...doc.matchAll(/```console\n\$ keepquant plan (.*)\n([\s\S]*?)\n\$ echo \$\?\n(\d+)\n```/g)];
    expect(blocks.length).toBe(5);
    for (const [, args, output, code] of blocks) {
      const r = plan(args!.split(" "));
      expect(r.stdout.trimEnd(), args).toBe(output);
      expect(String(r.code), args).toBe(code);
    }
  });
});
