/**
 * The harness stays out of the product: the import boundaries between packages/, tools/ and scripts/.
 *
 * - A non-test file under `packages/<name>/src` (test files are `*.test.ts`) imports neither the
 *   private oracle (`@keepquant/oracle`, or anything that needs it: `@keepquant/goldens`, an
 *   `@keepquant/<name>/oracle` subpath) nor any `testing` export (`@keepquant/<name>/testing`).
 * - No other non-test file under `packages/<name>/` (`bench/`, `scripts/`, `fuzz/`, configs; not
 *   node_modules or build output) imports the oracle or anything that needs it either: what needs
 *   the oracle lives under `tools/` (benchmarks: tools/bench) or in `*.test.ts` files.
 * - A file under `tools/` or `scripts/` reaches a package only through its public exports: no
 *   specifier (relative or not) that names `packages/<name>/src`.
 */
import fs from "node:fs";
import path from "node:path";

const SOURCE_EXTENSIONS = new Set([".ts", ".mts", ".cts", ".js", ".mjs", ".cjs"]);
const SKIPPED_FOLDERS = new Set(["node_modules", "dist", "build", ".turbo", ".cache", ".git"]);

/** `from "x"`, `import "x"`, `import("x")`, `require("x")`, `export ... from "x"`. */
const SPECIFIER_PATTERNS: readonly RegExp[] = [
  /\bfrom\s+["'`]([^"'`]+)["'`]/g,
  /\bimport\s+["'`]([^"'`]+)["'`]/g,
  /\bimport\s*\(\s*["'`]([^"'`]+)["'`]\s*\)/g,
  /\brequire\s*\(\s*["'`]([^"'`]+)["'`]\s*\)/g,
];

export interface ImportSite {
  readonly file: string;
  readonly line: number;
  readonly specifier: string;
}

export interface BoundaryViolation extends ImportSite {
  readonly rule: string;
}

function* sourceFiles(folder: string): Generator<string> {
  if (!fs.existsSync(folder) || !fs.statSync(folder).isDirectory()) return;
  for (const entry of fs.readdirSync(folder, { withFileTypes: true })) {
    if (SKIPPED_FOLDERS.has(entry.name)) continue;
    const full = path.join(folder, entry.name);
    if (entry.isDirectory()) yield* sourceFiles(full);
    else if (SOURCE_EXTENSIONS.has(path.extname(entry.name)) && !entry.name.endsWith(".d.ts")) yield full;
  }
}

/** Blanks out comments (keeping line breaks), so that a specifier named in a comment is not an import. */
function stripComments(text: string): string {
  return text.replace(/\/\*[\s\S]*?\*\//g, (c) => c.replace(/[^\n]/g, " ")).replace(/(^|[^:"'`\\])\/\/[^\n]*/g, "$1");
}

/** Every import specifier in `file` with its line. */
export function importSites(file: string, root: string): ImportSite[] {
  const text = stripComments(fs.readFileSync(file, "utf8"));
  const sites: ImportSite[] = [];
  for (const pattern of SPECIFIER_PATTERNS) {
    for (const match of text.matchAll(pattern)) {
      const line = text.slice(0, match.index).split("\n").length;
      sites.push({ file: path.relative(root, file), line, specifier: match[1]! });
    }
  }
  return sites.sort((a, b) => a.line - b.line);
}

const isTestFile = (file: string): boolean => /\.test\.[cm]?[jt]s$/.test(file);

/** What `specifier` is if it is the private oracle or needs it (`@keepquant/goldens`, an `@keepquant/<name>/oracle` subpath), or undefined. */
function oracleKind(specifier: string): string | undefined {
  if (specifier === "@keepquant/oracle" || specifier.startsWith("@keepquant/oracle/")) return "the private oracle";
  if (specifier === "@keepquant/goldens" || specifier.startsWith("@keepquant/goldens/")) return "the oracle-backed goldens";
  if (/^@keepquant\/[^/]+\/oracle(\/|$)/.test(specifier)) return "an oracle-backed export";
  return undefined;
}

/** Why `specifier` may not be imported by product code (a non-test file under packages/<name>/src), or undefined. */
export function productImportRule(specifier: string): string | undefined {
  const oracle = oracleKind(specifier);
  if (oracle) return `product code imports ${oracle}`;
  if (/^@keepquant\/[^/]+\/testing(\/|$)/.test(specifier)) return "product code imports a testing export";
  return undefined;
}

/** Why `specifier` may not be imported by a non-test file under packages/<name>/ outside src (bench/, scripts/, ...), or undefined. */
export function packageFileImportRule(specifier: string): string | undefined {
  const oracle = oracleKind(specifier);
  if (oracle) return `a file of a published package imports ${oracle} (move it under tools/, e.g. tools/bench, or into a *.test.ts file)`;
  return undefined;
}

/** Why `specifier`, imported by `file` under tools/ or scripts/, bypasses a package's public exports, or undefined. */
export function toolImportRule(file: string, specifier: string, root: string): string | undefined {
  const target = specifier.startsWith(".") ? path.relative(root, path.resolve(path.dirname(path.join(root, file)), specifier)) : specifier;
  const normalized = target.split(path.sep).join("/");
  if (/(^|\/)packages\/[^/]+\/src(\/|$)/.test(normalized)) return "tools/ and scripts/ import a package's src by path (use its exports)";
  return undefined;
}

/** Every boundary violation in the repository at `root`. */
export function importBoundaryViolations(root: string): BoundaryViolation[] {
  const violations: BoundaryViolation[] = [];
  const packages = path.join(root, "packages");
  for (const name of fs.existsSync(packages) ? fs.readdirSync(packages) : []) {
    const src = path.join(packages, name, "src");
    for (const file of sourceFiles(path.join(packages, name))) {
      if (isTestFile(file)) continue;
      const inSrc = file.startsWith(src + path.sep);
      for (const site of importSites(file, root)) {
        const rule = inSrc ? productImportRule(site.specifier) : packageFileImportRule(site.specifier);
        if (rule) violations.push({ ...site, rule });
      }
    }
  }
  for (const folder of ["tools", "scripts"]) {
    for (const file of sourceFiles(path.join(root, folder))) {
      for (const site of importSites(file, root)) {
        const rule = toolImportRule(site.file, site.specifier, root);
        if (rule) violations.push({ ...site, rule });
      }
    }
  }
  return violations;
}
