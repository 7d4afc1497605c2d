/**
 * pull, ls, rm and hf: model arguments against a loopback mock Hub (no internet): the CLI runs in this process
 * (the mock answers from the same event loop), its streams captured; the terminal progress bar under a pty.
 */
import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { defaultModelPath } from "@keepquant/default-model";
import { cpuAvailableMemory } from "@keepquant/engine";
import {
  GgmlType,
  QWEN35_27B_SHAPE,
  QWEN35_TEST_SHAPE,
  qwen35SpecLayout,
  readGguf,
  splitGgufBytes,
  synthesizeQwen35,
  synthesizeQwen35Header,
} from "@keepquant/gguf";
import { startMockHub, type MockHub, mockHubEnv } from "@keepquant/hub/testing";
import { afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { CommandIo } from "./command.js";
import { downloadProgress } from "./download-progress.js";
import { runCli } from "./main.js";

const bin = fileURLToPath(new URL("../dist/keepquant.js", import.meta.url));
const REPO = "unsloth/Qwen3.5-0.8B-GGUF";
const TOKEN = "hf_do_not_print_me";
let small: Uint8Array;
let shards: Uint8Array[];
let tooBig: { header: Uint8Array; size: number };
let hub: MockHub;
let dir: string;
let env: NodeJS.ProcessEnv;

beforeAll(async () => {
  small = fs.readFileSync(await defaultModelPath());
  shards = await splitGgufBytes(small, 2);
  // an F32 27B-shaped header with enough layers to be four times this machine's available memory (served sparse)
  const base = { ...QWEN35_27B_SHAPE, vocab: 4096, layers: 4 };
  const perFourLayers = qwen35SpecLayout(base).tensors.reduce((sum, t) => sum + t.ne.reduce((a, b) => a * b, 1) * 4, 0);
  const layers = 4 * Math.max(16, Math.ceil((4 * cpuAvailableMemory().bytes) / perFourLayers));
  const { header, fileSize } = synthesizeQwen35Header({ ...base, layers }, { types: () => GgmlType.F32 });
  tooBig = { header, size: fileSize };
});

beforeEach(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "kq-cli-hub-"));
  hub = await startMockHub({
    [REPO]: { files: { "Qwen3.5-0.8B-Q4_K_M.gguf": small, "Qwen3.5-0.8B-F32.gguf": tooBig, "mmproj-F16.gguf": small.subarray(0, 2048) } },
    "qwen/Gated-GGUF": { files: { "gated-Q4_K_M.gguf": small }, gatedToken: "hf_the_right_one" },
    "test/Header-GGUF": { files: { "test-Q8_0.gguf": synthesizeQwen35(QWEN35_TEST_SHAPE) } },
    "test/Mtp-GGUF": { files: { "m-Q8_0.gguf": small, "m-MTP-Q8_0.gguf": small.subarray(0, 4096) } },
    "test/Split-GGUF": {
      files: { "m-Q8_0-00001-of-00002.gguf": shards[0]!, "m-Q8_0-00002-of-00002.gguf": shards[1]! },
    },
  });
  env = mockHubEnv(hub, dir);
});

