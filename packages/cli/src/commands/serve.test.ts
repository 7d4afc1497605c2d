import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { defaultModelInfo } from "@keepquant/default-model";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type ServeProcess, spawnServe, expectBuiltCli, CLI_BIN } from "./test-support.js";

const bin = CLI_BIN;
const cache = mkdtempSync(path.join(tmpdir(), "kq-serve-"));
const env = { ...process.env, KEEPQUANT_CACHE_DIR: cache, KEEPQUANT_DEBUG: "", CI: "1" };

beforeAll(() => {
  expectBuiltCli();
});
afterAll(() => rmSync(cache, { recursive: true, force: true }));

/** Starts `keepquant serve --port 0 ...` and resolves once it says ready. */
function serve(args: string[], extraEnv: Record<string, string> = {}): Promise<ServeProcess> {
  return spawnServe(bin, ["serve", "--port", "0", "--threads", "1", ...args], { ...env, ...extraEnv });
}

describe("keepquant serve", () => {
  it("serves the embedded model with the key from KEEPQUANT_API_KEY; SIGTERM drains an in-flight stream and exits 0", async () => {
    const server = await serve(["--max-seqs", "2", "--drain-timeout", "120"], { KEEPQUANT_API_KEY: "sekrit" });
    try {
      expect(server.stderr()).toMatch(/embedded qwen35 model/);
      expect((await fetch(`${server.url}/health`)).status).toBe(200);
      expect((await fetch(`${server.url}/v1/models`)).status).toBe(401);
      const auth = { Authorization: "Bearer sekrit" };
      const models = (await (await fetch(`${server.url}/v1/models`, { headers: auth })).json()) as {
        data: { id: string; meta: { synthetic: boolean; max_sequences: number } }[];
      };
      expect(models.data[0]).toMatchObject({
        id: defaultModelInfo().name,
        meta: { synthetic: defaultModelInfo().synthetic, max_sequences: 2 },
      });

      // a stream in flight when SIGTERM arrives still gets its whole answer
      const response = await fetch(`${server.url}/v1/completions`, {
        method: "POST",
        headers: { ...auth, "Content-Type": "application/json" },
        body: JSON.stringify({
          prompt: "Once upon a time",
          max_tokens: 96,
          temperature: 0,
          ignore_eos: true, // 96 tokens whatever the model's text: the default model's greedy fortune ends sooner
          stream: true,
          stream_options: { include_usage: true },
        }),
      });
      const reader = response.body!.getReader();
      const first = await reader.read();
      expect(first.done).toBe(false);
      server.child.kill("SIGTERM");
      let text = new TextDecoder().decode(first.value);
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        text += new TextDecoder().decode(value);
      }
      expect(text.trimEnd().endsWith("data: [DONE]")).toBe(true);
      const usage = text
        .split("\n")
        .filter((line) => line.startsWith("data: {"))
        .map((line) => JSON.parse(line.slice(6)) as { usage?: { completion_tokens: number } | null })
        .find((chunk) => chunk.usage)?.usage;
      expect(usage?.completion_tokens).toBe(96);
      expect(await server.exit).toBe(0);
      expect(server.stderr()).toMatch(/SIGTERM, draining 1 request/);
      expect(server.stderr()).toMatch(/stopped/);
      // nothing listens any more
      await expect(fetch(`${server.url}/health`)).rejects.toThrow();
    } finally {
      server.child.kill("SIGKILL");
    }
  });

  it("--speculative mtp --draft-vocab keeps the prefix cache: a repeated prompt hits it and gets the same greedy text", async () => {
    const server = await serve(["--no-webui", "--speculative", "mtp", "--draft-tokens", "2", "--draft-vocab", "1024"]);
    try {
      expect(server.stderr()).toMatch(/prefix cache \d+ snapshots/);
      const prompt = "Once upon a time there was a little dog who lived in a house by the sea and";
      const complete = async (): Promise<string> => {
        const response = await fetch(`${server.url}/v1/completions`, {
          method: "POST",
          headers: { "Content-Type": "application/json" },
          body: JSON.stringify({ prompt, max_tokens: 16, temperature: 0 }),
        });
        expect(response.status).toBe(200);
        return ((await response.json()) as { choices: { text: string }[] }).choices[0]!.text;
      };
      const first = await complete();
      expect(await complete()).toBe(first);
      const metrics = await (await fetch(`${server.url}/metrics`)).text();
      const value = (name: string): number => Number(new RegExp(`^${name} (\\S+)$`, "m").exec(metrics)?.[1]);
      expect(value("keepquant_prefix_cache_hits_total")).toBeGreaterThanOrEqual(1);
      expect(value("keepquant_spec_decode_draft_tokens_total")).toBeGreaterThan(0);
    } finally {
      server.child.kill("SIGKILL");
    }
  });

  it("SIGINT with nothing in flight exits 0; --no-webui turns the page off", async () => {
    const server = await serve(["--no-webui", "--no-prefix-cache"]);
    try {
      expect(server.stderr()).toMatch(/prefix cache off/);
      expect((await fetch(`${server.url}/`)).status).toBe(404);
      server.child.kill("SIGINT");
      expect(await server.exit).toBe(0);
    } finally {
      server.child.kill("SIGKILL");
    }
  });

  it("refuses bad options with exit 2 and a missing model with exit 1", () => {
    const run = (...args: string[]) => spawnSync(process.execPath, [bin, "serve", ...args], { env, encoding: "utf8" });
    for (const args of [
      ["--port", "http"],
      ["--numerics", "int4"],
      ["--kv-type", "q8"],
      ["--flash-attn", "maybe"],
      ["--max-seqs", "0"],
      ["--bogus"],
      ["--speculative", "eagle"],
      ["--speculative", "mtp", "--draft-tokens", "9"],
      ["--draft-tokens", "2"],
      ["--speculative", "mtp", "--draft-vocab", "0"],
      ["--draft-vocab", "100"],
    ]) {
      const r = run(...args);
      expect(r.status, args.join(" ")).toBe(2);
      expect(r.stderr).toMatch(/^error: USAGE: /m);
    }
    const missing = run("/nonexistent/model.gguf");
    expect(missing.status).toBe(1);
    expect(missing.stderr).toMatch(/MODEL_NOT_FOUND/);
    const tooLong = run("--ctx", "100000000");
    expect(tooLong.status).toBe(2);
    expect(tooLong.stderr).toMatch(/context_length is \d+/);
  });
});
