/**
 * Layout and formula check of the PyTorch model before any training: a randomly initialised model
 * (python/check_random.py) is exported with our GGUF writer, then the engine (Engine.load, native
 * and TypeScript providers, `exact` numerics) and llama.cpp (the oracle, F32 K/V) evaluate the same
 * token sequence. Their logits must equal PyTorch's within f32 noise.
 *
 *   pnpm --filter @keepquant/train exec tsx src/check-random.ts
 *
 * Exit 0 when every max |dlogit| is below CHECK_TOLERANCE, 1 otherwise.
 */
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { Engine } from "@keepquant/engine";
import { decodeF32, llamaUnavailableReason, runOracle } from "@keepquant/oracle";
import { exportGguf } from "./export-gguf.js";
import { PYTHON, PYTHON_DIR } from "./python.js";
import { WORK_DIR, readRecipe, RECIPE_FILE } from "./recipe.js";
import { readTensorFile } from "./tensor-file.js";

/** f32 noise on logits of std ~8 after a few layers: 1e-2 nats is far below any layout mistake. */
const CHECK_TOLERANCE = 1e-2;

function maxDiff(a: ArrayLike<number>[], b: ArrayLike<number>[]): number {
  let worst = 0;
  for (let i = 0; i < a.length; i++) for (let j = 0; j < a[i]!.length; j++) worst = Math.max(worst, Math.abs(a[i]![j]! - b[i]![j]!));
  return worst;
}

const recipe = readRecipe();
const vocab = JSON.parse(fs.readFileSync(path.join(WORK_DIR, "vocab.json"), "utf8")) as { tokens: string[] };
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kq-train-check-"));
try {
  execFileSync(PYTHON, [path.join(PYTHON_DIR, "check_random.py"), RECIPE_FILE, String(vocab.tokens.length), dir], { stdio: "inherit" });
  const reference = JSON.parse(fs.readFileSync(path.join(dir, "random-logits.json"), "utf8")) as { ids: number[]; logits: number[][] };
  const { tensors } = readTensorFile(path.join(dir, "random.kqtw"));
  const file = path.join(dir, "random-f32.gguf");
  fs.writeFileSync(file, exportGguf({ name: "keepquant-random-check", shape: recipe.model, vocab, tensors }));
  const results: [string, number][] = [];
  for (const provider of ["auto", "ts"] as const) {
    for (const numerics of ["exact", "llama"] as const) {
      if (numerics === "exact" && provider === "auto") continue;
      const engine = await Engine.load(file, { numerics, provider, kvType: "f32", flashAttention: false });
      try {
        results.push([`engine ${provider} ${numerics}`, maxDiff(await engine.evaluate(reference.ids), reference.logits)]);
      } finally {
        engine.dispose();
      }
    }
  }
  const reason = llamaUnavailableReason();
  if (reason) console.log(`SKIP llama.cpp: ${reason}`);
  else {
    const oracle = await runOracle({ kind: "logits", model: file, sequences: [reference.ids], kvType: "f32" });
    results.push(["llama.cpp", maxDiff(oracle.logits[0]!.map(decodeF32), reference.logits)]);
  }
  let failed = 0;
  for (const [what, diff] of results) {
    const ok = diff < CHECK_TOLERANCE;
    if (!ok) failed++;
    console.log(
      `${what}: max |dlogit| vs PyTorch ${diff.toExponential(2)} over ${reference.ids.length} positions  ${ok ? "OK" : "MISMATCH"}`,
    );
  }
  process.exitCode = failed === 0 ? 0 : 1;
} finally {
  fs.rmSync(dir, { recursive: true, force: true });
}
