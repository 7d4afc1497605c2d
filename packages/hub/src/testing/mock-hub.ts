/**
 * A mock Hugging Face Hub on loopback, for tests without the internet. It answers the real paths:
 *
 * - `GET /api/models/{owner}/{repo}/revision/{revision}`: `{ id, sha, siblings }`
 * - `GET /api/models/{owner}/{repo}/tree/{revision}`: `[{ type, path, size, oid, lfs? }]` (GGUF files are LFS)
 * - `HEAD|GET /{owner}/{repo}/resolve/{revision}/{file}`: a 302 to `/cdn/<sha256>` for LFS files, with
 *   `X-Repo-Commit`, `X-Linked-Size`, `X-Linked-Etag` and `ETag`; small files are served directly
 * - `GET /cdn/<id>`: the bytes, with `Range` (206 and `Content-Range`)
 *
 * and injects faults: statuses served before the real answer (429, 500, ...), a connection cut after N bytes,
 * a wrong byte, a download that stops after its first bytes until the test releases it, a gated repository.
 */
import { createHash } from "node:crypto";
import http from "node:http";
import type { AddressInfo } from "node:net";
import path from "node:path";

/**
 * A file of `size` bytes that holds `header` and then zeros (a huge model's header, for planning before a
 * download); its hashes are made up, so only its header can be read, not downloaded.
 */
export interface SparseFile {
  header: Uint8Array;
  size: number;
}

export interface MockRepo {
  /** 40 hex digits (default: derived from the repo name). */
  commit?: string;
  files: Record<string, Uint8Array | SparseFile>;
  /** Requests need `Authorization: Bearer <token>` (else 401; a wrong token 403). */
  gatedToken?: string;
}

export interface MockFault {
  /** Statuses answered (in order, one per request) before the real answer. */
  statuses?: number[];
  /** The next download of the file sends this many bytes, then the connection is cut. */
  cutAfter?: number;
  /** Every download of the file has this byte offset flipped. */
  corruptByte?: number;
  /** The next download sends this many bytes, then waits for `release()` (or the client to go away). */
  stallAfter?: number;
  /** `cutAfter` and `stallAfter` wait for a request whose Range header this accepts (default: any request). */
  onRange?: (range: string | undefined) => boolean;
}

export interface MockRequest {
  method: string;
  path: string;
  range: string | undefined;
  authorized: boolean;
}

export interface MockHub {
  /** `http://127.0.0.1:<port>`: give it as HF_ENDPOINT. */
  url: string;
  requests: MockRequest[];
  /** Sets the faults of `repo/file` (`api:repo` for the revision and tree answers). */
  fault(key: string, fault: MockFault): void;
  /** Resolves once a stalled download has sent its first bytes. */
  stalled(): Promise<void>;
  /** Lets stalled downloads go on. */
  release(): void;
  close(): Promise<void>;
}

/** The environment that points a client at `hub`, with the Hugging Face home and cache in `dir` (`home`, `hub`). */
export function mockHubEnv(hub: MockHub, dir: string): { HF_ENDPOINT: string; HF_HOME: string; HF_HUB_CACHE: string } {
  return { HF_ENDPOINT: hub.url, HF_HOME: path.join(dir, "home"), HF_HUB_CACHE: path.join(dir, "hub") };
}

export const sha256Hex = (bytes: Uint8Array): string => createHash("sha256").update(bytes).digest("hex");
export const gitBlobId = (bytes: Uint8Array): string => createHash("sha1").update(`blob ${bytes.byteLength}\0`).update(bytes).digest("hex");
const commitOf = (repo: string): string => createHash("sha1").update(`commit ${repo}`).digest("hex");
const isLfs = (file: string): boolean => file.endsWith(".gguf");

const isSparse = (file: Uint8Array | SparseFile): file is SparseFile => !(file instanceof Uint8Array);
const sizeOf = (file: Uint8Array | SparseFile): number => (isSparse(file) ? file.size : file.byteLength);
const sha256Of = (file: Uint8Array | SparseFile): string =>
  isSparse(file) ? createHash("sha256").update(`sparse ${file.size}`).update(file.header).digest("hex") : sha256Hex(file);
