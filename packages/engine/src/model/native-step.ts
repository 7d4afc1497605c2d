/**
 * The native step: the whole qwen35 forward in @keepquant/tt-native, one async call per scheduler
 * step, run on the native thread pool off the JS thread. The TypeScript forward (forward.ts) is its
 * specification: the same ops in the same arithmetic order, bit for bit (tests hold it to that).
 *
 * The native model borrows everything: the weights (views of the memory-mapped GGUF file), the KV
 * and GDN state planes of the engine's pools (natively allocated), and owns only its scratch.
 */
import type { PagedKvCache } from "../kv/paged-kv.js";
import type { GdnStatePool } from "../kv/state-pool.js";
import { keptRows, type DrafterEntry, type StepEntry } from "./forward.js";
import type { Numerics } from "./matmul.js";
import type { DrafterWeights, ModelWeights, PackedMatrix } from "./weights.js";

type TtNative = typeof import("@keepquant/tt-native");
type NativeModelSpec = import("@keepquant/tt-native").NativeModelSpec;
type NativeModelHandle = import("@keepquant/tt-native").NativeModelHandle;
type NativeModelMatrix = import("@keepquant/tt-native").NativeModelMatrix;
type NativeModelDrafter = import("@keepquant/tt-native").NativeModelDrafter;

function matrix(w: PackedMatrix): NativeModelMatrix {
  return { type: w.type, rows: w.rows, cols: w.cols, rowBytes: w.rowBytes, data: w.data };
}

/** Rows of each entry that need logits (the same rule as forward.ts). */
function logitRows(entry: StepEntry): readonly number[] {
  if (entry.logitRows) return entry.logitRows;
  const n = entry.tokens.length;
  if (entry.logits === "all") return Array.from({ length: n }, (_, i) => i);
  if (entry.logits === "last") return [n - 1];
  return [];
}

export interface NativeStepOptions {
  numerics: Exclude<Numerics, "exact">;
  flashAttention: boolean;
  maxBatchTokens: number;
  /** Where StepEntry.snapshotRow copies a slot's GDN state (speculative decoding). */
  snapshots?: GdnStatePool | undefined;
}

export class NativeStep {
  private descriptor = new Int32Array(256);
  private logits = new Float32Array(0);
  private disposed = false;

  private hidden = new Float32Array(0);
  private hiddenCount = 0;

  private constructor(
    private readonly model: NativeModelHandle,
    private readonly vocab: number,
    private readonly embd: number,
    /** logits per row of a drafter step: the drafter head's rows (the vocabulary or a prefix of it) */
    private readonly draftVocab: number,
  ) {}

