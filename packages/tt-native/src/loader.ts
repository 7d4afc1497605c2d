/**
 * Finds, loads and checks the native addon. Never throws: every failure becomes a reason in the
 * status, and the caller decides (the engine runs the next provider and says so).
 */
import fs from "node:fs";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { NATIVE_ABI_VERSION, type IsaLevelName, type NativeAddon, type NativeBuildInfo } from "./native-types.js";

/** Path of a specific .node binary to load instead of the package's build/Release one. */
export const KEEPQUANT_NATIVE_BINARY = "KEEPQUANT_NATIVE_BINARY";
/** Force a kernel level: generic | avx2 | avx512 | neon | best. */
export const KEEPQUANT_NATIVE_ISA = "KEEPQUANT_NATIVE_ISA";
/** Threads of the native pool (positive integer); unset/empty = hardware threads. */
export const KEEPQUANT_NATIVE_THREADS = "KEEPQUANT_NATIVE_THREADS";

export const BINARY_FILE_NAME = "keepquant_native.node";

/** At most this many pool threads per logical core without `force` (more only oversubscribe the CPU). */
export const NATIVE_THREADS_PER_CORE = 4;
/** The pool never has more threads than this, even when forced. */
export const NATIVE_THREADS_HARD_LIMIT = 1024;

export interface NativeThreadLimits {
  /** os.availableParallelism(): the logical cores this process may run on */
  logicalCores: number;
  /** the largest pool size without `force`: NATIVE_THREADS_PER_CORE x logicalCores */
  max: number;
  /** the largest pool size with `force` */
  forcedMax: number;
}

/** The thread policy of the pool (the same numbers for setNativeThreads, KEEPQUANT_NATIVE_THREADS and the CLI). */
export function nativeThreadLimits(): NativeThreadLimits {
  const logicalCores = Math.max(1, os.availableParallelism());
  return {
    logicalCores,
    max: Math.min(NATIVE_THREADS_HARD_LIMIT, NATIVE_THREADS_PER_CORE * logicalCores),
    forcedMax: NATIVE_THREADS_HARD_LIMIT,
  };
}

export interface CpuArmStatus {
  loaded: boolean;
  /** every reason the arm did not load (empty when loaded) */
  reasons: string[];
  /** the binary that was loaded or tried last */
  binary?: string;
  abiVersion?: number;
  isa?: IsaLevelName;
  isaAvailable?: IsaLevelName[];
  threads?: number;
  compiler?: string;
}

export interface TtArmStatus {
  built: boolean;
  loaded: boolean;
  reasons: string[];
}

export interface NativeStatus {
  cpu: CpuArmStatus;
  tt: TtArmStatus;
}

export type EnvSource = Readonly<Record<string, string | undefined>>;

/** The package root (dist/ and src/ both sit one level below it). */
export function packageRoot(): string {
  return path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
}

/** The addon built from source (`pnpm build`, or the install step on a platform without a prebuilt binary). */
export function defaultBinaryPath(): string {
  return path.join(packageRoot(), "build", "Release", BINARY_FILE_NAME);
}

/** The prebuilt binary the package ships for this platform (linux-x64 today). */
export function prebuiltBinaryPath(): string {
  return path.join(packageRoot(), "prebuilds", `${process.platform}-${process.arch}`, BINARY_FILE_NAME);
}

/** The binaries tried in order when KEEPQUANT_NATIVE_BINARY is unset: built from source, then prebuilt. */
export function binaryCandidates(): string[] {
  return [defaultBinaryPath(), prebuiltBinaryPath()];
}

export interface LoadResult {
  addon?: NativeAddon;
  status: NativeStatus;
}

function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** Loads the addon from `env` settings. Pure function of its inputs apart from the require cache. */
export function loadNativeAddon(env: EnvSource = process.env): LoadResult {
  const reasons: string[] = [];
  const requested = env[KEEPQUANT_NATIVE_BINARY];
  const explicit = requested !== undefined && requested !== "";
  const candidates = explicit ? [path.resolve(requested)] : binaryCandidates();
  const cpu: CpuArmStatus = { loaded: false, reasons, binary: candidates[0]! };
  const notBuilt: TtArmStatus = { built: false, loaded: false, reasons: ["not built: the native addon did not load"] };
  const done = (addon?: NativeAddon): LoadResult => {
    if (!addon) return { status: { cpu, tt: notBuilt } };
    let info: NativeBuildInfo | undefined;
    try {
      info = addon.buildInfo();
    } catch (error) {
      reasons.push(`buildInfo() failed: ${errorText(error)}`);
      return { status: { cpu: { ...cpu, loaded: false }, tt: notBuilt } };
    }
    const tt: TtArmStatus = { built: info.tt.built, loaded: info.tt.loaded, reasons: info.tt.reason ? [info.tt.reason] : [] };
    return { addon: reasons.length === 0 ? addon : undefined, status: { cpu: { ...cpu, loaded: reasons.length === 0 }, tt } };
  };

  const present = candidates.filter((candidate) => fs.existsSync(candidate));
  if (present.length === 0) {
    reasons.push(
      explicit
        ? `${KEEPQUANT_NATIVE_BINARY}=${requested}: no such file`
        : `no native binary: neither ${candidates.join(" nor ")} exists (build it with \`pnpm --filter @keepquant/tt-native build\`, or \`npm rebuild @keepquant/tt-native\` with cmake and a C++ compiler)`,
    );
    return done();
  }
  // the first binary that loads wins; every failure is kept as a reason
  let addon: NativeAddon | undefined;
  let binary = present[0]!;
  const loadFailures: string[] = [];
  for (const candidate of present) {
    try {
      addon = createRequire(import.meta.url)(candidate) as NativeAddon;
      binary = candidate;
      break;
    } catch (error) {
      loadFailures.push(`loading ${candidate} failed: ${errorText(error)}`);
    }
  }
  cpu.binary = binary;
  if (!addon) {
    reasons.push(...loadFailures);
    return done();
  }
  try {
    const abi = addon.abiVersion();
    cpu.abiVersion = abi;
    if (abi !== NATIVE_ABI_VERSION) {
      reasons.push(`${binary} has ABI version ${abi}, this package needs ${NATIVE_ABI_VERSION} (rebuild the addon)`);
      return done();
    }
  } catch (error) {
    reasons.push(`${binary} does not report an ABI version: ${errorText(error)}`);
    return done();
  }

  const info = addon.buildInfo();
  cpu.isaAvailable = info.isaAvailable;
  cpu.compiler = info.compiler;
  const isa = env[KEEPQUANT_NATIVE_ISA];
  if (isa !== undefined && isa !== "") {
    try {
      addon.setIsa(isa);
    } catch (error) {
      reasons.push(`${KEEPQUANT_NATIVE_ISA}=${isa}: ${errorText(error)}`);
    }
  }
  const threads = env[KEEPQUANT_NATIVE_THREADS];
  if (threads !== undefined && threads !== "") {
    const value = /^[0-9]+$/.test(threads) ? Number(threads) : Number.NaN;
    const { max, logicalCores } = nativeThreadLimits();
    if (!Number.isSafeInteger(value) || value < 1 || value > max) {
      reasons.push(
        `${KEEPQUANT_NATIVE_THREADS}=${JSON.stringify(threads)} is invalid: expected an integer in [1, ${max}] (at most ${NATIVE_THREADS_PER_CORE}x the ${logicalCores} logical cores)`,
      );
    } else {
      addon.setThreads(value);
    }
  }
  cpu.isa = addon.getIsa();
  cpu.threads = addon.getThreads();
  return done(addon);
}
