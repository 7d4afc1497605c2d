/**
 * Load benchmark of `keepquant serve` on the embedded synthetic model (loopback): the load test's
 * shape (32 concurrent streaming chat requests, random lengths, half with a shared system
 * prompt, a quarter disconnecting midway), RUNS times with the native default thread count and RUNS
 * times with one thread. Prints requests/s and client-side time to first token (p50/p95). Numbers:
 * docs/benchmarks/server.md.
 *
 *   pnpm --filter @keepquant/server bench
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { Engine } from "@keepquant/engine";
import { quantile, runLoad } from "../src/load.js";
import { defaultModelFile, startTestServer } from "../src/test-support.js";

const RUNS = 2;
const cacheDir = mkdtempSync(path.join(tmpdir(), "kq-bench-load-"));
try {
  console.log("threads  run  requests  completed  wall s   req/s  tok/s   TTFT p50 ms  TTFT p95 ms");
  for (const threads of [undefined, 1]) {
    const engine = await Engine.load(await defaultModelFile(cacheDir), {
      maxSequences: 4,
      kvCacheTokens: 4 * 1024,
      prefixCacheSnapshots: 8,
      ...(threads === undefined ? {} : { threads }),
    });
    const serving = await startTestServer(engine, { contextTokens: 1024 });
    const label = threads === undefined ? "default" : String(threads);
    for (let run = 0; run < RUNS; run++) {
      engine.clearPrefixCache();
      const { records, wallMs } = await runLoad({
        url: serving.url,
        requests: 32,
        disconnectShare: 0.25,
        sharedPrefixShare: 0.5,
        seed: 2026 + run,
        maxTokens: [4, 48],
        promptWords: [2, 40],
      });
      const completed = records.filter((r) => !r.disconnected);
      const ttft = records.map((r) => r.ttftMs).filter((t) => Number.isFinite(t));
      const tokens = records.reduce((s, r) => s + r.tokens, 0);
      console.log(
        `${label.padEnd(9)}${String(run + 1).padEnd(5)}${String(records.length).padEnd(10)}${String(completed.length).padEnd(11)}${(wallMs / 1000).toFixed(2).padEnd(9)}` +
          `${((completed.length * 1000) / wallMs).toFixed(2).padEnd(7)}${((tokens * 1000) / wallMs).toFixed(0).padEnd(8)}` +
          `${quantile(ttft, 0.5).toFixed(0).padEnd(13)}${quantile(ttft, 0.95).toFixed(0)}`,
      );
    }
    console.log(`(${label} threads: ${engine.stats().providers["step"] ?? "?"})`);
    await serving.close();
    engine.dispose();
  }
} finally {
  rmSync(cacheDir, { recursive: true, force: true });
}
