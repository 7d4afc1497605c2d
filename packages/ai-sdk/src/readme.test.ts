/**
 * The README's example runs as written: each ```js block, as an ES module in a separate Node process from this
 * package's folder (so `@keepquant/ai-sdk` and `ai` resolve as they do for a user).
 */
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const packageDir = fileURLToPath(new URL("../", import.meta.url));
const readme = fs.readFileSync(new URL("../README.md", import.meta.url), "utf8");
const examples = [...readme.matchAll(/```js\n([\s\S]*?)```/g)].map((match) => match[1]!);

describe("README", () => {
  it("has a short JavaScript example", () => {
    expect(examples.length).toBeGreaterThan(0);
    for (const example of examples) expect(example.split("\n").filter((line) => line.trim() !== "").length).toBeLessThanOrEqual(10);
  });

  it.each(examples.map((example, i) => [i, example] as const))("example %i runs and prints the answer with its usage", (_i, example) => {
    const result = spawnSync(process.execPath, ["--input-type=module", "-e", example], { cwd: packageDir, encoding: "utf8" });
    expect(result.status, result.stderr).toBe(0);
    const usage = /\{ inputTokens: (\d+), outputTokens: (\d+), finishReason: '(stop|length)' \}/.exec(result.stdout);
    expect(usage, result.stdout).not.toBeNull();
    expect(Number(usage![1])).toBeGreaterThan(0);
    expect(Number(usage![2])).toBeGreaterThan(0);
    expect(result.stderr).toBe("");
  });
});
