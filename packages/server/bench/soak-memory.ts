/**
 * What bench/soak.ts reads about the server process from outside it: /proc/<pid>/status (VmRSS and its
 * anonymous / file-backed split, threads), /proc/<pid>/smaps (resident memory by kind of mapping), V8
 * heap snapshots summarised by object kind (to compare two of them) and, through gdb, glibc's own
 * malloc statistics. Linux only.
 */
import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { promisify } from "node:util";

const execFileAsync = promisify(execFile);

const KiB = 1024;
const MiB = 1024 * KiB;
/**
 * glibc's thread arenas live in heaps of HEAP_MAX_SIZE (64 MiB on 64-bit: 2 x the largest mmap
 * threshold), each mapped at a 64 MiB-aligned address: the part in use is read-write, the rest of the
 * 64 MiB stays PROT_NONE until the heap grows into it. A mapping of that shape is counted as an arena.
 */
const GLIBC_HEAP_MAX_SIZE = 64 * MiB;
/**
 * Anonymous read-write mappings this large, other than arenas, are the engine's pools (tt-native's
 * allocBuffer mmaps the KV cache one plane at a time; adjacent planes merge into one mapping): V8
 * maps its heap in pages of 256 KiB and the young generation's semi-spaces are at most 16 MiB each.
 */
const POOL_MAPPING_MIN_SIZE = 32 * MiB;

export interface ProcessStatus {
  rss: number;
  rssAnon: number;
  rssFile: number;
  /** the peak RSS since the process started */
  hwm: number;
  threads: number;
}

/** VmRSS and friends from /proc/<pid>/status, in bytes. */
export function readStatus(pid: number): ProcessStatus {
  const text = readFileSync(`/proc/${pid}/status`, "utf8");
  const field = (name: string): number => {
    const match = new RegExp(`^${name}:\\s+(\\d+)`, "m").exec(text);
    if (!match) throw new Error(`/proc/${pid}/status has no ${name}`);
    return Number(match[1]);
  };
  return {
    rss: field("VmRSS") * KiB,
    rssAnon: field("RssAnon") * KiB,
    rssFile: field("RssFile") * KiB,
    hwm: field("VmHWM") * KiB,
    threads: field("Threads"),
  };
}

/** Resident bytes by kind of mapping (from /proc/<pid>/smaps). */
export interface MappingBreakdown {
  /** the main malloc arena (brk, `[heap]`) */
  brkHeap: number;
  /** glibc's thread arenas (see GLIBC_HEAP_MAX_SIZE) */
  arenas: number;
  /** large anonymous read-write mappings: the engine's KV cache (see POOL_MAPPING_MIN_SIZE) */
  pools: number;
  /** every other anonymous mapping: V8's heap, the GDN state pools, thread stacks, WebAssembly memory, large mallocs */
  otherAnonymous: number;
  /** files whose name ends with `modelSuffix` (the mmapped model) */
  model: number;
  /** every other file-backed mapping (node, shared libraries, the addon) */
  otherFiles: number;
  /** mappings in all */
  mappings: number;
}

interface Mapping {
  start: bigint;
  end: bigint;
  perms: string;
  name: string;
  rss: number;
}

function readSmaps(pid: number): Mapping[] {
  const mappings: Mapping[] = [];
  for (const line of readFileSync(`/proc/${pid}/smaps`, "utf8").split("\n")) {
    const header = /^([0-9a-f]+)-([0-9a-f]+) (\S{4}) \S+ \S+ \S+\s*(.*)$/.exec(line);
    if (header) {
      mappings.push({ start: BigInt(`0x${header[1]}`), end: BigInt(`0x${header[2]}`), perms: header[3]!, name: header[4]!, rss: 0 });
      continue;
    }
    const rss = /^Rss:\s+(\d+) kB/.exec(line);
    if (rss && mappings.length > 0) mappings[mappings.length - 1]!.rss = Number(rss[1]) * KiB;
  }
  return mappings;
}

/** A glibc heap: read-write from a 64 MiB boundary, and PROT_NONE from its end to the next boundary (or 64 MiB read-write). */
function isArena(mapping: Mapping, next: Mapping | undefined): boolean {
  const heapSize = BigInt(GLIBC_HEAP_MAX_SIZE);
  if (mapping.name !== "" || !mapping.perms.startsWith("rw") || mapping.start % heapSize !== 0n) return false;
  const size = mapping.end - mapping.start;
  if (size === heapSize) return true;
  return (
    size < heapSize &&
    next !== undefined &&
    next.name === "" &&
    next.perms.startsWith("---") &&
    next.start === mapping.end &&
    next.end === mapping.start + heapSize
  );
}