  /** Builds the native model over `weights` and the pools' storage; throws NativeArgumentError on a bad spec. */
  static create(native: TtNative, weights: ModelWeights, kv: PagedKvCache, states: GdnStatePool, options: NativeStepOptions): NativeStep {
    const c = weights.config;
    const libm = native.nativeLibm();
    let kvIndex = 0;
    let stateIndex = 0;
    const spec: NativeModelSpec = {
      shape: {
        nLayer: c.nLayer,
        nEmbd: c.embeddingLength,
        nFf: c.feedForwardLength,
        nHead: c.headCount,
        nHeadKv: c.headCountKv,
        headDim: c.headDim,
        nRot: c.ropeDimensionCount,
        convKernel: c.ssmConvKernel,
        ssmStateSize: c.ssmStateSize,
        ssmGroupCount: c.ssmGroupCount,
        ssmTimeStepRank: c.ssmTimeStepRank,
        ssmInnerSize: c.ssmInnerSize,
        nVocab: weights.vocab,
        eps: Math.fround(c.rmsEps),
        ropeThetaScale: libm.powf(Math.fround(c.ropeFreqBase), Math.fround(-2 / c.ropeDimensionCount)),
        recurrent: c.layerKinds.map((kind) => kind === "gdn"),
      },
      numerics: options.numerics,
      flashAttention: options.flashAttention,
      maxBatchTokens: options.maxBatchTokens,
      tokenEmbd: matrix(weights.tokenEmbd),
      tokenEmbdTwin: weights.tokenEmbdTwin,
      outputNorm: weights.outputNorm,
      output: matrix(weights.output),
      layers: weights.layers.map((layer) => {
        const common = {
          attnNorm: layer.attnNorm,
          postAttnNorm: layer.postAttnNorm,
          ffnGate: matrix(layer.ffnGate),
          ffnUp: matrix(layer.ffnUp),
          ffnDown: matrix(layer.ffnDown),
        };
        if (layer.kind === "attention") {
          return {
            ...common,
            recurrent: false,
            cacheIndex: kvIndex++,
            q: matrix(layer.q),
            k: matrix(layer.k),
            v: matrix(layer.v),
            o: matrix(layer.o),
            qNorm: layer.qNorm,
            kNorm: layer.kNorm,
          };
        }
        return {
          ...common,
          recurrent: true,
          cacheIndex: stateIndex++,
          qkv: matrix(layer.qkv),
          gate: matrix(layer.gate),
          beta: matrix(layer.beta),
          alpha: matrix(layer.alpha),
          out: matrix(layer.out),
          conv: layer.conv,
          dtBias: layer.dtBias,
          a: layer.a,
          norm: layer.norm,
        };
      }),
      // the drafter runs when its weights are bound and the cache has its KV plane after the trunk's
      ...(weights.drafter && kv.numLayers === kvIndex + 1 ? { drafter: drafterSpec(weights.drafter, kvIndex) } : {}),
      kv: { f16: kv.kvType === "f16", blockSize: kv.blockSize, numBlocks: kv.numBlocks, k: kv.k, v: kv.v },
      states: { numSlots: states.numSlots, conv: states.conv, ssm: states.ssm },
      ...(options.snapshots
        ? { snapshots: { numSlots: options.snapshots.numSlots, conv: options.snapshots.conv, ssm: options.snapshots.ssm } }
        : {}),
    };
    return new NativeStep(
      native.createNativeModel(spec),
      weights.output.rows,
      c.embeddingLength,
      weights.drafter?.head.rows ?? weights.output.rows,
    );
  }

  /** Bytes of the native scratch. */
  get scratchBytes(): number {
    return this.disposed ? 0 : this.model.info().scratchBytes;
  }

  /**
   * Runs one step off the JS thread. Resolves with logits `[nOut, vocab]` for the requested rows
   * (entry order, then row order); the view is valid until the next call. The pools' planes must
   * not be written until it settles.
   */
  async forward(entries: readonly StepEntry[]): Promise<Float32Array> {
    const nOut = this.encode(entries, 0);
    if (nOut < 0) return new Float32Array(0);
    const logits = this.logitsView(nOut);
    await this.model.step(this.descriptor.subarray(0, this.descriptorLength), logits, this.hiddenView(entries));
    return logits;
  }

  /** The same step on the calling thread (tools and tests). */
  forwardSync(entries: readonly StepEntry[]): Float32Array {
    const nOut = this.encode(entries, 0);
    if (nOut < 0) return new Float32Array(0);
    const logits = this.logitsView(nOut);
    this.model.stepSync(this.descriptor.subarray(0, this.descriptorLength), logits, this.hiddenView(entries));
    return logits;
  }

  /**
   * One step of the MTP drafter block (forward.ts `draft`): `hiddenIn` [rows, D] pairs with the
   * rows. Resolves with the logits of the logit rows (`[nOut, drafter head rows]`); `hiddenRows`
   * then holds their hidden states.
   */
  async draft(entries: readonly DrafterEntry[], hiddenIn: Float32Array): Promise<Float32Array> {
    const asStep = entries.map((e): StepEntry => ({ ...e, stateSlot: -1, logits: "none" }));
    const nOut = this.encode(asStep, 1);
    if (nOut < 0) return new Float32Array(0);
    const logits = this.logitsView(nOut, this.draftVocab);
    await this.model.step(this.descriptor.subarray(0, this.descriptorLength), logits, this.hiddenBuffer(nOut), hiddenIn);
    return logits;
  }

