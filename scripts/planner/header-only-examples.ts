/**
 * Writes the header-only (sparse) qwen35 files that docs/usage/cli-plan.md plans: the real 0.8B and 27B
 * shapes with llama.cpp's Q4_K_M-class type mix, no tensor bytes (each takes only its header on disk).
 *
 *   pnpm exec tsx scripts/planner/header-only-examples.ts <dir>
 */
import { mkdirSync } from "node:fs";
import path from "node:path";
import { QWEN35_0_8B_SHAPE, QWEN35_27B_SHAPE, qwen35Q4KMClassMix, writeQwen35HeaderOnly } from "@keepquant/gguf";

/** File name -> how it is written (packages/cli/src/commands/plan.test.ts writes the same files). */
const PLAN_EXAMPLE_FILES = {
  "qwen35-0.8b-q4_k_m-class.gguf": (file: string) =>
    writeQwen35HeaderOnly(file, QWEN35_0_8B_SHAPE, { types: qwen35Q4KMClassMix(24, true) }),
  "qwen35-27b-q4_k_m-class.gguf": (file: string) => writeQwen35HeaderOnly(file, QWEN35_27B_SHAPE, { types: qwen35Q4KMClassMix(64, false) }),
} as const;

const dir = process.argv[2];
if (dir === undefined) {
  console.error("usage: tsx scripts/planner/header-only-examples.ts <dir>");
  process.exit(2);
}
mkdirSync(dir, { recursive: true });
for (const [name, write] of Object.entries(PLAN_EXAMPLE_FILES)) {
  const size = await write(path.join(dir, name));
  console.log(`${path.join(dir, name)}: ${size} bytes (sparse: header only)`);
}
