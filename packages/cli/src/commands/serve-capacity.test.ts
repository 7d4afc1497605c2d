/**
 * `keepquant serve` sizes its concurrency and KV cache from the planner and a memory budget: the start
 * line says what it chose, /metrics and /v1/models show it, explicit flags win, bad values are usage errors.
 */
import { type ChildProcess, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import os, { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { spawnServe, expectBuiltCli, CLI_BIN } from "./test-support.js";

const bin = CLI_BIN;
const cache = mkdtempSync(path.join(tmpdir(), "kq-serve-capacity-"));
const env = { ...process.env, KEEPQUANT_CACHE_DIR: cache, KEEPQUANT_DEBUG: "", CI: "1", KEEPQUANT_MEMORY_BUDGET: "" };

beforeAll(() => {
  expectBuiltCli();
});
afterAll(() => rmSync(cache, { recursive: true, force: true }));

/** Starts `keepquant serve --port 0 ...`, resolves once ready with its stderr so far; the caller stops it. */
async function serve(args: string[], extraEnv: Record<string, string> = {}): Promise<{ child: ChildProcess; url: string; stderr: string }> {
  const started = await spawnServe(bin, ["serve", "--port", "0", "--threads", "1", "--no-webui", ...args], { ...env, ...extraEnv });
  return { child: started.child, url: started.url, stderr: started.stderr() };
}

async function stop(child: ChildProcess): Promise<void> {
  const exited = new Promise((resolve) => child.once("exit", resolve));
  child.kill("SIGTERM");
  await exited;
}

const gauge = (text: string, name: string): number => Number(new RegExp(`^${name} (\\S+)$`, "m").exec(text)?.[1]);

describe("keepquant serve capacity", () => {
  it("plans the most sequences the budget holds (the embedded model: the cap), says so, and shows it in /metrics and /v1/models", async () => {
    const { child, url, stderr } = await serve(["--memory-budget", "4GiB", "--ctx", "1024"]);
    try {
      const line =
        /keepquant serve: capacity: (\d+) sequences \(the cap of 32\), KV cache (\d+) tokens, planned ([\d.]+) GiB of a 4\.00 GiB budget \(--memory-budget\)/.exec(
          stderr,
        );
      expect(line, stderr).not.toBeNull();
      expect(Number(line![1])).toBe(32);
      expect(Number(line![2])).toBe(32 * 1024);
      const metrics = await (await fetch(`${url}/metrics`)).text();
      expect(gauge(metrics, "keepquant_capacity_max_sequences")).toBe(32);
      expect(gauge(metrics, "keepquant_capacity_kv_cache_tokens")).toBe(32 * 1024);
      expect(gauge(metrics, "keepquant_capacity_memory_budget_bytes")).toBe(4 * 1024 ** 3);
      expect(gauge(metrics, "keepquant_capacity_planned_bytes")).toBeGreaterThan(0);
      expect(gauge(metrics, "keepquant_gdn_state_slots_total")).toBeGreaterThanOrEqual(32);
      const models = (await (await fetch(`${url}/v1/models`)).json()) as { data: { meta: { max_sequences: number } }[] };
      expect(models.data[0]!.meta.max_sequences).toBe(32);
    } finally {
      await stop(child);
    }
  });

  it("keeps explicit --max-seqs and --kv-tokens, and reads the budget from KEEPQUANT_MEMORY_BUDGET", async () => {
    const { child, url, stderr } = await serve(["--max-seqs", "3", "--kv-tokens", "5000", "--ctx", "1024"], {
      KEEPQUANT_MEMORY_BUDGET: "2GiB",
    });
    try {
      expect(stderr).toMatch(
        /capacity: 3 sequences \(--max-seqs\), KV cache 5000 tokens \(--kv-tokens\), planned [\d.]+ GiB of a 2\.00 GiB budget \(KEEPQUANT_MEMORY_BUDGET\)/,
      );
      const metrics = await (await fetch(`${url}/metrics`)).text();
      expect(gauge(metrics, "keepquant_capacity_max_sequences")).toBe(3);
      expect(gauge(metrics, "keepquant_capacity_kv_cache_tokens")).toBe(5000);
    } finally {
      await stop(child);
    }
  });

  it("refuses a bad budget, a KV cache below the context and --threads out of range, naming the range", () => {
    const run = (args: string[], extraEnv: Record<string, string> = {}) =>
      spawnSync(process.execPath, [bin, "serve", "--port", "0", ...args], { env: { ...env, ...extraEnv }, encoding: "utf8" });
    const budget = run(["--memory-budget", "lots"]);
    expect(budget.status).toBe(2);
    expect(budget.stderr).toMatch(/--memory-budget "lots": expected a size in bytes, e.g. 4GiB/);
    const fromEnv = run([], { KEEPQUANT_MEMORY_BUDGET: "-3" });
    expect(fromEnv.status).toBe(2);
    expect(fromEnv.stderr).toMatch(/KEEPQUANT_MEMORY_BUDGET "-3": expected a size in bytes/);
    const kv = run(["--ctx", "1024", "--kv-tokens", "512"]);
    expect(kv.status).toBe(2);
    expect(kv.stderr).toMatch(/--kv-tokens 512: at least the context \(--ctx 1024\)/);
    const most = Math.min(1024, 4 * os.availableParallelism());
    const threads = run(["--threads", String(most + 1)]);
    expect(threads.status).toBe(2);
    expect(threads.stderr).toContain(`--threads "${most + 1}": expected an integer in [1, ${most}] (at most 4x the`);
    const forced = run(["--threads", "1025", "--force"]);
    expect(forced.status).toBe(2);
    expect(forced.stderr).toContain('--threads "1025": expected an integer in [1, 1024]');
    const bench = spawnSync(process.execPath, [bin, "bench", "--threads", String(most + 1)], { env, encoding: "utf8" });
    expect(bench.status).toBe(2);
    expect(bench.stderr).toContain(`--threads "${most + 1}": expected an integer in [1, ${most}]`);
  });
});
