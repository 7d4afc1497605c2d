/**
 * What plugs into a generation: its grammar guide and its speculative decoding. A generation calls
 * them at fixed points of its life (docs/ARCHITECTURE.md, "The engine: a facade over generations"):
 *
 * - scheduling: `guide.blockedBy()` (the generation sits a step out while its guide waits on a grammar worker);
 * - before a step that samples: `guide.prepare(drafts, tokensLeft)` (the rules of the next token and after each draft);
 * - before sampling: `guide.apply(row, position)` masks the logits row;
 * - a step that carried drafts: `speculation.verify(...)`, which accepts tokens through the generation;
 * - acceptance: `guide.advance(token)` (a refusal is a bug), then `guide.done` (the document is complete) and, at a
 *   token or context limit, `guide.endsNext` (a forced close just completed it);
 * - drafting (after the step): each generation returns its drafter work, which the step loop hands to
 *   `speculation.draft` in one batch; drafts are checked with `guide.validDrafts` or masked through
 *   `guide.currentRule` between `checkpoint` and `restore`;
 * - the end (finished, aborted or failed): `guide.dispose()`.
 */
import type { GuideState, PositionRule } from "../constrain/index.js";
import type { DrafterWork, SpeculativeSequence } from "./speculative.js";

/** A generation's grammar guide: constrained decoding and the thinking budget (constrain's `DecodeGuide`). */
export interface GuidePlugin {
  /** What preparing the next rule would wait behind (a grammar worker's compile), or undefined. */
  blockedBy(): Promise<void> | undefined;
  /** Before a step that samples: the rules of the next token and after each of `drafts`. */
  prepare(drafts: readonly number[], tokensLeft: number): Promise<void>;
  /** Before sampling: `row` under the rule of draft position `position` (0: the next token). */
  apply(row: Float32Array, position?: number): Float32Array;
  /** At acceptance: feeds a kept token; false when the constraint does not allow it. */
  advance(token: number): boolean;
  /** The grammar accepted its stop token: the output is complete. */
  readonly done: boolean;
  /** The next token closes a forced close: a generation out of tokens now is complete, not cut off. */
  readonly endsNext: boolean;
  /** When drafting: the longest prefix of `drafts` the constraint allows. */
  validDrafts(drafts: readonly number[]): Promise<number[]>;
  /** When drafting: its state before advancing through drafts, and back to it. */
  checkpoint(): Readonly<GuideState>;
  restore(saved: Readonly<GuideState>): void;
  /** When drafting: the rule at the current position (masks the drafter's logits). */
  currentRule(): Promise<PositionRule>;
  /** At the end: gives its matcher back. */
  dispose(): void;
}

/** A generation's speculative decoding (the engine's one `SpeculativeDecoder`, shared by its generations). */
export interface SpeculationPlugin {
  /** KV positions the drafter's chain writes past a generation's verified tokens (reserved with its chunks). */
  readonly lookahead: number;
  /**
   * A step that verified `draftCount` drafts after `known` tokens: accepts the tokens the verification
   * keeps (through `sequence.accept`); returns the last position whose target state is kept.
   */
  verify(sequence: SpeculativeSequence, known: number, draftCount: number, rowsLogits: Float32Array): number;
  /** After a step: the next drafts of the generations that handed it their work (one batched drafter run). */
  draft(work: readonly DrafterWork[]): Promise<void>;
}
