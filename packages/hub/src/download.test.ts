import fs from "node:fs";
import fsp from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { QWEN35_TINY_SHAPE, readGguf, synthesizeQwen35 } from "@keepquant/gguf";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { listCachedModels, removeCachedModel } from "./cached.js";
import { hubConfig } from "./config.js";
import type { DownloadProgress } from "./download.js";
import { HubError } from "./errors.js";
import {
  downloadHubModel,
  ensureHubModel,
  ensureHubProjector,
  remoteModelSource,
  resolveHubModel,
  type DownloadOptions,
} from "./resolve.js";
import { sha256Hex, startMockHub, type MockHub, mockHubEnv } from "./testing/mock-hub.js";

const MODEL = synthesizeQwen35(QWEN35_TINY_SHAPE);
const OTHER = Uint8Array.from(MODEL.subarray(0, 4096));
const REPO = "unsloth/Qwen3.5-Tiny-GGUF";
const FILE = "Qwen3.5-Tiny-Q4_K_M.gguf";
const KEY = `${REPO}/${FILE}`;
const TOKEN = "hf_secret_token_for_tests";

let hub: MockHub;
let dir: string;
let env: Record<string, string>;

function options(extra: DownloadOptions = {}): DownloadOptions {
  return { env, retry: { baseDelayMs: 0 }, ...extra };
}

async function caught(promise: Promise<unknown>): Promise<HubError> {
  try {
    await promise;
  } catch (error) {
    if (HubError.isInstance(error)) return error;
    throw error;
  }
  throw new Error("expected a HubError");
}

const blobFile = (): string => path.join(dir, "hub", `models--${REPO.replace("/", "--")}`, "blobs", sha256Hex(MODEL));
const cdnGets = (): number => hub.requests.filter((r) => r.path === `/cdn/${sha256Hex(MODEL)}` && r.method === "GET").length;

beforeEach(async () => {
  dir = await fsp.mkdtemp(path.join(os.tmpdir(), "keepquant-hub-"));
  hub = await startMockHub({
    [REPO]: {
      files: {
        [FILE]: MODEL,
        "Qwen3.5-Tiny-Q8_0.gguf": OTHER,
        "mmproj-F16.gguf": OTHER,
        "README.md": new TextEncoder().encode("# tiny\n"),
      },
    },
    "qwen/gated-GGUF": { files: { "gated-Q4_K_M.gguf": OTHER }, gatedToken: TOKEN },
  });
  env = mockHubEnv(hub, dir);
});

afterEach(async () => {
  vi.restoreAllMocks();
  await hub.close();
  await fsp.rm(dir, { recursive: true, force: true });
});

