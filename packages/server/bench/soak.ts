/**
 * Memory soak of `keepquant serve`: does the server's RSS keep growing round after round (a leak), or
 * settle (a plateau)? It starts `keepquant serve` (the embedded default model, default options, on
 * 127.0.0.1 and a free port) as a child process, runs ROUNDS rounds of CLIENTS concurrent clients that
 * send requests one after another for SECONDS each (the mix of bench/soak-traffic.ts: chat and
 * completions, streamed and not, a share aborted mid-stream, response_format and tools), and after
 * each round, once the server is idle, samples the server process:
 *
 * - RSS (/proc/<pid>/status: anonymous and file-backed), and resident memory by kind of mapping
 *   (/proc/<pid>/smaps: the brk heap, glibc thread arenas, the engine's KV cache mapping, other anonymous
 *   memory, the model file);
 * - process.memoryUsage() after forced full GCs (V8 heap used/total, external, arrayBuffers) and the
 *   active handles, answered by bench/soak-probe.mjs inside the server over the IPC channel;
 * - the engine's gauges from /metrics (KV blocks in use, prefix-cache entries, running, waiting).
 *
 * The server is a child so that its figures hold none of the clients' memory. Round 0 is the idle
 * server before any traffic. It prints one table row per round, the RSS slope over the second half of
 * the rounds, and stops by itself: the rounds are bounded in count and length, every request has a
 * timeout, and the server is stopped (SIGTERM, then SIGKILL) at the end or on an error.
 *
 *   pnpm --filter @keepquant/server exec tsx bench/soak.ts --rounds 8 --clients 32 --seconds 60 [-- serve options]
 *
 * options:
 *   --rounds N            rounds of traffic, 1 .. 100 (default 8)
 *   --clients N           concurrent clients, 1 .. 256 (default 32)
 *   --seconds S           how long each round starts new requests, 1 .. 1800 (default 60); those in flight then finish
 *   --abort-share X       share of requests the client cuts halfway through their stream, 0 .. 1 (default 0.25)
 *   --seed N              traffic seed (default 2026)
 *   --settle S            seconds to wait once the server is idle, before sampling (default 2)
 *   --malloc-arena-max N  run the server with MALLOC_ARENA_MAX=N (glibc's cap on malloc arenas)
 *   --malloc-stats        also sample glibc's malloc_stats() (bytes each arena holds and bytes in use), called in
 *                         the server through gdb (the server stops for about a second while idle)
 *   --malloc-trim         after each sample, call malloc_trim(0) in the server through gdb and sample RSS again
 *                         (the free memory malloc was holding goes back; the later rounds then start from there)
 *   --heap-snapshots DIR  write V8 heap snapshots of the server after round 1 and after the last round into DIR,
 *                         and print the object kinds whose count grew between them (writing one took 50 to 60 MiB
 *                         of malloc on the main thread: freed, but the brk heap keeps it, in the rows after it)
 *   --json FILE           write every sample as JSON
 *   --cli FILE            the keepquant CLI to run (default packages/cli/dist/keepquant.js): to soak another build
 *   -- ARGS               the rest goes to `keepquant serve` (e.g. `-- --threads 1` or `-- model.gguf`); --host is refused
 *
 * Needs Linux (/proc) and the built CLI (`pnpm build`); --malloc-stats and --malloc-trim need gdb. Findings: docs/benchmarks/server.md.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath, pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import { metricValue } from "../src/load.js";
import {
  callInProcess,
  heapGrowth,
  MALLOC_STATS_END,
  type MallocStats,
  type MappingBreakdown,
  type ProcessStatus,
  parseMallocStats,
  readMappings,
  readStatus,
  summariseHeapSnapshot,
} from "./soak-memory.js";
import { runTraffic, type TrafficTally } from "./soak-traffic.js";

const MAX_ROUNDS = 100;
const MAX_CLIENTS = 256;
/** 30 minutes a round */
const MAX_ROUND_SECONDS = 1800;
/** The model load, the tuner and the grammar worker's start on a busy machine. */
const READY_TIMEOUT_MS = 300_000;
/** How long the server may take to finish its requests after a round's deadline (each request times out after 2 minutes). */
const IDLE_TIMEOUT_MS = 180_000;
const PROBE_TIMEOUT_MS = 120_000;
const STOP_TIMEOUT_MS = 30_000;
const MiB = 1024 * 1024;

