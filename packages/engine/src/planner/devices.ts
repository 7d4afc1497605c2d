import { readFileSync } from "node:fs";
import { freemem } from "node:os";
import { PlanError } from "./errors.js";

export type TtDeviceName = "tt-n150" | "tt-n300" | "tt-p100a" | "tt-p150";
export type DeviceName = "cpu" | TtDeviceName;

/** Where the planned bytes go: this machine's memory, a Tenstorrent card, or a size given by hand. */
export type DeviceKind = "cpu" | "tt" | "custom";

export interface PlanDevice {
  /** `cpu`, a Tenstorrent card name, or `custom`. */
  name: string;
  kind: DeviceKind;
  /** Bytes the plan may use. */
  capacityBytes: number;
  /** Chips (each with its own DRAM and its own trace region). */
  chips: number;
  /** Where the capacity comes from, e.g. "vendor: 12 GB GDDR6" or "/proc/meminfo MemAvailable". */
  source: string;
}

/** Tenstorrent cards, DRAM in decimal GB as the vendor states it. */
export const TT_DEVICES: Readonly<Record<TtDeviceName, { bytes: number; chips: number; description: string }>> = Object.freeze({
  "tt-n150": { bytes: 12e9, chips: 1, description: "Wormhole n150, 12 GB GDDR6" },
  "tt-n300": { bytes: 24e9, chips: 2, description: "Wormhole n300, 24 GB GDDR6 (2 chips x 12 GB)" },
  "tt-p100a": { bytes: 28e9, chips: 1, description: "Blackhole p100a, 28 GB GDDR6" },
  "tt-p150": { bytes: 32e9, chips: 1, description: "Blackhole p150, 32 GB GDDR6" },
});

export const DEVICE_NAMES: readonly DeviceName[] = Object.freeze(["cpu", ...(Object.keys(TT_DEVICES) as TtDeviceName[])]);

export function isTtDeviceName(name: string): name is TtDeviceName {
  return Object.hasOwn(TT_DEVICES, name);
}

function checkBytes(bytes: number, field: string, least = 1): number {
  if (!Number.isSafeInteger(bytes) || bytes < least) {
    throw new PlanError("PLAN_BAD_INPUT", `${field} must be a whole number of bytes >= ${least}, got ${String(bytes)}`, { field });
  }
  return bytes;
}

/** A Tenstorrent card; `memoryBytes` replaces its DRAM size (a what-if). */
export function ttDevice(name: TtDeviceName, memoryBytes?: number): PlanDevice {
  const card = TT_DEVICES[name];
  if (!card)
    throw new PlanError("PLAN_BAD_INPUT", `unknown device ${JSON.stringify(name)} (devices: ${DEVICE_NAMES.join(", ")})`, {
      field: "device",
    });
  if (memoryBytes !== undefined) {
    return {
      name,
      kind: "tt",
      capacityBytes: checkBytes(memoryBytes, "memory"),
      chips: card.chips,
      source: `given with --memory; the card has ${card.bytes / 1e9} GB`,
    };
  }
  return { name, kind: "tt", capacityBytes: card.bytes, chips: card.chips, source: `vendor: ${card.description}` };
}

/** This machine's memory available to a new process (see `cpuAvailableMemory`). */
export function cpuDevice(available: CpuMemory): PlanDevice {
  return {
    name: "cpu",
    kind: "cpu",
    capacityBytes: checkBytes(available.bytes, "available memory", 0),
    chips: 1,
    source: available.source,
  };
}

/** A memory size given by hand (`--memory SIZE`), planned like host memory: no trace region. */
export function customDevice(memoryBytes: number): PlanDevice {
  return { name: "custom", kind: "custom", capacityBytes: checkBytes(memoryBytes, "memory"), chips: 1, source: "given with --memory" };
}