const gitIdOf = (file: Uint8Array | SparseFile): string =>
  isSparse(file) ? createHash("sha1").update(`sparse ${file.size}`).update(file.header).digest("hex") : gitBlobId(file);

export async function startMockHub(repos: Record<string, MockRepo>): Promise<MockHub> {
  const faults = new Map<string, MockFault>();
  const requests: MockRequest[] = [];
  const blobs = new Map<string, { bytes: Uint8Array | SparseFile; key: string }>();
  for (const [repo, spec] of Object.entries(repos)) {
    for (const [file, bytes] of Object.entries(spec.files))
      blobs.set(isLfs(file) ? sha256Of(bytes) : gitIdOf(bytes), { bytes, key: `${repo}/${file}` });
  }
  let releaseStall: () => void = () => undefined;
  let stallGate = new Promise<void>((resolve) => (releaseStall = resolve));
  let reportStalled: () => void = () => undefined;
  let stalledOnce = new Promise<void>((resolve) => (reportStalled = resolve));
  const sockets = new Set<import("node:net").Socket>();

  const json = (response: http.ServerResponse, status: number, body: unknown): void => {
    response.writeHead(status, { "content-type": "application/json" });
    response.end(JSON.stringify(body));
  };
  /** The next queued status of `key`, or undefined. */
  const queuedStatus = (key: string): number | undefined => faults.get(key)?.statuses?.shift();

  const server = http.createServer((request, response) => {
    const url = new URL(request.url ?? "/", "http://mock");
    const pathName = decodeURIComponent(url.pathname);
    const authorization = request.headers.authorization;
    requests.push({
      method: request.method ?? "GET",
      path: pathName,
      range: request.headers.range,
      authorized: authorization !== undefined,
    });
    const access = (repo: string): boolean => {
      const token = repos[repo]?.gatedToken;
      if (token === undefined) return true;
      if (authorization === undefined) json(response, 401, { error: "Access to this resource is restricted" });
      else if (authorization !== `Bearer ${token}`) json(response, 403, { error: "You need to accept the terms" });
      else return true;
      return false;
    };
    const api = /^\/api\/models\/([^/]+\/[^/]+)\/(revision|tree)\/([^/]+)$/.exec(pathName);
    if (api) {
      const [, repo, kind] = api as unknown as [string, string, string, string];
      const spec = repos[repo];
      if (!spec) return json(response, 404, { error: "Repository not found" });
      if (!access(repo)) return;
      const status = queuedStatus(`api:${repo}`);
      if (status !== undefined) return json(response, status, { error: `injected ${status}` });
      const commit = spec.commit ?? commitOf(repo);
      if (kind === "revision")
        return json(response, 200, { id: repo, sha: commit, siblings: Object.keys(spec.files).map((rfilename) => ({ rfilename })) });
      return json(
        response,
        200,
        Object.entries(spec.files).map(([file, bytes]) => ({
          type: "file",
          path: file,
          size: sizeOf(bytes),
          oid: gitIdOf(bytes),
          ...(isLfs(file) ? { lfs: { oid: sha256Of(bytes), size: sizeOf(bytes), pointerSize: 134 } } : {}),
        })),
      );
    }
    const resolve = /^\/([^/]+\/[^/]+)\/resolve\/([^/]+)\/(.+)$/.exec(pathName);
    if (resolve) {
      const [, repo, , file] = resolve as unknown as [string, string, string, string];
      const spec = repos[repo];
      const bytes = spec?.files[file];
      if (!spec || !bytes) return json(response, 404, { error: "Entry not found" });
      if (!access(repo)) return;
      const status = queuedStatus(`${repo}/${file}`);
      if (status !== undefined) return json(response, status, { error: `injected ${status}` });
      const headers = { "x-repo-commit": spec.commit ?? commitOf(repo), etag: `"${gitIdOf(bytes)}"` };
      if (!isLfs(file)) return serve(request, response, bytes, `${repo}/${file}`, headers);
      const id = sha256Of(bytes);
      response.writeHead(302, {
        ...headers,
        // the file rides along, so that faults hit this file even where two repositories hold the same bytes
        location: `/cdn/${id}?file=${encodeURIComponent(`${repo}/${file}`)}`,
        "x-linked-size": String(sizeOf(bytes)),
        "x-linked-etag": `"${id}"`,
      });
      return response.end();
    }
    const cdn = /^\/cdn\/([0-9a-f]+)$/.exec(pathName);
    const blob = cdn ? blobs.get(cdn[1]!) : undefined;
    if (blob) return serve(request, response, blob.bytes, url.searchParams.get("file") ?? blob.key, { etag: `"${cdn![1]}"` });
    json(response, 404, { error: "not found" });
  });

  function serve(
    request: http.IncomingMessage,
    response: http.ServerResponse,
    file: Uint8Array | SparseFile,
    key: string,
    headers: Record<string, string>,
  ): void {
    const fault = faults.get(key) ?? {};
    if (isSparse(file)) return serveSparse(request, response, file, headers);
    let bytes = file;
    if (fault.corruptByte !== undefined) {
      bytes = Uint8Array.from(file);
      bytes[fault.corruptByte] = bytes[fault.corruptByte]! ^ 0xff;
    }
    let start = 0;
    let end = bytes.byteLength - 1;
    const range = /^bytes=(\d+)-(\d*)$/.exec(request.headers.range ?? "");
    if (range) {
      start = Number(range[1]);
      end = range[2] ? Math.min(end, Number(range[2])) : end;
      if (start > end) {
        response.writeHead(416, { "content-range": `bytes */${bytes.byteLength}` });
        return void response.end();
      }
    }
    const body = bytes.subarray(start, end + 1);
    response.writeHead(range ? 206 : 200, {
      ...headers,
      "accept-ranges": "bytes",
      "content-length": String(body.byteLength),
      ...(range ? { "content-range": `bytes ${start}-${end}/${bytes.byteLength}` } : {}),
    });
    if (request.method === "HEAD") return void response.end();
    const armed = fault.onRange?.(request.headers.range) ?? true;
    const cut = armed ? fault.cutAfter : undefined;
    const stall = armed ? fault.stallAfter : undefined;
    if (cut !== undefined) {
      fault.cutAfter = undefined;
      response.write(body.subarray(0, Math.min(cut, body.byteLength)), () => response.socket?.destroy());
      return;
    }
    if (stall !== undefined) {
      fault.stallAfter = undefined;
      response.write(body.subarray(0, Math.min(stall, body.byteLength)), () => {
        reportStalled();
        void stallGate.then(() => response.end(body.subarray(Math.min(stall, body.byteLength))));
      });
      return;
    }
    response.end(body);
  }

  /** A sparse file answers Range requests only (its whole body would be the size of a real model). */
  function serveSparse(
    request: http.IncomingMessage,
    response: http.ServerResponse,
    file: SparseFile,
    headers: Record<string, string>,
  ): void {
    const range = /^bytes=(\d+)-(\d+)$/.exec(request.headers.range ?? "");
    if (!range || Number(range[2]) - Number(range[1]) > 64 * 1024 * 1024)
      return json(response, 416, { error: "the mock serves sparse files by range only" });
    const start = Number(range[1]);
    const end = Math.min(file.size - 1, Number(range[2]));
    const body = new Uint8Array(end - start + 1);
    if (start < file.header.byteLength) body.set(file.header.subarray(start, Math.min(file.header.byteLength, end + 1)));
    response.writeHead(206, {
      ...headers,
      "content-length": String(body.byteLength),
      "content-range": `bytes ${start}-${end}/${file.size}`,
    });
    response.end(body);
  }

  server.on("connection", (socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    fault(key, fault) {
      faults.set(key, { ...fault, ...(fault.statuses ? { statuses: [...fault.statuses] } : {}) });
    },
    stalled: () => stalledOnce,
    release() {
      releaseStall();
      stallGate = new Promise<void>((resolve) => (releaseStall = resolve));
      stalledOnce = new Promise<void>((resolve) => (reportStalled = resolve));
    },
    async close() {
      releaseStall();
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