describe("pulling into the Hugging Face cache layout", () => {
  it("writes blobs/<sha256>, a relative snapshot link and refs/main, then resolves from the cache without the network", async () => {
    const resolved = await ensureHubModel(`hf:${REPO}`, options());
    const folder = path.join(dir, "hub", "models--unsloth--Qwen3.5-Tiny-GGUF");
    const link = path.join(folder, "snapshots", resolved.commit, FILE);
    expect(resolved.model.files.map((f) => f.localPath)).toEqual([link]);
    expect(fs.readlinkSync(link)).toBe(path.join("..", "..", "blobs", sha256Hex(MODEL)));
    expect(fs.readFileSync(path.join(folder, "refs", "main"), "utf8")).toBe(resolved.commit);
    expect(sha256Hex(fs.readFileSync(link))).toBe(sha256Hex(MODEL));
    expect(fs.readdirSync(path.join(folder, "blobs"))).toEqual([sha256Hex(MODEL)]);
    const seen = hub.requests.length;
    const again = await resolveHubModel(`hf:${REPO}:q4_k_m`, options());
    expect(again.fromCache).toBe(true);
    expect(again.model.files[0]!.localPath).toBe(link);
    expect(hub.requests.length).toBe(seen);
  });

  it("reuses a file another tool put in the cache instead of fetching it again", async () => {
    const first = await ensureHubModel(`hf:${REPO}`, options());
    const gets = cdnGets();
    const fresh = await resolveHubModel(`hf:${REPO}`, { ...options(), preferCache: false });
    expect(fresh.fromCache).toBe(false);
    expect(fresh.model.files[0]!.cached).toBe(true);
    await downloadHubModel(fresh, options());
    expect(cdnGets()).toBe(gets);
    expect(fresh.model.files[0]!.localPath).toBe(first.model.files[0]!.localPath);
  });

  it("fetches the vision projector when asked, and says when a repository has no MTP drafter", async () => {
    const resolved = await resolveHubModel(`hf:${REPO}`, options());
    const paths = await downloadHubModel(resolved, options({ mmproj: true }));
    expect(paths.map((p) => path.basename(p))).toEqual([FILE, "mmproj-F16.gguf"]);
    expect((await caught(downloadHubModel(resolved, options({ mtp: true })))).message).toContain("has no separate MTP drafter");
  });

  it("ensureHubProjector fetches the projector alone, also for a model pulled before without it", async () => {
    await ensureHubModel(`hf:${REPO}`, options());
    const file = await ensureHubProjector(`hf:${REPO}`, options());
    expect(path.basename(file)).toBe("mmproj-F16.gguf");
    expect(sha256Hex(fs.readFileSync(file))).toBe(sha256Hex(OTHER));
    expect(cdnGets()).toBe(1); // the model once, by ensureHubModel
    // from the cache now, without the network
    const seen = hub.requests.length;
    expect(await ensureHubProjector(`hf:${REPO}`, options())).toBe(file);
    expect(hub.requests.length).toBe(seen);
    env.HF_TOKEN = TOKEN;
    const none = await caught(ensureHubProjector("hf:qwen/gated-GGUF", options()));
    expect(none.code).toBe("HUB_NO_MATCHING_FILE");
    expect(none.message).toContain("has no vision projector (mmproj-*.gguf)");
  });

  it("reads the GGUF header over Range requests without downloading the file", async () => {
    const resolved = await resolveHubModel(`hf:${REPO}`, options());
    const source = remoteModelSource(resolved, options());
    const file = await readGguf(source);
    expect(file.metadata.get("general.architecture")?.value).toBe("qwen35");
    expect(hub.requests.some((r) => r.path.startsWith("/cdn/") && r.range?.startsWith("bytes=0-"))).toBe(true);
    expect(fs.existsSync(blobFile())).toBe(false);
  });
});

