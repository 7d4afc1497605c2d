/**
 * qwen35moe against llama.cpp (the oracle build, llama_model_qwen35moe, pinned to the haswell CPU
 * variant): synthetic MoE fixtures made by our synthesizer and quantized by llama.cpp's own quantizer
 * to Q4_K_M. Their prompt logits equal llama.cpp's bit for bit at every position; greedy decoding in
 * one-token steps picks, at every step, the argmax of llama.cpp's batched pass over the same sequence
 * (STRICT; llama.cpp's own one-token steps can disagree with its batched pass on these files, see
 * docs/usage/parity.md, "qwen35moe"); MTP speculation on the MoE drafter block gives the plain greedy
 * tokens; a fixture whose router scores tie (equal router rows) checks ggml_argsort's order of equal
 * values. The engine runs the native step's MoE FFN; the TypeScript forward is checked against it and,
 * on the tie fixture, against llama.cpp.
 */
import fs from "node:fs";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fixtureTokenizerFromJson, parityModelSpec } from "@keepquant/fixtures";
import { oracleAndNativeSkipReason, REPO_ROOT } from "@keepquant/fixtures/oracle";
import { GgmlType, readGguf, synthesizeQwen35, writeGguf, type Qwen35Spec } from "@keepquant/gguf";
import { decodeF32, runOracle } from "@keepquant/oracle";
import * as native from "@keepquant/tt-native";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Engine } from "../engine.js";
import { pinNativeLibm } from "../model/test-support.js";
import { expectSameBits } from "./test-support.js";

const reason = oracleAndNativeSkipReason(native);

/** The MoE fixtures: several expert counts, top-k 1 and > 1, tied and untied heads, with and without the MTP block. */
const MOE_FIXTURES: { name: string; base: string; moe: NonNullable<Qwen35Spec["moe"]>; routerTies?: number }[] = [
  { name: "tied-4l-e8k2", base: "tied-4l", moe: { experts: 8, used: 2, ffnExp: 256, ffnShared: 256 } },
  { name: "tied-4l-e4k1", base: "tied-4l", moe: { experts: 4, used: 1, ffnExp: 256, ffnShared: 512 } },
  { name: "untied-mtp-6l-e16k4", base: "untied-mtp-6l", moe: { experts: 16, used: 4, ffnExp: 256, ffnShared: 256 } },
  // router rows equal in groups of 3 (experts 3j, 3j + 1, 3j + 2): every token's scores tie inside the
  // top 4 and across its boundary, and with 32 > 16 experts ggml's std::sort is an introsort, whose
  // order of equal values is not the lower index first
  { name: "tied-4l-e32k4-ties", base: "tied-4l", moe: { experts: 32, used: 4, ffnExp: 256, ffnShared: 256 }, routerTies: 3 },
];

/** Copies router row 3j to rows 3j + 1 .. 3j + group - 1 of every layer (an F32 file's ffn_gate_inp). */
async function tieRouterRows(bytes: Uint8Array, group: number): Promise<void> {
  const file = await readGguf(bytes);
  for (const t of file.tensors) {
    if (!t.name.endsWith(".ffn_gate_inp.weight")) continue;
    expect(t.type).toBe(GgmlType.F32);
    const [cols, rows] = t.ne as [number, number];
    const view = new Float32Array(bytes.buffer, bytes.byteOffset + t.offset, cols * rows);
    for (let r = 0; r < rows; r++) if (r % group !== 0) view.copyWithin(r * cols, (r - (r % group)) * cols, (r - (r % group) + 1) * cols);
  }
}

const dir = mkdtempSync(path.join(tmpdir(), "kq-moe-oracle-"));
const files = new Map<string, string>();

