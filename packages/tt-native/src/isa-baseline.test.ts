/**
 * The binary must run on any x86-64 CPU: AVX2 / AVX-512 instructions may appear only in functions of
 * the per-ISA translation units (namespaces and entry points named avx2 / avx512), which the
 * dispatcher enters only after cpuid says the CPU supports them.
 */
import { execFileSync } from "node:child_process";
import { describe, expect, it } from "vitest";
import { defaultBinaryPath } from "./index.js";

function objdumpReason(): string | undefined {
  if (process.arch !== "x64") return `x86-64 only (this is ${process.arch})`;
  try {
    execFileSync("objdump", ["--version"], { stdio: "ignore" });
    return undefined;
  } catch {
    return "objdump (binutils) is not installed";
  }
}
const reason = objdumpReason();

describe("ISA baseline of the addon", () => {
  it.skipIf(reason)(`AVX/AVX-512 instructions appear only in avx2/avx512 functions${reason ? ` (skipped: ${reason})` : ""}`, () => {
    const text = execFileSync("objdump", ["-d", "-C", "--no-show-raw-insn", defaultBinaryPath()], {
      encoding: "utf8",
      maxBuffer: 256 * 1024 * 1024,
    });
    const offenders = new Map<string, string>();
    let current = "";
    let vexFunctions = 0;
    const seen = new Set<string>();
    for (const line of text.split("\n")) {
      const header = /^[0-9a-f]+ <(.*)>:$/.exec(line);
      if (header) {
        current = header[1]!;
        continue;
      }
      const tab = line.lastIndexOf("\t");
      if (tab < 0) continue;
      const instruction = line.slice(tab + 1).trim();
      const vex = /^v[a-z0-9]+\s/.test(instruction) || /%[yz]mm|%k[0-7]\b/.test(instruction);
      if (!vex) continue;
      if (!seen.has(current)) {
        seen.add(current);
        vexFunctions++;
      }
      if (!/avx/i.test(current) && !offenders.has(current)) offenders.set(current, instruction);
    }
    expect(vexFunctions).toBeGreaterThan(10); // the scan sees the SIMD kernels
    expect([...offenders].map(([fn, ins]) => `${fn}: ${ins}`)).toEqual([]);
  });
});
