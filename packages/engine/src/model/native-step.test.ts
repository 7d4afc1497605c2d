/**
 * The native step against its specification, the TypeScript forward (with the same native matmul
 * kernels and the C library's libm): bit-identical logits on every parity fixture, in prefill
 * (one-chunk and tiled flash attention) and decode, batched, f16 and f32 KV, flash attention on and
 * off, both numerics modes, image embedding rows and M-RoPE (t, h, w) positions among text; the same
 * bits for 1, 2 and 4 threads; and the JS thread stays free while a step runs.
 */
import { afterAll, describe, expect, it } from "vitest";
import { buildLoadPlan, readGguf } from "@keepquant/gguf";
import * as native from "@keepquant/tt-native";
import { PagedKvCache, type KvType } from "../kv/paged-kv.js";
import { GdnStatePool } from "../kv/state-pool.js";
import { seededRandom } from "../testing/synthetic-model.js";
import { PARITY_FIXTURES, PARITY_MODELS } from "@keepquant/fixtures";
import { parityFixtureFile, parityFixturesUnavailableReason } from "@keepquant/fixtures/oracle";
import { Qwen35Forward, type DrafterEntry, type StepEntry } from "./forward.js";
import { loadQwen35Weights, mappedTensorBytes } from "./load.js";
import { createNativeMatmulProviders } from "./native-provider.js";
import { NativeStep } from "./native-step.js";
import { quantDequantizeRow, selectProviders, typescriptProviders } from "./providers.js";
import { EngineOptionError } from "../errors.js";
import {
  DEFAULT_SCHEDULE,
  expectNativeEqualsSpec,
  firstDifference,
  IMAGE_SCHEDULE,
  loadFileWeights,
  pinNativeLibm,
  runSchedule,
  specAndNativeLogits,
  STEP_CASES,
  stepCasesFor,
  type StepPools,
  TILED_SCHEDULE,
} from "./test-support.js";
import { type ModelWeights, withDrafterHeadRows } from "./weights.js";

function skipReason(): string | undefined {
  if (!native.nativeAddon()) return `the native addon did not load: ${native.nativeStatus().cpu.reasons.join("; ")}`;
  return parityFixturesUnavailableReason();
}
const reason = skipReason();

function pools(
  weights: ModelWeights,
  kvType: KvType,
  storage = (bytes: number) => native.allocNativeBuffer(bytes),
  blocks = 24,
): StepPools {
  return {
    kv: PagedKvCache.forModel(weights.config, blocks, 8, kvType, storage),
    states: GdnStatePool.forModel(weights.config, 4, storage),
  };
}

/** Every weight type of a model (the experts' stacked matrices sit deeper in a layer). */
function weightTypes(weights: ModelWeights): Set<number> {
  const types = new Set<number>();
  const collect = (node: unknown, depth: number): void => {
    if (typeof node !== "object" || node === null || depth > 4 || ArrayBuffer.isView(node)) return;
    const record = node as Record<string, unknown>;
    if (typeof record["type"] === "number" && "rowBytes" in record) types.add(record["type"]);
    for (const value of Object.values(record)) collect(value, depth + 1);
  };
  collect(weights.layers, 0);
  collect(weights.output, 0);
  return types;
}

describe.skipIf(reason !== undefined)("native step == TypeScript forward, bit for bit (libm pinned to the C library)", () => {
  pinNativeLibm();

  for (const fixture of PARITY_FIXTURES) {
    it(`${fixture.name}: prefill, batched prefill + decode; f16/f32 KV; flash attention on/off; llama and bf16 numerics`, async () => {
      const file = await parityFixtureFile(fixture);
      for (const stepCase of stepCasesFor(fixture.weightType)) {
        const weights = await loadFileWeights(file, stepCase.numerics);
        await expectNativeEqualsSpec(weights, stepCase, (kvType) => pools(weights, kvType));
      }
    });
  }

  // image rows and positions act before the layers and in RoPE, the same for every model and weight type: one
  // file, every case (both numerics, both KV types, flash on and off); the ISA test below runs another model
  for (const fixture of PARITY_FIXTURES.filter((f) => f.name === "tied-4l-q4_k_m")) {
    it(`${fixture.name}: image embedding rows and M-RoPE (t, h, w) positions among text, prefill and decode`, async () => {
      const file = await parityFixtureFile(fixture);
      for (const stepCase of stepCasesFor(fixture.weightType)) {
        const weights = await loadFileWeights(file, stepCase.numerics);
        await expectNativeEqualsSpec(weights, stepCase, (kvType) => pools(weights, kvType), IMAGE_SCHEDULE);
      }
    });
  }

  it("tiled flash attention: several KV tiles and query blocks, chunks from mid-tile, sequences and decode rows in one step", async () => {
    const fixture = PARITY_FIXTURES.find((f) => f.name === "untied-mtp-6l-q4_k_m")!;
    const file = await parityFixtureFile(fixture);
    const weights = await loadFileWeights(file, "llama");
    // every ISA level, then 4 threads (more than a one-row decode step's KV heads: one task per query head)
    const runs = [
      ...(["f16", "f32"] as const).flatMap((kvType) => native.availableNativeIsas().map((isa) => ({ kvType, isa, threads: 2 }))),
      { kvType: "f16" as const, isa: "best" as const, threads: 4 },
    ];
    const before = native.getNativeThreads();
    try {
      for (const { kvType, isa, threads } of runs) {
        native.setNativeIsa(isa);
        native.setNativeThreads(threads);
        const { expected, actual } = await specAndNativeLogits(weights, {
          numerics: "llama",
          flashAttention: true,
          maxBatchTokens: 256,
          pools: () => pools(weights, kvType, undefined, 64),
          schedule: TILED_SCHEDULE,
        });
        expect(firstDifference(actual, expected), `kv ${kvType} ${isa} ${threads} threads`).toBeUndefined();
      }
    } finally {
      native.setNativeIsa("best");
      native.setNativeThreads(before);
    }
  });
});