describe("downloads a person can trust", () => {
  it("resumes with a Range request after the connection is cut mid-file", async () => {
    hub.fault(KEY, { cutAfter: 100_000 });
    await ensureHubModel(`hf:${REPO}`, options());
    expect(sha256Hex(fs.readFileSync(blobFile()))).toBe(sha256Hex(MODEL));
    const ranges = hub.requests.filter((r) => r.path.startsWith("/cdn/")).map((r) => r.range);
    expect(ranges[0]).toBe(`bytes=0-${MODEL.byteLength - 1}`);
    expect(ranges.some((r) => r !== undefined && /^bytes=(\d+)-/.exec(r)![1] !== "0")).toBe(true);
  });

  it("resumes a partial another tool left (a .incomplete without our record) from its length", async () => {
    fs.mkdirSync(path.dirname(blobFile()), { recursive: true });
    fs.writeFileSync(`${blobFile()}.incomplete`, MODEL.subarray(0, 200_000));
    const progress: DownloadProgress[] = [];
    await ensureHubModel(`hf:${REPO}`, options({ onProgress: (p) => progress.push(p) }));
    expect(progress[0]!.resumed).toBe(200_000);
    expect(hub.requests.filter((r) => r.path.startsWith("/cdn/")).map((r) => r.range)).toEqual([`bytes=200000-${MODEL.byteLength - 1}`]);
    expect(sha256Hex(fs.readFileSync(blobFile()))).toBe(sha256Hex(MODEL));
    expect(fs.readdirSync(path.dirname(blobFile()))).toEqual([sha256Hex(MODEL)]);
  });

  it("fetches a large file over parallel ranges and joins them exactly", async () => {
    await ensureHubModel(`hf:${REPO}`, options({ parallelFrom: 1, connections: 4 }));
    const ranges = hub.requests.filter((r) => r.path.startsWith("/cdn/")).map((r) => r.range);
    expect(ranges).toHaveLength(4);
    expect(new Set(ranges).size).toBe(4);
    expect(sha256Hex(fs.readFileSync(blobFile()))).toBe(sha256Hex(MODEL));
  });

  it("refuses a file with a wrong byte by its sha256 and leaves nothing behind", async () => {
    hub.fault(KEY, { corruptByte: 1234 });
    const error = await caught(ensureHubModel(`hf:${REPO}`, options()));
    expect(error.code).toBe("HUB_CHECKSUM_MISMATCH");
    expect(error.message).toContain(`expected ${sha256Hex(MODEL)}`);
    const blobs = path.dirname(blobFile());
    expect(fs.readdirSync(blobs)).toEqual([]);
    expect(fs.existsSync(path.join(dir, "hub", "models--unsloth--Qwen3.5-Tiny-GGUF", "snapshots"))).toBe(false);
  });

  it("retries a 429 and a 503 with backoff, then goes on", async () => {
    hub.fault(`api:${REPO}`, { statuses: [429] });
    hub.fault(KEY, { statuses: [503] });
    const retries: string[] = [];
    await ensureHubModel(`hf:${REPO}`, options({ onRetry: (event) => retries.push(event.reason) }));
    expect(retries).toEqual(["HTTP 429", "HTTP 503"]);
    expect(sha256Hex(fs.readFileSync(blobFile()))).toBe(sha256Hex(MODEL));
  });

  it("gives up after the retry policy's attempts with HUB_HTTP", async () => {
    hub.fault(`api:${REPO}`, { statuses: [500, 500, 500] });
    const error = await caught(ensureHubModel(`hf:${REPO}`, options({ retry: { attempts: 3, baseDelayMs: 0 } })));
    expect(error.code).toBe("HUB_HTTP");
    expect(error.message).toContain("HTTP 500 after 3 attempts");
  });

  it("says 401 for a gated repository without a token, 403 with the wrong one, and never shows the token", async () => {
    const noToken = await caught(ensureHubModel("hf:qwen/gated-GGUF", options()));
    expect(noToken.code).toBe("HUB_UNAUTHORIZED");
    expect(noToken.field).toBe("qwen/gated-GGUF");
    expect(noToken.message).toContain("set HF_TOKEN");
    env.HF_TOKEN = "hf_wrong_token";
    const wrong = await caught(ensureHubModel("hf:qwen/gated-GGUF", options()));
    expect(wrong.code).toBe("HUB_FORBIDDEN");
    expect(wrong.message).toContain("accept its terms");
    expect(wrong.message).not.toContain("hf_wrong_token");
    env.HF_TOKEN = TOKEN;
    const resolved = await ensureHubModel("hf:qwen/gated-GGUF", options());
    expect(fs.existsSync(resolved.model.files[0]!.localPath)).toBe(true);
  });

  it("says 404 for a repository that does not exist, naming it", async () => {
    const error = await caught(ensureHubModel("hf:nobody/nothing-GGUF", options()));
    expect(error.code).toBe("HUB_NOT_FOUND");
    expect(error.message).toContain("nobody/nothing-GGUF");
  });

  it("aborted mid-file leaves a resumable partial and no visible file; the next pull resumes it", async () => {
    hub.fault(KEY, { stallAfter: 50_000 });
    const controller = new AbortController();
    let progressed!: () => void;
    const gotBytes = new Promise<void>((resolve) => (progressed = resolve));
    const onProgress = (p: DownloadProgress): void => {
      if (p.downloaded > 0) progressed();
    };
    const pulling = ensureHubModel(`hf:${REPO}`, options({ signal: controller.signal, onProgress }));
    await gotBytes;
    controller.abort();
    expect((await caught(pulling)).code).toBe("HUB_ABORTED");
    expect(fs.existsSync(blobFile())).toBe(false);
    expect(fs.existsSync(path.join(dir, "hub", "models--unsloth--Qwen3.5-Tiny-GGUF", "snapshots"))).toBe(false);
    const record = JSON.parse(fs.readFileSync(`${blobFile()}.incomplete.json`, "utf8")) as { ranges: { written: number }[] };
    const written = record.ranges[0]!.written;
    expect(written).toBeGreaterThan(0);
    expect(fs.statSync(`${blobFile()}.incomplete`).size).toBeGreaterThanOrEqual(written);
    expect(fs.existsSync(`${blobFile()}.lock`)).toBe(false);
    hub.release();
    const resumed: DownloadProgress[] = [];
    await ensureHubModel(`hf:${REPO}`, options({ onProgress: (p) => resumed.push(p) }));
    expect(resumed[0]!.resumed).toBe(written);
    expect(hub.requests.at(-1)!.range).toBe(`bytes=${written}-${MODEL.byteLength - 1}`);
    expect(sha256Hex(fs.readFileSync(blobFile()))).toBe(sha256Hex(MODEL));
    expect(fs.readdirSync(path.dirname(blobFile()))).toEqual([sha256Hex(MODEL)]);
  });

  it("two pulls of the same file at once download it once", async () => {
    const [a, b] = await Promise.all([ensureHubModel(`hf:${REPO}`, options()), ensureHubModel(`hf:${REPO}`, options())]);
    expect(a.model.files[0]!.localPath).toBe(b.model.files[0]!.localPath);
    expect(cdnGets()).toBe(1);
    expect(sha256Hex(fs.readFileSync(blobFile()))).toBe(sha256Hex(MODEL));
    expect(fs.readdirSync(path.dirname(blobFile()))).toEqual([sha256Hex(MODEL)]);
  });

  it("checks the free disk space before it starts", async () => {
    vi.spyOn(fsp, "statfs").mockResolvedValue({ bavail: 10, bsize: 4096 } as unknown as fs.StatsFs);
    const error = await caught(ensureHubModel(`hf:${REPO}`, options()));
    expect(error.code).toBe("HUB_DISK_FULL");
    expect(error.message).toContain(`needs ${MODEL.byteLength} more bytes`);
    expect(fs.existsSync(blobFile())).toBe(false);
  });

  it("HF_HUB_OFFLINE=1 uses the cache only", async () => {
    const offline = { ...env, HF_HUB_OFFLINE: "1" };
    const error = await caught(ensureHubModel(`hf:${REPO}`, { env: offline }));
    expect(error.code).toBe("HUB_OFFLINE_NOT_CACHED");
    expect(hub.requests).toHaveLength(0);
    await ensureHubModel(`hf:${REPO}`, options());
    const seen = hub.requests.length;
    const resolved = await resolveHubModel(`hf:${REPO}`, { env: offline, preferCache: false });
    expect(resolved.fromCache).toBe(true);
    expect(hub.requests.length).toBe(seen);
  });
});

