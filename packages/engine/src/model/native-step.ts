/**
 * The native step: the whole qwen35 forward in @keepquant/tt-native, one async call per scheduler
 * step, run on the native thread pool off the JS thread. The TypeScript forward (forward.ts) is its
 * specification: the same ops in the same arithmetic order, bit for bit (tests hold it to that).
 *
 * The native model borrows everything: the weights (views of the memory-mapped GGUF file), the KV
 * and GDN state planes of the engine's pools (natively allocated), and owns only its scratch.
 */
import type { ModelDescription, TensorDescription } from "@keepquant/gguf";
import type { PagedKvCache } from "../kv/paged-kv.js";
import { modelDescription } from "./config.js";
import type { GdnStatePool } from "../kv/state-pool.js";
import { imropeSections, keptRows, type DrafterEntry, type StepEntry } from "./forward.js";
import type { Numerics } from "./matmul.js";
import type { TtNative } from "./native-module.js";
import { checkStepInputs, type StepBackend, type StepLabels } from "./step-backend.js";
import type { ModelWeights, PackedMatrix } from "./weights.js";

type NativeModelSpec = import("@keepquant/tt-native").NativeModelSpec;
type NativeModelHandle = import("@keepquant/tt-native").NativeModelHandle;
type NativeModelTensor = import("@keepquant/tt-native").NativeModelTensor;
type StepDescriptorEntry = import("@keepquant/tt-native").StepDescriptorEntry;

/** Rows of each entry that need logits (the same rule as forward.ts). */
function logitRows(entry: StepEntry): readonly number[] {
  if (entry.logitRows) return entry.logitRows;
  const n = entry.tokens.length;
  if (entry.logits === "all") return Array.from({ length: n }, (_, i) => i);
  if (entry.logits === "last") return [n - 1];
  return [];
}

/** One entry of the native model's tensor table: a bound weight under its description's slot and dims. */
function tableTensor(t: TensorDescription, value: PackedMatrix | Float32Array, dims: readonly string[] = t.dims): NativeModelTensor {
  const at = { slot: t.slot, layer: t.layer ?? -1, dims };
  if (!(value instanceof Float32Array)) {
    const groups = value.groups > 1 ? { groups: value.groups } : {};
    return { ...at, ...groups, type: value.type, rows: value.rows, cols: value.cols, rowBytes: value.rowBytes, data: value.data };
  }
  // an f32 vector: an F32 matrix of ne[1] rows of ne[0] (1 x n for a 1-D tensor)
  const cols = t.ne[0]!;
  return {
    ...at,
    type: 0, // GgmlType.F32
    rows: value.length / cols,
    cols,
    rowBytes: cols * 4,
    data: new Uint8Array(value.buffer, value.byteOffset, value.byteLength),
  };
}

/**
 * The native model's table for these weights: every tensor of the model description bound to the
 * weight object's field (the description's binding), the description's named dimensions as the
 * hyperparameters. The MTP block is included when `withDrafter`.
 */
function nativeTable(
  weights: ModelWeights,
  withDrafter: boolean,
  libm: TtNative["nativeLibm"] extends () => infer L ? L : never,
  d: ModelDescription,
): Pick<NativeModelSpec, "hparams" | "layers" | "tensors"> {
  const c = weights.config;
  const drafter = withDrafter ? weights.drafter : undefined;
  const tensors: NativeModelTensor[] = [];
  // a dotted field is a path into the bound object (`moe.router`)
  const fieldOf = (source: object, field: string): PackedMatrix | Float32Array | undefined =>
    field.split(".").reduce<unknown>((o, key) => (o as Record<string, unknown> | undefined)?.[key], source) as
      | PackedMatrix
      | Float32Array
      | undefined;
  const bindAll = (list: readonly TensorDescription[], source: object, dimsOf?: (t: TensorDescription) => readonly string[]) => {
    for (const t of list) {
      const value = fieldOf(source, t.field);
      if (value) tensors.push(tableTensor(t, value, dimsOf?.(t)));
    }
  };
  bindAll(d.global, weights);
  const layers = d.layers.filter((l) => l.role === "trunk" || drafter);
  for (const l of layers) {
    if (l.role === "trunk") bindAll(l.tensors, weights.layers[l.index]!);
    // the drafter's head may be a prefix of the shared head's rows (speculative.draftVocab)
    else bindAll(l.tensors, drafter!, (t) => (t.field === "head" ? ["nEmbd", "drafterVocab"] : t.dims));
  }
  return {
    hparams: {
      ...d.dims,
      drafterVocab: drafter?.head.rows ?? weights.vocab,
      eps: Math.fround(c.rmsEps),
      ropeThetaScale: libm.powf(Math.fround(c.ropeFreqBase), Math.fround(-2 / c.ropeDimensionCount)),
    },
    layers: layers.map((l) => ({ index: l.index, role: l.role, mixer: l.mixer, ffn: l.ffn, cacheIndex: l.cacheIndex })),
    tensors,
  };
}