describe.skipIf(reason !== undefined)("native step at every ISA level this CPU runs == TypeScript forward", () => {
  pinNativeLibm();
  afterAll(() => native.setNativeIsa("best"));

  it("generic, avx2, avx512 (the forward ops' vector bodies against their scalar forms)", async () => {
    const fixture = PARITY_FIXTURES.find((f) => f.name === "untied-mtp-6l-q4_k_m")!;
    const file = await parityFixtureFile(fixture);
    for (const isa of native.availableNativeIsas()) {
      native.setNativeIsa(isa);
      for (const flashAttention of [true, false]) {
        const weights = await loadFileWeights(file, "llama");
        const { expected, actual } = await specAndNativeLogits(weights, {
          numerics: "llama",
          flashAttention,
          maxBatchTokens: 128,
          pools: () => pools(weights, "f16"),
        });
        expect(firstDifference(actual, expected), `${isa} flash ${flashAttention}`).toBeUndefined();
      }
    }
  });

  it("image rows and M-RoPE positions: generic, avx2, avx512 (flash on; off is the case above); 1 and 4 threads", async () => {
    const fixture = PARITY_FIXTURES.find((f) => f.name === "untied-mtp-6l-q4_k_m")!;
    const weights = await loadFileWeights(await parityFixtureFile(fixture), "llama");
    const runs = [
      ...native.availableNativeIsas().map((isa) => ({ isa, flashAttention: true, threads: 2 })),
      ...[1, 4].map((threads) => ({ isa: "best" as const, flashAttention: true, threads })),
    ];
    const before = native.getNativeThreads();
    try {
      for (const { isa, flashAttention, threads } of runs) {
        native.setNativeIsa(isa);
        native.setNativeThreads(threads);
        const { expected, actual } = await specAndNativeLogits(weights, {
          numerics: "llama",
          flashAttention,
          maxBatchTokens: 128,
          pools: () => pools(weights, "f16"),
          schedule: IMAGE_SCHEDULE,
        });
        expect(firstDifference(actual, expected), `${isa} flash ${flashAttention} ${threads} threads`).toBeUndefined();
      }
    } finally {
      native.setNativeIsa("best");
      native.setNativeThreads(before);
    }
  });
});

/** A schedule's entries with their rotary positions replaced: `ropeOf(entry)`, or none when it returns undefined. */
function withRope(
  forward: (entries: readonly StepEntry[]) => Float32Array | Promise<Float32Array>,
  ropeOf: (e: StepEntry) => Int32Array | undefined,
) {
  return (entries: readonly StepEntry[]) =>
    forward(
      entries.map((e) => {
        const { ropePositions: _, ...rest } = e;
        const rope = ropeOf(e);
        return rope ? { ...rest, ropePositions: rope } : rest;
      }),
    );
}

/** Row i of the entry at startPos + i in all three rotary components (what a text row is without positions). */
function kvRope(e: StepEntry): Int32Array {
  return Int32Array.from({ length: 3 * e.tokens.length }, (_, k) => e.startPos + Math.floor(k / 3));
}

