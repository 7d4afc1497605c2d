/**
 * The step contract: what the engine needs from whatever computes a scheduler step. The TypeScript
 * specification (`Qwen35Forward`, through `SpecStepBackend`) and the native model (`NativeStep`)
 * implement it; the engine holds one and never asks which. A TT arm would be a third.
 */
import { EngineOptionError } from "../errors.js";
import type { DrafterEntry, Qwen35Forward, StepEntry } from "./forward.js";

/** Provider labels of the ops a step runs (merged into `engine.stats().providers`). */
export interface StepLabels {
  step: string;
  embedding: string;
  attention: string;
  gdn: string;
  norms: string;
  /** greedy sampling's argmax over a logits row */
  greedy: string;
}

export interface StepBackend {
  /** Labels of the ops this backend runs, e.g. `step: "native-step-avx512"`. */
  readonly labels: StepLabels;
  /**
   * True when a step runs off the JS thread (the event loop turns while it runs); false when it
   * runs on it, so the engine yields to the event loop between steps.
   */
  readonly offThread: boolean;
  /**
   * Greedy sampling's argmax over a logits row, where the backend has a faster one than the samplers' scan (the
   * same index: the lowest of the largest value, NaN never taken); undefined: the scan.
   */
  readonly argmax?: (logits: Float32Array) => number;
  /** Logits `[logit rows, vocab]` of one step (entry order, then row order); valid until the next step. */
  forward(entries: readonly StepEntry[]): Promise<Float32Array>;
  /** One MTP drafter step: `hiddenIn` [rows, D] pairs with the rows; logits `[logit rows, drafter head rows]`. */
  draft(entries: readonly DrafterEntry[], hiddenIn: Float32Array): Promise<Float32Array>;
  /** The post-norm hidden rows of the last step (see Qwen35Forward.hiddenRows); valid until the next step. */
  readonly hiddenRows: Float32Array;
  /** Bytes of the backend's own scratch. */
  readonly scratchBytes: number;
  dispose(): void;
}

/**
 * Every entry's embedding rows and rotary positions fit its chunk: rows ascending inside it, `embd`
 * values per row, 3 positions per row. Both backends check this before any work; a misfit is an
 * EngineOptionError (ENGINE_BAD_REQUEST) naming `entries[i].<field>`.
 */
export function checkStepInputs(entries: readonly StepEntry[], embd: number): void {
  entries.forEach((e, index) => {
    const bad = (field: string, detail: string): never => {
      throw new EngineOptionError("ENGINE_BAD_REQUEST", `step entry ${index}: ${field} ${detail}`, { field: `entries[${index}].${field}` });
    };
    const n = e.tokens.length;
    if (e.ropePositions !== undefined) {
      if (!(e.ropePositions instanceof Int32Array)) bad("ropePositions", "must be an Int32Array");
      if (e.ropePositions.length !== 3 * n) bad("ropePositions", `has ${e.ropePositions.length} values, expected 3 per row (${3 * n})`);
    }
    const media = e.embeddings;
    if (media === undefined) return;
    if (!(media.data instanceof Float32Array)) bad("embeddings.data", "must be a Float32Array");
    media.rows.forEach((row, k) => {
      if (!Number.isInteger(row) || row < 0 || row >= n) bad("embeddings.rows", `[${k}] = ${row} is not a row of the chunk [0, ${n})`);
      if (k > 0 && row <= media.rows[k - 1]!) bad("embeddings.rows", `must ascend ([${k - 1}] = ${media.rows[k - 1]}, [${k}] = ${row})`);
    });
    if (media.data.length !== media.rows.length * embd)
      bad("embeddings.data", `has ${media.data.length} values, expected ${media.rows.length} rows x ${embd}`);
  });
}

/** The TypeScript specification as a step backend (runs on the JS thread). */
export class SpecStepBackend implements StepBackend {
  readonly offThread = false;
  readonly labels: StepLabels;

  constructor(
    /** the specification itself (tools reach it to tap activations) */
    readonly spec: Qwen35Forward,
    options: { flashAttention: boolean; bf16Twin: boolean },
  ) {
    this.labels = {
      step: "ts-forward",
      embedding: options.bf16Twin ? "ts-bf16-twin-gather" : "ts-exact-row-decode",
      attention: options.flashAttention ? "ts-flash-attn-llama" : "ts-attn-llama-no-fa",
      gdn: "ts-fused-gdn",
      norms: "ts-f32",
      greedy: "ts-scan",
    };
  }

  async forward(entries: readonly StepEntry[]): Promise<Float32Array> {
    checkStepInputs(entries, this.spec.weights.config.embeddingLength);
    return this.spec.forward(entries);
  }

  async draft(entries: readonly DrafterEntry[], hiddenIn: Float32Array): Promise<Float32Array> {
    return this.spec.draft(entries, hiddenIn);
  }

  get hiddenRows(): Float32Array {
    return this.spec.hiddenRows;
  }

  get scratchBytes(): number {
    return this.spec.scratchBytes;
  }

  dispose(): void {}
}
