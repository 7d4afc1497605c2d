/**
 * `keepquant serve` stopped by SIGTERM with streams running and queued: the queued ones get a 503 (their
 * 200 headers were never sent), the running ones cut at the drain timeout end with an error event, a
 * finish_reason and [DONE], and the process exits 0.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { spawnServe, expectBuiltCli, CLI_BIN } from "./test-support.js";

const bin = CLI_BIN;
const cache = mkdtempSync(path.join(tmpdir(), "kq-serve-drain-"));

beforeAll(() => {
  expectBuiltCli();
});
afterAll(() => rmSync(cache, { recursive: true, force: true }));

/** The `data:` payloads of an SSE body. */
async function events(response: Response, onFirst: () => void): Promise<string[]> {
  const out: string[] = [];
  const reader = response.body!.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return out;
    buffer += decoder.decode(value, { stream: true });
    for (let cut = buffer.indexOf("\n\n"); cut >= 0; cut = buffer.indexOf("\n\n")) {
      const event = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      if (event.startsWith("data: ")) out.push(event.slice(6));
      onFirst();
    }
  }
}

describe("keepquant serve drain (SIGTERM)", () => {
  it("queued streams get 503 shutting_down; running streams cut at --drain-timeout end with an error event, finish_reason abort, [DONE]; exit 0", async () => {
    const { child, url, stderr, exit } = await spawnServe(
      bin,
      ["serve", "--port", "0", "--threads", "1", "--no-webui", "--max-seqs", "2", "--drain-timeout", "0"],
      { ...process.env, KEEPQUANT_CACHE_DIR: cache, KEEPQUANT_DEBUG: "", KEEPQUANT_MEMORY_BUDGET: "", CI: "1" },
    );
    try {
      const stream = () =>
        fetch(`${url}/v1/completions`, {
          method: "POST",
          headers: { "Content-Type": "application/json" },
          body: JSON.stringify({ prompt: "Once upon a time", max_tokens: 1900, ignore_eos: true, stream: true }),
        });
      // two sequences: two streams run, two wait in the engine
      const running = await Promise.all([stream(), stream()]);
      const started: Promise<void>[] = [];
      const bodies = running.map((response) => {
        let first!: () => void;
        started.push(new Promise<void>((resolve) => (first = resolve)));
        return events(response, () => first());
      });
      await Promise.all(started);
      const queued = [stream(), stream()];
      for (;;) {
        const metrics = await (await fetch(`${url}/metrics`)).text();
        if (/^keepquant_requests_waiting 2$/m.test(metrics)) break;
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      child.kill("SIGTERM");
      for (const response of await Promise.all(queued)) {
        expect(response.status).toBe(503);
        expect(response.headers.get("retry-after")).toBe("1");
        expect(((await response.json()) as { error: { code: string } }).error.code).toBe("shutting_down");
      }
      for (const received of await Promise.all(bodies)) {
        const [error, finish, done] = received.slice(-3);
        expect(done).toBe("[DONE]");
        expect((JSON.parse(error!) as { error: { code: string } }).error.code).toBe("shutting_down");
        expect((JSON.parse(finish!) as { choices: { finish_reason: string }[] }).choices[0]!.finish_reason).toBe("abort");
      }
      expect(await exit).toBe(0);
      expect(stderr()).toMatch(/SIGTERM, draining 4 request\(s\)/);
    } finally {
      if (child.exitCode === null) child.kill("SIGKILL");
    }
  });
});
