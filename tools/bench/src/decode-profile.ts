/**
 * Where one decoded token's time goes in the native step: the addon's own phase timers (matmuls of the
 * layers and of the head, GDN, attention, norms, activation quantizers, ...), the thread pool's
 * dispatches and the caller's wait for the other threads, and the rate of each matmul class against
 * the machine's read bandwidth. Also prints the decode tuner's report (a forced, full-budget tuning).
 *
 * With `--seqs N` (N > 1) it profiles N concurrent greedy generations instead: the figures are then per
 * batched step (one token of every sequence), so they compare directly with the one-sequence step.
 *
 *   tsx src/decode-profile.ts <file.gguf> [--threads 2] [--tokens 48] [--seqs 1] [--no-tune] [--budget 5000]
 */
import { performance } from "node:perf_hooks";
import { Engine } from "@keepquant/engine";
import * as native from "@keepquant/tt-native";

const args = process.argv.slice(2);
const file = args.find((a) => !a.startsWith("--") && !/^\d+$/.test(a));
if (!file) {
  process.stderr.write("usage: tsx src/decode-profile.ts <file.gguf> [--threads 2] [--tokens 48] [--no-tune] [--budget 5000]\n");
  process.exit(2);
}
const option = (name: string, fallback: number) => {
  const i = args.indexOf(name);
  return i >= 0 ? Number(args[i + 1]) : fallback;
};
const threads = option("--threads", 2);
const tokens = option("--tokens", 48);
const budgetMs = option("--budget", 5000);
const seqs = option("--seqs", 1);
const tune = args.includes("--no-tune") ? false : { budgetMs, force: true };

const engine = await Engine.load(file, { threads, kvCacheTokens: 1024, maxSequences: seqs, tune });
const vocab = engine.weights.vocab;
const prompt = Array.from({ length: 8 }, (_, i) => (i * 7919 + 13) % vocab);
const run = async (maxTokens: number): Promise<number[]> => {
  const times: number[] = [];
  for await (const event of engine.generate(prompt, { maxTokens, temperature: 0, ignoreEog: true }))
    if (event.type === "token") times.push(performance.now());
  return times;
};
await run(4); // warm-up
// the first token is the prefill: profile from the second on
const times: number[] = [];
let profiled = false;
if (seqs <= 1) {
  for await (const event of engine.generate(prompt, { maxTokens: tokens + 1, temperature: 0, ignoreEog: true })) {
    if (event.type !== "token") continue;
    times.push(performance.now());
    if (!profiled) {
      native.setNativeProfiling(true);
      profiled = true;
    }
  }
} else {
  // profiling starts once every sequence has its first token (the prefills are behind), and the steps are
  // counted on sequence 0: each of its tokens after that is one batched step
  let started = 0;
  await Promise.all(
    Array.from({ length: seqs }, async (_, s) => {
      const ids = prompt.map((t) => (t + 101 * s) % vocab);
      let first = true;
      for await (const event of engine.generate(ids, { maxTokens: tokens + 8, temperature: 0, ignoreEog: true })) {
        if (event.type !== "token") continue;
        if (first && ++started === seqs) {
          native.setNativeProfiling(true);
          profiled = true;
          times.push(performance.now());
        } else if (s === 0 && profiled && times.length <= tokens) times.push(performance.now());
        if (times.length > tokens && profiled) native.setNativeProfiling(false);
        first = false;
      }
    }),
  );
}
const profile = native.nativeProfile();
native.setNativeProfiling(false);
const decoded = times.length - 1;
const wallMs = times.at(-1)! - times[0]!;
const bandwidth = native.measureReadBandwidth();
const stats = engine.stats();

const bytesOf = (role: "layer" | "head") => {
  let bytes = 0;
  const head = engine.weights.output;
  for (const layer of engine.weights.layers)
    for (const value of Object.values(layer))
      if (value && typeof value === "object" && "rowBytes" in value && value !== head)
        bytes += (value as { data: Uint8Array }).data.byteLength;
  return role === "head" ? head.data.byteLength : bytes;
};
const phases = Object.entries(profile.phases)
  .filter(([, p]) => p.ns > 0)
  .map(([name, p]) => ({ name, msPerToken: p.ns / 1e6 / decoded, share: 0, callsPerToken: p.calls / decoded }));
const total = phases.reduce((s, p) => s + p.msPerToken, 0);
for (const p of phases) p.share = p.msPerToken / total;
const rate = (phase: string, bytes: number) => {
  const p = profile.phases[phase as keyof typeof profile.phases];
  const seconds = p.ns / 1e9 / decoded;
  return { bytesPerToken: bytes, gbPerSecond: bytes / seconds / 1e9, shareOfBandwidth: bytes / seconds / bandwidth.bytesPerSecond };
};
const result = {
  file,
  threads,
  sequences: seqs,
  decodedTokens: decoded,
  decodeTokensPerSecond: (decoded / wallMs) * 1000,
  stepMsPerToken: total,
  phases,
  matmulLayers: rate("matmulLayers", bytesOf("layer")),
  matmulHead: rate("matmulHead", bytesOf("head")),
  pool: {
    jobsPerToken: profile.pool.jobs / decoded,
    inlineJobsPerToken: profile.pool.inlineJobs / decoded,
    waitMsPerToken: profile.pool.waitNs / 1e6 / decoded,
    waitUsPerJob: profile.pool.waitNs / 1e3 / Math.max(1, profile.pool.jobs),
    stalledJobsPerToken: profile.pool.stalledJobs / decoded,
    soloJobsPerToken: profile.pool.soloJobs / decoded,
  },
  bandwidthGbPerSecond: bandwidth.bytesPerSecond / 1e9,
  tuning: stats.tuning,
};
process.stdout.write(`${JSON.stringify(result, null, 1)}\n`);
engine.dispose();
process.exit(0);