/** The split file's bytes with each layer's ffn_gate_exps and ffn_up_exps merged into ffn_gate_up_exps: per expert, its gate rows then its up rows. */
async function mergeGateUp(bytes: Uint8Array): Promise<Uint8Array> {
  const file = await readGguf(bytes);
  const data = (t: (typeof file.tensors)[number]) => bytes.subarray(t.offset, t.offset + t.byteLength);
  const byName = new Map(file.tensors.map((t) => [t.name, t]));
  const tensors: { name: string; type: GgmlType; ne: number[]; data: Uint8Array }[] = [];
  for (const t of file.tensors) {
    if (t.name.endsWith(".ffn_up_exps.weight")) continue;
    if (t.name.endsWith(".ffn_gate_exps.weight")) expect(byName.get(t.name.replace("ffn_gate_exps", "ffn_up_exps"))!.type).toBe(t.type);
    if (!t.name.endsWith(".ffn_gate_exps.weight")) {
      tensors.push({ name: t.name, type: t.type, ne: t.ne, data: data(t) });
      continue;
    }
    const up = byName.get(t.name.replace("ffn_gate_exps", "ffn_up_exps"))!;
    const [cols, rows, experts] = t.ne as [number, number, number];
    const expertBytes = t.byteLength / experts;
    const merged = new Uint8Array(2 * t.byteLength);
    for (let e = 0; e < experts; e++) {
      merged.set(data(t).subarray(e * expertBytes, (e + 1) * expertBytes), 2 * e * expertBytes);
      merged.set(data(up).subarray(e * expertBytes, (e + 1) * expertBytes), (2 * e + 1) * expertBytes);
    }
    tensors.push({ name: t.name.replace("ffn_gate_exps", "ffn_gate_up_exps"), type: t.type, ne: [cols, 2 * rows, experts], data: merged });
  }
  return writeGguf({ metadata: [...file.metadata.values()], tensors });
}

