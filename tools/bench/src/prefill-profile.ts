/**
 * Where a long prefill's time goes: the native step's phase timers (matmuls, GDN, attention, ...) and the
 * time outside the native step (the engine's JS work: scheduler, block tables, prefix cache, sampling), for
 * prompts of several lengths on one engine. A cost that grows faster than the prompt shows as a per-token
 * time that rises from row to row.
 *
 *   tsx src/prefill-profile.ts [file.gguf] [--lengths 512,1024,2048,4096] [--threads 2] [--batch 512] [--decode 0]
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
  kvCacheTokens: longest + 64 + Number(option("--decode", "0")),
  contextLength: longest + 64 + Number(option("--decode", "0")),
  maxSequences: 1,
  maxBatchTokens: batch,
});
const vocab = engine.weights.vocab;
const prompt = (n: number) => Array.from({ length: n }, (_, i) => (i * 7919 + 13) % vocab);
const decodeTokens = Number(option("--decode", "0"));

type Profile = ReturnType<typeof native.nativeProfile>;
const report = (label: string, tokens: number, wallMs: number, cpuMs: number, profile: Profile) => {
  const phases = Object.entries(profile.phases).filter(([, p]) => p.ns > 0);
  const nativeMs = phases.reduce((s, [, p]) => s + p.ns / 1e6, 0);
  const parts = phases.map(([name, p]) => `${name} ${((p.ns / 1e6 / tokens) * 1000).toFixed(0)}`).join(", ");
  console.log(
    `${label}: ${wallMs.toFixed(0)} ms (${((tokens / wallMs) * 1000).toFixed(1)} tok/s, process CPU ${cpuMs.toFixed(0)} ms), ` +
      `us/token: native ${((nativeMs / tokens) * 1000).toFixed(0)} [${parts}], outside the step ${(((wallMs - nativeMs) / tokens) * 1000).toFixed(0)}`,
  );
};

/** Profiles the prefill of `ids` (to its first token), then `decodeTokens` decoded tokens after it. */
const profileRun = async (ids: number[], print: boolean) => {
  let t0 = performance.now();
  let cpu0 = process.cpuUsage();
  const cpuMs = () => {
    const cpu = process.cpuUsage(cpu0);
    return (cpu.user + cpu.system) / 1000;
  };
  native.setNativeProfiling(true);
  let tokens = 0;
  for await (const event of engine.generate(ids, { maxTokens: 1 + decodeTokens, temperature: 0, ignoreEog: true })) {
    if (event.type !== "token") continue;
    if (++tokens === 1) {
      if (print)
        report(`${String(ids.length).padStart(6)} tokens, prefill`, ids.length, performance.now() - t0, cpuMs(), native.nativeProfile());
      native.setNativeProfiling(false);
      native.setNativeProfiling(true);
      t0 = performance.now();
      cpu0 = process.cpuUsage();
    }
  }
  if (print && decodeTokens > 0)
    report(`${String(ids.length).padStart(6)} tokens, decode after`, tokens - 1, performance.now() - t0, cpuMs(), native.nativeProfile());
  native.setNativeProfiling(false);
};
await profileRun(prompt(8), false); // warm-up
console.log(`${file}, ${threads} threads, batch ${batch}, step ${engine.stats().providers.step}`);
for (const n of lengths) await profileRun(prompt(n), true);
engine.dispose();
process.exit(0);