describe.skipIf(reason !== undefined)("M-RoPE positions in the specification and the native step", () => {
  pinNativeLibm();

  it("(t, h, w) all at the KV position is plain RoPE, bit for bit; an image's positions dropped change the logits", async () => {
    const fixture = PARITY_FIXTURES.find((f) => f.name === "tied-4l-q4_k_m")!;
    const weights = await loadFileWeights(await parityFixtureFile(fixture), "llama");
    const D = weights.config.embeddingLength;
    const providers = [...(await createNativeMatmulProviders("llama", undefined, [])), ...typescriptProviders("llama", [])];
    const byWeight = selectProviders(weights, providers, "llama").byWeight;
    type Forward = (entries: readonly StepEntry[]) => Float32Array | Promise<Float32Array>;
    const implementations: [string, (p: StepPools) => { forward: Forward; dispose(): void }][] = [
      [
        "spec",
        (p) => {
          const ts = new Qwen35Forward(weights, p.kv, p.states, byWeight, "llama", quantDequantizeRow, 128, true);
          return { forward: (e) => ts.forward(e), dispose: () => {} };
        },
      ],
      [
        "native",
        (p) => {
          const step = NativeStep.create(native, weights, p.kv, p.states, { numerics: "llama", flashAttention: true, maxBatchTokens: 128 });
          return { forward: (e) => step.forward(e), dispose: () => step.dispose() };
        },
      ],
    ];
    for (const [name, make] of implementations) {
      const run = async (wrap: (f: Forward) => Forward, schedule = DEFAULT_SCHEDULE): Promise<Float32Array[]> => {
        const p = pools(weights, "f16");
        const impl = make(p);
        try {
          return await runSchedule(wrap(impl.forward), p, weights.vocab, schedule, D);
        } finally {
          impl.dispose();
        }
      };
      const plain = await run((f) => f);
      const explicit = await run((f) => withRope(f, kvRope));
      expect(firstDifference(explicit, plain), `${name}: positions at the KV index`).toBeUndefined();
      // the image schedule with its positions, and with every row back at its KV position
      const image = await run((f) => f, IMAGE_SCHEDULE);
      const dropped = await run((f) => withRope(f, () => undefined), IMAGE_SCHEDULE);
      expect(firstDifference(dropped, image), `${name}: the positions matter`).toBeDefined();
      // the first step's logit rows 3 and 10 come before the image (from row 22): the same either way; row 29 is an image row
      const V = weights.vocab;
      expect(firstDifference([image[0]!.subarray(0, 2 * V)], [dropped[0]!.subarray(0, 2 * V)]), name).toBeUndefined();
      expect(firstDifference([image[0]!.subarray(2 * V)], [dropped[0]!.subarray(2 * V)]), name).toBeDefined();
    }
  });
});