export function readMappings(pid: number, modelSuffix = ".gguf"): MappingBreakdown {
  const breakdown: MappingBreakdown = { brkHeap: 0, arenas: 0, pools: 0, otherAnonymous: 0, model: 0, otherFiles: 0, mappings: 0 };
  const mappings = readSmaps(pid);
  mappings.forEach((mapping, i) => {
    breakdown.mappings++;
    const kind: Exclude<keyof MappingBreakdown, "mappings"> =
      mapping.name === "[heap]"
        ? "brkHeap"
        : mapping.name.startsWith("/")
          ? mapping.name.endsWith(modelSuffix)
            ? "model"
            : "otherFiles"
          : isArena(mapping, mappings[i + 1])
            ? "arenas"
            : mapping.name === "" && mapping.perms.startsWith("rw") && mapping.end - mapping.start >= BigInt(POOL_MAPPING_MIN_SIZE)
              ? "pools"
              : "otherAnonymous";
    breakdown[kind] += mapping.rss;
  });
  return breakdown;
}

/** Count and self size of one kind of heap object. */
export interface HeapKind {
  count: number;
  bytes: number;
}

interface HeapSnapshotFile {
  snapshot: { meta: { node_fields: string[]; node_types: [string[], ...unknown[]] } };
  nodes: number[];
  strings: string[];
}

/**
 * A V8 heap snapshot summarised by kind: objects and closures by constructor name (`object Request`),
 * everything else by node type (`(string)`, `(code)` ...).
 */
export function summariseHeapSnapshot(file: string): Map<string, HeapKind> {
  const parsed = JSON.parse(readFileSync(file, "utf8")) as HeapSnapshotFile;
  const fields = parsed.snapshot.meta.node_fields;
  const types = parsed.snapshot.meta.node_types[0];
  const width = fields.length;
  const typeAt = fields.indexOf("type");
  const nameAt = fields.indexOf("name");
  const sizeAt = fields.indexOf("self_size");
  const kinds = new Map<string, HeapKind>();
  for (let i = 0; i < parsed.nodes.length; i += width) {
    const type = types[parsed.nodes[i + typeAt]!]!;
    const key = type === "object" || type === "closure" ? `${type} ${parsed.strings[parsed.nodes[i + nameAt]!]}` : `(${type})`;
    const kind = kinds.get(key) ?? { count: 0, bytes: 0 };
    kind.count++;
    kind.bytes += parsed.nodes[i + sizeAt]!;
    kinds.set(key, kind);
  }
  return kinds;
}

/** The kinds whose count grew most from `before` to `after` (largest growth first). */
export function heapGrowth(
  before: ReadonlyMap<string, HeapKind>,
  after: ReadonlyMap<string, HeapKind>,
  top: number,
): { kind: string; count: number; bytes: number }[] {
  const grown: { kind: string; count: number; bytes: number }[] = [];
  for (const [kind, now] of after) {
    const then = before.get(kind) ?? { count: 0, bytes: 0 };
    if (now.count > then.count) grown.push({ kind, count: now.count - then.count, bytes: now.bytes - then.bytes });
  }
  return grown.sort((a, b) => b.count - a.count).slice(0, top);
}

/** glibc's malloc_stats(): bytes each arena took from the system and bytes in use in it, and the totals with mmapped chunks. */
export interface MallocStats {
  arenas: { system: number; inUse: number }[];
  total: { system: number; inUse: number };
}

/** The text glibc's malloc_stats() prints (to the process's stderr), from its first line to its last. */
export const MALLOC_STATS_END = /^max mmap bytes\s+=/;

export function parseMallocStats(lines: readonly string[]): MallocStats {
  const stats: MallocStats = { arenas: [], total: { system: 0, inUse: 0 } };
  let current: { system: number; inUse: number } | undefined;
  for (const line of lines) {
    if (/^Arena \d+:/.test(line)) {
      current = { system: 0, inUse: 0 };
      stats.arenas.push(current);
    } else if (line.startsWith("Total (incl. mmap):")) {
      current = stats.total;
    }
    const value = /^(system|in use) bytes\s+=\s+(\d+)/.exec(line);
    if (value && current) current[value[1] === "system" ? "system" : "inUse"] = Number(value[2]);
  }
  return stats;
}

/** The longest one gdb call may take (attaching stops every thread of the server for about a second). */
const GDB_TIMEOUT_MS = 60_000;

/**
 * Calls a C library function in the running process `pid` through gdb (`gdb -p PID -batch -ex "call ..."`),
 * e.g. `(void) malloc_stats()` or `(int) malloc_trim(0)`, and returns what gdb printed for the result.
 * Needs gdb and the right to trace the process (a child of ours is fine unless ptrace is locked down).
 */
export async function callInProcess(pid: number, expression: string): Promise<string> {
  const { stdout } = await execFileAsync("gdb", ["-p", String(pid), "-batch", "-nx", "-ex", `call ${expression}`], {
    timeout: GDB_TIMEOUT_MS,
  });
  return /^\$1 = (.*)$/m.exec(stdout)?.[1] ?? "";
}
