/**
 * One blob from the Hub into the cache, in a way a person can trust: written to `<blob>.incomplete`, resumed
 * with HTTP Range after an interruption, fetched over parallel ranges when large, hashed against the Hub's
 * sha256 (the LFS oid; the git blob id for small files) before it is renamed to its visible name, under a lock
 * so two processes never write the same blob, after a check that the disk has room for what is left.
 *
 * `<blob>.incomplete.json` records each range's progress, so a resume continues every range where it stopped.
 * A `.incomplete` file without it (another tool's) is resumed as one range from its length.
 */
import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import fs from "node:fs/promises";
import path from "node:path";
import { setTimeout as delay } from "node:timers/promises";
import { isPresent } from "./cache.js";
import { HubError } from "./errors.js";
import { aborted, type HubClient } from "./http.js";
import { acquireLock } from "./lock.js";

export interface DownloadProgress {
  /** Path inside the repository. */
  file: string;
  /** Bytes on disk for this file (resumed bytes included). */
  downloaded: number;
  total: number;
  /** Bytes already there when this download started (a resume). */
  resumed: number;
}

export interface BlobDownload {
  client: HubClient;
  repo: string;
  /** Path inside the repository (messages, progress). */
  file: string;
  url: string;
  size: number;
  /** The LFS sha256; without it `gitOid` (sha1 of the git blob) is checked. */
  sha256?: string | undefined;
  gitOid?: string | undefined;
  /** The blob's final path. */
  blob: string;
  signal?: AbortSignal | undefined;
  onProgress?: ((progress: DownloadProgress) => void) | undefined;
  /** Ranges fetched at once for a large file (default 4). */
  connections?: number | undefined;
  /** Files at least this large are fetched over parallel ranges (default 64 MiB). */
  parallelFrom?: number | undefined;
}

export const DEFAULT_CONNECTIONS = 4;
export const PARALLEL_FROM_BYTES = 64 * 1024 * 1024;
/** The progress record is rewritten after this many new bytes of a range (and whenever a range stops). */
const RECORD_EVERY_BYTES = 16 * 1024 * 1024;
/** Free space kept beyond what the download needs. */
const DISK_MARGIN_BYTES = 64 * 1024 * 1024;

interface Range {
  start: number;
  /** Exclusive. */
  end: number;
  written: number;
}

interface Record {
  size: number;
  hash: string;
  ranges: Range[];
}

function planRanges(size: number, connections: number): Range[] {
  const count = Math.max(1, Math.min(connections, size));
  const step = Math.ceil(size / count);
  const ranges: Range[] = [];
  for (let start = 0; start < size; start += step) ranges.push({ start, end: Math.min(size, start + step), written: 0 });
  return ranges.length > 0 ? ranges : [{ start: 0, end: 0, written: 0 }];
}

async function readRecord(file: string, size: number, hash: string): Promise<Record | undefined> {
  try {
    const record = JSON.parse(await fs.readFile(file, "utf8")) as Record;
    if (record.size !== size || record.hash !== hash || !Array.isArray(record.ranges)) return undefined;
    const valid = record.ranges.every(
      (r) =>
        Number.isInteger(r.start) &&
        Number.isInteger(r.end) &&
        Number.isInteger(r.written) &&
        r.written >= 0 &&
        r.start + r.written <= r.end,
    );
    return valid ? record : undefined;
  } catch {
    return undefined;
  }
}

async function writeRecord(file: string, record: Record): Promise<void> {
  const temporary = `${file}.tmp`;
  await fs.writeFile(temporary, JSON.stringify(record));
  await fs.rename(temporary, file);
}

/** The hex digest the Hub gives the file: sha256 of the bytes (LFS), or sha1 of `blob <size>\0<bytes>` (git). */
async function digest(file: string, size: number, kind: "sha256" | "sha1", signal?: AbortSignal): Promise<string> {
  const hash = createHash(kind);
  if (kind === "sha1") hash.update(`blob ${size}\0`);
  for await (const chunk of createReadStream(file, signal ? { signal } : {})) hash.update(chunk as Buffer);
  return hash.digest("hex");
}

async function checkDiskSpace(folder: string, needed: number, repo: string, file: string): Promise<void> {
  if (needed <= 0) return;
  const stats = await fs.statfs(folder).catch(() => undefined);
  if (!stats) return;
  const free = Number(stats.bavail) * Number(stats.bsize);
  if (free < needed + DISK_MARGIN_BYTES) {
    throw new HubError(
      "HUB_DISK_FULL",
      `${repo}: ${file} needs ${needed} more bytes, but ${folder} has ${free} free (keeping ${DISK_MARGIN_BYTES} spare); free some space or set HF_HUB_CACHE to a larger disk`,
      { field: file },
    );
  }
}

/** Downloads one blob (see the module comment). Returns at once when the blob is already there. */
export async function downloadBlob(download: BlobDownload): Promise<void> {
  const { blob, size, repo, file, signal } = download;
  if (await isPresent(blob, size)) return;
  const hash = download.sha256 ?? download.gitOid;
  if (hash === undefined)
    throw new HubError("HUB_BAD_RESPONSE", `${repo}: the Hub gives ${file} no hash to check it against`, { field: file });
  await fs.mkdir(path.dirname(blob), { recursive: true });
  let release: () => Promise<void>;
  try {
    release = await acquireLock(`${blob}.lock`, signal);
  } catch (error) {
    if (signal?.aborted) throw aborted(`${repo}/${file}`, signal);
    throw error;
  }
  try {
    // whoever held the lock may have finished it
    if (await isPresent(blob, size)) return;
    await fetchIntoIncomplete(download, hash);
  } finally {
    await release();
  }
}