describe.skipIf(reason !== undefined)("native step", () => {
  it("gives the same bits with 1, 2 and 4 threads", async () => {
    const fixture = PARITY_FIXTURES.find((f) => f.name === "untied-mtp-6l-q4_k_m")!;
    const weights = await loadFileWeights(await parityFixtureFile(fixture), "llama");
    const before = native.getNativeThreads();
    const results: Float32Array[][] = [];
    try {
      for (const threads of [1, 2, 4]) {
        native.setNativeThreads(threads);
        const p = pools(weights, "f16");
        const step = NativeStep.create(native, weights, p.kv, p.states, { numerics: "llama", flashAttention: true, maxBatchTokens: 128 });
        results.push(await runSchedule((e) => step.forward(e), p, weights.vocab));
        step.dispose();
      }
    } finally {
      native.setNativeThreads(before);
    }
    expect(firstDifference(results[1]!, results[0]!)).toBeUndefined();
    expect(firstDifference(results[2]!, results[0]!)).toBeUndefined();
  });

  it("gives the same bits under every decode variant, MoE expert matmuls included", async () => {
    // one sequence: a prefill, then single-token steps (the decode variants act on one-row matmuls,
    // and a routed expert sees one row in most batched steps too)
    const addon = native.nativeAddon()!;
    const fixtures = ["moe-4l-e8k2-q4_k_m", "untied-mtp-6l-q4_k_m"].map((name) => PARITY_FIXTURES.find((f) => f.name === name)!);
    const variants: native.DecodeVariant[] = [
      // every SIMD level (the generic one sums in another order: it is not a decode variant)
      ...native
        .availableNativeIsas()
        .filter((isa) => isa !== "generic")
        .flatMap((isa) => [
          { isa, weightRows: 1, prefetch: 2, rowsPerTask: 3 },
          { isa, weightRows: 4, prefetch: 5, rowsPerTask: 7 },
        ]),
      { weightRows: 2, prefetch: 7, rowsPerTask: 5 },
      { weightRows: 4, prefetch: 0, rowsPerTask: 64, threads: 1 },
    ];
    try {
      for (const fixture of fixtures) {
        const weights = await loadFileWeights(await parityFixtureFile(fixture), "llama");
        const types = weightTypes(weights);
        expect(types.size).toBeGreaterThan(1);
        const run = async (): Promise<Float32Array[]> => {
          const p = pools(weights, "f16");
          const step = NativeStep.create(native, weights, p.kv, p.states, { numerics: "llama", flashAttention: true, maxBatchTokens: 128 });
          const blockTable = Array.from({ length: p.kv.blocksFor(40) }, () => p.kv.pool.allocate());
          const stateSlot = p.states.allocate();
          const random = seededRandom(7);
          const tokens = Array.from({ length: 26 }, () => Math.floor(random() * weights.vocab));
          const out: Float32Array[] = [];
          let pos = 0;
          for (const n of [20, 1, 1, 1, 1, 1, 1]) {
            out.push(
              (await step.forward([{ tokens: tokens.slice(pos, pos + n), startPos: pos, blockTable, stateSlot, logits: "last" }])).slice(),
            );
            pos += n;
          }
          step.dispose();
          return out;
        };
        addon.resetDecodeVariants();
        const expected = await run();
        for (const variant of variants) {
          for (const type of types) for (const role of ["layer", "head"] as const) addon.setDecodeVariant(role, type as never, variant);
          expect(firstDifference(await run(), expected), `${fixture.name} ${JSON.stringify(variant)}`).toBeUndefined();
        }
      }
    } finally {
      addon.resetDecodeVariants();
    }
  });

  it("gives the same bits under both batch and prefill kernels in steps of several sequences, MoE experts included", async () => {
    // 4 sequences (the pool's state slots): a prefill each (32 rows in the dense matmuls: prefillKernel applies), then
    // batched steps of one token per sequence (4 rows in the dense matmuls and the head, a few per routed expert:
    // batchKernel applies), under each kernel's choices
    const addon = native.nativeAddon()!;
    const fixtures = ["moe-4l-e8k2-q4_k_m", "untied-mtp-6l-q4_k_m"].map((name) => PARITY_FIXTURES.find((f) => f.name === name)!);
    try {
      for (const fixture of fixtures) {
        const weights = await loadFileWeights(await parityFixtureFile(fixture), "llama");
        const types = weightTypes(weights);
        const run = async (): Promise<Float32Array[]> => {
          const p = pools(weights, "f16");
          const step = NativeStep.create(native, weights, p.kv, p.states, { numerics: "llama", flashAttention: true, maxBatchTokens: 128 });
          const random = seededRandom(11);
          const seqs = Array.from({ length: 4 }, () => ({
            blockTable: Array.from({ length: p.kv.blocksFor(24) }, () => p.kv.pool.allocate()),
            stateSlot: p.states.allocate(),
            tokens: Array.from({ length: 14 }, () => Math.floor(random() * weights.vocab)),
          }));
          const out: Float32Array[] = [];
          const at = (pos: number, n: number) =>
            seqs.map((s) => ({
              tokens: s.tokens.slice(pos, pos + n),
              startPos: pos,
              blockTable: s.blockTable,
              stateSlot: s.stateSlot,
              logits: "last" as const,
            }));
          out.push((await step.forward(at(0, 8))).slice());
          for (let pos = 8; pos < 14; pos++) out.push((await step.forward(at(pos, 1))).slice());
          step.dispose();
          return out;
        };
        addon.resetDecodeVariants();
        const expected = await run();
        for (const [batchKernel, prefillKernel] of [
          [1, 1],
          [0, 0],
          [0, 1],
        ]) {
          for (const type of types)
            for (const role of ["layer", "head"] as const) addon.setDecodeVariant(role, type as never, { batchKernel, prefillKernel });
          expect(
            firstDifference(await run(), expected),
            `${fixture.name} batchKernel=${batchKernel} prefillKernel=${prefillKernel}`,
          ).toBeUndefined();
        }
      }
    } finally {
      addon.resetDecodeVariants();
    }
  });

  it("runs off the JS thread: the event loop turns while a step is in flight", async () => {
    const weights = await loadFileWeights(await parityFixtureFile(PARITY_FIXTURES[0]!), "llama");
    const p = pools(weights, "f16");
    const step = NativeStep.create(native, weights, p.kv, p.states, { numerics: "llama", flashAttention: true, maxBatchTokens: 128 });
    const blockTable = Array.from({ length: p.kv.blocksFor(100) }, () => p.kv.pool.allocate());
    const entry: StepEntry = {
      tokens: Array.from({ length: 100 }, (_, i) => i),
      startPos: 0,
      blockTable,
      stateSlot: p.states.allocate(),
      logits: "last",
    };
    // the step waits on its worker until this thread releases it; a step that blocked this thread
    // could not be released and would time out instead
    step.holdNextStep();
    let settled = false;
    const pending = step.forward([entry]).then(() => (settled = true));
    let turns = 0;
    while (turns < 3) {
      await new Promise<void>((resolve) => setImmediate(resolve));
      turns++;
    }
    expect(settled).toBe(false);
    step.releaseHold();
    await pending;
    expect(step.lastHold).toBe("released");
    step.dispose();
  });

  it("Engine: timers and I/O callbacks keep running while a long prefill is in flight", async () => {
    const { Engine } = await import("../engine.js");
    const engine = await Engine.load(await parityFixtureFile(PARITY_FIXTURES[0]!), { maxBatchTokens: 512 });
    const backend = (engine as unknown as { backend: unknown }).backend;
    const step = backend instanceof NativeStep ? backend : undefined;
    expect(step, "the engine runs the native step").toBeDefined();
    step!.holdNextStep();
    let settled = false;
    const result = engine
      .generateToEnd(
        Array.from({ length: 400 }, (_, i) => (i * 31) % 1000),
        { maxTokens: 2 },
      )
      .then((r) => {
        settled = true;
        return r;
      });
    // a counter driven by the event loop: it can only advance while the step runs off this thread
    let turns = 0;
    while (turns < 5) {
      await new Promise<void>((resolve) => setImmediate(resolve));
      turns++;
    }
    expect(settled).toBe(false);
    step!.releaseHold();
    const done = await result;
    expect(step!.lastHold).toBe("released");
    expect(done.tokens.length).toBe(2);
    engine.dispose();
  });

  it("refuses a bad step with a typed error and stays usable", async () => {
    const weights = await loadFileWeights(await parityFixtureFile(PARITY_FIXTURES[0]!), "llama");
    const p = pools(weights, "f16");
    const step = NativeStep.create(native, weights, p.kv, p.states, { numerics: "llama", flashAttention: true, maxBatchTokens: 16 });
    const blockTable = [p.kv.pool.allocate()];
    const slot = p.states.allocate();
    const vocab = weights.vocab;
    const bad: [string, StepEntry[], RegExp][] = [
      [
        "token out of range",
        [{ tokens: [vocab], startPos: 0, blockTable, stateSlot: slot, logits: "last" }],
        /token \d+ at row 0 is outside/,
      ],
      ["negative token", [{ tokens: [-1], startPos: 0, blockTable, stateSlot: slot, logits: "last" }], /is outside/],
      ["block table too short", [{ tokens: [1], startPos: 8, blockTable, stateSlot: slot, logits: "last" }], /block table has 1 blocks/],
      ["bad block id", [{ tokens: [1], startPos: 0, blockTable: [10_000], stateSlot: slot, logits: "last" }], /block id 10000 is outside/],
      ["bad state slot", [{ tokens: [1], startPos: 0, blockTable, stateSlot: 99, logits: "last" }], /state slot 99 is outside/],
      [
        "too many tokens",
        [{ tokens: Array.from({ length: 17 }, () => 1), startPos: 0, blockTable: [0, 1, 2], stateSlot: slot, logits: "last" }],
        /more than maxBatchTokens/,
      ],
      [
        "unsorted logit rows",
        [{ tokens: [1, 2], startPos: 0, blockTable, stateSlot: slot, logits: "none", logitRows: [1, 0] }],
        /ascending/,
      ],
      [
        "one slot twice",
        [
          { tokens: [1], startPos: 0, blockTable, stateSlot: slot, logits: "last" },
          { tokens: [2], startPos: 1, blockTable, stateSlot: slot, logits: "last" },
        ],
        /appears twice/,
      ],
    ];
    for (const [what, entries, message] of bad) {
      expect(() => step.forwardSync(entries), what).toThrow(message);
      await expect(step.forward(entries), what).rejects.toThrow(message);
    }
    // image rows and rotary positions that do not fit their entry: EngineOptionError before any native work
    const D = weights.config.embeddingLength;
    const entry = (extra: Partial<StepEntry>): StepEntry[] => [
      { tokens: [1, -1, -1, 2], startPos: 0, blockTable, stateSlot: slot, logits: "last", ...extra },
    ];
    const rows = (r: number[], values = r.length * D) => ({ embeddings: { rows: r, data: new Float32Array(values) } });
    const badMedia: [string, StepEntry[], RegExp][] = [
      ["embedding data too short", entry(rows([1, 2], D)), /embeddings\.data has 256 values, expected 2 rows x 256/],
      ["embedding data too long", entry(rows([1, 2], 3 * D)), /expected 2 rows x/],
      ["embedding rows out of order", entry(rows([2, 1])), /embeddings\.rows must ascend/],
      ["embedding row twice", entry(rows([1, 1])), /must ascend/],
      ["embedding row past the chunk", entry(rows([1, 4])), /\[1\] = 4 is not a row of the chunk \[0, 4\)/],
      ["negative embedding row", entry(rows([-1, 1])), /is not a row of the chunk/],
      [
        "rotary positions too short",
        entry({ ...rows([1, 2]), ropePositions: new Int32Array(9) }),
        /ropePositions has 9 values, expected 3 per row \(12\)/,
      ],
      ["rotary positions not Int32", entry({ ropePositions: [0, 0, 0] as unknown as Int32Array }), /ropePositions must be an Int32Array/],
    ];
    expect(D).toBe(256);
    for (const [what, entries, message] of badMedia) {
      expect(() => step.forwardSync(entries), what).toThrow(message);
      expect(() => step.forwardSync(entries), what).toThrow(EngineOptionError);
      await expect(step.forward(entries), what).rejects.toThrow(message);
    }
    // the addon checks the descriptor by itself too: embedding rows without their values, a placeholder token
    // that is not an embedding row, positions of the wrong count
    const model = (step as unknown as { model: native.NativeModelHandle }).model;
    const descriptor = (entries: native.StepDescriptorEntry[]) => {
      const out = new Int32Array(native.stepDescriptorLength(entries));
      native.encodeStepDescriptor("trunk", entries, out);
      return out;
    };
    const described = { tokens: [1, -1], startPos: 0, stateSlot: slot, logitRows: [1], blockTable, keepHidden: false, snapshotRow: -1 };
    const out = new Float32Array(vocab);
    expect(() => model.stepSync(descriptor([{ ...described, embeddingRows: [1] }]), out), "no embeddings").toThrow(
      /1 embedding rows need the embeddings/,
    );
    expect(() =>
      model.stepSync(descriptor([{ ...described, embeddingRows: [1] }]), out, undefined, undefined, new Float32Array(D - 1)),
    ).toThrow(/embeddings holds 255 values, 256 needed/);
    expect(() => model.stepSync(descriptor([described]), out), "placeholder looked up").toThrow(/token -1 at row 1 is outside/);
    expect(() => model.stepSync(descriptor([{ ...described, tokens: [1, 2], ropePositions: [0, 0, 0] }]), out)).toThrow(
      /rotary positions: 3 values, expected 0 or 3 per row \(6\)/,
    );
    expect(() =>
      model.stepSync(descriptor([{ ...described, embeddingRows: [1, 0] }]), out, undefined, undefined, new Float32Array(2 * D)),
    ).toThrow(/embedding rows must be ascending/);
    const logits = await step.forward([{ tokens: [1, 2, 3], startPos: 0, blockTable, stateSlot: slot, logits: "last" }]);
    expect(logits.length).toBe(vocab);
    expect(logits.every(Number.isFinite)).toBe(true);
    step.dispose();
    expect(() => step.forwardSync([{ tokens: [1], startPos: 0, blockTable, stateSlot: slot, logits: "last" }])).toThrow(/disposed/);
  });
});

