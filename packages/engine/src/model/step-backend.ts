/**
 * The step contract: what the engine needs from whatever computes a scheduler step. The TypeScript
 * specification (`Qwen35Forward`, through `SpecStepBackend`) and the native model (`NativeStep`)
 * implement it; the engine holds one and never asks which. A TT arm would be a third.
 */
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
