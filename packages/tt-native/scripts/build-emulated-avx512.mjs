// Build step (tests only, never shipped): on an x86-64 CPU without AVX-512, the addon again with its AVX-512
// kernels emulated by SIMDe over AVX2 (CMake option KEEPQUANT_EMULATE_AVX512, src/cpu/x86/simde_avx512.h),
// into build/emulated-avx512/, so that src/emulated-avx512.test.ts checks the AVX-512 code on this machine
// too. A CPU with AVX-512 runs the real kernels in every test, and needs no emulation. Without SIMDe's headers
// (Debian: libsimde-dev) it builds nothing and says why; that test then skips with the reason.
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const out = path.join("build", "emulated-avx512");

function whyNot() {
  if (process.arch !== "x64") return `x86-64 only (this is ${process.arch})`;
  // the levels this CPU runs, as the addon just built dispatches them (its cpuid checks, not a copy of them)
  const { isaAvailable } = createRequire(import.meta.url)(path.join(root, "build", "Release", "keepquant_native.node")).buildInfo();
  if (!isaAvailable.includes("avx2")) return "the CPU has no AVX2 (the emulation runs on AVX2)";
  if (isaAvailable.includes("avx512")) return "the CPU runs the real AVX-512 kernels";
  const dirs = [...(process.env.CPATH ?? "").split(":").filter(Boolean), "/usr/include", "/usr/local/include"];
  if (!dirs.some((d) => fs.existsSync(path.join(d, "simde", "x86", "avx512.h"))))
    return "SIMDe's headers are not installed (Debian: apt-get install libsimde-dev)";
  return undefined;
}

const reason = whyNot();
if (reason) {
  console.log(`emulated AVX-512 build skipped: ${reason}`);
} else {
  const cmakeJs = path.join(root, "node_modules", ".bin", "cmake-js");
  execFileSync(
    cmakeJs,
    ["build", "--out", out, "--config", "Release", "--parallel", "2", "--log-level", "warn", "--CDKEEPQUANT_EMULATE_AVX512=ON"],
    {
      cwd: root,
      stdio: "inherit",
    },
  );
  console.log(`emulated AVX-512 build: ${path.join(out, "Release", "keepquant_native.node")}`);
}