/** The trunk and drafter calls of one implementation (TypeScript forward or native step). */
interface DrafterRunner {
  forward(entries: readonly StepEntry[]): Float32Array | Promise<Float32Array>;
  draft(entries: readonly DrafterEntry[], hiddenIn: Float32Array): Float32Array | Promise<Float32Array>;
  readonly hiddenRows: Float32Array;
}

/**
 * Trunk prefill of two sequences keeping every row's hidden state, the drafter over each prompt
 * (row p pairs token p with the trunk's hidden state at p - 1, zeros at 0) batched, then three
 * chained drafter steps (each on the drafter's own hidden state) batched, and a trunk verification
 * step over the drafted tokens. Returns every logits and hidden-state output (copied).
 */
async function runDrafterSchedule(
  runner: DrafterRunner,
  { kv, states }: StepPools,
  snapshots: GdnStatePool,
  vocab: number,
  D: number,
): Promise<Float32Array[]> {
  const random = seededRandom(777);
  const token = () => Math.floor(random() * vocab);
  const seqs = [23, 9].map((length) => ({
    blockTable: Array.from({ length: kv.blocksFor(length + 8) }, () => kv.pool.allocate()),
    stateSlot: states.allocate(),
    tokens: Array.from({ length }, token),
  }));
  const out: Float32Array[] = [];
  // trunk prefill, every row's hidden state kept
  const logits = await runner.forward(
    seqs.map((s) => ({ tokens: s.tokens, startPos: 0, blockTable: s.blockTable, stateSlot: s.stateSlot, logits: "last", hidden: true })),
  );
  out.push(logits.slice(), runner.hiddenRows.slice());
  const prefillHidden = runner.hiddenRows.slice();
  const next = seqs.map((_, i) => argmax(logits.subarray(i * vocab, (i + 1) * vocab)));
  // drafter over prompt + the sampled token: rows 0..n, hidden inputs [0, h_0 .. h_{n-1}]
  const rows = seqs.reduce((n, s) => n + s.tokens.length + 1, 0);
  const hiddenIn = new Float32Array(rows * D);
  let at = 0;
  let from = 0;
  for (const s of seqs) {
    hiddenIn.set(prefillHidden.subarray(from * D, (from + s.tokens.length) * D), (at + 1) * D);
    at += s.tokens.length + 1;
    from += s.tokens.length;
  }
  let draftLogits = await runner.draft(
    seqs.map((s, i) => ({ tokens: [...s.tokens, next[i]!], startPos: 0, blockTable: s.blockTable, logitRows: [s.tokens.length] })),
    hiddenIn,
  );
  out.push(draftLogits.slice(), runner.hiddenRows.slice());
  const drafted = seqs.map(() => [] as number[]);
  for (let k = 0; k < 3; k++) {
    const own = runner.hiddenRows.slice();
    seqs.forEach((_, i) => drafted[i]!.push(argmax(draftLogits.subarray(i * vocab, (i + 1) * vocab))));
    draftLogits = await runner.draft(
      seqs.map((s, i) => ({ tokens: [drafted[i]![k]!], startPos: s.tokens.length + 1 + k, blockTable: s.blockTable, logitRows: [0] })),
      own,
    );
    out.push(draftLogits.slice(), runner.hiddenRows.slice());
  }
  // trunk verification of [next, drafted...] with logits and hidden states at every row, the GDN
  // state copied after row i of sequence i
  const verify = await runner.forward(
    seqs.map((s, i) => ({
      tokens: [next[i]!, ...drafted[i]!],
      startPos: s.tokens.length,
      blockTable: s.blockTable,
      stateSlot: s.stateSlot,
      logits: "all",
      snapshotRow: i,
    })),
  );
  out.push(verify.slice(), runner.hiddenRows.slice());
  for (const s of seqs) {
    for (const plane of [...snapshots.conv, ...snapshots.ssm]) {
      const stride = plane.length / snapshots.numSlots;
      out.push(plane.slice(s.stateSlot * stride, (s.stateSlot + 1) * stride));
    }
  }
  for (const s of seqs) {
    for (const block of s.blockTable) kv.pool.release(block);
    states.release(s.stateSlot);
  }
  return out;
}