describe.skipIf(reason !== undefined)(`qwen35moe against llama.cpp${reason ? ` (skipped: ${reason})` : ""}`, () => {
  // the TypeScript forward computes with the C library's libm here, as llama.cpp does
  pinNativeLibm();
  beforeAll(async () => {
    const tokenizer = fixtureTokenizerFromJson(
      JSON.parse(fs.readFileSync(path.join(REPO_ROOT, "goldens", "tokenizer", "vocab.json"), "utf8")),
    );
    for (const f of MOE_FIXTURES) {
      const f32 = path.join(dir, `${f.name}-f32.gguf`);
      const q4 = path.join(dir, `${f.name}-q4_k_m.gguf`);
      const bytes = synthesizeQwen35({ ...parityModelSpec(f.base, tokenizer), moe: f.moe, name: `keepquant-moe-${f.name}` });
      if (f.routerTies) await tieRouterRows(bytes, f.routerTies);
      writeFileSync(f32, bytes);
      await runOracle({ kind: "quantize", input: f32, output: q4, ftype: "Q4_K_M" }, { timeoutMs: 120_000 });
      files.set(f.name, q4);
    }
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  /** A `length`-token prompt's logits at every position, bit for bit llama.cpp's (flash attention, f16 K/V). */
  async function expectLlamaPromptLogits(engine: Engine, file: string, length: number): Promise<void> {
    const ids = Array.from({ length }, (_, i) => (i * 7919 + 13) % engine.weights.vocab);
    const ours = await engine.evaluate(ids);
    const oracle = await runOracle({ kind: "logits", model: file, sequences: [ids], flashAttention: true }, { timeoutMs: 120_000 });
    const theirs = oracle.logits[0]!.map(decodeF32);
    expectSameBits(ours, theirs, (p, at) => `position ${p}, logit ${at}: ${ours[p]![at]} vs llama.cpp's ${theirs[p]![at]}`);
  }

  for (const f of MOE_FIXTURES) {
    it(`${f.name} (Q4_K_M): a 40-token prompt's logits at every position, bit for bit (flash attention, f16 K/V)`, async () => {
      const file = files.get(f.name)!;
      const engine = await Engine.load(file, { maxBatchTokens: 64 });
      try {
        expect(engine.stats().providers.step).toMatch(/^native-step-/);
        await expectLlamaPromptLogits(engine, file, 40);
      } finally {
        engine.dispose();
      }
    });

    it(`${f.name} (Q4_K_M): 16 greedy tokens (one-token steps) are llama.cpp's teacher-forced argmax at every step (STRICT)`, async () => {
      const file = files.get(f.name)!;
      // the oracle's greedy and logits jobs run without flash attention, f32 K/V: so does the engine here
      const engine = await Engine.load(file, { flashAttention: false, kvType: "f32" });
      try {
        const prompt = [13, 7932, 3755, 1582, 3505, 1432, 3455].map((t) => t % engine.weights.vocab);
        const mine = (await engine.generateToEnd(prompt, { maxTokens: 16, stopAtEog: false })).tokens;
        expect(mine).toHaveLength(16);
        // llama.cpp's batched pass over our own sequence: its argmax at each step is the token it would pick there
        const sequence = [...prompt, ...mine.slice(0, -1)];
        const oracle = await runOracle({ kind: "logits", model: file, sequences: [sequence] }, { timeoutMs: 120_000 });
        const forced = oracle.logits[0]!.slice(prompt.length - 1).map((text) => {
          const l = decodeF32(text);
          let best = 0;
          for (let i = 1; i < l.length; i++) if (l[i]! > l[best]!) best = i;
          return best;
        });
        expect(mine).toEqual(forced);
      } finally {
        engine.dispose();
      }
    });
  }

  it("16 greedy tokens equal llama.cpp's own greedy run (its one-token steps, repacking off) on every MoE fixture, 3 prompts each", async () => {
    // llama.cpp's one-row steps score the F32 router with ggml_vec_dot_f32 (llamafile_sgemm declines n < 2),
    // so do ours: without that, the 16-expert fixture's steps follow llama.cpp's batched pass instead
    for (const name of MOE_FIXTURES.map((f) => f.name)) {
      const file = files.get(name)!;
      const prompts = [[13, 3836, 3755, 1582, 3505, 1432, 3455], [5, 99, 1234], [42]];
      const oracle = await runOracle(
        { kind: "greedy", model: file, prompts, nTokens: 16, kvType: "f32", repack: false, threads: 1 },
        { timeoutMs: 120_000 },
      );
      const engine = await Engine.load(file, { flashAttention: false, kvType: "f32" });
      try {
        for (const [p, prompt] of prompts.entries()) {
          const mine = (await engine.generateToEnd(prompt, { maxTokens: 16, stopAtEog: false })).tokens;
          expect(mine, `${name} prompt ${p}`).toEqual(oracle.tokens[p]);
        }
      } finally {
        engine.dispose();
      }
    }
  });

  it("tied router scores (tied-4l-e32k4-ties): the TypeScript forward's top-k order is ggml_argsort's, its logits llama.cpp's bit for bit", async () => {
    const file = files.get("tied-4l-e32k4-ties")!;
    const engine = await Engine.load(file, { nativeStep: false, maxBatchTokens: 64 });
    try {
      expect(engine.stats().providers.step).toBe("ts-forward");
      await expectLlamaPromptLogits(engine, file, 24);
    } finally {
      engine.dispose();
    }
  });

  it("a merged ffn_gate_up_exps file (per expert: gate rows, then up rows) is read as llama.cpp reads it: its Q4_K_M logits are the split file's, bit for bit, on llama.cpp, the native step and the TypeScript forward", async () => {
    const split = files.get("tied-4l-e8k2")!;
    const merged = path.join(dir, "tied-4l-e8k2-merged-q4_k_m.gguf");
    const bytes = new Uint8Array(fs.readFileSync(split));
    writeFileSync(merged, await mergeGateUp(bytes));
    expect((await readGguf(merged)).tensors.some((t) => t.name === "blk.0.ffn_gate_up_exps.weight")).toBe(true);
    const ids = Array.from({ length: 12 }, (_, i) => (i * 7919 + 13) % 4096);
    const logits = async (model: string) =>
      (await runOracle({ kind: "logits", model, sequences: [ids], flashAttention: true }, { timeoutMs: 120_000 })).logits[0]!.map(
        decodeF32,
      );
    const reference = await logits(split);
    const same = (label: string, a: Float32Array[], b: Float32Array[]) => {
      for (let p = 0; p < ids.length; p++) {
        const x = new Uint32Array(a[p]!.buffer, a[p]!.byteOffset, a[p]!.length);
        const y = new Uint32Array(b[p]!.buffer, b[p]!.byteOffset, b[p]!.length);
        const at = x.findIndex((bits, i) => bits !== y[i]);
        if (at >= 0) expect.fail(`${label}: position ${p}, logit ${at}: ${a[p]![at]} vs ${b[p]![at]}`);
      }
    };
    same("llama.cpp merged vs split", await logits(merged), reference);
    for (const nativeStep of [true, false]) {
      const engine = await Engine.load(merged, { nativeStep, maxBatchTokens: 64 });
      try {
        same(`keepquant (${engine.stats().providers.step}) merged vs llama.cpp`, await engine.evaluate(ids), reference);
      } finally {
        engine.dispose();
      }
    }
  });

  it("the native step's MoE FFN is bit-identical to the TypeScript forward at every ISA level, 1 and 2 threads, llama and bf16 numerics", async () => {
    const file = files.get("untied-mtp-6l-e16k4")!;
    const ids = Array.from({ length: 33 }, (_, i) => (i * 104_729 + 7) % 4096);
    const before = native.getNativeThreads();
    try {
      for (const numerics of ["llama", "bf16"] as const) {
        for (const isa of native.availableNativeIsas()) {
          native.setNativeIsa(isa);
          // the same (native) matmul kernels of this level on both sides: the step is compared, not the kernels
          const spec = await Engine.load(file, { numerics, nativeStep: false, exactKernels: false, maxBatchTokens: 64 });
          expect(spec.stats().providers.step).toBe("ts-forward");
          const expected = await spec.evaluate(ids);
          spec.dispose();
          for (const threads of [1, 2]) {
            native.setNativeThreads(threads);
            const engine = await Engine.load(file, { numerics, exactKernels: false, maxBatchTokens: 64 });
            try {
              expect(engine.stats().providers.step, `${numerics} ${isa} ${threads}`).toMatch(/^native-step-/);
              const actual = await engine.evaluate(ids);
              expectSameBits(actual, expected, (p, at) => `${numerics} ${isa} ${threads} threads: position ${p}, logit ${at} differs`);
            } finally {
              engine.dispose();
            }
          }
        }
      }
    } finally {
      native.setNativeIsa("best");
      native.setNativeThreads(before);
    }
  });

  it("MTP on the MoE drafter block (untied-mtp-6l-e16k4): k = 1, 2, 4, alone and batched, the plain greedy tokens", async () => {
    const file = files.get("untied-mtp-6l-e16k4")!;
    const prompts = [
      [5, 17, 230, 4000, 12],
      [901, 33, 7],
    ];
    const run = async (speculative: { method: "mtp"; draftTokens: number } | undefined, batched: boolean) => {
      const engine = await Engine.load(file, { maxSequences: 2, kvCacheTokens: 512, ...(speculative ? { speculative } : {}) });
      try {
        const one = (p: number[]) => engine.generateToEnd(p, { maxTokens: 12, stopAtEog: false }).then((r) => r.tokens);
        if (batched) return await Promise.all(prompts.map(one));
        const out: number[][] = [];
        for (const p of prompts) out.push(await one(p));
        return out;
      } finally {
        engine.dispose();
      }
    };
    const plain = await run(undefined, false);
    for (const draftTokens of [1, 2, 4]) {
      for (const batched of [false, true]) {
        expect(await run({ method: "mtp", draftTokens }, batched), `k = ${draftTokens}${batched ? ", batched" : ""}`).toEqual(plain);
      }
    }
  });
});
