/**
 * Facts about the embedded default model, read from the code (packages/default-model's
 * default-model.json) and checked against what the docs say about it: a paragraph (or table row)
 * that speaks of the embedded/default model must not give it another size, another sha256, a parity
 * fixture's name, or call it synthetic when it is not.
 */
import fs from "node:fs";
import path from "node:path";

export interface DefaultModelFacts {
  name: string;
  bytes: number;
  sha256: string;
  synthetic: boolean;
}

export interface DocProblem {
  file: string;
  line: number;
  problem: string;
}

export function readDefaultModelFacts(repoRoot: string): DefaultModelFacts {
  const json = JSON.parse(
    fs.readFileSync(path.join(repoRoot, "packages", "default-model", "default-model.json"), "utf8"),
  ) as DefaultModelFacts;
  return { name: json.name, bytes: json.bytes, sha256: json.sha256, synthetic: json.synthetic };
}

/** Names of the parity fixtures (goldens/parity/manifest.json): the default model's former identity. */
export function readFixtureNames(repoRoot: string): string[] {
  const manifest = JSON.parse(fs.readFileSync(path.join(repoRoot, "goldens", "parity", "manifest.json"), "utf8")) as {
    fixtures: { name: string }[];
  };
  return manifest.fixtures.map((f) => f.name);
}

const MENTIONS = /\bembedded\b|\bdefault model\b|@keepquant\/default-model|Engine\.loadDefault/i;
const MENTIONS_ALL = new RegExp(MENTIONS.source, "gi");
/** A size counts as the default model's when it follows a mention within this many characters (same sentence). */
const SIZE_WINDOW = 200;
const SIZE = /(\d+(?:\.\d+)?)\s*(MB|MiB)\b/g;
const SHA256 = /\b[0-9a-f]{64}\b/g;
/** "synthetic" as a word (a backticked `synthetic` is the JSON field), and words that make it about something else or the past. */
const SYNTHETIC = /\bsynthetic\b/i;
const NOT_ABOUT_NOW = /\b(not|no longer|former(ly)?|earlier|was|until|fixtures?)\b/i;

/** Sentences of a block (a code line is one). */
function sentences(text: string): string[] {
  return text.split(/(?<=[.!?])\s+(?=[A-Z`(*])/);
}

/** Blocks of text separated by blank lines; each table row is a block of its own. Lines are 1-based. */
function blocks(text: string): { line: number; text: string }[] {
  const out: { line: number; text: string }[] = [];
  let current: { line: number; lines: string[] } | undefined;
  const flush = (): void => {
    if (current) out.push({ line: current.line, text: current.lines.join("\n") });
    current = undefined;
  };
  let fenced = false;
  text.split("\n").forEach((line, i) => {
    if (line.trimStart().startsWith("```")) {
      flush();
      fenced = !fenced;
      return;
    }
    if (line.trim() === "") return flush();
    if (fenced || line.trimStart().startsWith("|")) {
      flush();
      out.push({ line: i + 1, text: line });
      return;
    }
    if (!current) current = { line: i + 1, lines: [] };
    current.lines.push(line);
  });
  flush();
  return out;
}

/** The problems in one document's text. */
export function checkDefaultModelMentions(file: string, text: string, facts: DefaultModelFacts, fixtures: readonly string[]): DocProblem[] {
  const problems: DocProblem[] = [];
  for (const block of blocks(text)) {
    const add = (problem: string): void => {
      problems.push({ file, line: block.line, problem });
    };
    for (const sentence of sentences(block.text)) {
      if (!MENTIONS.test(sentence)) continue;
      const near = (index: number): boolean =>
        [...sentence.matchAll(MENTIONS_ALL)].some((m) => m.index! <= index && index - m.index! <= SIZE_WINDOW);
      for (const match of sentence.matchAll(SIZE)) {
        if (!near(match.index!)) continue;
        const stated = Number(match[1]);
        const decimals = match[1]!.split(".")[1]?.length ?? 0;
        const actual = facts.bytes / (match[2] === "MiB" ? 2 ** 20 : 1e6);
        if (Math.abs(stated - actual) > 0.5 * 10 ** -decimals + 1e-12)
          add(`says ${match[0]}; the default model is ${actual.toFixed(2)} ${match[2]} (${facts.bytes} bytes)`);
      }
      for (const match of sentence.matchAll(SHA256)) {
        if (match[0] !== facts.sha256) add(`gives sha256 ${match[0]}; the default model's is ${facts.sha256}`);
      }
      for (const fixture of fixtures) {
        if (new RegExp(`\\b${fixture.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}\\b`).test(sentence))
          add(`names the parity fixture ${fixture} beside the default model, which is ${facts.name}`);
      }
      const words = sentence.replace(/`[^`]*`/g, ""); // code spans: field names such as `synthetic`
      if (!facts.synthetic && SYNTHETIC.test(words) && !NOT_ABOUT_NOW.test(words))
        add(`calls the default model synthetic; ${facts.name} is not (default-model.json: synthetic false)`);
    }
  }
  return problems;
}

/** The documents checked: the usage chapters, the READMEs and DEFAULT-MODEL.md (BENCHMARKS.md records past runs as they were). */
export function documentsToCheck(repoRoot: string): string[] {
  const usage = fs
    .readdirSync(path.join(repoRoot, "docs", "usage"))
    .filter((f) => f.endsWith(".md"))
    .map((f) => path.join("docs", "usage", f));
  const readmes = fs
    .readdirSync(path.join(repoRoot, "packages"))
    .map((p) => path.join("packages", p, "README.md"))
    .filter((f) => fs.existsSync(path.join(repoRoot, f)));
  return ["README.md", path.join("docs", "DEFAULT-MODEL.md"), ...usage, ...readmes];
}
