import fs from "node:fs/promises";
import { readGgufModel, type GgufFile } from "@keepquant/gguf";
import { listRepoFiles, resolveRevision, resolveUrl } from "./api.js";
import { blobPath, isPresent, linkSnapshot, readRef, repoFolder, snapshotFiles, snapshotPath, writeRef } from "./cache.js";
import { hubConfig, type HubConfig, type HubEnvironment } from "./config.js";
import { downloadBlob, type DownloadProgress } from "./download.js";
import { HubError } from "./errors.js";
import { HubClient, type HubClientOptions } from "./http.js";
import { formatHubReference, parseHubReference, type HubReference } from "./reference.js";
import { RemoteSource } from "./remote-source.js";
import { modelGroups, selectModel, type RepoFile } from "./select.js";

/** One file of a resolved model: where it comes from and where it lives in the cache. */
export interface HubModelFile {
  /** Path inside the repository. */
  path: string;
  /** `snapshots/<commit>/<path>` in the cache (there or not yet). */
  localPath: string;
  size: number;
  /** True when the file is in the cache, complete. */
  cached: boolean;
  /** Set when resolved from the Hub (undefined when resolved from the cache alone). */
  remote?: { url: string; sha256: string | undefined; gitOid: string | undefined };
}

/** What an `hf:` reference names, at one commit: the model's files (shards in order) and its companions. */
export interface ResolvedHubModel {
  reference: HubReference;
  /** The reference as text. */
  name: string;
  commit: string;
  /** The model's file name without a shard suffix, and its quant. */
  model: { name: string; quant: string | undefined; files: HubModelFile[] };
  mmproj: HubModelFile | undefined;
  mtp: HubModelFile | undefined;
  /** The repository's other models with their total size (what a smaller quant would be): from the Hub only. */
  alternatives: { name: string; quant: string | undefined; size: number }[];
  /** True when resolved from the cache without asking the Hub. */
  fromCache: boolean;
}

export interface HubOptions extends HubClientOptions {
  /** The environment the configuration is read from (default process.env); ignored with `config`. */
  env?: HubEnvironment;
  config?: HubConfig;
  signal?: AbortSignal;
}

export interface ResolveOptions extends HubOptions {
  /**
   * Use a cached snapshot of the reference without asking the Hub (default true): a model pulled once runs
   * offline. `pull` passes false to look for a newer commit. HF_HUB_OFFLINE=1 always uses the cache only.
   */
  preferCache?: boolean;
}

async function fromCache(config: HubConfig, reference: HubReference): Promise<ResolvedHubModel | string> {
  const folder = repoFolder(config.cacheDir, reference.repo);
  const commit = await readRef(folder, reference.revision);
  if (commit === undefined) return `${reference.repo}@${reference.revision} is not in ${config.cacheDir}`;
  const files = await snapshotFiles(folder, commit);
  let selection: ReturnType<typeof selectModel>;
  try {
    selection = selectModel(reference.repo, files, reference.tag);
  } catch (error) {
    return (error as Error).message;
  }
  const entry = async (file: string): Promise<HubModelFile> => {
    const localPath = snapshotPath(folder, commit, file);
    return { path: file, localPath, size: (await fs.stat(localPath)).size, cached: true };
  };
  return {
    reference,
    name: formatHubReference(reference),
    commit,
    model: { name: selection.model.name, quant: selection.model.quant, files: await Promise.all(selection.model.files.map(entry)) },
    mmproj: selection.mmproj === undefined ? undefined : await entry(selection.mmproj),
    mtp: selection.mtp === undefined ? undefined : await entry(selection.mtp),
    alternatives: [],
    fromCache: true,
  };
}

/** The configuration and client of an options object. */
export function hubClient(options: HubOptions = {}): HubClient {
  return new HubClient(options.config ?? hubConfig(options.env), options);
}

/**
 * Resolves an `hf:` reference to a commit and the files of the model it names (without downloading them): from
 * the cache when it holds the reference (see `preferCache`), else from the Hub's revision and tree APIs.
 */