const DEFAULT_CLI = fileURLToPath(new URL("../../cli/dist/keepquant.js", import.meta.url));
const PROBE = pathToFileURL(fileURLToPath(new URL("./soak-probe.mjs", import.meta.url))).href;

interface SoakOptions {
  rounds: number;
  clients: number;
  seconds: number;
  abortShare: number;
  seed: number;
  settleSeconds: number;
  mallocArenaMax: number | undefined;
  mallocStats: boolean;
  mallocTrim: boolean;
  heapSnapshots: string | undefined;
  json: string | undefined;
  cli: string;
  serveArgs: string[];
}

function parseOptions(argv: readonly string[]): SoakOptions {
  const { values, positionals } = parseArgs({
    args: [...argv],
    allowPositionals: true,
    options: {
      rounds: { type: "string" },
      clients: { type: "string" },
      seconds: { type: "string" },
      "abort-share": { type: "string" },
      seed: { type: "string" },
      settle: { type: "string" },
      "malloc-arena-max": { type: "string" },
      "malloc-stats": { type: "boolean" },
      "malloc-trim": { type: "boolean" },
      "heap-snapshots": { type: "string" },
      json: { type: "string" },
      cli: { type: "string" },
    },
  });
  const number = (name: string, text: string | undefined, fallback: number, low: number, high: number, integer = true): number => {
    if (text === undefined) return fallback;
    const value = Number(text);
    if (!Number.isFinite(value) || value < low || value > high || (integer && !Number.isInteger(value)))
      throw new Error(`--${name} ${JSON.stringify(text)}: expected ${integer ? "an integer" : "a number"} in [${low}, ${high}]`);
    return value;
  };
  // parseArgs hands everything after `--` over as positionals
  const serveArgs = positionals;
  if (serveArgs.some((arg) => arg === "--host" || arg.startsWith("--host=")))
    throw new Error("the soak serves on 127.0.0.1 only: drop --host");
  const arenas = values["malloc-arena-max"];
  return {
    rounds: number("rounds", values.rounds, 8, 1, MAX_ROUNDS),
    clients: number("clients", values.clients, 32, 1, MAX_CLIENTS),
    seconds: number("seconds", values.seconds, 60, 1, MAX_ROUND_SECONDS, false),
    abortShare: number("abort-share", values["abort-share"], 0.25, 0, 1, false),
    seed: number("seed", values.seed, 2026, 0, 2 ** 31),
    settleSeconds: number("settle", values.settle, 2, 0, 600, false),
    mallocArenaMax: arenas === undefined ? undefined : number("malloc-arena-max", arenas, 0, 1, 1024),
    mallocStats: values["malloc-stats"] === true,
    mallocTrim: values["malloc-trim"] === true,
    heapSnapshots: values["heap-snapshots"],
    json: values.json,
    cli: path.resolve(values.cli ?? DEFAULT_CLI),
    serveArgs,
  };
}

/** The server child: its pid, its URL on 127.0.0.1 and a request/reply channel to soak-probe.mjs. */
interface Served {
  child: ChildProcess;
  pid: number;
  url: string;
  probe<T>(message: { type: string; file?: string }): Promise<T>;
  /** Collects the server's stderr lines (instead of echoing them) from now until one matches `last`. */
  captureStderr(last: RegExp): Promise<string[]>;
}