/** The native model's spec: the table of `weights` (see nativeTable) and the pools' storage. */
export function nativeModelSpec(
  native: TtNative,
  weights: ModelWeights,
  kv: PagedKvCache,
  states: GdnStatePool,
  options: NativeStepOptions,
): NativeModelSpec {
  // the drafter runs when its weights are bound and the cache has its KV plane after the trunk's
  const description = modelDescription(weights);
  const withDrafter = weights.drafter !== undefined && kv.numLayers === description.attentionLayers + 1;
  return {
    ...nativeTable(weights, withDrafter, native.nativeLibm(), description),
    numerics: options.numerics,
    flashAttention: options.flashAttention,
    maxBatchTokens: options.maxBatchTokens,
    tokenEmbdTwin: weights.tokenEmbdTwin,
    // the section each rotated pair turns with (the specification's table: forward.ts)
    ropeSections: imropeSections(weights.config.ropeSections ?? [0, 0, 0, 0], description.dims.nRot / 2),
    kv: { f16: kv.kvType === "f16", blockSize: kv.blockSize, numBlocks: kv.numBlocks, k: kv.k, v: kv.v },
    states: { numSlots: states.numSlots, conv: states.conv, ssm: states.ssm },
    ...(options.snapshots
      ? { snapshots: { numSlots: options.snapshots.numSlots, conv: options.snapshots.conv, ssm: options.snapshots.ssm } }
      : {}),
  };
}

export interface NativeStepOptions {
  numerics: Exclude<Numerics, "exact">;
  flashAttention: boolean;
  maxBatchTokens: number;
  /** Where StepEntry.snapshotRow copies a slot's GDN state (speculative decoding). */
  snapshots?: GdnStatePool | undefined;
}

export class NativeStep implements StepBackend {
  readonly offThread = true;
  private descriptor = new Int32Array(256);
  private logits = new Float32Array(0);
  /** the embedding rows of the step being encoded, entry after entry ([rows, D]) */
  private embeddings = new Float32Array(0);
  private embeddingCount = 0;
  private disposed = false;

  private hidden = new Float32Array(0);
  private hiddenCount = 0;
  /** greedy sampling's argmax (tt-native's nativeArgmax: 0.012 ms against the scan's 0.27-0.41 ms on a 248,320-entry row) */
  readonly argmax = (logits: Float32Array): number => this.native.nativeArgmax(logits);

  private constructor(
    private readonly native: TtNative,
    private readonly model: NativeModelHandle,
    private readonly vocab: number,
    private readonly embd: number,
    /** logits per row of a drafter step: the drafter head's rows (the vocabulary or a prefix of it) */
    private readonly draftVocab: number,
    readonly labels: StepLabels,
  ) {}

