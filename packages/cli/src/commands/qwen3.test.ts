import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { qwen3FixtureFile } from "@keepquant/fixtures/qwen3";
import { readGguf } from "@keepquant/gguf";
import { llamaUnavailableReason, runOracle } from "@keepquant/oracle";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CLI_BIN, GOLDEN_RUN_FLAGS, spawnCli, serveInDescribe, expectBuiltCli } from "./test-support.js";

const _bin = CLI_BIN;
const cache = mkdtempSync(path.join(tmpdir(), "kq-qwen3-cli-"));
const env = { ...process.env, KEEPQUANT_CACHE_DIR: cache, KEEPQUANT_DEBUG: "", CI: "1" };
let model = "";

// the Q4_K_M fixture is made by llama.cpp's quantizer (the oracle), and run's tokens are checked against it
const oracle = llamaUnavailableReason();
const reason = oracle ? `the qwen3 fixture and its check need llama.cpp: ${oracle}` : undefined;

beforeAll(async () => {
  expectBuiltCli();
  if (!reason) model = await qwen3FixtureFile("qwen3-tied-4l", "Q4_K_M");
});
afterAll(() => rmSync(cache, { recursive: true, force: true }));

function cli(input: string, ...args: string[]) {
  return spawnCli(args, env, input);
}

