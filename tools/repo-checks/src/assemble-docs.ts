import fs from "node:fs";
import path from "node:path";

/**
 * docs/USAGE.md and docs/BENCHMARKS.md are assembled from per-package fragments (docs/usage/*.md,
 * docs/benchmarks/*.md) behind a fixed head, so each package documents itself in its own file and the
 * two entry documents never drift from them. `pnpm docs:assemble` rewrites them; a test checks they are current.
 */
export interface AssembledDocument {
  readonly target: string;
  readonly head: string;
  readonly fragmentFolder: string;
}

export const ASSEMBLED_DOCUMENTS: readonly AssembledDocument[] = [
  { target: "docs/USAGE.md", head: "docs/usage/_head.md", fragmentFolder: "docs/usage" },
  { target: "docs/BENCHMARKS.md", head: "docs/benchmarks/_head.md", fragmentFolder: "docs/benchmarks" },
];

const GENERATED_NOTE = "<!-- Assembled by `pnpm docs:assemble` from the files beside it in {folder}/; edit those. -->\n\n";

/** Shift every Markdown heading outside fenced code so the fragment's top heading becomes `##`. */
export function demoteHeadings(markdown: string): string {
  const lines = markdown.split("\n");
  let fenced = false;
  const isHeading = lines.map((line) => {
    if (/^\s*(```|~~~)/.test(line)) fenced = !fenced;
    return !fenced && /^#+ /.test(line);
  });
  const levels = lines.filter((_line, index) => isHeading[index]).map((line) => line.indexOf(" "));
  const shift = levels.length === 0 ? 0 : 2 - Math.min(...levels);
  return lines
    .map((line, index) => {
      if (!isHeading[index] || shift === 0) return line;
      const level = Math.max(1, line.indexOf(" ") + shift);
      return "#".repeat(level) + line.slice(line.indexOf(" "));
    })
    .join("\n");
}

export function assembleDocument(repoRoot: string, document: AssembledDocument): string {
  const folder = path.join(repoRoot, document.fragmentFolder);
  const fragments = fs
    .readdirSync(folder)
    .filter((name) => name.endsWith(".md") && !name.startsWith("_"))
    .sort();
  const head = fs.readFileSync(path.join(repoRoot, document.head), "utf8").trimEnd();
  const parts = [head, GENERATED_NOTE.replace("{folder}", document.fragmentFolder).trimEnd()];
  for (const name of fragments) {
    const text = fs.readFileSync(path.join(folder, name), "utf8").trimEnd();
    // Fragments start at "# "; inside the assembled document each becomes a "## " section.
    parts.push(demoteHeadings(text));
  }
  return parts.join("\n\n") + "\n";
}
