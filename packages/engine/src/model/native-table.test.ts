import { buildLoadPlan, readGguf, synthesizeQwen35, type LoadPlan } from "@keepquant/gguf";
import * as native from "@keepquant/tt-native";
import { describe, expect, it } from "vitest";
import { EngineError } from "../errors.js";
import { PagedKvCache } from "../kv/paged-kv.js";
import { GdnStatePool } from "../kv/state-pool.js";
import { TINY_SPEC } from "../testing/synthetic-model.js";
import { Qwen35Forward, type StepEntry } from "./forward.js";
import { loadQwen35Weights, readTensorSource } from "./load.js";
import { createNativeMatmulProviders } from "./native-provider.js";
import { NativeStep, nativeModelSpec } from "./native-step.js";
import { quantDequantizeRow, selectProviders, typescriptProviders } from "./providers.js";
import { pinNativeLibm } from "./test-support.js";
import { SpecStepBackend, type StepBackend } from "./step-backend.js";
import type { ModelWeights } from "./weights.js";

type Spec = import("@keepquant/tt-native").NativeModelSpec;

const reason = native.nativeAddon() ? undefined : `the native addon did not load: ${native.nativeStatus().cpu.reasons.join("; ")}`;

/** The tiny synthetic qwen35 with its MTP block, loaded through the plan with the drafter kept. */
async function tinyWithDrafter(): Promise<{ plan: LoadPlan; weights: ModelWeights }> {
  const bytes = synthesizeQwen35({ ...TINY_SPEC, mtp: true, seed: 3 });
  const plan = buildLoadPlan(await readGguf(bytes), { speculative: "mtp" });
  return { plan, weights: (await loadQwen35Weights(plan, readTensorSource(bytes), "llama")).weights };
}

function storage(weights: ModelWeights) {
  const allocate = (bytes: number) => native.allocNativeBuffer(bytes);
  return {
    kv: PagedKvCache.forModel(weights.config, 8, 8, "f16", allocate, true),
    states: GdnStatePool.forModel(weights.config, 2, allocate),
  };
}