/** Resolves a device name; `memoryBytes` replaces the capacity (for cpu: the measured available memory). */
export function resolveDevice(name: string | undefined, options: { memoryBytes?: number; cpuMemory?: () => CpuMemory } = {}): PlanDevice {
  if (name === undefined)
    return options.memoryBytes !== undefined ? customDevice(options.memoryBytes) : cpuDevice((options.cpuMemory ?? cpuAvailableMemory)());
  if (name === "cpu") {
    if (options.memoryBytes !== undefined) return { ...customDevice(options.memoryBytes), name: "cpu", kind: "cpu" };
    return cpuDevice((options.cpuMemory ?? cpuAvailableMemory)());
  }
  if (isTtDeviceName(name)) return ttDevice(name, options.memoryBytes);
  throw new PlanError("PLAN_BAD_INPUT", `unknown device ${JSON.stringify(name)} (devices: ${DEVICE_NAMES.join(", ")})`, {
    field: "device",
  });
}

export interface CpuMemory {
  bytes: number;
  /** How `bytes` was found, said in the plan. */
  source: string;
}

/** Reads a text file, or undefined when it is absent or unreadable. */
export type TextFileReader = (path: string) => string | undefined;

const readText: TextFileReader = (path) => {
  try {
    return readFileSync(path, "utf8");
  } catch {
    return undefined;
  }
};

/** cgroup limits at or above this are "no limit" (cgroup v1 writes 2^63 - 4096). */
const CGROUP_UNLIMITED = 2 ** 60;

function statField(stat: string, key: string): number | undefined {
  const match = new RegExp(`^${key} (\\d+)$`, "m").exec(stat);
  return match ? Number(match[1]) : undefined;
}

/**
 * The memory cgroup's headroom: its limit minus what it uses beyond reclaimable file pages (page
 * cache, including the memory-mapped model when it is cached). cgroup v2 first, then v1.
 */
function cgroupHeadroom(read: TextFileReader): CpuMemory | undefined {
  const v2Max = read("/sys/fs/cgroup/memory.max")?.trim();
  if (v2Max !== undefined && /^\d+$/.test(v2Max) && Number(v2Max) < CGROUP_UNLIMITED) {
    const current = Number(read("/sys/fs/cgroup/memory.current")?.trim() ?? Number.NaN);
    const file = statField(read("/sys/fs/cgroup/memory.stat") ?? "", "file") ?? 0;
    if (Number.isFinite(current)) {
      return {
        bytes: Math.max(0, Number(v2Max) - Math.max(0, current - file)),
        source: "cgroup v2 memory.max - (memory.current - file pages)",
      };
    }
  }
  const v1Limit = read("/sys/fs/cgroup/memory/memory.limit_in_bytes")?.trim();
  if (v1Limit !== undefined && /^\d+$/.test(v1Limit) && Number(v1Limit) < CGROUP_UNLIMITED) {
    const usage = Number(read("/sys/fs/cgroup/memory/memory.usage_in_bytes")?.trim() ?? Number.NaN);
    const stat = read("/sys/fs/cgroup/memory/memory.stat") ?? "";
    const file = (statField(stat, "total_inactive_file") ?? 0) + (statField(stat, "total_active_file") ?? 0);
    if (Number.isFinite(usage)) {
      return {
        bytes: Math.max(0, Number(v1Limit) - Math.max(0, usage - file)),
        source: "cgroup v1 memory.limit_in_bytes - (usage - file pages)",
      };
    }
  }
  return undefined;
}

/**
 * Memory a new process can use without swapping: `MemAvailable` of /proc/meminfo (free memory plus
 * reclaimable page cache, which is what memory-mapped weights draw on), capped by the memory
 * cgroup's headroom when a limit is set; `os.freemem()` where /proc/meminfo does not exist.
 */
export function cpuAvailableMemory(read: TextFileReader = readText): CpuMemory {
  const meminfo = read("/proc/meminfo");
  const match = meminfo === undefined ? null : /^MemAvailable:\s+(\d+) kB$/m.exec(meminfo);
  let result: CpuMemory = match
    ? { bytes: Number(match[1]) * 1024, source: "/proc/meminfo MemAvailable (free memory + reclaimable page cache)" }
    : { bytes: freemem(), source: "os.freemem() (no /proc/meminfo MemAvailable)" };
  const cgroup = cgroupHeadroom(read);
  if (cgroup && cgroup.bytes < result.bytes)
    result = { bytes: cgroup.bytes, source: `${cgroup.source} (below ${result.source.split(" (")[0]})` };
  return result;
}
