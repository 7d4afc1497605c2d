/**
 * The Hugging Face cache layout, shared with huggingface-cli, huggingface_hub, llama.cpp and node-llama-cpp:
 *
 * ```
 * <cacheDir>/models--<owner>--<repo>/
 *   blobs/<sha256 or git blob id>          the bytes, once per content
 *   snapshots/<commit>/<path in repo>      symbolic links to ../../blobs/<id>
 *   refs/<revision>                        the commit a branch or tag pointed at when last fetched
 * ```
 *
 * A file another tool downloaded is found here and not fetched twice.
 */
import fs from "node:fs/promises";
import path from "node:path";

export function repoFolder(cacheDir: string, repo: string): string {
  return path.join(cacheDir, `models--${repo.replace("/", "--")}`);
}

export function blobPath(folder: string, blobId: string): string {
  return path.join(folder, "blobs", blobId);
}

export function snapshotPath(folder: string, commit: string, file: string): string {
  return path.join(folder, "snapshots", commit, ...file.split("/"));
}

/** The commit `refs/<revision>` holds; a 40-hex revision is its own commit. Undefined when not cached. */
export async function readRef(folder: string, revision: string): Promise<string | undefined> {
  if (/^[0-9a-f]{40}$/.test(revision)) return revision;
  try {
    const commit = (await fs.readFile(path.join(folder, "refs", ...revision.split("/")), "utf8")).trim();
    return /^[0-9a-f]{40}$/.test(commit) ? commit : undefined;
  } catch {
    return undefined;
  }
}

/** Records that `revision` points at `commit` (written to a temporary name and renamed). */
export async function writeRef(folder: string, revision: string, commit: string): Promise<void> {
  if (revision === commit) return;
  const file = path.join(folder, "refs", ...revision.split("/"));
  await fs.mkdir(path.dirname(file), { recursive: true });
  const temporary = `${file}.${process.pid}.tmp`;
  await fs.writeFile(temporary, commit);
  await fs.rename(temporary, file);
}

/** Links `snapshots/<commit>/<file>` to its blob by a relative link, as huggingface_hub does (atomically). */
export async function linkSnapshot(folder: string, commit: string, file: string, blobId: string): Promise<string> {
  const link = snapshotPath(folder, commit, file);
  await fs.mkdir(path.dirname(link), { recursive: true });
  const target = path.relative(path.dirname(link), blobPath(folder, blobId));
  const temporary = `${link}.${process.pid}.link`;
  await fs.rm(temporary, { force: true });
  await fs.symlink(target, temporary);
  await fs.rename(temporary, link);
  return link;
}

/** True when `file` is a complete, readable file (a link whose blob is there counts; a dangling one does not). */
export async function isPresent(file: string, size?: number): Promise<boolean> {
  try {
    const stats = await fs.stat(file);
    return stats.isFile() && (size === undefined || stats.size === size);
  } catch {
    return false;
  }
}

/** The files of a cached snapshot, as paths inside the repository (links whose blob is missing left out). */
export async function snapshotFiles(folder: string, commit: string): Promise<string[]> {
  const root = path.join(folder, "snapshots", commit);
  const entries = await fs.readdir(root, { recursive: true }).catch(() => [] as string[]);
  const files: string[] = [];
  for (const entry of entries) {
    const full = path.join(root, entry);
    if (await isPresent(full)) files.push(entry.split(path.sep).join("/"));
  }
  return files.sort();
}
