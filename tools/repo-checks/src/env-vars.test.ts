import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { findEnvironmentReads, undocumentedReads } from "./env-vars.js";

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");

describe("environment variables", () => {
  it("every variable read by packages/, tools/ or scripts/ is documented in docs/USAGE.md", () => {
    const reads = findEnvironmentReads(repoRoot, ["packages", "tools", "scripts"]);
    const usage = fs.readFileSync(path.join(repoRoot, "docs", "USAGE.md"), "utf8");
    const missing = undocumentedReads(reads, usage).map((read) => `${read.variable} (${read.file}:${read.line})`);
    expect(missing).toEqual([]);
  });

  it("the scanner finds reads in every supported form and flags undocumented ones", () => {
    const folder = fs.mkdtempSync(path.join(os.tmpdir(), "kq-env-"));
    fs.mkdirSync(path.join(folder, "src"));
    fs.writeFileSync(
      path.join(folder, "src", "a.ts"),
      'const a = process.env.KQ_ONE;\nconst b = process.env["KQ_TWO"];\nconst c = env.KQ_THREE;\nconst d = process.env.HOME;\n',
    );
    fs.writeFileSync(path.join(folder, "src", "b.cc"), 'const char* v = getenv("KQ_FOUR");\n');
    // tsup's transient bundled config (deleted while a parallel build runs) is not source
    fs.writeFileSync(path.join(folder, "src", "tsup.config.bundled_x1y2.mjs"), "const e = process.env.KQ_TRANSIENT;\n");
    const reads = findEnvironmentReads(folder, ["src"]);
    expect(reads.map((read) => read.variable).sort()).toEqual(["KQ_FOUR", "KQ_ONE", "KQ_THREE", "KQ_TWO"]);
    expect(
      undocumentedReads(reads, "KQ_ONE and KQ_FOUR are documented")
        .map((read) => read.variable)
        .sort(),
    ).toEqual(["KQ_THREE", "KQ_TWO"]);
    fs.rmSync(folder, { recursive: true });
  });
});
