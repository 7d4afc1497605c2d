import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import {
  KEEPQUANT_NATIVE_BINARY,
  KEEPQUANT_NATIVE_ISA,
  KEEPQUANT_NATIVE_THREADS,
  NATIVE_ABI_VERSION,
  NativeIsaError,
  availableNativeIsas,
  defaultBinaryPath,
  getNativeIsa,
  getNativeThreads,
  loadNativeAddon,
  nativeAddon,
  nativeStatus,
  nativeThreadLimits,
  nativeThreadsProblem,
  NATIVE_THREADS_HARD_LIMIT,
  NativeArgumentError,
  setNativeIsa,
  setNativeThreads,
} from "./index.js";

describe("loading and status", () => {
  it("loads the CPU arm from build/Release with a matching ABI version", () => {
    const status = nativeStatus();
    expect(status.cpu.reasons).toEqual([]);
    expect(status.cpu.loaded).toBe(true);
    expect(status.cpu.binary).toBe(defaultBinaryPath());
    expect(status.cpu.abiVersion).toBe(NATIVE_ABI_VERSION);
    expect(nativeAddon()?.abiVersion()).toBe(NATIVE_ABI_VERSION);
    expect(status.cpu.isaAvailable?.[0]).toBe("generic");
    expect(status.cpu.isaAvailable).toContain(status.cpu.isa);
  });

  it("reports the TT-Metal arm as not built, with the reason", () => {
    const { tt } = nativeStatus();
    expect(tt.built).toBe(false);
    expect(tt.loaded).toBe(false);
    expect(tt.reasons).toHaveLength(1);
    expect(tt.reasons[0]).toMatch(/^not built: .*KEEPQUANT_TT=ON/);
  });

  it("KEEPQUANT_NATIVE_BINARY pointing nowhere: not loaded, reason names the variable", () => {
    const result = loadNativeAddon({ [KEEPQUANT_NATIVE_BINARY]: "/nonexistent/keepquant_native.node" });
    expect(result.addon).toBeUndefined();
    expect(result.status.cpu.loaded).toBe(false);
    expect(result.status.cpu.reasons).toEqual([`${KEEPQUANT_NATIVE_BINARY}=/nonexistent/keepquant_native.node: no such file`]);
    expect(result.status.tt.reasons[0]).toMatch(/^not built/);
  });

  it("a file that is not an addon: not loaded, the loader's error is kept (never thrown)", () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kq-native-"));
    const fake = path.join(dir, "fake.node");
    fs.writeFileSync(fake, "not an ELF file");
    const result = loadNativeAddon({ [KEEPQUANT_NATIVE_BINARY]: fake });
    fs.rmSync(dir, { recursive: true });
    expect(result.status.cpu.loaded).toBe(false);
    expect(result.status.cpu.reasons).toHaveLength(1);
    expect(result.status.cpu.reasons[0]).toContain(`loading ${fake} failed`);
  });

  it("KEEPQUANT_NATIVE_BINARY naming the real binary loads it", () => {
    const result = loadNativeAddon({ [KEEPQUANT_NATIVE_BINARY]: defaultBinaryPath() });
    expect(result.status.cpu.loaded).toBe(true);
    expect(result.addon).toBeDefined();
  });

  it("invalid KEEPQUANT_NATIVE_ISA / KEEPQUANT_NATIVE_THREADS: not loaded, every reason collected", () => {
    const result = loadNativeAddon({ [KEEPQUANT_NATIVE_ISA]: "sse9", [KEEPQUANT_NATIVE_THREADS]: "many" });
    expect(result.status.cpu.loaded).toBe(false);
    expect(result.status.cpu.reasons).toHaveLength(2);
    expect(result.status.cpu.reasons[0]).toContain(`${KEEPQUANT_NATIVE_ISA}=sse9: unknown ISA level 'sse9'`);
    expect(result.status.cpu.reasons[1]).toContain(`${KEEPQUANT_NATIVE_THREADS}="many" is invalid`);
  });

  it("selecting ISA levels: every available one works, others are refused with the reason", () => {
    const before = getNativeIsa();
    for (const level of availableNativeIsas()) {
      setNativeIsa(level);
      expect(getNativeIsa()).toBe(level);
    }
    for (const level of ["avx2", "avx512"] as const) {
      if (!availableNativeIsas().includes(level)) {
        expect(() => setNativeIsa(level)).toThrow(NativeIsaError);
        expect(() => setNativeIsa(level)).toThrow(`'${level}' is not supported by this CPU`);
      }
    }
    expect(() => setNativeIsa("bogus" as "generic")).toThrow(/unknown ISA level 'bogus'/);
    setNativeIsa(before);
  });

  it("thread count: default is the hardware thread count, configurable", () => {
    const hw = nativeAddon()!.hardwareThreads();
    setNativeThreads(0);
    expect(getNativeThreads()).toBe(hw);
    setNativeThreads(3);
    expect(getNativeThreads()).toBe(3);
    setNativeThreads(0);
    expect(() => setNativeThreads(-1)).toThrow(/threads/);
  });

  it("thread policy: 1 .. 4x the logical cores, up to the hard limit with force; the error names the range", () => {
    const { logicalCores, max, forcedMax } = nativeThreadLimits();
    expect(logicalCores).toBe(os.availableParallelism());
    expect(max).toBe(Math.min(4 * logicalCores, NATIVE_THREADS_HARD_LIMIT));
    expect(forcedMax).toBe(NATIVE_THREADS_HARD_LIMIT);
    expect(nativeThreadsProblem(max)).toBeUndefined();
    expect(nativeThreadsProblem(max + 1)).toBe(
      `expected an integer in [1, ${max}] (at most 4x the ${logicalCores} logical cores; --force allows up to ${forcedMax}), got ${max + 1}`,
    );
    expect(nativeThreadsProblem(max + 1, { force: true })).toBeUndefined();
    expect(nativeThreadsProblem(forcedMax + 1, { force: true })).toMatch(/\[1, 1024\]/);
    expect(nativeThreadsProblem(1.5)).toBeDefined();
    expect(() => setNativeThreads(max + 1)).toThrow(NativeArgumentError);
    expect(() => setNativeThreads(1000)).toThrow(/expected an integer in \[1, \d+\]/);
    setNativeThreads(max + 1, { force: true });
    expect(getNativeThreads()).toBe(max + 1);
    setNativeThreads(0);
    // the environment variable follows the same policy (and the addon then does not load, with the reason)
    const result = loadNativeAddon({ [KEEPQUANT_NATIVE_THREADS]: String(max + 1) });
    expect(result.status.cpu.reasons.join("; ")).toContain(`expected an integer in [1, ${max}]`);
  });
});