export async function resolveHubModel(reference: string | HubReference, options: ResolveOptions = {}): Promise<ResolvedHubModel> {
  const parsed = typeof reference === "string" ? parseHubReference(reference) : reference;
  const client = hubClient(options);
  const { config } = client;
  if (config.offline || options.preferCache !== false) {
    const cached = await fromCache(config, parsed);
    if (typeof cached !== "string") return cached;
    if (config.offline) {
      throw new HubError(
        "HUB_OFFLINE_NOT_CACHED",
        `HF_HUB_OFFLINE=1 and ${formatHubReference(parsed)} cannot be used from the cache: ${cached}; pull it first with the network on`,
        {
          field: parsed.repo,
        },
      );
    }
  }
  const commit = await resolveRevision(client, parsed.repo, parsed.revision, options.signal);
  const files = await listRepoFiles(client, parsed.repo, commit, options.signal);
  const byPath = new Map(files.map((f) => [f.path, f]));
  const selection = selectModel(
    parsed.repo,
    files.map((f) => f.path),
    parsed.tag,
  );
  const folder = repoFolder(config.cacheDir, parsed.repo);
  const entry = async (file: RepoFile): Promise<HubModelFile> => {
    const localPath = snapshotPath(folder, commit, file.path);
    return {
      path: file.path,
      localPath,
      size: file.size,
      cached: await isPresent(localPath, file.size),
      remote: { url: resolveUrl(config.endpoint, parsed.repo, commit, file.path), sha256: file.sha256, gitOid: file.gitOid },
    };
  };
  const companion = async (file: string | undefined) => (file === undefined ? undefined : entry(byPath.get(file)!));
  return {
    reference: parsed,
    name: formatHubReference(parsed),
    commit,
    model: {
      name: selection.model.name,
      quant: selection.model.quant,
      files: await Promise.all(selection.model.files.map((f) => entry(byPath.get(f)!))),
    },
    mmproj: await companion(selection.mmproj),
    mtp: await companion(selection.mtp),
    alternatives: modelGroups(files.map((f) => f.path))
      .filter((g) => g.name !== selection.model.name)
      .map((g) => ({ name: g.name, quant: g.quant, size: g.files.reduce((sum, f) => sum + byPath.get(f)!.size, 0) })),
    fromCache: false,
  };
}

export interface DownloadOptions extends HubOptions {
  /** Also fetch the vision projector / the separate MTP drafter (an error when the repository has none). */
  mmproj?: boolean;
  mtp?: boolean;
  onProgress?: (progress: DownloadProgress) => void;
  /** Ranges fetched at once for a large file (default 4). */
  connections?: number;
  /** Files at least this large use parallel ranges (default 64 MiB). */
  parallelFrom?: number;
}

/** The files a download fetches: the model's (all shards) and the companions asked for. */
export function filesToFetch(resolved: ResolvedHubModel, options: { mmproj?: boolean; mtp?: boolean } = {}): HubModelFile[] {
  const files = [...resolved.model.files];
  for (const kind of ["mmproj", "mtp"] as const) {
    if (!options[kind]) continue;
    const file = resolved[kind];
    if (!file) {
      throw new HubError(
        "HUB_NO_MATCHING_FILE",
        `${resolved.reference.repo} has no ${kind === "mmproj" ? "vision projector (mmproj-*.gguf)" : "separate MTP drafter (*mtp*.gguf)"}`,
        { field: resolved.reference.repo },
      );
    }
    files.push(file);
  }
  return files;
}

/**
 * Downloads what `resolved` names into the cache (see download.ts for how) and links it into its snapshot;
 * files already cached are not fetched again (nor is a blob another snapshot or tool already has). Records
 * `refs/<revision>`. Returns the local paths, the model's shards first.
 */
