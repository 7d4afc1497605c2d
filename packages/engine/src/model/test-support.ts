/**
 * Test support of the model modules (not exported from the package): the TypeScript forward pinned to
 * the C library's libm, a fixture file's weights, and the step schedules the native-step tests run.
 */
import { buildLoadPlan, readGguf } from "@keepquant/gguf";
import * as native from "@keepquant/tt-native";
import { afterAll, beforeAll, expect } from "vitest";
import type { KvType, PagedKvCache } from "../kv/paged-kv.js";
import type { GdnStatePool } from "../kv/state-pool.js";
import { seededRandom } from "../testing/synthetic-model.js";
import { libm, Qwen35Forward, setLibm, type StepEntry } from "./forward.js";
import { loadQwen35Weights, mappedTensorBytes } from "./load.js";
import { createNativeMatmulProviders } from "./native-provider.js";
import { NativeStep } from "./native-step.js";
import { quantDequantizeRow, selectProviders, typescriptProviders } from "./providers.js";
import type { ModelWeights } from "./weights.js";

/**
 * In the enclosing `describe`: the TypeScript forward computes with the C library's libm (as the native
 * step and llama.cpp do) from its `beforeAll`, and with the one it had before from its `afterAll`.
 */
export function pinNativeLibm(): void {
  const original = { ...libm };
  beforeAll(() => {
    const c = native.nativeLibm();
    setLibm({ expf: c.expf, logf: c.logf, cosf: c.cosf, sinf: c.sinf, powf: c.powf });
  });
  afterAll(() => setLibm(original));
}

/** A GGUF file's weights, mapped, through its load plan. */
export async function loadFileWeights(file: string, numerics: "llama" | "bf16"): Promise<ModelWeights> {
  const plan = buildLoadPlan(await readGguf(file));
  return (await loadQwen35Weights(plan, mappedTensorBytes(native.mapFile(file)), numerics)).weights;
}

export interface StepPools {
  kv: PagedKvCache;
  states: GdnStatePool;
}

/**
 * An image in a chunk: `rows` x `cols` embedding rows from chunk row `at` on (row-major; what does
 * not fit goes on at the start of the sequence's next chunks), at rotary positions (t, t + row,
 * t + col) where t is the sequence's next rotary position; the text after it turns from
 * t + max(rows, cols) on (as Qwen3-VL's M-RoPE), so its rotary positions lag its KV positions.
 */
export interface ImagePlacement {
  at: number;
  rows: number;
  cols: number;
}

/** One step entry: `n` tokens of sequence `seq` from where it stands (with an image in it). */
export type Chunk = (seq: 0 | 1 | 2, n: number, logits: StepEntry["logits"], logitRows?: number[], image?: ImagePlacement) => StepEntry;

export interface StepSchedule {
  /** the three sequences' token counts */
  lengths: readonly [number, number, number];
  steps: (chunk: Chunk) => (() => StepEntry[])[];
}

/**
 * The default schedule over three sequences: a 70-token prefill alone (the tiled attention path), two
 * prefills batched (one with logits at every row), a prefill chunk next to a decode, then five
 * batched decode steps.
 */
export const DEFAULT_SCHEDULE: StepSchedule = {
  lengths: [90, 40, 20],
  steps: (chunk) => [
    () => [chunk(0, 70, "last")],
    () => [chunk(1, 13, "none"), chunk(2, 9, "all")],
    () => [chunk(1, 10, "last", [3, 9]), chunk(0, 1, "last")],
    ...Array.from({ length: 5 }, () => () => [chunk(0, 1, "last"), chunk(1, 1, "last"), chunk(2, 1, "last")]),
  ],
};

/**
 * The tiled attention (steps of 64 rows or more) over several of its KV tiles and query blocks: a 100-token
 * prefill, a chunk that starts mid-tile beside another sequence's prefill, a step of 64+ rows with a
 * decode row and a fresh prefill in it, then batched decodes and a one-row decode step.
 */
export const TILED_SCHEDULE: StepSchedule = {
  lengths: [200, 110, 40],
  steps: (chunk) => [
    () => [chunk(0, 100, "last")],
    () => [chunk(0, 67, "all"), chunk(1, 70, "last")],
    () => [chunk(2, 37, "all"), chunk(0, 1, "last"), chunk(1, 29, "last", [0, 28])],
    ...Array.from({ length: 3 }, () => () => [chunk(0, 1, "last"), chunk(1, 1, "last"), chunk(2, 1, "last")]),
    () => [chunk(0, 1, "last")],
  ],
};

