import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { checkDefaultModelMentions, documentsToCheck, readDefaultModelFacts, readFixtureNames } from "./default-model-docs.js";

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");

describe("what the docs say about the embedded default model", () => {
  it("matches default-model.json (name, size, sha256, synthetic or not) in the READMEs and docs/usage", () => {
    const facts = readDefaultModelFacts(repoRoot);
    const fixtures = readFixtureNames(repoRoot);
    const problems = documentsToCheck(repoRoot).flatMap((file) =>
      checkDefaultModelMentions(file, fs.readFileSync(path.join(repoRoot, file), "utf8"), facts, fixtures).map(
        (p) => `${p.file}:${p.line}: ${p.problem}`,
      ),
    );
    expect(problems).toEqual([]);
  });

  it("flags another size, a fixture's name, another sha256 and 'synthetic'; leaves other paragraphs alone", () => {
    const facts = { name: "keepquant-default-fortunes", bytes: 3_954_048, sha256: "a".repeat(64), synthetic: false };
    const text = [
      "The embedded default model is 3.95 MB (3.8 MiB rounds to 3.77).",
      "",
      "Without a model it uses the default model: the fixture `tied-4l-f32`, 15 MB.",
      "",
      `| \`model.gguf\` | the embedded SYNTHETIC model, sha256 ${"b".repeat(64)} |`,
      "",
      "A 27B model is 15 MB of header; tied-4l-f32 is a fixture.",
    ].join("\n");
    const problems = checkDefaultModelMentions("x.md", text, facts, ["tied-4l-f32"]);
    expect(problems.map((p) => [p.line, p.problem.split(";")[0]])).toEqual([
      [3, "says 15 MB"],
      [3, "names the parity fixture tied-4l-f32 beside the default model, which is keepquant-default-fortunes"],
      [5, `gives sha256 ${"b".repeat(64)}`],
      [5, "calls the default model synthetic"],
    ]);
  });
});