afterEach(async () => {
  await hub.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

/** A stream that hands what is written to `take`. */
function sink(take: (text: string) => void): NodeJS.WritableStream {
  return {
    write(text: string) {
      take(text);
      return true;
    },
  } as unknown as NodeJS.WritableStream;
}

async function cli(args: string[], interactive = false) {
  let stdout = "";
  let stderr = "";
  const io: CommandIo = {
    stdout: sink((text) => {
      stdout += text;
    }),
    stderr: sink((text) => {
      stderr += text;
    }),
    env,
    interactive,
  };
  const code = await runCli(args, io);
  return { code, stdout, stderr };
}

const repoFolder = (): string => path.join(dir, "hub", "models--unsloth--Qwen3.5-0.8B-GGUF");

describe("keepquant pull, ls, rm", () => {
  it("pull downloads Q4_K_M by default into the cache after the planner says it fits; ls lists it; rm removes it", async () => {
    const pulled = await cli(["pull", `hf:${REPO}`]);
    expect(pulled.stderr).toContain("plan: fits with");
    expect(pulled.stderr).toContain("downloading Qwen3.5-0.8B-Q4_K_M.gguf (4.7 MiB)");
    expect(pulled.stderr).toMatch(/downloaded Qwen3\.5-0\.8B-Q4_K_M\.gguf \(4\.7 MiB\) in \d+s/);
    expect(pulled.code).toBe(0);
    const local = pulled.stdout.trim();
    expect(local.startsWith(path.join(repoFolder(), "snapshots"))).toBe(true);
    expect(fs.readFileSync(local).equals(small)).toBe(true);

    const listed = await cli(["ls", "--json"]);
    const document = JSON.parse(listed.stdout) as { models: Record<string, unknown>[] };
    expect(document.models).toEqual([
      expect.objectContaining({
        reference: `hf:${REPO}:Q4_K_M`,
        quant: "Q4_K_M",
        size: small.byteLength,
        architecture: "qwen35",
        fits: true,
        path: local,
      }),
    ]);
    const table = await cli(["ls"]);
    expect(table.stdout.split("\n")[0]).toMatch(/^MODEL\s+FILE\s+QUANT\s+SIZE\s+ARCH\s+FITS$/);
    expect(table.stdout).toMatch(/hf:unsloth\/Qwen3\.5-0\.8B-GGUF:Q4_K_M\s+Qwen3\.5-0\.8B-Q4_K_M\.gguf\s+Q4_K_M\s+4\.7 MiB\s+qwen35\s+yes/);

    const again = await cli(["pull", `hf:${REPO}`]);
    expect(again.stderr).toContain("all cached");
    expect(again.stderr).not.toContain("downloading");

    const removed = await cli(["rm", `hf:${REPO}:Q4_K_M`]);
    expect(removed.code).toBe(0);
    expect(removed.stderr).toContain("freed 4.7 MiB");
    expect(fs.existsSync(local)).toBe(false);
    expect(JSON.parse((await cli(["ls", "--json"])).stdout).models).toEqual([]);
    const missing = await cli(["rm", `hf:${REPO}:Q4_K_M`]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain("error: HUB_NOT_CACHED");
  });

  it("pull refuses a model that does not fit from its header alone (exit 3, nothing downloaded) and names a quant that would", async () => {
    const refused = await cli(["pull", `hf:${REPO}:F32`]);
    expect(refused.code).toBe(3);
    expect(refused.stderr).toContain("error: PLAN_DOES_NOT_FIT:");
    expect(refused.stderr).toContain("Quants of unsloth/Qwen3.5-0.8B-GGUF that would fit: Q4_K_M (4.7 MiB)");
    expect(refused.stderr).toContain("Pass --force to download anyway");
    expect(fs.existsSync(path.join(repoFolder(), "blobs"))).toBe(false);
    const ranges = hub.requests.filter((r) => r.path.startsWith("/cdn/")).map((r) => r.range);
    expect(ranges.length).toBeGreaterThan(0);
    expect(ranges.every((r) => r !== undefined && /^bytes=\d+-\d+$/.test(r))).toBe(true);
  });

  it("pull --mmproj brings the vision projector; a missing quant lists what the repository has", async () => {
    const pulled = await cli(["pull", `hf:${REPO}`, "--mmproj", "--json"]);
    expect(pulled.code).toBe(0);
    const document = JSON.parse(pulled.stdout) as { files: { path: string }[]; plan: { fits: boolean } };
    expect(document.files.map((f) => f.path)).toEqual(["Qwen3.5-0.8B-Q4_K_M.gguf", "mmproj-F16.gguf"]);
    expect(document.plan.fits).toBe(true);
    const wrong = await cli(["pull", `hf:${REPO}:Q2_K`]);
    expect(wrong.code).toBe(1);
    expect(wrong.stderr).toContain(
      "error: HUB_NO_MATCHING_FILE: unsloth/Qwen3.5-0.8B-GGUF has no model file matching Q2_K: it has: F32, Q4_K_M",
    );
  });

  it("a split model: planned from every shard's header, every shard downloaded into one snapshot, loaded as one model", async () => {
    const pulled = await cli(["pull", "hf:test/Split-GGUF:Q8_0"]);
    expect(pulled.code, pulled.stderr).toBe(0);
    expect(pulled.stderr).toContain("m-Q8_0.gguf (Q8_0, 2 file(s)");
    expect(pulled.stderr).toMatch(/^plan: fits/m);
    expect(
      pulled.stdout
        .trim()
        .split("\n")
        .map((p) => path.basename(p)),
    ).toEqual(["m-Q8_0-00001-of-00002.gguf", "m-Q8_0-00002-of-00002.gguf"]);
    const listed = JSON.parse((await cli(["ls", "--json"])).stdout) as { models: { shards: number; fits: boolean | null }[] };
    expect(listed.models).toEqual([expect.objectContaining({ shards: 2, fits: true })]);
    const inspected = JSON.parse((await cli(["inspect", "hf:test/Split-GGUF:Q8_0", "--json"])).stdout) as {
      tensorCount: number;
      shards: { tensorCount: number }[];
      plan: { ok: boolean };
    };
    expect(inspected.tensorCount).toBe((await readGguf(small)).tensors.length);
    expect(inspected.shards.map((s) => s.tensorCount).reduce((a, b) => a + b, 0)).toBe(inspected.tensorCount);
    expect(inspected.plan.ok).toBe(true);
    const ran = await cli(["run", "hf:test/Split-GGUF:Q8_0", "--prompt", "Hi", "--max-tokens", "3", "--threads", "1", "--json"]);
    expect(ran.code, ran.stderr).toBe(0);
    expect(JSON.parse(ran.stdout).stats.generatedTokens).toBe(3);
  });

  it("a split model not in the cache is planned from the headers of all its shards, by Range requests", async () => {
    const planned = await cli(["plan", "hf:test/Split-GGUF:Q8_0", "--json"]);
    expect(planned.code, planned.stderr).toBe(0);
    const whole = await readGguf(small);
    const weights = whole.tensors.reduce((sum, t) => sum + t.byteLength, 0);
    const plan = JSON.parse(planned.stdout) as { fits: boolean; model: { usedBytes: number; skippedBytes: number } };
    expect(plan.fits).toBe(true);
    expect(plan.model.usedBytes + plan.model.skippedBytes).toBe(weights);
    expect(fs.existsSync(path.join(dir, "hub", "models--test--Split-GGUF"))).toBe(false);
  });

  it("--mtp brings the separate MTP drafter with the model; --connections is checked", async () => {
    const plain = JSON.parse((await cli(["pull", "hf:test/Mtp-GGUF", "--json"])).stdout) as { files: { path: string }[] };
    expect(plain.files.map((f) => f.path)).toEqual(["m-Q8_0.gguf"]);
    const pulled = await cli(["pull", "hf:test/Mtp-GGUF", "--mtp", "--connections", "2", "--json"]);
    expect(pulled.code, pulled.stderr).toBe(0);
    const document = JSON.parse(pulled.stdout) as { files: { path: string; localPath: string }[]; downloadedBytes: number };
    expect(document.files.map((f) => f.path)).toEqual(["m-Q8_0.gguf", "m-MTP-Q8_0.gguf"]);
    expect(document.downloadedBytes).toBe(4096);
    expect(fs.readFileSync(document.files[1]!.localPath).equals(small.subarray(0, 4096))).toBe(true);
    const bad = await cli(["pull", "hf:test/Mtp-GGUF", "--connections", "0"]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("--connections");
  });

  it("a gated repository: 401 without a token, 403 with the wrong one, the token never printed", async () => {
    const anonymous = await cli(["pull", "hf:qwen/Gated-GGUF"]);
    expect(anonymous.code).toBe(1);
    expect(anonymous.stderr).toMatch(/^error: HUB_UNAUTHORIZED: qwen\/Gated-GGUF: .*set HF_TOKEN/m);
    env.HF_TOKEN = TOKEN;
    const wrong = await cli(["pull", "hf:qwen/Gated-GGUF", "--json"]);
    expect(wrong.stderr).toContain("error: HUB_FORBIDDEN: qwen/Gated-GGUF");
    expect(JSON.parse(wrong.stdout).error).toMatchObject({ code: "HUB_FORBIDDEN", field: "qwen/Gated-GGUF" });
    expect(wrong.stdout + wrong.stderr).not.toContain(TOKEN);
  });
});

/** Runs the built binary as a separate process (the mock Hub answers from this one's event loop). */
function spawnCli(args: string[]) {
  const child = spawn(process.execPath, [bin, ...args], { env: { ...process.env, ...env, CI: "1", KEEPQUANT_DEBUG: "" } });
  let output = "";
  child.stdout.on("data", (d: Buffer) => (output += d.toString()));
  child.stderr.on("data", (d: Buffer) => (output += d.toString()));
  const done = new Promise<{ code: number | null; output: string }>((resolve, reject) => {
    child.on("error", reject);
    child.on("close", (code) => resolve({ code, output }));
  });
  return { child, done };
}

describe("separate processes", () => {
  it("two keepquant pull processes of the same model at once: both succeed, the file is fetched once", async () => {
    const [a, b] = await Promise.all([spawnCli(["pull", `hf:${REPO}`]).done, spawnCli(["pull", `hf:${REPO}`]).done]);
    expect(a.code, a.output).toBe(0);
    expect(b.code, b.output).toBe(0);
    // each process reads the header (one 2 MiB range) to plan; the whole file is fetched by one of them
    const whole = `bytes=0-${small.byteLength - 1}`;
    expect(hub.requests.filter((r) => r.path.startsWith("/cdn/") && r.range === whole)).toHaveLength(1);
    const blobs = fs.readdirSync(path.join(repoFolder(), "blobs"));
    expect(blobs).toHaveLength(1);
  });

  it("Ctrl-C during a slow download exits 130, keeps a resumable partial and no visible file; the next pull resumes", async () => {
    // the download stalls, not the planner's header read before it
    const whole = `bytes=0-${small.byteLength - 1}`;
    hub.fault(`${REPO}/Qwen3.5-0.8B-Q4_K_M.gguf`, { stallAfter: 1_000_000, onRange: (range) => range === whole });
    const pulling = spawnCli(["pull", `hf:${REPO}`]);
    await hub.stalled();
    const blobs = path.join(repoFolder(), "blobs");
    const partial = (): string | undefined => fs.readdirSync(blobs).find((f) => f.endsWith(".incomplete"));
    // wait (on the file, not on a clock) until the child has written the first bytes it received
    while (!(partial() !== undefined && fs.statSync(path.join(blobs, partial()!)).size > 0)) await new Promise((r) => setTimeout(r, 20));
    pulling.child.kill("SIGINT");
    const interrupted = await pulling.done;
    expect(interrupted.code, interrupted.output).toBe(130);
    expect(interrupted.output).toContain("error: HUB_ABORTED:");
    expect(interrupted.output).toContain("run the same command again to resume it");
    expect(fs.readdirSync(blobs).filter((f) => !f.includes(".incomplete"))).toEqual([]);
    expect(fs.existsSync(path.join(repoFolder(), "snapshots"))).toBe(false);
    hub.release();
    const resumed = await cli(["pull", `hf:${REPO}`]);
    expect(resumed.code).toBe(0);
    expect(resumed.stderr).toMatch(/downloading Qwen3\.5-0\.8B-Q4_K_M\.gguf \(4\.7 MiB, resuming at [\d.]+ (KiB|MiB)\)/);
    expect(fs.readFileSync(resumed.stdout.trim()).equals(small)).toBe(true);
    expect(fs.readdirSync(blobs)).toHaveLength(1);
  });
});

describe("hf: where a model path goes", () => {
  it("run downloads the model on first use and generates", async () => {
    const ran = await cli(["run", `hf:${REPO}:q4_k_m`, "--prompt", "Hi", "--max-tokens", "3", "--threads", "1", "--json"]);
    expect(ran.code).toBe(0);
    expect(JSON.parse(ran.stdout).stats.generatedTokens).toBe(3);
    expect(fs.readdirSync(path.join(repoFolder(), "blobs"))).toHaveLength(1);
  });

  it("plan and inspect read a model that is not cached by Range requests, downloading nothing", async () => {
    const planned = await cli(["plan", "hf:test/Header-GGUF", "--json"]);
    expect(planned.code).toBe(0);
    expect(JSON.parse(planned.stdout).fits).toBe(true);
    const inspected = await cli(["inspect", "hf:test/Header-GGUF:Q8_0", "--json"]);
    expect(inspected.code).toBe(0);
    expect(JSON.parse(inspected.stdout).architecture).toBe("qwen35");
    expect(fs.existsSync(path.join(dir, "hub", "models--test--Header-GGUF"))).toBe(false);
  });

  it("HF_HUB_OFFLINE=1 without the model in the cache says so", async () => {
    env.HF_HUB_OFFLINE = "1";
    const offline = await cli(["run", `hf:${REPO}`, "--prompt", "Hi"]);
    expect(offline.code).toBe(1);
    expect(offline.stderr).toContain("error: HUB_OFFLINE_NOT_CACHED: HF_HUB_OFFLINE=1");
    expect(hub.requests).toHaveLength(0);
  });
});

describe("download progress", () => {
  it("on a terminal: a bar with bytes, rate and ETA redrawn in place; otherwise one line per file", () => {
    let clock = 0;
    let text = "";
    const io = {
      stdout: process.stdout,
      stderr: sink((t) => {
        text += t;
      }),
      env: {},
      interactive: true,
    } as unknown as CommandIo;
    const progress = downloadProgress(io, { now: () => clock, redrawMs: 0 });
    const mib = 1024 * 1024;
    progress.onProgress({ file: "dir/model.gguf", downloaded: 0, total: 100 * mib, resumed: 0 });
    clock = 2000;
    progress.onProgress({ file: "dir/model.gguf", downloaded: 50 * mib, total: 100 * mib, resumed: 0 });
    expect(text.split("\r").at(-1)).toBe("model.gguf [############............] 50.0% 50.0 MiB/100.0 MiB 25.0 MiB/s ETA 2s");
    clock = 4000;
    progress.onProgress({ file: "dir/model.gguf", downloaded: 100 * mib, total: 100 * mib, resumed: 0 });
    progress.finish();
    expect(text.endsWith("downloaded model.gguf (100.0 MiB) in 4s at 25.0 MiB/s\n")).toBe(true);

    let quiet = "";
    const plain = downloadProgress(
      {
        ...io,
        interactive: false,
        stderr: sink((t) => {
          quiet += t;
        }),
      } as unknown as CommandIo,
      {
        now: () => clock,
      },
    );
    plain.onProgress({ file: "model.gguf", downloaded: 10 * mib, total: 100 * mib, resumed: 10 * mib });
    plain.onProgress({ file: "model.gguf", downloaded: 60 * mib, total: 100 * mib, resumed: 10 * mib });
    plain.onProgress({ file: "model.gguf", downloaded: 100 * mib, total: 100 * mib, resumed: 10 * mib });
    plain.finish();
    expect(quiet.split("\n")).toEqual([
      "downloading model.gguf (100.0 MiB, resuming at 10.0 MiB)",
      "downloaded model.gguf (100.0 MiB) in 0s",
      "",
    ]);
  });

  // script(1) (util-linux) gives the child a pty
  it.skipIf(spawnSync("script", ["--version"]).error !== undefined)(
    "under a pty, keepquant pull draws the bar with carriage returns; piped, it prints plain lines",
    async () => {
      const run = (command: string, args: string[]) =>
        new Promise<string>((resolve, reject) => {
          const child = spawn(command, args, {
            env: { ...process.env, ...env, CI: "", KEEPQUANT_DEBUG: "" },
            stdio: ["ignore", "pipe", "pipe"],
          });
          let output = "";
          child.stdout.on("data", (d: Buffer) => (output += d.toString()));
          child.stderr.on("data", (d: Buffer) => (output += d.toString()));
          child.on("error", reject);
          child.on("close", (code) => (code === 0 ? resolve(output) : reject(new Error(`exit ${code}: ${output}`))));
        });
      const tty = await run("script", ["-qefc", `${JSON.stringify(process.execPath)} ${JSON.stringify(bin)} pull hf:${REPO}`, "/dev/null"]);
      expect(tty).toMatch(/\rQwen3\.5-0\.8B-Q4_K_M\.gguf \[#+\.*\] 100\.0% 4\.7 MiB\/4\.7 MiB .*\/s ETA/);
      expect(tty).toContain("downloaded Qwen3.5-0.8B-Q4_K_M.gguf");
      expect(tty).not.toContain("downloading Qwen3.5");
      fs.rmSync(path.join(dir, "hub"), { recursive: true, force: true });
      const piped = await run(process.execPath, [bin, "pull", `hf:${REPO}`]);
      expect(piped).not.toContain("\r");
      expect(piped).toContain("downloading Qwen3.5-0.8B-Q4_K_M.gguf (4.7 MiB)");
    },
  );
});
