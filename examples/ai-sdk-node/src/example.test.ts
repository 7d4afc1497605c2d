/** The example app runs as a user runs it (`node index.mjs`) and prints what it says it does. */
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const exampleDir = fileURLToPath(new URL("../", import.meta.url));

describe("examples/ai-sdk-node", () => {
  it("node index.mjs answers, streams, runs three calls at once, fills a schema, calls a tool and aborts one, leaving every KV block free", () => {
    const result = spawnSync(process.execPath, ["index.mjs"], { cwd: exampleDir, encoding: "utf8" });
    expect(result.status, result.stderr).toBe(0);
    expect(result.stderr).toBe("");
    const out = result.stdout;
    expect(out).toMatch(/^assistant: \S/m);
    const usage = /^usage: (\d+) prompt tokens, (\d+) output tokens; finish: (stop|length)$/m.exec(out);
    expect(usage, out).not.toBeNull();
    expect(Number(usage![1])).toBeGreaterThan(0);
    expect(Number(usage![2])).toBeGreaterThan(0);
    const streamed = /^streamed in (\d+) deltas; finish: (stop|length)$/m.exec(out);
    expect(Number(streamed?.[1])).toBeGreaterThan(1);
    for (const question of ["What is love?", "Why is the sky blue?", "Say something wise."]) expect(out).toContain(`${question} -> `);
    const object = /^object: (.*)$/m.exec(out);
    const parsed = JSON.parse(object![1]!) as { mood: string; lucky: boolean };
    expect(["happy", "sad", "calm"]).toContain(parsed.mood);
    expect(typeof parsed.lucky).toBe("boolean");
    expect(out).toMatch(/^tool weather\(\{"city":"(Oslo|Paris|Lima)"\}\) -> \{"city":"\1","celsius":-?\d+\}$/m);
    expect(out).toMatch(/^aborted after 5 deltas$/m);
    const kv = /^KV blocks free after the calls: (\d+) of (\d+)$/m.exec(out);
    expect(kv, out).not.toBeNull();
    expect(kv![1]).toBe(kv![2]);
  });
});
