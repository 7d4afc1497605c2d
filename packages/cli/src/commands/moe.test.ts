import { existsSync, mkdtempSync, rmSync } from "node:fs";
import os, { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readGoldensFile } from "@keepquant/engine/parity";
import { parityFixture } from "@keepquant/fixtures";
import { FIXTURE_CACHE_DIR, parityFixtureFile } from "@keepquant/fixtures/oracle";
import { QWEN35_397B_A17B_SHAPE, qwen35Q4KMClassMix, readGguf, writeQwen35HeaderOnly } from "@keepquant/gguf";
import { llamaUnavailableReason } from "@keepquant/oracle";
import { CLI_BIN, GOLDEN_RUN_FLAGS, serveInDescribe, spawnCli, expectBuiltCli } from "./test-support.js";

const _bin = CLI_BIN;
const repoRoot = fileURLToPath(new URL("../../../../", import.meta.url));
const goldensDir = path.join(repoRoot, "goldens", "parity");
const cache = mkdtempSync(path.join(tmpdir(), "kq-moe-cli-"));
const env = { ...process.env, KEEPQUANT_CACHE_DIR: cache, KEEPQUANT_DEBUG: "", CI: "1" };
const FIXTURE = "moe-4l-e8k2-q4_k_m";
let model = "";

// the Q4_K_M fixture is made by llama.cpp's quantizer (the oracle) unless it is cached
const oracle = llamaUnavailableReason();
const reason =
  oracle && !existsSync(path.join(FIXTURE_CACHE_DIR, parityFixture(FIXTURE).file))
    ? `fixture ${FIXTURE} not cached and no quantizer: ${oracle}`
    : undefined;

beforeAll(async () => {
  expectBuiltCli();
  // checked against the manifest's sha256 (a mismatch throws)
  if (!reason) model = await parityFixtureFile(parityFixture(FIXTURE));
});
afterAll(() => rmSync(cache, { recursive: true, force: true }));

function cli(input: string, ...args: string[]) {
  return spawnCli(args, env, input);
}