describe.skipIf(reason !== undefined)("the native model's table", () => {
  // the specification computes with the C library's libm here, as the native step does
  pinNativeLibm();

  it("is the model description bound to the weights: every used tensor once, the description's dims as hparams", async () => {
    const { plan, weights } = await tinyWithDrafter();
    const { kv, states } = storage(weights);
    const spec = nativeModelSpec(native, weights, kv, states, { numerics: "llama", flashAttention: true, maxBatchTokens: 16 });
    expect(spec.hparams).toMatchObject(plan.description.dims);
    // the rotary section of every pair, the specification's table (the tiny shape's [3, 3, 2, 0] over 8 pairs)
    expect(Array.from(spec.ropeSections!)).toEqual([0, 1, 2, 0, 1, 2, 0, 1]);
    expect(spec.layers.map((l) => l.mixer)).toEqual(plan.description.layers.map((l) => l.mixer));
    const named = spec.tensors.map((t) => (t.layer < 0 ? t.slot : `blk.${t.layer}.${t.slot}`));
    expect(new Set(named).size).toBe(named.length);
    // the file's tensors, plus what the description's fallbacks bind (a tied head, the drafter's shared head)
    for (const t of plan.used) expect(named, t.name).toContain(t.name.replace(/\.(weight|bias)$/, ""));
    const model = native.createNativeModel(spec);
    model.dispose();
  });

  it("refuses a bad table with a typed error that names the tensor or hyperparameter", async () => {
    const { weights } = await tinyWithDrafter();
    const { kv, states } = storage(weights);
    const good = () => nativeModelSpec(native, weights, kv, states, { numerics: "llama", flashAttention: true, maxBatchTokens: 16 });
    const tensorAt = (spec: Spec, name: string) => spec.tensors.findIndex((t) => `blk.${t.layer}.${t.slot}` === name || t.slot === name);
    const cases: [string, (spec: Spec) => void, RegExp][] = [
      [
        "wrong dims",
        (s) => {
          s.tensors[tensorAt(s, "blk.3.attn_q")]!.dims = ["nEmbd", "kvDim"];
        },
        /blk\.3\.attn_q: \[256, 64\], expected \[64, 64\] \(kvDim x nEmbd\)/,
      ],
      [
        "a missing hyperparameter",
        (s) => {
          delete s.hparams.convDim;
        },
        /hparams\.convDim is missing/,
      ],
      [
        "an unknown slot",
        (s) => {
          s.tensors[tensorAt(s, "blk.0.ssm_a")]!.slot = "ssm_bogus";
        },
        /blk\.0\.ssm_bogus: not a layer slot/,
      ],
      [
        "a GDN slot in an attention layer",
        (s) => {
          s.tensors[tensorAt(s, "blk.3.attn_q_norm")]!.slot = "ssm_norm";
        },
        /a full-attention layer has no ssm_norm/,
      ],
      ["a missing tensor", (s) => void s.tensors.splice(tensorAt(s, "blk.1.ssm_out"), 1), /blk\.1\.ssm_out: missing from the table/],
      ["a tensor twice", (s) => void s.tensors.push({ ...s.tensors[tensorAt(s, "blk.2.ffn_up")]! }), /blk\.2\.ffn_up: appears twice/],
      [
        "a vector that is not f32",
        (s) => {
          s.tensors[tensorAt(s, "output_norm")]!.type = 1;
        },
        /output_norm: .*(f32 vector|rowBytes)/,
      ],
      ["a second MTP block", (s) => void s.layers.push({ ...s.layers.at(-1)!, index: 99 }), /only one MTP block/],
      [
        "a rotary section table of the wrong length",
        (s) => {
          s.ropeSections = new Uint8Array(7);
        },
        /ropeSections: 7 values, expected one per rotated pair \(8\)/,
      ],
      [
        "a rotary section that is not t, h or w",
        (s) => {
          s.ropeSections = Uint8Array.of(0, 1, 2, 3, 0, 1, 2, 0);
        },
        /ropeSections\[3\] is 3, expected 0 \(t\), 1 \(h\) or 2 \(w\)/,
      ],
      [
        "a rotary section table that is not a Uint8Array",
        (s) => {
          s.ropeSections = [0, 1] as unknown as Uint8Array;
        },
        /ropeSections must be a Uint8Array/,
      ],
    ];
    for (const [what, edit, message] of cases) {
      const spec = good();
      edit(spec);
      const error = (() => {
        try {
          native.createNativeModel(spec).dispose();
        } catch (e) {
          return e;
        }
        return undefined;
      })();
      expect(error, what).toBeInstanceOf(native.NativeArgumentError);
      expect((error as Error).message, what).toMatch(message);
    }
  });

  it("both step backends implement one contract: same logits and hidden rows, bit for bit", async () => {
    const { weights } = await tinyWithDrafter();
    const options = { numerics: "llama" as const, flashAttention: true, maxBatchTokens: 16 };
    const make = async (kind: "spec" | "native"): Promise<{ backend: StepBackend; kv: PagedKvCache; states: GdnStatePool }> => {
      const { kv, states } = storage(weights);
      if (kind === "native") return { backend: NativeStep.create(native, weights, kv, states, options), kv, states };
      // the specification's matmuls on the native kernels, as in native-step.test.ts: the step is compared, not the kernels
      const providers = [...(await createNativeMatmulProviders("llama", undefined, [])), ...typescriptProviders("llama", [])];
      const selection = selectProviders(weights, providers, "llama");
      const forward = new Qwen35Forward(weights, kv, states, selection.byWeight, "llama", quantDequantizeRow, 16, true);
      return { backend: new SpecStepBackend(forward, { flashAttention: true, bf16Twin: false }), kv, states };
    };
    const results = [];
    for (const kind of ["spec", "native"] as const) {
      const { backend, kv, states } = await make(kind);
      const a = [kv.pool.allocate()];
      const b = [kv.pool.allocate()];
      const entries: StepEntry[] = [
        { tokens: [5, 17, 3], startPos: 0, blockTable: a, stateSlot: states.allocate(), logits: "all", hidden: true },
        { tokens: [9], startPos: 0, blockTable: b, stateSlot: states.allocate(), logits: "last" },
      ];
      const logits = Float32Array.from(await backend.forward(entries));
      results.push({ logits, hidden: Float32Array.from(backend.hiddenRows), offThread: backend.offThread, step: backend.labels.step });
      // image rows that do not fit their chunk: the same typed error from both, before any work
      const misfit: StepEntry = {
        tokens: [5, -1, -1],
        startPos: 3,
        blockTable: a,
        stateSlot: entries[0]!.stateSlot,
        logits: "last",
        embeddings: { rows: [2, 1], data: new Float32Array(2 * weights.config.embeddingLength) },
      };
      const refusal = await backend.forward([misfit]).then(
        () => undefined,
        (error: unknown) => error,
      );
      expect(EngineError.isInstance(refusal), kind).toBe(true);
      expect((refusal as EngineError).field, kind).toBe("entries[0].embeddings.rows");
      expect((refusal as Error).message, kind).toMatch(/must ascend \(\[0\] = 2, \[1\] = 1\)/);
      backend.dispose();
    }
    const [spec, nat] = results;
    expect(spec!.logits.length).toBe(4 * weights.vocab);
    expect(nat!.logits).toEqual(spec!.logits);
    expect(nat!.hidden).toEqual(spec!.hidden);
    expect([spec!.offThread, nat!.offThread]).toEqual([false, true]);
    expect(spec!.step).toBe("ts-forward");
    expect(nat!.step).toMatch(/^native-step-/);
  });
});
