/**
 * qwen3's native step against its specification, the TypeScript forward (the same native matmul
 * kernels, the C library's libm): bit-identical logits on the qwen3 fixtures (F32, Q8_0, Q4_K_M; tied
 * and untied head) in prefill (tiled and one-chunk flash attention, the standard path), batched prefill
 * beside decode, and batched decode; f16 and f32 KV; llama and bf16 numerics.
 */
import { QWEN3_FIXTURE_MODELS, qwen3FixtureFile } from "@keepquant/fixtures/qwen3";
import { buildLoadPlan, readGguf } from "@keepquant/gguf";
import { llamaUnavailableReason } from "@keepquant/oracle";
import * as native from "@keepquant/tt-native";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type KvType, PagedKvCache } from "../kv/paged-kv.js";
import { GdnStatePool } from "../kv/state-pool.js";
import { seededRandom } from "../testing/synthetic-model.js";
import { libm, Qwen35Forward, setLibm, type StepEntry } from "./forward.js";
import { loadQwen35Weights, mappedTensorBytes } from "./load.js";
import { createNativeMatmulProviders } from "./native-provider.js";
import { NativeStep } from "./native-step.js";
import { quantDequantizeRow, selectProviders, typescriptProviders } from "./providers.js";
import type { ModelWeights } from "./weights.js";

function skipReason(): string | undefined {
  if (!native.nativeAddon()) return `the native addon did not load: ${native.nativeStatus().cpu.reasons.join("; ")}`;
  const oracle = llamaUnavailableReason();
  if (oracle) return `the qwen3 fixtures need llama.cpp's quantizer: ${oracle}`;
  return undefined;
}
const reason = skipReason();

async function loadWeights(file: string, numerics: "llama" | "bf16"): Promise<ModelWeights> {
  const plan = buildLoadPlan(await readGguf(file));
  return (await loadQwen35Weights(plan, mappedTensorBytes(native.mapFile(file)), numerics)).weights;
}

function pools(weights: ModelWeights, kvType: KvType) {
  const storage = (bytes: number) => native.allocNativeBuffer(bytes);
  const description = weights.description!;
  return { kv: PagedKvCache.forModel(description, 48, 8, kvType, storage), states: GdnStatePool.forModel(description, 4, storage) };
}

type Chunk = (seq: 0 | 1 | 2, n: number, logits: StepEntry["logits"], logitRows?: number[]) => StepEntry;

/** A 70-token prefill alone (tiled), two prefills batched, a prefill chunk beside a decode, five batched decodes. */
const steps = (chunk: Chunk): (() => StepEntry[])[] => [
  () => [chunk(0, 70, "last")],
  () => [chunk(1, 13, "none"), chunk(2, 9, "all")],
  () => [chunk(1, 10, "last", [3, 9]), chunk(0, 1, "last")],
  ...Array.from({ length: 5 }, () => () => [chunk(0, 1, "last"), chunk(1, 1, "last"), chunk(2, 1, "last")]),
];

async function runSchedule(
  forward: (entries: readonly StepEntry[]) => Float32Array | Promise<Float32Array>,
  { kv, states }: ReturnType<typeof pools>,
  vocab: number,
): Promise<Float32Array[]> {
  const random = seededRandom(4242);
  const seqs = [90, 40, 20].map((length) => ({
    blockTable: Array.from({ length: kv.blocksFor(length) }, () => kv.pool.allocate()),
    stateSlot: states.allocate(),
    tokens: Array.from({ length }, () => Math.floor(random() * vocab)),
    pos: 0,
  }));
  const chunk: Chunk = (seq, n, logits, logitRows) => {
    const s = seqs[seq]!;
    const entry: StepEntry = {
      tokens: s.tokens.slice(s.pos, s.pos + n),
      startPos: s.pos,
      blockTable: s.blockTable,
      stateSlot: s.stateSlot,
      logits,
      ...(logitRows ? { logitRows } : {}),
    };
    s.pos += n;
    return entry;
  };
  const out: Float32Array[] = [];
  for (const step of steps(chunk)) out.push((await forward(step())).slice());
  for (const s of seqs) {
    for (const block of s.blockTable) kv.pool.release(block);
    states.release(s.stateSlot);
  }
  return out;
}

function firstDifference(a: Float32Array[], b: Float32Array[]): string | undefined {
  for (let s = 0; s < a.length; s++) {
    const x = new Uint32Array(a[s]!.buffer, a[s]!.byteOffset, a[s]!.length);
    const y = new Uint32Array(b[s]!.buffer, b[s]!.byteOffset, b[s]!.length);
    if (x.length !== y.length) return `step ${s}: ${x.length} logits vs ${y.length}`;
    for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return `step ${s}, logit ${i}: ${a[s]![i]} vs ${b[s]![i]}`;
  }
  return a.length === b.length ? undefined : `${a.length} steps vs ${b.length}`;
}

const CASES: { numerics: "llama" | "bf16"; kvType: KvType; flashAttention: boolean }[] = [
  { numerics: "llama", kvType: "f16", flashAttention: true },
  { numerics: "llama", kvType: "f16", flashAttention: false },
  { numerics: "llama", kvType: "f32", flashAttention: false },
  { numerics: "bf16", kvType: "f16", flashAttention: true },
  { numerics: "bf16", kvType: "f32", flashAttention: false },
];

describe.skipIf(reason !== undefined)(
  `qwen3: native step == TypeScript forward, bit for bit${reason ? ` (skipped: ${reason})` : ""}`,
  () => {
    const original = { ...libm };
    beforeAll(() => {
      const c = native.nativeLibm();
      setLibm({ expf: c.expf, logf: c.logf, cosf: c.cosf, sinf: c.sinf, powf: c.powf });
    });
    afterAll(() => setLibm(original));

    for (const model of Object.keys(QWEN3_FIXTURE_MODELS)) {
      for (const weightType of ["F32", "Q8_0", "Q4_K_M"] as const) {
        // the Q4_K_M file runs every case; F32 and Q8_0 two that cover both numerics, KV types and flash on/off
        const cases = weightType === "Q4_K_M" ? CASES : [CASES[0]!, CASES[4]!];
        it(`${model} (${weightType}): prefill, batched prefill + decode, batched decode; ${cases.length} cases`, async () => {
          const file = await qwen3FixtureFile(model, weightType);
          for (const { numerics, kvType, flashAttention } of cases) {
            const weights = await loadWeights(file, numerics);
            expect(weights.layers.every((l) => l.kind === "attention_ungated")).toBe(true);
            const providers = [...(await createNativeMatmulProviders(numerics, undefined, [])), ...typescriptProviders(numerics, [])];
            const selection = selectProviders(weights, providers, numerics);
            const spec = pools(weights, kvType);
            const ts = new Qwen35Forward(
              weights,
              spec.kv,
              spec.states,
              selection.byWeight,
              numerics,
              quantDequantizeRow,
              128,
              flashAttention,
            );
            const expected = await runSchedule((e) => ts.forward(e), spec, weights.vocab);
            const mine = pools(weights, kvType);
            const step = NativeStep.create(native, weights, mine.kv, mine.states, { numerics, flashAttention, maxBatchTokens: 128 });
            const actual = await runSchedule((e) => step.forward(e), mine, weights.vocab);
            step.dispose();
            expect(firstDifference(actual, expected), `${numerics} kv ${kvType} flash ${flashAttention}`).toBeUndefined();
            expect(actual.reduce((n, l) => n + l.length, 0)).toBeGreaterThan(0);
          }
        });
      }
    }
  },
);
