import fs from "node:fs";
import path from "node:path";

/** Variables that belong to the platform, not to keepquant; they need no entry in docs/USAGE.md. */
export const PLATFORM_VARIABLES: ReadonlySet<string> = new Set([
  "CI",
  "NODE_ENV",
  "HOME",
  "PATH",
  "TERM",
  "NO_COLOR",
  "FORCE_COLOR",
  "TMPDIR",
  "LD_LIBRARY_PATH",
]);

const SOURCE_EXTENSIONS = new Set([".ts", ".mts", ".js", ".mjs", ".cc", ".cpp", ".h", ".hpp"]);
const SKIPPED_FOLDERS = new Set(["node_modules", "dist", "build", ".turbo", ".cache", ".git"]);
/** tsup's bundled config, written and deleted while a package builds (turbo builds packages side by side). */
const TRANSIENT_FILE = /\.bundled_[^.]*\.mjs$/;

/** Patterns for reads: process.env dot or bracket access, `env.<NAME>` on an env parameter, and getenv. */
const READ_PATTERNS: readonly RegExp[] = [
  /process\.env\.([A-Z][A-Z0-9_]+)/g,
  /process\.env\[\s*["'`]([A-Z][A-Z0-9_]+)["'`]\s*\]/g,
  /\benv(?:ironment)?\s*(?:\?\.|\.)\s*([A-Z][A-Z0-9_]{2,})/g,
  /\benv(?:ironment)?\s*\[\s*["'`]([A-Z][A-Z0-9_]+)["'`]\s*\]/g,
  /getenv\(\s*"([A-Z][A-Z0-9_]+)"\s*\)/g,
];

export interface EnvironmentRead {
  readonly variable: string;
  readonly file: string;
  readonly line: number;
}

function* sourceFiles(folder: string): Generator<string> {
  for (const entry of fs.readdirSync(folder, { withFileTypes: true })) {
    if (SKIPPED_FOLDERS.has(entry.name)) continue;
    const full = path.join(folder, entry.name);
    if (entry.isDirectory()) yield* sourceFiles(full);
    else if (SOURCE_EXTENSIONS.has(path.extname(entry.name)) && !/\.test\.ts$/.test(entry.name) && !TRANSIENT_FILE.test(entry.name))
      yield full;
  }
}

/** Every environment variable read by non-test source under `roots` (relative to `repoRoot`). */
export function findEnvironmentReads(repoRoot: string, roots: readonly string[]): EnvironmentRead[] {
  const reads: EnvironmentRead[] = [];
  for (const root of roots) {
    const folder = path.join(repoRoot, root);
    if (!fs.existsSync(folder)) continue;
    for (const file of sourceFiles(folder)) {
      let source: string;
      try {
        source = fs.readFileSync(file, "utf8");
      } catch (error) {
        // a build running beside the scan removed it after the listing: nothing left to read
        if ((error as NodeJS.ErrnoException).code === "ENOENT") continue;
        throw error;
      }
      const lines = source.split("\n");
      lines.forEach((text, index) => {
        const onLine = new Set<string>();
        for (const pattern of READ_PATTERNS) {
          for (const match of text.matchAll(pattern)) {
            const variable = match[1];
            if (variable && !PLATFORM_VARIABLES.has(variable)) onLine.add(variable);
          }
        }
        for (const variable of onLine) reads.push({ variable, file: path.relative(repoRoot, file), line: index + 1 });
      });
    }
  }
  return reads;
}

/** The reads whose variable is not named in the documentation text. */
export function undocumentedReads(reads: readonly EnvironmentRead[], documentation: string): EnvironmentRead[] {
  return reads.filter((read) => !new RegExp(`\\b${read.variable}\\b`).test(documentation));
}
