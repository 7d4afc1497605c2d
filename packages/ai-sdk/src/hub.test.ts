/** An `hf:` model id through the provider: fetched from a loopback mock Hub into a temporary Hugging Face cache. */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { defaultModelPath } from "@keepquant/default-model";
import { startMockHub, type MockHub, mockHubEnv } from "@keepquant/hub/testing";
import { generateText } from "ai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createKeepquant } from "./index.js";

let hub: MockHub;
let dir: string;
const keepquant = createKeepquant({ defaults: { threads: 1 } });

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "keepquant-ai-sdk-hub-"));
  hub = await startMockHub({ "keepquant/Default-GGUF": { files: { "default-Q4_K_M.gguf": fs.readFileSync(await defaultModelPath()) } } });
});

afterAll(async () => {
  await keepquant.dispose();
  await hub.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

describe("hf: model ids", () => {
  it("downloads the model into the cache and generates what the same file generates by path", async () => {
    const env = mockHubEnv(hub, dir);
    const fromHub = await generateText({
      model: keepquant("hf:keepquant/Default-GGUF", { engine: { hub: { env } } }),
      prompt: "Hi",
      maxOutputTokens: 8,
    });
    const byPath = await generateText({ model: keepquant("default"), prompt: "Hi", maxOutputTokens: 8 });
    expect(fromHub.text.length).toBeGreaterThan(0);
    expect(fromHub.text).toBe(byPath.text);
    expect(fs.readdirSync(path.join(dir, "hub", "models--keepquant--Default-GGUF", "blobs"))).toHaveLength(1);
  });
});
