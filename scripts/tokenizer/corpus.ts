/** The training corpus: README / licence / markdown files of the packages under node_modules. */
import { createHash } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..");

export interface CorpusFile {
  file: string;
  sha256: string;
  bytes: number;
}

export function collectCorpus(): { files: CorpusFile[]; texts: string[] } {
  const store = path.join(ROOT, "node_modules", ".pnpm");
  const entries: { key: string; full: string }[] = [];
  for (const storeDir of fs.readdirSync(store)) {
    const modules = path.join(store, storeDir, "node_modules");
    if (!fs.existsSync(modules) || !fs.statSync(modules).isDirectory()) continue;
    // "<name>@<version>[_peers]" (scoped: "@scope+name@version")
    const at = storeDir.lastIndexOf("@");
    if (at <= 0) continue;
    const name = storeDir.slice(0, at).replace("+", "/");
    const version = storeDir.slice(at + 1).split("_")[0]!;
    const packageDir = path.join(modules, name);
    if (!fs.existsSync(packageDir)) continue;
    for (const file of fs.readdirSync(packageDir)) {
      if (!/^(readme|license|licence|changelog|history|notice)(\.|$)|\.md$/i.test(file)) continue;
      const full = path.join(packageDir, file);
      if (!fs.statSync(full).isFile()) continue;
      entries.push({ key: `${name}@${version}/${file}`, full });
    }
  }
  entries.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  const seen = new Set<string>();
  const files: CorpusFile[] = [];
  const texts: string[] = [];
  for (const entry of entries) {
    const bytes = fs.readFileSync(entry.full);
    const sha256 = createHash("sha256").update(bytes).digest("hex");
    if (seen.has(sha256)) continue;
    seen.add(sha256);
    files.push({ file: entry.key, sha256, bytes: bytes.length });
    texts.push(bytes.toString("utf8"));
  }
  return { files, texts };
}