  /** Builds the native model over `weights` and the pools' storage; throws NativeArgumentError on a bad spec. */
  static create(native: TtNative, weights: ModelWeights, kv: PagedKvCache, states: GdnStatePool, options: NativeStepOptions): NativeStep {
    const spec = nativeModelSpec(native, weights, kv, states, options);
    const name = `native-step-${native.getNativeIsa()}`;
    const labels: StepLabels = {
      step: name,
      embedding: weights.tokenEmbdTwin ? `${name}-bf16-twin-gather` : `${name}-exact-row-decode`,
      attention: `${name}-${options.flashAttention ? "flash-attn-llama" : "attn-llama-no-fa"}`,
      gdn: `${name}-fused-gdn`,
      norms: `${name}-f32`,
      greedy: `${name}-argmax`,
    };
    return new NativeStep(
      native,
      native.createNativeModel(spec),
      weights.output.rows,
      weights.config.embeddingLength,
      weights.drafter?.head.rows ?? weights.output.rows,
      labels,
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
    const nOut = this.encode(entries, "trunk");
    if (nOut < 0) return new Float32Array(0);
    const logits = this.logitsView(nOut);
    await this.model.step(
      this.descriptor.subarray(0, this.descriptorLength),
      logits,
      this.hiddenView(entries),
      undefined,
      this.embeddingsView(),
    );
    return logits;
  }

  /** The same step on the calling thread (tools and tests). */
  forwardSync(entries: readonly StepEntry[]): Float32Array {
    const nOut = this.encode(entries, "trunk");
    if (nOut < 0) return new Float32Array(0);
    const logits = this.logitsView(nOut);
    this.model.stepSync(
      this.descriptor.subarray(0, this.descriptorLength),
      logits,
      this.hiddenView(entries),
      undefined,
      this.embeddingsView(),
    );
    return logits;
  }

  /**
   * One step of the MTP drafter block (forward.ts `draft`): `hiddenIn` [rows, D] pairs with the
   * rows. Resolves with the logits of the logit rows (`[nOut, drafter head rows]`); `hiddenRows`
   * then holds their hidden states.
   */
  async draft(entries: readonly DrafterEntry[], hiddenIn: Float32Array): Promise<Float32Array> {
    const asStep = entries.map((e): StepEntry => ({ ...e, stateSlot: -1, logits: "none" }));
    const nOut = this.encode(asStep, "drafter");
    if (nOut < 0) return new Float32Array(0);
    const logits = this.logitsView(nOut, this.draftVocab);
    await this.model.step(this.descriptor.subarray(0, this.descriptorLength), logits, this.hiddenBuffer(nOut), hiddenIn);
    return logits;
  }

  /** The drafter step on the calling thread (tools and tests). */
  draftSync(entries: readonly DrafterEntry[], hiddenIn: Float32Array): Float32Array {
    const asStep = entries.map((e): StepEntry => ({ ...e, stateSlot: -1, logits: "none" }));
    const nOut = this.encode(asStep, "drafter");
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

  /**
   * Writes the step descriptor (src/step-descriptor.ts of tt-native) and gathers the entries'
   * embedding rows; returns the number of logit rows, or -1 for an empty step. Throws
   * EngineOptionError (ENGINE_BAD_REQUEST) for embedding rows or rotary positions that do not fit
   * their entry, before any native work.
   */
  private encode(entries: readonly StepEntry[], kind: "trunk" | "drafter"): number {
    let tokens = 0;
    let nOut = 0;
    let embeddingRows = 0;
    checkStepInputs(entries, this.embd);
    for (const e of entries) embeddingRows += e.embeddings?.rows.length ?? 0;
    this.embeddingCount = 0;
    if (embeddingRows > 0) {
      const D = this.embd;
      if (this.embeddings.length < embeddingRows * D)
        this.embeddings = new Float32Array(Math.max(embeddingRows * D, 2 * this.embeddings.length));
      for (const e of entries) {
        if (!e.embeddings || e.embeddings.rows.length === 0) continue;
        this.embeddings.set(e.embeddings.data, this.embeddingCount * D);
        this.embeddingCount += e.embeddings.rows.length;
      }
    }
    const described = entries.map((e): StepDescriptorEntry => {
      const rows = logitRows(e);
      tokens += e.tokens.length;
      nOut += rows.length;
      return {
        ...(e.ropePositions ? { ropePositions: e.ropePositions } : {}),
        ...(e.embeddings ? { embeddingRows: e.embeddings.rows } : {}),
        tokens: e.tokens,
        startPos: e.startPos,
        stateSlot: e.stateSlot,
        logitRows: rows,
        blockTable: e.blockTable,
        keepHidden: e.hidden === true,
        snapshotRow: e.snapshotRow ?? -1,
      };
    });
    this.hiddenCount = 0;
    if (tokens === 0) return -1;
    const length = this.native.stepDescriptorLength(described);
    if (this.descriptor.length < length) this.descriptor = new Int32Array(Math.max(length, 2 * this.descriptor.length));
    this.descriptorLength = this.native.encodeStepDescriptor(kind, described, this.descriptor);
    return nOut;
  }

  private embeddingsView(): Float32Array | undefined {
    return this.embeddingCount > 0 ? this.embeddings.subarray(0, this.embeddingCount * this.embd) : undefined;
  }

  private logitsView(nOut: number, width = this.vocab): Float32Array {
    const need = nOut * width;
    if (this.logits.length < need) this.logits = new Float32Array(Math.max(need, 2 * this.logits.length));
    return this.logits.subarray(0, need);
  }
}
