/**
 * Sampler cost per token at Qwen3.5's vocabulary size (248,320 logits), for a few parameter sets.
 *
 *   pnpm exec tsx scripts/tokenizer/bench-sampling.ts
 */
import { Sampler, createRng, type SamplingParams } from "@keepquant/engine";

const VOCAB = 248_320;
const rng = createRng(1);
// Peaked logits (a few strong candidates over a noisy floor), as a language model gives.
const peaked = new Float32Array(VOCAB);
for (let i = 0; i < VOCAB; i++) peaked[i] = (rng.next() - 0.5) * 6 + (i % 9973 === 0 ? 12 : 0);
// Flat logits: the worst case for top-p.
const flat = Float32Array.from({ length: VOCAB }, () => rng.next() * 2);
const history = Array.from({ length: 64 }, (_, i) => i * 7);

const cases: [string, SamplingParams, Float32Array][] = [
  ["greedy", { temperature: 0 }, peaked],
  ["defaults (k 40, p 0.95, min-p 0.05, T 0.8)", {}, peaked],
  ["no filters, T 1", { topK: 0, topP: 1, minP: 0, temperature: 1 }, peaked],
  ["top-p 0.9 only, peaked", { topK: 0, minP: 0, topP: 0.9 }, peaked],
  ["top-p 0.9 only, flat", { topK: 0, minP: 0, topP: 0.9 }, flat],
];
for (const [name, params, logits] of cases) {
  const sampler = new Sampler({ ...params, repeatPenalty: 1.1 });
  for (let i = 0; i < 5; i++) sampler.sample(logits, history);
  const runs = 40;
  const start = performance.now();
  for (let i = 0; i < runs; i++) sampler.sample(logits, history);
  console.log(`${name}: ${((performance.now() - start) / runs).toFixed(2)} ms/token`);
}