describe.skipIf(reason !== undefined)(`keepquant on a qwen35moe file${reason ? ` (skipped: ${reason})` : ""}`, () => {
  it("run: greedy tokens are llama.cpp's goldens (F32 K/V, flash attention off, as the goldens were made)", async () => {
    expect((await readGguf(model)).metadata.get("general.architecture")?.value).toBe("qwen35moe");
    const goldens = readGoldensFile(path.join(goldensDir, `${FIXTURE}.json`));
    for (const golden of goldens.prompts.slice(0, 3)) {
      const r = cli(
        "",
        "run",
        model,
        "--prompt-ids",
        golden.ids.join(","),
        "--max-tokens",
        String(golden.tokens.length),
        ...GOLDEN_RUN_FLAGS,
      );
      expect(r.code, r.stderr).toBe(0);
      const doc = JSON.parse(r.stdout) as { tokens: number[]; providers: Record<string, string> };
      expect(doc.tokens).toEqual(golden.tokens);
      expect(doc.providers.step).toMatch(/^native-step-/);
    }
  });

  it("parity: every golden prompt STRICT, exit 0", () => {
    const r = cli("", "parity", model, "--goldens", goldensDir, "--json");
    expect(r.code, r.stdout + r.stderr).toBe(0);
    const report = JSON.parse(r.stdout) as { fixture: string; strict: number; total: number; passed: boolean };
    expect(report).toMatchObject({ fixture: FIXTURE, strict: 16, total: 16, passed: true });
  });

  it("chat: answers each stdin line, deterministically at temperature 0", () => {
    const input = "Hello there\nSecond question?\n";
    const first = cli(input, "chat", model, "--max-tokens", "6", "--temperature", "0");
    expect(first.code, first.stderr).toBe(0);
    expect(first.stdout.split("\n").length - 1).toBe(2);
    expect(cli(input, "chat", model, "--max-tokens", "6", "--temperature", "0").stdout).toBe(first.stdout);
  });

  it("bench: runs, and its decode efficiency counts the bytes of 2 of the 8 experts a token reads", async () => {
    const r = cli("", "bench", model, "--prompt", "16", "--gen", "8", "--repeat", "1", "--threads", "1", "--json");
    expect(r.code, r.stderr).toBe(0);
    const doc = JSON.parse(r.stdout) as { model: { weightBytesPerToken: number }; decodeTokensPerSecond: number };
    expect(doc.decodeTokensPerSecond).toBeGreaterThan(0);
    const gguf = await readGguf(model);
    const experts = gguf.tensors.filter((t) => t.name.endsWith("_exps.weight")).reduce((a, t) => a + t.byteLength, 0);
    const all = gguf.tensors.reduce((a, t) => a + t.byteLength, 0);
    expect(experts).toBeGreaterThan(0);
    // a token reads at most the whole file minus the 6 of 8 experts it skips
    expect(doc.model.weightBytesPerToken).toBeLessThanOrEqual(all - experts * (6 / 8));
    expect(doc.model.weightBytesPerToken).toBeGreaterThan(experts * (2 / 8));
  });

  describe("serve", () => {
    const served = serveInDescribe(() => model, env);
    const { complete } = served;
    const metric = async (name: string): Promise<number> => {
      const metrics = await (await fetch(`${served.url()}/metrics`)).text();
      return Number(new RegExp(`^${name} (\\S+)$`, "m").exec(metrics)?.[1]);
    };
    const prompts = ["Once upon a time", "The quick brown fox", "## Installation\n\nRun", "In the beginning"];

    it("answers 4 concurrent requests (one batch) as it answers each alone", async () => {
      const alone: string[] = [];
      for (const p of prompts) alone.push(await complete(p));
      const together = await Promise.all(prompts.map((p) => complete(p)));
      expect(together).toEqual(alone);
      expect(new Set(alone).size).toBeGreaterThan(1);
    });

    it("a repeated long prompt hits the prefix cache and gets the same greedy text", async () => {
      const prompt = "Once upon a time there was a little dog who lived in a house by the sea and";
      const hits = (await metric("keepquant_prefix_cache_hits_total")) || 0;
      const first = await complete(prompt, 16);
      expect(await complete(prompt, 16)).toBe(first);
      expect(await metric("keepquant_prefix_cache_hits_total")).toBeGreaterThan(hits);
    });

    it("an aborted stream leaves the server serving: the next request gets the same text as before", async () => {
      const before = await complete(prompts[0]!);
      const controller = new AbortController();
      const response = await fetch(`${served.url()}/v1/completions`, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ prompt: prompts[1], max_tokens: 200, temperature: 0, stream: true }),
        signal: controller.signal,
      });
      const reader = response.body!.getReader();
      expect((await reader.read()).done).toBe(false);
      controller.abort();
      await expect(reader.read()).rejects.toThrow();
      expect(await complete(prompts[0]!)).toBe(before);
      expect((await fetch(`${served.url()}/health`)).status).toBe(200);
    });
  });
});

const bigMachine = os.totalmem() > 200e9;
describe.skipIf(bigMachine)(
  `a qwen35moe file that does not fit (the 397B-A17B preset, header-only Q4_K_M-class)${bigMachine ? " (skipped: this machine has the memory for it)" : ""}`,
  () => {
    it("run, chat and serve refuse it before loading, with the planner's verdict and what would make it fit (exit 1)", async () => {
      const file = path.join(cache, "qwen35moe-397b-a17b-header-only.gguf");
      await writeQwen35HeaderOnly(file, QWEN35_397B_A17B_SHAPE, { types: qwen35Q4KMClassMix(QWEN35_397B_A17B_SHAPE.layers + 1, false) });
      try {
        for (const args of [
          ["run", file, "--prompt", "hi", "--max-tokens", "2"],
          ["chat", file, "--max-tokens", "2"],
          ["serve", file, "--port", "0"],
        ]) {
          const r = cli("hi\n", ...args);
          expect(r.code, `${args[0]}: ${r.stderr}`).toBe(1);
          expect(r.stderr).toMatch(/PLAN_DOES_NOT_FIT: .* does not fit: needs \d+\.\d\d GiB/);
          expect(r.stderr).toMatch(/Would fit with: /);
        }
      } finally {
        rmSync(file, { force: true });
      }
    });
  },
);