/**
 * Image-like entries among text (Qwen3-VL's M-RoPE): a prefill with a 4 x 5 image from its row 22 on
 * (logits at a text row and an image row) that goes on over the sequence's next two chunks, another
 * image at a chunk's first row beside a text-only prefill, text chunks and decode steps whose rotary
 * positions lag their KV positions (after an image), a 70-row chunk with an 8 x 8 image (the tiled
 * attention), and batched decodes. Image rows' tokens are placeholders (-1).
 */
export const IMAGE_SCHEDULE: StepSchedule = {
  lengths: [48, 105, 24],
  steps: (chunk) => [
    () => [chunk(0, 30, "none", [3, 10, 29], { at: 22, rows: 4, cols: 5 })],
    () => [chunk(1, 12, "none"), chunk(2, 9, "all", undefined, { at: 0, rows: 2, cols: 3 })],
    () => [chunk(0, 10, "last"), chunk(1, 16, "all", undefined, { at: 2, rows: 3, cols: 3 }), chunk(2, 1, "last")],
    () => [chunk(1, 70, "last", undefined, { at: 3, rows: 8, cols: 8 }), chunk(0, 3, "all"), chunk(2, 4, "last")],
    ...Array.from({ length: 5 }, () => () => [chunk(0, 1, "last"), chunk(1, 1, "last"), chunk(2, 1, "last")]),
  ],
};

/**
 * Runs a schedule over three sequences (random tokens; images' rows random values of width `embd`)
 * and returns every step's logits (copied).
 */
export async function runSchedule(
  forward: (entries: readonly StepEntry[]) => Float32Array | Promise<Float32Array>,
  { kv, states }: StepPools,
  vocab: number,
  schedule: StepSchedule = DEFAULT_SCHEDULE,
  embd = 0,
): Promise<Float32Array[]> {
  const random = seededRandom(4242);
  const token = () => Math.floor(random() * vocab);
  // the images' embedding rows: their own generator, so that the tokens of a schedule without images stay the same
  const pixels = seededRandom(977);
  const seqs = schedule.lengths.map((length) => {
    const blockTable = Array.from({ length: kv.blocksFor(length) }, () => kv.pool.allocate());
    // rope: the next text row's rotary position (behind pos after an image); image: one not finished yet
    const image = undefined as (ImagePlacement & { next: number; t: number }) | undefined;
    return { blockTable, stateSlot: states.allocate(), tokens: Array.from({ length }, token), pos: 0, rope: 0, image };
  });
  const chunk: Chunk = (seq, n, logits, logitRows, image) => {
    const s = seqs[seq]!;
    const tokens = s.tokens.slice(s.pos, s.pos + n);
    let multimodal: Pick<StepEntry, "embeddings" | "ropePositions"> = {};
    if (image) {
      if (s.image) throw new Error("runSchedule: an image starts before the last one ended");
      s.image = { ...image, next: 0, t: -1 };
    }
    if (s.image || s.rope !== s.pos) {
      const ropePositions = new Int32Array(3 * n);
      const rows: number[] = [];
      let text = s.rope;
      for (let i = 0; i < n; i++) {
        const img = s.image;
        // an image continues from the last chunk (t set) or starts at its row of this one
        if (img && (img.t >= 0 || i >= img.at)) {
          if (img.t < 0) img.t = text;
          const k = img.next++;
          ropePositions.set([img.t, img.t + Math.floor(k / img.cols), img.t + (k % img.cols)], 3 * i);
          rows.push(i);
          tokens[i] = -1;
          if (img.next === img.rows * img.cols) {
            text = img.t + Math.max(img.rows, img.cols);
            s.image = undefined;
          }
        } else {
          ropePositions.set([text, text, text], 3 * i);
          text++;
        }
      }
      s.rope = text;
      if (rows.length > 0 && embd < 1) throw new Error("runSchedule: a schedule with images needs the embedding width");
      const data = Float32Array.from({ length: rows.length * embd }, () => (pixels() - 0.5) * 0.25);
      multimodal = { ropePositions, ...(rows.length > 0 ? { embeddings: { rows, data } } : {}) };
    } else {
      s.rope += n;
    }
    const entry: StepEntry = {
      tokens,
      startPos: s.pos,
      blockTable: s.blockTable,
      stateSlot: s.stateSlot,
      logits,
      ...(logitRows ? { logitRows } : {}),
      ...multimodal,
    };
    s.pos += n;
    return entry;
  };
  const out: Float32Array[] = [];
  for (const step of schedule.steps(chunk)) out.push((await forward(step())).slice());
  for (const s of seqs) {
    for (const block of s.blockTable) kv.pool.release(block);
    states.release(s.stateSlot);
  }
  return out;
}

