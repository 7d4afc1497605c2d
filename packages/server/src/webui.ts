/**
 * The web chat page: static files shipped in the package's `webui/` folder (no CDN, no build step),
 * read once at startup and served from memory. `index.html` is served on `/` too.
 */
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

export interface StaticFile {
  body: Buffer;
  contentType: string;
}

const CONTENT_TYPES: Record<string, string> = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".svg": "image/svg+xml",
  ".png": "image/png",
  ".ico": "image/x-icon",
};

/** The package's webui folder: beside dist/ in the package, or copied into a bundle's dist/. */
export function defaultWebUiDir(): string | undefined {
  const here = path.dirname(fileURLToPath(import.meta.url));
  for (const candidate of [path.join(here, "webui"), path.join(here, "..", "webui")]) {
    if (fs.existsSync(path.join(candidate, "index.html"))) return candidate;
  }
  return undefined;
}

/** URL path -> file, for every servable file of `dir` (top level only). */
export function loadWebUi(dir = defaultWebUiDir()): Map<string, StaticFile> {
  const files = new Map<string, StaticFile>();
  if (!dir) return files;
  for (const name of fs.readdirSync(dir)) {
    const contentType = CONTENT_TYPES[path.extname(name)];
    const full = path.join(dir, name);
    if (!contentType || !fs.statSync(full).isFile()) continue;
    const file = { body: fs.readFileSync(full), contentType };
    files.set(`/${name}`, file);
    if (name === "index.html") files.set("/", file);
  }
  return files;
}