function argmax(row: Float32Array): number {
  let best = 0;
  for (let i = 1; i < row.length; i++) if (row[i]! > row[best]!) best = i;
  return best;
}

const MTP_FIXTURES = PARITY_FIXTURES.filter((f) => PARITY_MODELS[f.model]?.mtp === true);

describe.skipIf(reason !== undefined)("native MTP drafter == TypeScript drafter, bit for bit (libm pinned)", () => {
  pinNativeLibm();

  it("the MTP fixtures exist", () => {
    expect(MTP_FIXTURES.map((f) => f.name)).toEqual(["untied-mtp-6l-f32", "untied-mtp-6l-q8_0", "untied-mtp-6l-q4_k_m"]);
  });

  for (const fixture of MTP_FIXTURES) {
    it(`${fixture.name}: drafter over the prompt, chained drafts, verification; hidden states too`, async () => {
      const file = await parityFixtureFile(fixture);
      for (const { numerics, kvType, flashAttention } of STEP_CASES) {
        const plan = buildLoadPlan(await readGguf(file), { speculative: "mtp" });
        const weights = (await loadQwen35Weights(plan, mappedTensorBytes(native.mapFile(file)), numerics)).weights;
        expect(weights.drafter).toBeDefined();
        const D = weights.config.embeddingLength;
        const providers = [...(await createNativeMatmulProviders(numerics, undefined, [])), ...typescriptProviders(numerics, [])];
        const selection = selectProviders(weights, providers, numerics);
        const drafterPools = (): StepPools => ({
          kv: PagedKvCache.forModel(weights.config, 24, 8, kvType, (bytes) => native.allocNativeBuffer(bytes), true),
          states: GdnStatePool.forModel(weights.config, 4, (bytes) => native.allocNativeBuffer(bytes)),
        });
        const snapshotPool = () => GdnStatePool.forModel(weights.config, 4, (bytes) => native.allocNativeBuffer(bytes));
        const spec = drafterPools();
        const tsSnapshots = snapshotPool();
        const ts = new Qwen35Forward(weights, spec.kv, spec.states, selection.byWeight, numerics, quantDequantizeRow, 128, flashAttention);
        ts.snapshots = tsSnapshots;
        const expected = await runDrafterSchedule(ts, spec, tsSnapshots, weights.vocab, D);
        const mine = drafterPools();
        const nativeSnapshots = snapshotPool();
        const step = NativeStep.create(native, weights, mine.kv, mine.states, {
          numerics,
          flashAttention,
          maxBatchTokens: 128,
          snapshots: nativeSnapshots,
        });
        const actual = await runDrafterSchedule(step, mine, nativeSnapshots, weights.vocab, D);
        step.dispose();
        expect(firstDifference(actual, expected), `${numerics} kv ${kvType} flash ${flashAttention}`).toBeUndefined();
        expect(actual[2]!.every(Number.isFinite)).toBe(true);
        expect(
          actual.at(-1)!.some((v) => v !== 0),
          "the GDN state snapshot was written",
        ).toBe(true);
        expect(new Set(actual[2]).size, "the drafter logits are not degenerate").toBeGreaterThan(weights.vocab / 2);
      }
    });
  }
});

