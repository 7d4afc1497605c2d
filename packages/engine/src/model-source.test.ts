import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { QWEN35_TEST_SHAPE, splitGgufBytes, synthesizeQwen35 } from "@keepquant/gguf";
import { startMockHub, type MockHub, mockHubEnv } from "@keepquant/hub/testing";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { Engine } from "./engine.js";
import { checkCpuLoad } from "./planner/index.js";

const MODEL = synthesizeQwen35(QWEN35_TEST_SHAPE);
const SHARDS = await splitGgufBytes(MODEL, 2);

let hub: MockHub;
let dir: string;
let env: Record<string, string>;

beforeEach(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "keepquant-engine-hub-"));
  hub = await startMockHub({
    "unsloth/Qwen3.5-Test-GGUF": { files: { "Qwen3.5-Test-Q4_K_M.gguf": MODEL } },
    "bartowski/Qwen3.5-Split-GGUF": {
      files: { "Qwen3.5-Split-Q8_0-00001-of-00002.gguf": SHARDS[0]!, "Qwen3.5-Split-Q8_0-00002-of-00002.gguf": SHARDS[1]! },
    },
  });
  env = mockHubEnv(hub, dir);
});

afterEach(async () => {
  await hub.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

describe("Engine.load with an hf: reference", () => {
  it("downloads the model into the Hugging Face cache and loads it; the second load is from the cache", async () => {
    const engine = await Engine.load("hf:unsloth/Qwen3.5-Test-GGUF", { provider: "ts", hub: { env } });
    try {
      expect((await engine.evaluate([1, 2]))[0]!.every(Number.isFinite)).toBe(true);
    } finally {
      engine.dispose();
    }
    const seen = hub.requests.length;
    const again = await Engine.load("hf:unsloth/Qwen3.5-Test-GGUF:q4_k_m", { provider: "ts", hub: { env } });
    again.dispose();
    expect(hub.requests.length).toBe(seen);
  });

  it("downloads every shard of a split model and loads them as one model", async () => {
    const engine = await Engine.load("hf:bartowski/Qwen3.5-Split-GGUF:Q8_0", { provider: "ts", hub: { env } });
    const whole = path.join(dir, "whole.gguf");
    fs.writeFileSync(whole, MODEL);
    const reference = await Engine.load(whole, { provider: "ts" });
    try {
      const [got, expected] = [await engine.evaluate([1, 2]), await reference.evaluate([1, 2])];
      got.forEach((row, i) => expect(Buffer.from(row.buffer).equals(Buffer.from(expected[i]!.buffer))).toBe(true));
    } finally {
      engine.dispose();
      reference.dispose();
    }
    const snapshots = path.join(dir, "hub", "models--bartowski--Qwen3.5-Split-GGUF", "snapshots");
    const [commit] = fs.readdirSync(snapshots);
    expect(fs.readdirSync(path.join(snapshots, commit!)).sort()).toEqual([
      "Qwen3.5-Split-Q8_0-00001-of-00002.gguf",
      "Qwen3.5-Split-Q8_0-00002-of-00002.gguf",
    ]);
  });

  it("the planner reads a header from a byte source and names it", async () => {
    const { BufferSource } = await import("@keepquant/gguf");
    const source = Object.assign(new BufferSource(MODEL), { description: "hf:x/y (model.gguf)" });
    const check = await checkCpuLoad(source, {}, { memory: { bytes: 64 * 2 ** 30, source: "test" } });
    expect(check.plan.fits).toBe(true);
    expect(check.explanation).toContain("hf:x/y (model.gguf) on this machine");
  });
});
