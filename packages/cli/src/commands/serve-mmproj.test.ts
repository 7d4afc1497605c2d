/**
 * `keepquant serve --mmproj FILE`: the embedded default model (the parity fixture tied-4l-f32) with the synthetic F32
 * parity projector (written into a temporary folder, removed after). The server says it takes images; the image
 * options are refused without --mmproj.
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { writeParityProjector } from "@keepquant/fixtures/projector";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CLI_BIN, expectBuiltCli, spawnServe } from "./test-support.js";

const dir = mkdtempSync(path.join(tmpdir(), "kq-serve-mmproj-"));
const projector = path.join(dir, "mmproj-parity-f32.gguf");
const env = { ...process.env, KEEPQUANT_CACHE_DIR: path.join(dir, "cache"), KEEPQUANT_DEBUG: "", CI: "1" };

beforeAll(async () => {
  expectBuiltCli();
  await writeParityProjector(projector, "f32");
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("keepquant serve --mmproj", () => {
  it("loads the projector: /v1/models says images (and image URLs with --allow-image-urls); text requests are unchanged", async () => {
    const server = await spawnServe(
      CLI_BIN,
      ["serve", "--port", "0", "--threads", "1", "--no-webui", "--mmproj", projector, "--allow-image-urls", "--max-image-size", "4MiB"],
      env,
    );
    try {
      expect(server.stderr()).toMatch(/ready: .*images \(and image URLs\)/);
      const models = (await (await fetch(`${server.url}/v1/models`)).json()) as { data: { meta: Record<string, unknown> }[] };
      expect(models.data[0]!.meta).toMatchObject({ vision: true, image_urls: true });
      const chat = await fetch(`${server.url}/v1/chat/completions`, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ messages: [{ role: "user", content: "hi" }], max_tokens: 2, temperature: 0 }),
      });
      expect(chat.status).toBe(200);
      // an image over --max-image-size is refused before it is decoded
      const big = `data:image/png;base64,${Buffer.alloc(4 * 1024 * 1024 + 3).toString("base64")}`;
      const refused = await fetch(`${server.url}/v1/chat/completions`, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({
          messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: big } }] }],
          max_tokens: 2,
        }),
      });
      // the body limit (8 MiB) holds the 5.6 MB data URL; the image limit refuses it
      expect(refused.status).toBe(400);
      expect(((await refused.json()) as { error: { code: string } }).error.code).toBe("image_too_large");
      server.child.kill("SIGTERM");
      expect(await server.exit).toBe(0);
    } finally {
      server.child.kill("SIGKILL");
    }
  }, 120_000);

  it("refuses image options without --mmproj, a bad size, and a missing projector file with exit 2", () => {
    const run = (...args: string[]) => spawnSync(process.execPath, [CLI_BIN, "serve", ...args], { env, encoding: "utf8" });
    for (const [args, message] of [
      [["--allow-image-urls"], /need --mmproj FILE/],
      [["--max-image-size", "4MiB"], /need --mmproj FILE/],
      [["--mmproj", projector, "--max-image-size", "banana"], /--max-image-size "banana"/],
      [["--mmproj", projector, "--image-fetch-timeout", "-1"], /image-fetch-timeout/],
      [["--mmproj", path.join(dir, "missing.gguf")], /--mmproj .*no such file/],
    ] as const) {
      const r = run(...args);
      expect(r.status, args.join(" ")).toBe(2);
      expect(r.stderr).toMatch(/^error: USAGE: /m);
      expect(r.stderr).toMatch(message);
    }
  });
});
