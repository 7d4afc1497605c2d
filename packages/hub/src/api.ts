import { listFiles } from "@huggingface/hub";
import { HubError } from "./errors.js";
import type { HubClient } from "./http.js";
import type { RepoFile } from "./select.js";

const COMMIT = /^[0-9a-f]{40}$/;
const SHA256 = /^[0-9a-f]{64}$/;

/** The commit a revision (branch, tag or commit) points at now: `GET /api/models/{repo}/revision/{revision}`. */
export async function resolveRevision(client: HubClient, repo: string, revision: string, signal?: AbortSignal): Promise<string> {
  const url = `${client.config.endpoint}/api/models/${repo}/revision/${encodeURIComponent(revision)}`;
  const response = await client.fetch(url, { repo, signal });
  const body = (await response.json().catch(() => undefined)) as { sha?: unknown } | undefined;
  if (typeof body?.sha !== "string" || !COMMIT.test(body.sha)) {
    throw new HubError("HUB_BAD_RESPONSE", `${repo}@${revision}: the Hub's revision answer has no commit sha`, { field: repo });
  }
  return body.sha;
}

/** Every file of `repo` at `commit` with its size and hashes (the Hub's tree listing, through @huggingface/hub). */
export async function listRepoFiles(client: HubClient, repo: string, commit: string, signal?: AbortSignal): Promise<RepoFile[]> {
  const files: RepoFile[] = [];
  const entries = listFiles({
    repo: { type: "model", name: repo },
    revision: commit,
    recursive: true,
    hubUrl: client.config.endpoint,
    fetch: (input, init) => client.fetch(String(input instanceof Request ? input.url : input), { ...init, repo, signal }),
  });
  for await (const entry of entries) {
    if (entry.type !== "file") continue;
    const sha256 = entry.lfs?.oid;
    if (sha256 !== undefined && !SHA256.test(sha256)) {
      throw new HubError("HUB_BAD_RESPONSE", `${repo}: the tree listing gives ${entry.path} an LFS oid that is not a sha256`, {
        field: repo,
      });
    }
    files.push({ path: entry.path, size: entry.lfs?.size ?? entry.size, sha256, gitOid: entry.oid });
  }
  return files;
}

/** The URL a file is downloaded from (the Hub answers with a redirect to its storage). */
export function resolveUrl(endpoint: string, repo: string, commit: string, file: string): string {
  return `${endpoint}/${repo}/resolve/${commit}/${file.split("/").map(encodeURIComponent).join("/")}`;
}