describe.skipIf(reason !== undefined)("a reduced drafter head (speculative.draftVocab) scores a prefix of the vocabulary", () => {
  it("its logits are the full drafter's first N columns, bit for bit, in the TypeScript forward and the native step", async () => {
    const fixture = MTP_FIXTURES.find((f) => f.weightType === "Q4_K_M")!;
    const file = await parityFixtureFile(fixture);
    const plan = buildLoadPlan(await readGguf(file), { speculative: "mtp" });
    const full = (await loadQwen35Weights(plan, mappedTensorBytes(native.mapFile(file)), "llama")).weights;
    const vocab = full.vocab;
    const N = Math.floor(vocab / 3) + 1; // not a multiple of anything the kernels tile by
    const reduced = withDrafterHeadRows(full, N);
    expect(reduced.drafter!.head.rows).toBe(N);
    expect(reduced.drafter!.head.data.buffer).toBe(full.drafter!.head.data.buffer); // a view, not a copy
    expect(reduced.output).toBe(full.output); // the target's head is untouched
    expect(withDrafterHeadRows(full, vocab)).toBe(full);
    expect(() => withDrafterHeadRows(full, vocab + 1)).toThrow(RangeError);
    expect(() => withDrafterHeadRows(full, 0)).toThrow(RangeError);
    const D = full.config.embeddingLength;
    const random = seededRandom(31);
    const tokens = Array.from({ length: 11 }, () => Math.floor(random() * vocab));
    const hiddenIn = Float32Array.from({ length: tokens.length * D }, () => random() - 0.5);
    const providers = [...(await createNativeMatmulProviders("llama", undefined, [])), ...typescriptProviders("llama", [])];
    /** one drafter step over `tokens` with logits at rows 4 and 10, through both implementations */
    const draft = async (weights: ModelWeights, impl: "ts" | "native"): Promise<Float32Array> => {
      const kv = PagedKvCache.forModel(weights.config, 4, 8, "f16", (bytes) => native.allocNativeBuffer(bytes), true);
      const states = GdnStatePool.forModel(weights.config, 1, (bytes) => native.allocNativeBuffer(bytes));
      const blockTable = [kv.pool.allocate(), kv.pool.allocate()];
      const entry: DrafterEntry = { tokens, startPos: 0, blockTable, logitRows: [4, 10] };
      if (impl === "ts") {
        const byWeight = selectProviders(weights, providers, "llama").byWeight;
        return new Qwen35Forward(weights, kv, states, byWeight, "llama", quantDequantizeRow, 64, true).draft([entry], hiddenIn).slice();
      }
      const step = NativeStep.create(native, weights, kv, states, { numerics: "llama", flashAttention: true, maxBatchTokens: 64 });
      try {
        return (await step.draft([entry], hiddenIn)).slice();
      } finally {
        step.dispose();
      }
    };
    for (const impl of ["ts", "native"] as const) {
      const whole = await draft(full, impl);
      const part = await draft(reduced, impl);
      expect(whole.length).toBe(2 * vocab);
      expect(part.length, impl).toBe(2 * N);
      for (let row = 0; row < 2; row++) {
        const expected = whole.subarray(row * vocab, row * vocab + N);
        expect(firstDifference([part.subarray(row * N, (row + 1) * N)], [expected]), `${impl} row ${row}`).toBeUndefined();
      }
      expect(new Set(part).size, "the logits are not degenerate").toBeGreaterThan(N / 2);
    }
  });
});
