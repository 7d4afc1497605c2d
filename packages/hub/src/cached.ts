import fs from "node:fs/promises";
import path from "node:path";
import { scanCacheDir } from "@huggingface/hub";
import { repoFolder, snapshotFiles } from "./cache.js";
import { hubConfig, type HubConfig, type HubEnvironment } from "./config.js";
import { HubError } from "./errors.js";
import { parseHubReference } from "./reference.js";
import { modelGroups, selectModel } from "./select.js";

/** One model in the cache: a GGUF file (or a split model's shards) of one repository snapshot. */
export interface CachedModel {
  /** `owner/repo`. */
  repo: string;
  commit: string;
  /** The branches and tags pointing at this commit. */
  refs: string[];
  /** The model's file name without a shard suffix. */
  name: string;
  quant: string | undefined;
  /** Local paths of its files (shards in order). */
  files: string[];
  /** Bytes of all its files. */
  size: number;
}

export interface CacheListing {
  cacheDir: string;
  models: CachedModel[];
  /** Repositories the scan could not read, with the reason. */
  warnings: string[];
}

/** The GGUF models in the Hugging Face cache (any tool's downloads), found by @huggingface/hub's cache scan. */
export async function listCachedModels(options: { env?: HubEnvironment; config?: HubConfig } = {}): Promise<CacheListing> {
  const config = options.config ?? hubConfig(options.env);
  const exists = await fs.stat(config.cacheDir).then(
    (s) => s.isDirectory(),
    () => false,
  );
  if (!exists) return { cacheDir: config.cacheDir, models: [], warnings: [] };
  const scan = await scanCacheDir(config.cacheDir);
  const models: CachedModel[] = [];
  for (const repo of scan.repos) {
    if (repo.id.type !== "model") continue;
    for (const revision of repo.revisions) {
      const sizes = new Map(revision.files.map((f) => [path.relative(revision.path, f.path).split(path.sep).join("/"), f.blob.size]));
      for (const group of modelGroups([...sizes.keys()])) {
        models.push({
          repo: repo.id.name,
          commit: revision.commitOid,
          refs: [...revision.refs].sort(),
          name: group.name,
          quant: group.quant,
          files: group.files.map((f) => path.join(revision.path, ...f.split("/"))),
          size: group.files.reduce((sum, f) => sum + (sizes.get(f) ?? 0), 0),
        });
      }
    }
  }
  models.sort((a, b) => a.repo.localeCompare(b.repo) || a.name.localeCompare(b.name) || a.commit.localeCompare(b.commit));
  return { cacheDir: config.cacheDir, models, warnings: scan.warnings.map((w) => w.message) };
}

export interface RemovedFromCache {
  /** Snapshot links and blobs removed (local paths). */
  removed: string[];
  /** Bytes freed (blobs no other snapshot still links to). */
  freedBytes: number;
}

/**
 * Removes from the cache what `hf:owner/repo[:tag][@revision]` names: with a tag, that model's files in the
 * revision's snapshot (and their blobs, unless another snapshot links them); without one, the whole
 * repository folder. HUB_NOT_CACHED when nothing matches.
 */
export async function removeCachedModel(
  reference: string,
  options: { env?: HubEnvironment; config?: HubConfig } = {},
): Promise<RemovedFromCache> {
  const parsed = parseHubReference(reference);
  const config = options.config ?? hubConfig(options.env);
  const folder = repoFolder(config.cacheDir, parsed.repo);
  const listing = (await listCachedModels({ config })).models.filter((m) => m.repo === parsed.repo);
  if (listing.length === 0) throw new HubError("HUB_NOT_CACHED", `${parsed.repo} is not in ${config.cacheDir}`, { field: parsed.repo });
  if (parsed.tag === undefined) {
    const freedBytes = await folderBytes(path.join(folder, "blobs"));
    await fs.rm(folder, { recursive: true, force: true });
    return { removed: [folder], freedBytes };
  }
  const explicitRevision = reference.includes("@");
  const commits = [
    ...new Set(
      listing.filter((m) => !explicitRevision || m.commit === parsed.revision || m.refs.includes(parsed.revision)).map((m) => m.commit),
    ),
  ];
  const removed: string[] = [];
  let freedBytes = 0;
  const removedBlobs = new Set<string>();
  for (const commit of commits) {
    let files: string[];
    try {
      files = selectModel(parsed.repo, await snapshotFiles(folder, commit), parsed.tag).model.files;
    } catch {
      continue;
    }
    for (const file of files) {
      const link = path.join(folder, "snapshots", commit, ...file.split("/"));
      const target = await fs.realpath(link).catch(() => undefined);
      await fs.rm(link, { force: true });
      removed.push(link);
      if (target?.startsWith(path.join(folder, "blobs")) && !removedBlobs.has(target) && !(await linkedElsewhere(folder, target))) {
        freedBytes += (await fs.stat(target)).size;
        await fs.rm(target, { force: true });
        removedBlobs.add(target);
        removed.push(target);
      }
    }
  }
  if (removed.length === 0) {
    throw new HubError("HUB_NOT_CACHED", `${reference}: no cached model of ${parsed.repo} matches (see keepquant ls)`, {
      field: parsed.repo,
    });
  }
  return { removed, freedBytes };
}

async function folderBytes(folder: string): Promise<number> {
  const names = await fs.readdir(folder).catch(() => [] as string[]);
  let total = 0;
  for (const name of names) total += (await fs.stat(path.join(folder, name)).catch(() => undefined))?.size ?? 0;
  return total;
}

/** True when a snapshot link of `folder` still resolves to `blob`. */
async function linkedElsewhere(folder: string, blob: string): Promise<boolean> {
  const snapshots = path.join(folder, "snapshots");
  const entries = await fs.readdir(snapshots, { recursive: true }).catch(() => [] as string[]);
  for (const entry of entries) {
    if ((await fs.realpath(path.join(snapshots, entry)).catch(() => undefined)) === blob) return true;
  }
  return false;
}
