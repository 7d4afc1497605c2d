/**
 * Where a long prefill's time goes: the native step's phase timers (matmuls, GDN, attention, ...) and the
 * time outside the native step (the engine's JS work: scheduler, block tables, prefix cache, sampling), for
 * prompts of several lengths on one engine. A cost that grows faster than the prompt shows as a per-token
 * time that rises from row to row.
 *
 *   tsx src/prefill-profile.ts [file.gguf] [--lengths 512,1024,2048,4096] [--threads 2] [--batch 512]
 *
 * Without a file it profiles the embedded default model.
 */
import { performance } from "node:perf_hooks";
import path from "node:path";
import { Engine } from "@keepquant/engine";
import { REPO_ROOT } from "./real-shape.js";
import * as native from "@keepquant/tt-native";

const args = process.argv.slice(2);
const option = (name: string, fallback: string) => {
  const i = args.indexOf(name);
  return i >= 0 && args[i + 1] ? args[i + 1]! : fallback;
};
const file =
  args.find((a, i) => !a.startsWith("--") && !args[i - 1]?.startsWith("--")) ??
  path.join(REPO_ROOT, "packages", "default-model", "model", "keepquant-default.gguf");
const lengths = option("--lengths", "512,1024,2048,4096").split(",").map(Number);
const threads = Number(option("--threads", "2"));
const batch = Number(option("--batch", "512"));
const longest = Math.max(...lengths);

const engine = await Engine.load(file, {
  threads,
  kvCacheTokens: longest + 64,
  contextLength: longest + 64,
  maxSequences: 1,
  maxBatchTokens: batch,
});
const vocab = engine.weights.vocab;
const prompt = (n: number) => Array.from({ length: n }, (_, i) => (i * 7919 + 13) % vocab);
const firstToken = async (ids: number[]) => {
  for await (const event of engine.generate(ids, { maxTokens: 1, temperature: 0, ignoreEog: true })) if (event.type === "token") break;
};
await firstToken(prompt(8)); // warm-up
console.log(`${file}, ${threads} threads, batch ${batch}, step ${engine.stats().providers.step}`);
for (const n of lengths) {
  native.setNativeProfiling(true);
  const t0 = performance.now();
  const cpu0 = process.cpuUsage();
  await firstToken(prompt(n));
  const wallMs = performance.now() - t0;
  const cpu = process.cpuUsage(cpu0);
  const cpuMs = (cpu.user + cpu.system) / 1000;
  const profile = native.nativeProfile();
  native.setNativeProfiling(false);
  const phases = Object.entries(profile.phases).filter(([, p]) => p.ns > 0);
  const nativeMs = phases.reduce((s, [, p]) => s + p.ns / 1e6, 0);
  const parts = phases.map(([name, p]) => `${name} ${((p.ns / 1e6 / n) * 1000).toFixed(0)}`).join(", ");
  console.log(
    `${String(n).padStart(6)} tokens: ${wallMs.toFixed(0)} ms (${((n / wallMs) * 1000).toFixed(0)} tok/s, process CPU ${cpuMs.toFixed(0)} ms), ` +
      `us/token: native ${((nativeMs / n) * 1000).toFixed(0)} [${parts}], outside the step ${(((wallMs - nativeMs) / n) * 1000).toFixed(0)}`,
  );
}
engine.dispose();
process.exit(0);