async function startServer(options: SoakOptions): Promise<Served> {
  if (!existsSync(options.cli)) throw new Error(`${options.cli} is missing: run pnpm build first`);
  const child = spawn(
    process.execPath,
    ["--expose-gc", "--import", PROBE, options.cli, "serve", "--host", "127.0.0.1", "--port", "0", ...options.serveArgs],
    {
      stdio: ["ignore", "inherit", "pipe", "ipc"],
      env: { ...process.env, ...(options.mallocArenaMax === undefined ? {} : { MALLOC_ARENA_MAX: String(options.mallocArenaMax) }) },
    },
  );
  let url: string | undefined;
  let capture: { lines: string[]; last: RegExp; done: (lines: string[]) => void } | undefined;
  const ready = new Promise<void>((resolve, reject) => {
    let pending = "";
    child.stderr!.setEncoding("utf8");
    child.stderr!.on("data", (chunk: string) => {
      pending += chunk;
      for (let cut = pending.indexOf("\n"); cut >= 0; cut = pending.indexOf("\n")) {
        const line = pending.slice(0, cut);
        pending = pending.slice(cut + 1);
        if (capture) {
          capture.lines.push(line);
          if (capture.last.test(line)) {
            capture.done(capture.lines);
            capture = undefined;
          }
          continue;
        }
        process.stderr.write(`  [serve] ${line}\n`);
        const listening = /listening on (http:\/\/[^\s]+)/.exec(line);
        if (listening) url = listening[1];
        if (/keepquant serve: ready:/.test(line)) resolve();
      }
    });
    child.once("exit", (code, signal) => reject(new Error(`keepquant serve exited before it was ready (${signal ?? `code ${code}`})`)));
  });
  const timer = setTimeout(() => child.kill("SIGKILL"), READY_TIMEOUT_MS);
  try {
    await ready;
  } catch (error) {
    child.kill("SIGKILL");
    throw error;
  } finally {
    clearTimeout(timer);
  }
  if (!url || !/^http:\/\/127\.0\.0\.1:\d+$/.test(url)) {
    child.kill("SIGKILL");
    throw new Error(`keepquant serve listens on ${url ?? "an unknown address"}, not on 127.0.0.1`);
  }
  const probe = <T>(message: { type: string; file?: string }): Promise<T> =>
    new Promise<T>((resolve, reject) => {
      const timeout = setTimeout(() => {
        child.off("message", onMessage);
        reject(new Error(`the probe did not answer ${message.type} within ${PROBE_TIMEOUT_MS / 1000} s`));
      }, PROBE_TIMEOUT_MS);
      const onMessage = (reply: { type?: string }): void => {
        if (reply.type !== message.type) return;
        clearTimeout(timeout);
        child.off("message", onMessage);
        resolve(reply as T);
      };
      child.on("message", onMessage);
      child.send(message);
    });
  const captureStderr = (last: RegExp): Promise<string[]> =>
    new Promise<string[]>((resolve, reject) => {
      const timeout = setTimeout(() => {
        capture = undefined;
        reject(new Error(`the server printed no line matching ${last} within ${PROBE_TIMEOUT_MS / 1000} s`));
      }, PROBE_TIMEOUT_MS);
      capture = {
        lines: [],
        last,
        done: (lines) => {
          clearTimeout(timeout);
          resolve(lines);
        },
      };
    });
  return { child, pid: child.pid!, url, probe, captureStderr };
}

async function stopServer(served: Served): Promise<void> {
  if (served.child.exitCode !== null || served.child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => served.child.once("exit", () => resolve()));
  if (served.child.connected) served.child.disconnect();
  served.child.kill("SIGTERM");
  const timer = setTimeout(() => served.child.kill("SIGKILL"), STOP_TIMEOUT_MS);
  await exited;
  clearTimeout(timer);
}

interface EngineGauges {
  running: number;
  waiting: number;
  kvBlocksUsed: number;
  kvBlocksTotal: number;
  prefixEntries: number;
  gdnSlotsUsed: number;
  /** generation requests that ended, by finish reason, since the start */
  finished: Record<string, number>;
}

async function engineGauges(url: string): Promise<EngineGauges> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const finished: Record<string, number> = {};
  for (const reason of ["stop", "length", "tool_calls", "abort", "error"]) {
    finished[reason] = metricValue(text, "keepquant_requests_total", [`finish_reason="${reason}"`]);
  }
  return {
    running: metricValue(text, "keepquant_requests_running"),
    waiting: metricValue(text, "keepquant_requests_waiting"),
    kvBlocksUsed: metricValue(text, "keepquant_kv_blocks_used"),
    kvBlocksTotal: metricValue(text, "keepquant_kv_blocks_total"),
    prefixEntries: metricValue(text, "keepquant_prefix_cache_entries"),
    gdnSlotsUsed: metricValue(text, "keepquant_gdn_state_slots_used"),
    finished,
  };
}

/** Waits until the engine runs and queues nothing (false after IDLE_TIMEOUT_MS). */
async function waitIdle(url: string): Promise<boolean> {
  const until = performance.now() + IDLE_TIMEOUT_MS;
  while (performance.now() < until) {
    const gauges = await engineGauges(url);
    if (gauges.running === 0 && gauges.waiting === 0) return true;
    await sleep(250);
  }
  return false;
}

interface ProbeSample {
  memory: NodeJS.MemoryUsage;
  /** V8's heap spaces by name (`new_space`, `old_space`, `code_space` ...) */
  spaces: Record<string, { size: number; used: number }>;
  heap: { mallocedMemory: number; peakMallocedMemory: number; nativeContexts: number; detachedContexts: number };
  resources: Record<string, number>;
}