  /** The drafter step on the calling thread (tools and tests). */
  draftSync(entries: readonly DrafterEntry[], hiddenIn: Float32Array): Float32Array {
    const asStep = entries.map((e): StepEntry => ({ ...e, stateSlot: -1, logits: "none" }));
    const nOut = this.encode(asStep, 1);
    if (nOut < 0) return new Float32Array(0);
    const logits = this.logitsView(nOut, this.draftVocab);
    this.model.stepSync(this.descriptor.subarray(0, this.descriptorLength), logits, this.hiddenBuffer(nOut), hiddenIn);
    return logits;
  }

  /**
   * The post-norm hidden rows of the last step (forward.ts `hiddenRows`): every row of the entries
   * with `hidden` and the logit rows of the others; for a drafter step its logit rows. Valid until
   * the next step.
   */
  get hiddenRows(): Float32Array {
    return this.hidden.subarray(0, this.hiddenCount * this.embd);
  }

  private hiddenView(entries: readonly StepEntry[]): Float32Array {
    let rows = 0;
    for (const e of entries) rows += keptRows(e).length;
    return this.hiddenBuffer(rows);
  }

  private hiddenBuffer(rows: number): Float32Array {
    const need = rows * this.embd;
    if (this.hidden.length < need) this.hidden = new Float32Array(Math.max(need, 2 * this.hidden.length));
    this.hiddenCount = rows;
    return this.hidden.subarray(0, need);
  }

  /** Test hook of the async contract (see NativeModelHandle.holdNextStep). */
  holdNextStep(): void {
    this.model.holdNextStep();
  }

  releaseHold(): void {
    this.model.releaseHold();
  }

  /** What the last held step saw: "released" when the JS thread released it while it was in flight. */
  get lastHold(): string {
    return this.model.info().lastHold;
  }

  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    this.model.dispose();
  }

  private descriptorLength = 0;

  /** Writes the step descriptor (kind 0 trunk, 1 drafter); returns the number of logit rows, or -1 for an empty step. */
  private encode(entries: readonly StepEntry[], kind: 0 | 1): number {
    let length = 2;
    let tokens = 0;
    const rows = entries.map(logitRows);
    entries.forEach((e, i) => {
      length += 7 + e.tokens.length + rows[i]!.length + e.blockTable.length;
      tokens += e.tokens.length;
    });
    this.hiddenCount = 0;
    if (tokens === 0) return -1;
    if (this.descriptor.length < length) this.descriptor = new Int32Array(Math.max(length, 2 * this.descriptor.length));
    const d = this.descriptor;
    let at = 0;
    let nOut = 0;
    d[at++] = kind;
    d[at++] = entries.length;
    entries.forEach((e, i) => {
      const selected = rows[i]!;
      d[at++] = e.tokens.length;
      d[at++] = e.startPos;
      d[at++] = e.stateSlot;
      d[at++] = selected.length;
      d[at++] = e.blockTable.length;
      d[at++] = e.hidden ? 1 : 0;
      d[at++] = e.snapshotRow ?? -1;
      for (let t = 0; t < e.tokens.length; t++) d[at++] = e.tokens[t]!;
      for (const r of selected) d[at++] = r;
      for (const b of e.blockTable) d[at++] = b;
      nOut += selected.length;
    });
    this.descriptorLength = at;
    return nOut;
  }

  private logitsView(nOut: number, width = this.vocab): Float32Array {
    const need = nOut * width;
    if (this.logits.length < need) this.logits = new Float32Array(Math.max(need, 2 * this.logits.length));
    return this.logits.subarray(0, need);
  }
}

function drafterSpec(d: DrafterWeights, cacheIndex: number): NativeModelDrafter {
  return {
    cacheIndex,
    attnNorm: d.attnNorm,
    postAttnNorm: d.postAttnNorm,
    q: matrix(d.q),
    k: matrix(d.k),
    v: matrix(d.v),
    o: matrix(d.o),
    qNorm: d.qNorm,
    kNorm: d.kNorm,
    ffnGate: matrix(d.ffnGate),
    ffnUp: matrix(d.ffnUp),
    ffnDown: matrix(d.ffnDown),
    ehProj: matrix(d.ehProj),
    enorm: d.enorm,
    hnorm: d.hnorm,
    headNorm: d.headNorm,
    ...(d.embedTokens ? { embedTokens: matrix(d.embedTokens) } : {}),
    head: matrix(d.head),
  };
}