describe("the cache: ls and rm", () => {
  it("lists cached models with their quant and size, and removes one model or a whole repository", async () => {
    await ensureHubModel(`hf:${REPO}`, options());
    await ensureHubModel(`hf:${REPO}:Q8_0`, options());
    const listing = await listCachedModels({ env });
    expect(listing.models.map((m) => [m.repo, m.name, m.quant, m.size, m.refs])).toEqual([
      [REPO, FILE, "Q4_K_M", MODEL.byteLength, ["main"]],
      [REPO, "Qwen3.5-Tiny-Q8_0.gguf", "Q8_0", OTHER.byteLength, ["main"]],
    ]);
    const removed = await removeCachedModel(`hf:${REPO}:Q4_K_M`, { env });
    expect(removed.freedBytes).toBe(MODEL.byteLength);
    expect(fs.existsSync(blobFile())).toBe(false);
    expect((await listCachedModels({ env })).models.map((m) => m.quant)).toEqual(["Q8_0"]);
    expect((await caught(removeCachedModel(`hf:${REPO}:Q4_K_M`, { env }))).code).toBe("HUB_NOT_CACHED");
    await removeCachedModel(`hf:${REPO}`, { env });
    expect((await listCachedModels({ env })).models).toEqual([]);
    expect(hubConfig(env).cacheDir).toBe(path.join(dir, "hub"));
  });
});
