import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { ASSEMBLED_DOCUMENTS, assembleDocument, demoteHeadings } from "./assemble-docs.js";

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");

describe("assembled docs", () => {
  it("moves a fragment's top heading to ## and leaves fenced code alone", () => {
    expect(demoteHeadings("# A\ntext\n```sh\n# a comment\n```\n## B")).toBe("## A\ntext\n```sh\n# a comment\n```\n### B");
    expect(demoteHeadings("## A\n### B")).toBe("## A\n### B");
  });

  for (const document of ASSEMBLED_DOCUMENTS) {
    it(`${document.target} is current with ${document.fragmentFolder}/ (run \`pnpm docs\`)`, () => {
      const written = fs.readFileSync(path.join(repoRoot, document.target), "utf8");
      expect(written).toBe(assembleDocument(repoRoot, document));
    });
  }
});
