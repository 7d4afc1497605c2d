/**
 * The built package (dist, bundled by tsup) runs the grammar worker, and an idle grammar worker never
 * keeps a process alive: a script that compiles a constraint and never disposes its engine exits.
 */
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { beforeAll, describe, expect, it } from "vitest";

const dist = fileURLToPath(new URL("../../dist/index.js", import.meta.url));

beforeAll(() => {
  if (!existsSync(dist)) throw new Error(`${dist} is missing: run \`pnpm --filter @keepquant/engine build\` first`);
});

describe("the grammar worker from the built package", () => {
  it("a constrained generation works and the process exits without dispose, printing nothing of its own", () => {
    const script = `
      import { Engine } from ${JSON.stringify(dist)};
      const engine = await Engine.loadDefault({ maxSequences: 1 });
      const refused = await engine.prepareConstraint({ type: "grammar", ebnf: "root ::= (" }).catch((error) => error.code);
      const result = await engine.generateToEnd("Hi", { maxTokens: 40, constraint: { type: "grammar", ebnf: 'root ::= "ok" [0-9]' } });
      process.stdout.write(JSON.stringify({ refused, text: result.text }));
    `;
    const child = spawnSync(process.execPath, ["--input-type=module", "-e", script], { encoding: "utf8", timeout: 60_000 });
    expect(child.signal).toBeNull();
    expect(child.status).toBe(0);
    expect(child.stderr).toBe("");
    const out = JSON.parse(child.stdout) as { refused: string; text: string };
    expect(out.refused).toBe("CONSTRAINT_BAD_GRAMMAR");
    expect(out.text).toMatch(/^ok[0-9]$/);
  }, 90_000);
});