async function fetchIntoIncomplete(download: BlobDownload, hash: string): Promise<void> {
  const { blob, size, repo, file, signal, client } = download;
  const incomplete = `${blob}.incomplete`;
  const recordFile = `${incomplete}.json`;
  const existing = await fs.stat(incomplete).catch(() => undefined);
  let record = existing ? await readRecord(recordFile, size, hash) : undefined;
  if (!record) {
    const ranges =
      existing && existing.size > 0 && existing.size <= size
        ? [{ start: 0, end: size, written: existing.size }]
        : size >= (download.parallelFrom ?? PARALLEL_FROM_BYTES)
          ? planRanges(size, download.connections ?? DEFAULT_CONNECTIONS)
          : [{ start: 0, end: size, written: 0 }];
    record = { size, hash, ranges };
  }
  const resumed = record.ranges.reduce((sum, r) => sum + r.written, 0);
  await checkDiskSpace(path.dirname(blob), size - resumed, repo, file);
  let downloaded = resumed;
  const handle = await fs.open(incomplete, existing ? "r+" : "w");
  // a partial longer than the file (not ours) would survive past the end of every range
  if (existing && existing.size > size) await handle.truncate(size);
  const report = (): void => download.onProgress?.({ file, downloaded, total: size, resumed });
  report();
  let sinceRecord = 0;
  const save = async (): Promise<void> => {
    sinceRecord = 0;
    await writeRecord(recordFile, record!);
  };
  await save();
  // one failed range stops the others (they write to the same file), and all have stopped before it is closed
  const stopAll = new AbortController();
  const rangeSignal = signal ? AbortSignal.any([signal, stopAll.signal]) : stopAll.signal;
  let firstError: unknown;
  try {
    const settled = await Promise.allSettled(
      record.ranges
        .map(async (range) => {
          let failures = 0;
          while (range.written < range.end - range.start) {
            if (rangeSignal.aborted) throw aborted(`${repo}/${file}`, rangeSignal);
            const from = range.start + range.written;
            const before = range.written;
            try {
              const response = await client.fetch(download.url, {
                repo,
                signal: rangeSignal,
                headers: { range: `bytes=${from}-${range.end - 1}`, "accept-encoding": "identity" },
              });
              if (response.status === 200 && from !== 0) {
                // the server ignored Range: only a single range from the start can use a whole-file answer
                await response.body?.cancel().catch(() => undefined);
                if (record!.ranges.length > 1)
                  throw new HubError("HUB_BAD_RESPONSE", `${download.url}: the server does not answer Range requests`);
                range.written = 0;
                continue;
              }
              if (response.status !== 200 && response.status !== 206) {
                await response.body?.cancel().catch(() => undefined);
                throw new HubError("HUB_BAD_RESPONSE", `${repo}: ${file}: unexpected HTTP ${response.status} for a range request`, {
                  field: file,
                });
              }
              if (!response.body) throw new HubError("HUB_BAD_RESPONSE", `${repo}: ${file}: an empty answer`, { field: file });
              const served = /^bytes (\d+)-/.exec(response.headers.get("content-range") ?? "");
              if (response.status === 206 && (served === null || Number(served[1]) !== from)) {
                await response.body.cancel().catch(() => undefined);
                throw new HubError(
                  "HUB_BAD_RESPONSE",
                  `${repo}: ${file}: asked for bytes from ${from}, the server sent ${response.headers.get("content-range") ?? "no Content-Range"}`,
                  {
                    field: file,
                  },
                );
              }
              for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
                const room = range.end - range.start - range.written;
                const bytes = chunk.byteLength > room ? chunk.subarray(0, room) : chunk;
                await handle.write(bytes, 0, bytes.byteLength, range.start + range.written);
                range.written += bytes.byteLength;
                downloaded += bytes.byteLength;
                sinceRecord += bytes.byteLength;
                report();
                if (sinceRecord >= RECORD_EVERY_BYTES) await save();
                if (range.written >= range.end - range.start) break;
              }
            } catch (error) {
              if (rangeSignal.aborted) throw aborted(`${repo}/${file}`, rangeSignal);
              if (HubError.isInstance(error) && error.code !== "HUB_HTTP") throw error;
              // a cut connection: go on from where the range stopped; give up after as many failures in a row as the retry policy allows
              failures = range.written > before ? 1 : failures + 1;
              if (failures >= client.retry.attempts) {
                throw new HubError(
                  "HUB_HTTP",
                  `${repo}: ${file}: the download kept failing (${(error as Error).message}); run the command again to resume`,
                  {
                    field: file,
                    cause: error,
                  },
                );
              }
              await delay(Math.min(client.retry.maxDelayMs, client.retry.baseDelayMs * 2 ** (failures - 1)), undefined, {
                signal: rangeSignal,
              }).catch(() => undefined);
            }
          }
        })
        .map((work) =>
          work.catch((error: unknown) => {
            if (!stopAll.signal.aborted) {
              firstError = error;
              stopAll.abort();
            }
            throw error;
          }),
        ),
    );
    if (signal?.aborted) throw aborted(`${repo}/${file}`, signal);
    if (settled.some((s) => s.status === "rejected")) throw firstError;
  } finally {
    await handle.close();
    await save().catch(() => undefined);
  }
  const kind = download.sha256 !== undefined ? "sha256" : "sha1";
  const actual = await digest(incomplete, size, kind, signal);
  if (actual !== hash) {
    await fs.rm(incomplete, { force: true });
    await fs.rm(recordFile, { force: true });
    throw new HubError(
      "HUB_CHECKSUM_MISMATCH",
      `${repo}: ${file} does not match the Hub's ${kind} (expected ${hash}, got ${actual}); the bad copy was removed, run the command again`,
      { field: file },
    );
  }
  await fs.rename(incomplete, blob);
  await fs.rm(recordFile, { force: true });
}
