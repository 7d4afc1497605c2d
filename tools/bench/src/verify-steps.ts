/**
 * Step time of the target's verification path on the real 0.8B shape: one forward step over m rows
 * with logits at every row (what verifying m - 1 drafts costs), `Engine.evaluate` of m tokens, for
 * m = 1 .. 9, interleaved and repeated. At acceptance 1.0 every verification yields m tokens, so
 * k = m - 1 drafts speed decoding up by m t(1) / t(m) at most (no drafter cost). Minimum and median
 * per m: on a shared machine the minimum is the least disturbed run.
 *
 *   pnpm --filter @keepquant/bench exec tsx src/verify-steps.ts <model.gguf> [--repeat R]
 */
import { Engine } from "@keepquant/engine";

const argv = process.argv.slice(2);
const model = argv.find((a) => !a.startsWith("--") && argv[argv.indexOf(a) - 1] !== "--repeat");
if (!model) throw new Error("usage: verify-steps.ts <model.gguf> [--repeat R]");
const repeatAt = argv.indexOf("--repeat");
const repeat = repeatAt >= 0 ? Number(argv[repeatAt + 1]) : 15;
if (!Number.isInteger(repeat) || repeat < 1) throw new Error(`--repeat must be a positive integer, got ${argv[repeatAt + 1]}`);

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

const engine = await Engine.load(model, { maxSequences: 1, kvCacheTokens: 256 });
const ROWS = [1, 2, 3, 4, 5, 6, 7, 8, 9];
const times = new Map<number, number[]>(ROWS.map((m) => [m, []]));
try {
  await engine.evaluate([1, 2, 3, 4]); // warm-up
  for (let r = 0; r < repeat; r++) {
    for (const m of ROWS) {
      const ids = Array.from({ length: m }, (_, i) => (i * 7919 + r) % 1000);
      const t0 = performance.now();
      await engine.evaluate(ids);
      times.get(m)!.push(performance.now() - t0);
    }
  }
} finally {
  engine.dispose();
}
const t1min = Math.min(...times.get(1)!);
const t1med = median(times.get(1)!);
const lines = [
  `model: ${model}; ${repeat} interleaved runs per row count`,
  "",
  "| k (drafts) | rows | step ms (min) | step ms (median) | speed-up at acceptance 1.0 (min) | (median) | bound k + 1 | min / bound |",
  "|---|---|---|---|---|---|---|---|",
  ...ROWS.map((m) => {
    const t = times.get(m)!;
    const min = Math.min(...t);
    const med = median(t);
    const up = (m * t1min) / min;
    return `| ${m - 1} | ${m} | ${min.toFixed(1)} | ${med.toFixed(1)} | ${up.toFixed(2)}x | ${((m * t1med) / med).toFixed(2)}x | ${m}x | ${((100 * up) / m).toFixed(0)}% |`;
  }),
];
process.stdout.write(`${lines.join("\n")}\n`);