describe.skipIf(reason !== undefined)(`keepquant on a qwen3 file${reason ? ` (skipped: ${reason})` : ""}`, () => {
  it("run: greedy tokens are llama.cpp's own greedy run (F32 K/V, flash attention off)", async () => {
    expect((await readGguf(model)).metadata.get("general.architecture")?.value).toBe("qwen3");
    const prompts = [
      [13, 3836, 3755, 1582, 3505, 1432, 3455],
      [5, 99, 1234],
    ];
    const expected = await runOracle(
      { kind: "greedy", model, prompts, nTokens: 12, kvType: "f32", repack: false, threads: 1 },
      { timeoutMs: 120_000 },
    );
    for (const [p, prompt] of prompts.entries()) {
      const r = cli("", "run", model, "--prompt-ids", prompt.join(","), "--max-tokens", "12", ...GOLDEN_RUN_FLAGS);
      expect(r.code, r.stderr).toBe(0);
      const doc = JSON.parse(r.stdout) as { tokens: number[]; providers: Record<string, string> };
      expect(doc.tokens).toEqual(expected.tokens[p]);
      expect(doc.providers.step).toMatch(/^native-step-/);
    }
  });

  it("parity: the committed qwen3 goldens (goldens/parity-qwen3), every prompt STRICT on both files", async () => {
    const goldens = fileURLToPath(new URL("../../../../goldens/parity-qwen3", import.meta.url));
    for (const [name, file] of [
      ["qwen3-tied-4l-q4_k_m", model],
      ["qwen3-untied-4l-q8_0", await qwen3FixtureFile("qwen3-untied-4l", "Q8_0")],
    ] as const) {
      const r = cli("", "parity", file, "--goldens", goldens, "--json");
      expect(r.code, r.stdout + r.stderr).toBe(0);
      const report = JSON.parse(r.stdout) as { fixture: string; strict: number; total: number; passed: boolean };
      expect(report).toMatchObject({ fixture: name, strict: 16, total: 16, passed: true });
    }
  });

  it("inspect: the qwen3 hyperparameters and a load plan", () => {
    const r = cli("", "inspect", model);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/hyperparameters \(qwen3\)/);
    expect(r.stdout).toMatch(/0 GDN \+ 4 attention/);
    expect(r.stdout).toMatch(/heads\s+4 q \/ 2 kv, head_dim 64/);
    // no Gated DeltaNet line for a model without GDN layers
    expect(r.stdout).not.toMatch(/^\s+gdn\s/m);
  });

  it("plan: 4 attention layers, no GDN layer, KV of 4 layers x K and V of 2 heads x 64 (f16) per token", () => {
    const r = cli("", "plan", model, "--ctx", "1024", "--seqs", "1", "--kv-type", "f16", "--json");
    expect(r.code, r.stderr).toBe(0);
    const doc = JSON.parse(r.stdout) as {
      model: { nLayer: number; attentionLayers: number; gdnLayers: number };
      classes: { id: string; bytes: number }[];
      fits: boolean;
    };
    expect(doc.model).toMatchObject({ nLayer: 4, attentionLayers: 4, gdnLayers: 0 });
    expect(doc.fits).toBe(true);
    expect(doc.classes.find((c) => c.id === "kvCache")?.bytes).toBe(4 * 2 * 2 * 64 * 2 * 1024);
    expect(doc.classes.find((c) => c.id === "gdnState")?.bytes ?? 0).toBe(0);
  });

  it("chat: answers each stdin line with the file's chat template, deterministically at temperature 0", () => {
    const input = "Hello there\nSecond question?\n";
    const first = cli(input, "chat", model, "--max-tokens", "6", "--temperature", "0");
    expect(first.code, first.stderr).toBe(0);
    expect(first.stdout.split("\n").length - 1).toBe(2);
    expect(cli(input, "chat", model, "--max-tokens", "6", "--temperature", "0").stdout).toBe(first.stdout);
  });

  it("bench: runs and reports decode speed", () => {
    const r = cli("", "bench", model, "--prompt", "16", "--gen", "8", "--repeat", "1", "--threads", "1", "--json");
    expect(r.code, r.stderr).toBe(0);
    const doc = JSON.parse(r.stdout) as { decodeTokensPerSecond: number; prefillTokensPerSecond: number };
    expect(doc.decodeTokensPerSecond).toBeGreaterThan(0);
    expect(doc.prefillTokensPerSecond).toBeGreaterThan(0);
  });

  describe("serve", () => {
    const served = serveInDescribe(() => model, env);
    const { complete } = served;

    it("answers 4 concurrent requests (one batch) as it answers each alone", async () => {
      const prompts = ["Once upon a time", "The quick brown fox", "## Installation\n\nRun", "In the beginning"];
      const alone: string[] = [];
      for (const p of prompts) alone.push(await complete(p));
      expect(await Promise.all(prompts.map((p) => complete(p)))).toEqual(alone);
    });

    it("chat completions render the file's chat template", async () => {
      const response = await fetch(`${served.url()}/v1/chat/completions`, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ messages: [{ role: "user", content: "Hello" }], max_tokens: 6, temperature: 0 }),
      });
      expect(response.status).toBe(200);
      const body = (await response.json()) as { usage: { prompt_tokens: number } };
      expect(body.usage.prompt_tokens).toBeGreaterThan(3);
    });

    it("a forced tool call comes back as a call in the template's format (JSON: the file's template has no <function=)", async () => {
      const tools = [
        {
          type: "function",
          function: {
            name: "get_weather",
            parameters: { type: "object", properties: { city: { type: "string", maxLength: 8 } }, required: ["city"] },
          },
        },
      ];
      const response = await fetch(`${served.url()}/v1/chat/completions`, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({
          messages: [{ role: "user", content: "Weather in Paris?" }],
          tools,
          tool_choice: "required",
          max_tokens: 64,
          temperature: 0,
        }),
      });
      expect(response.status).toBe(200);
      const body = (await response.json()) as {
        choices: { finish_reason: string; message: { tool_calls?: { function: { name: string; arguments: string } }[] } }[];
      };
      const call = body.choices[0]!.message.tool_calls?.[0];
      expect(call?.function.name, JSON.stringify(body)).toBe("get_weather");
      expect(typeof (JSON.parse(call!.function.arguments) as { city: unknown }).city).toBe("string");
      expect(body.choices[0]!.finish_reason).toBe("tool_calls");
    });
  });
});