/** Where two runs' logits first differ in their bits (undefined: nowhere). */
export function firstDifference(a: Float32Array[], b: Float32Array[]): string | undefined {
  if (a.length !== b.length) return `${a.length} steps vs ${b.length}`;
  for (let s = 0; s < a.length; s++) {
    const x = new Uint32Array(a[s]!.buffer, a[s]!.byteOffset, a[s]!.length);
    const y = new Uint32Array(b[s]!.buffer, b[s]!.byteOffset, b[s]!.length);
    if (x.length !== y.length) return `step ${s}: ${x.length} logits vs ${y.length}`;
    for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return `step ${s}, logit ${i}: ${a[s]![i]} vs ${b[s]![i]}`;
  }
  return undefined;
}

/** One run of the TypeScript forward and of the native step over the same schedule. */
export interface SpecAndNativeRun {
  numerics: "llama" | "bf16";
  flashAttention: boolean;
  maxBatchTokens: number;
  /** fresh pools: each side runs on its own */
  pools: () => StepPools;
  schedule?: StepSchedule;
}

/**
 * The logits of the specification (the TypeScript forward with the native matmul kernels) and of the
 * native step over one schedule: `expected` and `actual`, to compare with `firstDifference`.
 */
export async function specAndNativeLogits(
  weights: ModelWeights,
  { numerics, flashAttention, maxBatchTokens, pools, schedule }: SpecAndNativeRun,
): Promise<{ expected: Float32Array[]; actual: Float32Array[] }> {
  const providers = [...(await createNativeMatmulProviders(numerics, undefined, [])), ...typescriptProviders(numerics, [])];
  const selection = selectProviders(weights, providers, numerics);
  const spec = pools();
  const ts = new Qwen35Forward(
    weights,
    spec.kv,
    spec.states,
    selection.byWeight,
    numerics,
    quantDequantizeRow,
    maxBatchTokens,
    flashAttention,
  );
  const D = weights.config.embeddingLength;
  const expected = await runSchedule((e) => ts.forward(e), spec, weights.vocab, schedule, D);
  const mine = pools();
  const step = NativeStep.create(native, weights, mine.kv, mine.states, { numerics, flashAttention, maxBatchTokens });
  try {
    return { expected, actual: await runSchedule((e) => step.forward(e), mine, weights.vocab, schedule, D) };
  } finally {
    step.dispose();
  }
}

/** One case of the native-step tests: the numerics, the KV type and whether attention is flash. */
export interface StepCase {
  numerics: "llama" | "bf16";
  kvType: KvType;
  flashAttention: boolean;
}

/** Every case: both numerics, both KV types, flash attention on and off. */
export const STEP_CASES: readonly StepCase[] = [
  { numerics: "llama", kvType: "f16", flashAttention: true },
  { numerics: "llama", kvType: "f16", flashAttention: false },
  { numerics: "llama", kvType: "f32", flashAttention: false },
  { numerics: "bf16", kvType: "f16", flashAttention: true },
  { numerics: "bf16", kvType: "f32", flashAttention: false },
];

/**
 * The cases a fixture runs. The KV type and flash attention act on the attention over the cache, the
 * same code whatever the weights' type, so each model's Q4_K_M file runs every case and its F32 and
 * Q8_0 files two that together still cover both numerics, both KV types and flash attention on and
 * off (the matmul kernels of each weight type in both numerics).
 */
export function stepCasesFor(weightType: string): readonly StepCase[] {
  if (weightType.toUpperCase() === "Q4_K_M") return STEP_CASES;
  return [STEP_CASES[0]!, STEP_CASES[4]!];
}

/**
 * Expects the native step's logits over a schedule (the default one unless given) to be the
 * specification's bit for bit (and not empty), in one case, each side on fresh pools of the case's KV type.
 */
export async function expectNativeEqualsSpec(
  weights: ModelWeights,
  { numerics, kvType, flashAttention }: StepCase,
  pools: (kvType: KvType) => StepPools,
  schedule: StepSchedule = DEFAULT_SCHEDULE,
): Promise<void> {
  const { expected, actual } = await specAndNativeLogits(weights, {
    numerics,
    flashAttention,
    maxBatchTokens: 128,
    pools: () => pools(kvType),
    schedule,
  });
  expect(firstDifference(actual, expected), `${numerics} kv ${kvType} flash ${flashAttention}`).toBeUndefined();
  expect(actual.reduce((n, l) => n + l.length, 0)).toBeGreaterThan(0);
}