export async function downloadHubModel(resolved: ResolvedHubModel, options: DownloadOptions = {}): Promise<string[]> {
  const files = filesToFetch(resolved, options);
  const client = hubClient(options);
  const { repo, revision } = resolved.reference;
  const folder = repoFolder(client.config.cacheDir, repo);
  for (const file of files) {
    if (file.cached || (await isPresent(file.localPath, file.size))) continue;
    if (!file.remote) throw new HubError("HUB_OFFLINE_NOT_CACHED", `${repo}: ${file.path} is not in the cache`, { field: repo });
    if (client.config.offline) {
      throw new HubError("HUB_OFFLINE_NOT_CACHED", `HF_HUB_OFFLINE=1 and ${repo}: ${file.path} is not in the cache`, { field: repo });
    }
    const blobId = file.remote.sha256 ?? file.remote.gitOid;
    if (blobId === undefined) throw new HubError("HUB_BAD_RESPONSE", `${repo}: the Hub gives ${file.path} no hash`, { field: file.path });
    await downloadBlob({
      client,
      repo,
      file: file.path,
      url: file.remote.url,
      size: file.size,
      sha256: file.remote.sha256,
      gitOid: file.remote.gitOid,
      blob: blobPath(folder, blobId),
      signal: options.signal,
      onProgress: options.onProgress,
      connections: options.connections,
      parallelFrom: options.parallelFrom,
    });
    await linkSnapshot(folder, resolved.commit, file.path, blobId);
    file.cached = true;
  }
  if (!resolved.fromCache) await writeRef(folder, revision, resolved.commit);
  return files.map((f) => f.localPath);
}

/**
 * The model an `hf:` reference names, on disk: resolved (from the cache when it has it) and downloaded when
 * missing. What `Engine.load("hf:...")` and the CLI's model argument use. Returns the model's shard paths.
 */
export async function ensureHubModel(reference: string, options: DownloadOptions & ResolveOptions = {}): Promise<ResolvedHubModel> {
  const resolved = await resolveHubModel(reference, options);
  await downloadHubModel(resolved, options);
  return resolved;
}

/**
 * The vision projector (`mmproj-*.gguf`) of an `hf:` repository, on disk: the reference resolved as for its model,
 * but only the projector downloaded (the model's files are not fetched). A snapshot in the cache without the
 * projector (a model pulled without `--mmproj`) is looked up on the Hub again unless HF_HUB_OFFLINE=1.
 * HUB_NO_MATCHING_FILE when the repository has none. Returns the projector's path.
 */
export async function ensureHubProjector(reference: string, options: DownloadOptions & ResolveOptions = {}): Promise<string> {
  let resolved = await resolveHubModel(reference, options);
  if (resolved.fromCache && resolved.mmproj === undefined && !hubClient(options).config.offline) {
    resolved = await resolveHubModel(reference, { ...options, preferCache: false });
  }
  const projectorOnly: ResolvedHubModel = { ...resolved, model: { ...resolved.model, files: [] } };
  const [file] = await downloadHubModel(projectorOnly, { ...options, mmproj: true, mtp: false });
  return file!;
}

/** Shard `shard` (0-based; the first or only file by default) of the model read over HTTP Range requests, for its GGUF header: nothing downloaded. */
export function remoteModelSource(resolved: ResolvedHubModel, options: HubOptions = {}, shard = 0): RemoteSource {
  const file = resolved.model.files[shard];
  if (!file) throw new HubError("HUB_BAD_RESPONSE", `${resolved.name} has ${resolved.model.files.length} file(s), no shard ${shard + 1}`);
  if (!file.remote) throw new HubError("HUB_BAD_RESPONSE", `${resolved.name} was resolved from the cache: read ${file.localPath}`);
  return new RemoteSource(
    hubClient(options),
    resolved.reference.repo,
    file.remote.url,
    file.size,
    `${resolved.name} (${file.path})`,
    options.signal,
  );
}

/**
 * The model's GGUF header, every shard of a split model merged (`readGgufModel`): read from the cache where a file
 * is there, else by HTTP Range requests (a few MB per shard; nothing downloaded).
 */
export async function readHubModelHeader(resolved: ResolvedHubModel, options: HubOptions = {}): Promise<GgufFile> {
  const files = resolved.model.files;
  if (files.every((f) => f.cached)) return readGgufModel(files[0]!.localPath);
  const source = (shard: number): string | RemoteSource => {
    const file = files[shard];
    return file?.cached ? file.localPath : remoteModelSource(resolved, options, shard);
  };
  return readGgufModel(source(0), {
    openShard: (shard, count) => {
      if (count !== files.length) {
        throw new HubError(
          "HUB_BAD_RESPONSE",
          `${resolved.name}: the GGUF header says ${count} shards, the repository has ${files.length}`,
        );
      }
      return source(shard);
    },
  });
}