interface Sample {
  round: number;
  traffic: TrafficTally | undefined;
  idle: boolean;
  status: ProcessStatus;
  mappings: MappingBreakdown;
  probe: ProbeSample;
  engine: EngineGauges;
  /** with --malloc-stats */
  malloc: MallocStats | undefined;
  /** with --malloc-trim: VmRSS once malloc_trim(0) returned */
  rssAfterTrim: number | undefined;
}

async function sample(
  served: Served,
  options: SoakOptions,
  round: number,
  traffic: TrafficTally | undefined,
  idle: boolean,
): Promise<Sample> {
  const probe = await served.probe<ProbeSample & { type: string }>({ type: "sample" });
  const taken: Sample = {
    round,
    traffic,
    idle,
    status: readStatus(served.pid),
    mappings: readMappings(served.pid),
    probe: { memory: probe.memory, spaces: probe.spaces, heap: probe.heap, resources: probe.resources },
    engine: await engineGauges(served.url),
    malloc: undefined,
    rssAfterTrim: undefined,
  };
  if (options.mallocStats) {
    const printed = served.captureStderr(MALLOC_STATS_END);
    await callInProcess(served.pid, "(void) malloc_stats()");
    taken.malloc = parseMallocStats(await printed);
  }
  if (options.mallocTrim) {
    await callInProcess(served.pid, "(int) malloc_trim(0)");
    taken.rssAfterTrim = readStatus(served.pid).rss;
  }
  return taken;
}

const mib = (bytes: number): string => (bytes / MiB).toFixed(1);

/** The sum of the arenas' bytes: what malloc took from the system for them, or what is in use there. */
const arenaBytes = (s: Sample, what: "system" | "inUse"): number => s.malloc?.arenas.reduce((sum, arena) => sum + arena[what], 0) ?? 0;

const COLUMNS: readonly (readonly [string, (s: Sample) => string])[] = [
  ["round", (s) => String(s.round)],
  ["requests", (s) => String(s.traffic?.sent ?? 0)],
  ["aborted", (s) => String(s.traffic?.aborted ?? 0)],
  ["errors", (s) => String(Object.values(s.traffic?.errors ?? {}).reduce((a, b) => a + b, 0))],
  ["RSS MiB", (s) => mib(s.status.rss)],
  ["anon", (s) => mib(s.status.rssAnon)],
  ["file", (s) => mib(s.status.rssFile)],
  ["brk heap", (s) => mib(s.mappings.brkHeap)],
  ["arenas", (s) => mib(s.mappings.arenas)],
  ["KV pool", (s) => mib(s.mappings.pools)],
  ["other anon", (s) => mib(s.mappings.otherAnonymous)],
  ["V8 used", (s) => mib(s.probe.memory.heapUsed)],
  ["V8 total", (s) => mib(s.probe.memory.heapTotal)],
  ["V8 young", (s) => mib(s.probe.spaces["new_space"]?.size ?? 0)],
  ["external", (s) => mib(s.probe.memory.external)],
  ["arrayBuffers", (s) => mib(s.probe.memory.arrayBuffers)],
  ["KV blocks", (s) => String(s.engine.kvBlocksUsed)],
  ["prefix entries", (s) => String(s.engine.prefixEntries)],
  ["threads", (s) => String(s.status.threads)],
  ["handles", (s) => String(Object.values(s.probe.resources).reduce((a, b) => a + b, 0))],
];

/** Columns shown with --malloc-stats / --malloc-trim. */
const MALLOC_COLUMNS: readonly (readonly [string, (s: Sample) => string])[] = [
  ["malloc arenas", (s) => String(s.malloc?.arenas.length ?? "-")],
  ["arena bytes", (s) => mib(arenaBytes(s, "system"))],
  ["in use", (s) => mib(arenaBytes(s, "inUse"))],
  ["free, held", (s) => mib(arenaBytes(s, "system") - arenaBytes(s, "inUse"))],
];
const TRIM_COLUMNS: readonly (readonly [string, (s: Sample) => string])[] = [
  ["RSS after malloc_trim", (s) => (s.rssAfterTrim === undefined ? "-" : mib(s.rssAfterTrim))],
];

function row(cells: readonly string[]): string {
  return `| ${cells.join(" | ")} |`;
}

/** Least-squares slope of `values` against their index. */
function slope(values: readonly number[]): number {
  const n = values.length;
  if (n < 2) return 0;
  const meanX = (n - 1) / 2;
  const meanY = values.reduce((a, b) => a + b, 0) / n;
  let num = 0;
  let den = 0;
  values.forEach((y, x) => {
    num += (x - meanX) * (y - meanY);
    den += (x - meanX) ** 2;
  });
  return num / den;
}

async function snapshot(served: Served, directory: string, name: string): Promise<string> {
  mkdirSync(directory, { recursive: true });
  const reply = await served.probe<{ file: string }>({ type: "snapshot", file: path.resolve(directory, `${name}.heapsnapshot`) });
  return reply.file;
}

async function main(): Promise<void> {
  const options = parseOptions(process.argv.slice(2));
  console.log(
    `soak of ${path.relative(process.cwd(), options.cli)}: ${options.rounds} rounds x ${options.seconds} s, ${options.clients} clients, abort share ${options.abortShare}, seed ${options.seed}` +
      `${options.mallocArenaMax === undefined ? "" : `, MALLOC_ARENA_MAX=${options.mallocArenaMax}`}${options.serveArgs.length > 0 ? `, serve ${options.serveArgs.join(" ")}` : ""}`,
  );
  const served = await startServer(options);
  const stopOnSignal = (): void => {
    void stopServer(served).then(() => process.exit(130));
  };
  process.once("SIGINT", stopOnSignal);
  const columns = [...COLUMNS, ...(options.mallocStats ? MALLOC_COLUMNS : []), ...(options.mallocTrim ? TRIM_COLUMNS : [])];
  const samples: Sample[] = [];
  const snapshots: string[] = [];
  try {
    await sleep(options.settleSeconds * 1000);
    samples.push(await sample(served, options, 0, undefined, true));
    console.log(row(columns.map(([name]) => name)));
    console.log(row(columns.map(() => "---")));
    console.log(row(columns.map(([, cell]) => cell(samples[0]!))));
    for (let round = 1; round <= options.rounds; round++) {
      const traffic = await runTraffic({
        url: served.url,
        clients: options.clients,
        deadline: performance.now() + options.seconds * 1000,
        abortShare: options.abortShare,
        seed: options.seed + round,
      });
      const idle = await waitIdle(served.url);
      await sleep(options.settleSeconds * 1000);
      const taken = await sample(served, options, round, traffic, idle);
      samples.push(taken);
      console.log(row(columns.map(([, cell]) => cell(taken))) + (idle ? "" : " (not idle)"));
      if (options.heapSnapshots && (round === 1 || round === options.rounds)) {
        snapshots.push(await snapshot(served, options.heapSnapshots, `round-${round}`));
      }
    }
  } finally {
    process.off("SIGINT", stopOnSignal);
    await stopServer(served);
  }

  const last = samples[samples.length - 1]!;
  const secondHalf = samples.slice(1 + Math.floor(options.rounds / 2));
  console.log(
    `\nRSS: ${mib(samples[0]!.status.rss)} MiB idle, ${mib(last.status.rss)} MiB after round ${last.round} (peak ${mib(last.status.hwm)} MiB); ` +
      `slope over rounds ${secondHalf[0]?.round ?? "-"}..${last.round}: RSS ${mib(slope(secondHalf.map((s) => s.status.rss)))} MiB/round, ` +
      `V8 used ${mib(slope(secondHalf.map((s) => s.probe.memory.heapUsed)))} MiB/round`,
  );
  console.log(`server's finish reasons since start: ${JSON.stringify(last.engine.finished)}`);
  const errors = samples.flatMap((s) => Object.entries(s.traffic?.errors ?? {}).map(([what, n]) => `round ${s.round}: ${n} x ${what}`));
  if (errors.length > 0) console.log(`client errors: ${errors.join("; ")}`);
  if (snapshots.length === 2) {
    console.log(`\nheap objects that grew from round 1 to round ${options.rounds} (${snapshots.join(", ")}):`);
    const grown = heapGrowth(summariseHeapSnapshot(snapshots[0]!), summariseHeapSnapshot(snapshots[1]!), 15);
    for (const { kind, count, bytes } of grown)
      console.log(`  +${count} ${kind} (${bytes >= 0 ? "+" : ""}${(bytes / 1024).toFixed(1)} KiB)`);
  }
  if (options.json) writeFileSync(options.json, `${JSON.stringify({ options, samples }, null, 2)}\n`);
}

await main();
