/**
 * The engine's step loop: while the scheduler has work, one batched forward over the chunks it picks,
 * each generation taking what the step computed for it, then the drafter's work. It is every
 * generation's host (acceptance, finishing and failure are the generation's own) and serializes every
 * use of the forward and of the pools' storage (`exclusive`: steps and `Engine.evaluate`).
 */
import type { EngineStats } from "../engine-types.js";
import { EngineError } from "../errors.js";
import type { PagedKvCache } from "../kv/paged-kv.js";
import type { GdnStatePool } from "../kv/state-pool.js";
import type { StepEntry } from "../model/forward.js";
import type { StepBackend } from "../model/step-backend.js";
import type { Scheduler } from "../scheduler.js";
import type { DrafterWork } from "./speculative.js";
import type { Generation, GenerationHost, PendingRules, StepOutcome } from "./generation.js";
import type { SpeculationPlugin } from "./plugins.js";
import { mediaEntryFields } from "../vision/media.js";

/**
 * How long the step loop waits, when every schedulable sequence waits on a grammar worker (a compile, a
 * mask), before it schedules again (a request that arrives meanwhile gets in without waiting for it).
 */
const HELD_STEP_RETRY_MS = 5;

export type StepCounters = Omit<EngineStats["counters"], "preemptions">;

export interface StepLoopParts {
  scheduler: Scheduler<Generation>;
  backend: StepBackend;
  /** the speculation plug-in of every generation (undefined: off); `drafter`: it runs the MTP drafter */
  speculation: SpeculationPlugin | undefined;
  drafter: boolean;
  /** the pools (`evaluate` takes a state slot and blocks of its own) and the forward's row limit */
  kv: PagedKvCache;
  states: GdnStatePool;
  maxBatchTokens: number;
  /** logits per row, and the hidden state's width */
  vocab: number;
  hiddenWidth: number;
  isEog(token: number): boolean;
}

export class StepLoop implements GenerationHost {
  readonly counters: StepCounters = { steps: 0, prefillTokens: 0, decodeTokens: 0, forwardMs: 0 };
  /** The running generations (from creation to their end), in creation order. */
  private readonly generations = new Set<Generation>();
  private readonly scheduler: Scheduler<Generation>;
  private running = false;
  private closed = false;
  /** Serializes every use of the forward (scheduler steps and evaluate) and of the pools' storage. */
  private forwardLock: Promise<void> = Promise.resolve();

  constructor(private readonly parts: StepLoopParts) {
    this.scheduler = parts.scheduler;
  }

  /** A new generation runs (it is scheduled by `schedule`). */
  admit(generation: Generation): void {
    this.generations.add(generation);
  }

  /** Hands a generation to the scheduler and makes sure the loop runs. */
  schedule(generation: Generation): void {
    this.scheduler.add(generation);
    this.kick();
  }

  // GenerationHost
  isEog(token: number): boolean {
    return this.parts.isEog(token);
  }

  release(generation: Generation): void {
    this.generations.delete(generation);
    this.scheduler.remove(generation);
  }

  afterStep(generation: Generation, hidden: Float32Array | undefined): void {
    this.scheduler.afterStep(generation, hidden);
  }

  truncateBlocks(generation: Generation, positions: number): void {
    this.scheduler.truncateBlocks(generation, positions);
  }

  countTokens(kind: "prefill" | "decode", count: number): void {
    if (kind === "decode") this.counters.decodeTokens += count;
    else this.counters.prefillTokens += count;
  }

  /** Runs `work` when no other forward or pool mutation is in flight. */
  async exclusive<T>(work: () => Promise<T>): Promise<T> {
    const previous = this.forwardLock;
    let release!: () => void;
    this.forwardLock = new Promise<void>((resolve) => (release = resolve));
    await previous;
    try {
      return await work();
    } finally {
      release();
    }
  }

  /** One forward step (see `stats().providers.step` for what ran). */
  async runForward(entries: readonly StepEntry[]): Promise<Float32Array> {
    const t0 = performance.now();
    try {
      return await this.parts.backend.forward(entries);
    } finally {
      this.counters.forwardMs += performance.now() - t0;
    }
  }

  /**
   * Teacher-forced logits (Engine.evaluate): `ids` as one fresh sequence in ubatches of maxBatchTokens,
   * a copy of the logits at each of `positions` (checked by the caller).
   */
  async evaluate(ids: readonly number[], positions: readonly number[]): Promise<Float32Array[]> {
    const { kv, states, maxBatchTokens } = this.parts;
    const wanted = new Set(positions);
    return this.exclusive(async () => {
      const slot = states.allocate();
      const blocksNeeded = kv.blocksFor(ids.length);
      if (slot < 0 || kv.pool.freeCount < blocksNeeded) {
        if (slot >= 0) states.release(slot);
        throw new EngineError("ENGINE_CAPACITY", `evaluate needs a free state slot and ${blocksNeeded} KV blocks`);
      }
      const blockTable: number[] = [];
      for (let i = 0; i < blocksNeeded; i++) blockTable.push(kv.pool.allocate());
      const vocab = this.parts.vocab;
      const byPosition = new Map<number, Float32Array>();
      try {
        for (let start = 0; start < ids.length; start += maxBatchTokens) {
          const chunk = ids.slice(start, start + maxBatchTokens);
          const rows: number[] = [];
          for (let i = 0; i < chunk.length; i++) if (wanted.has(start + i)) rows.push(i);
          const entry: StepEntry = {
            tokens: chunk,
            startPos: start,
            blockTable,
            stateSlot: slot,
            logits: rows.length === chunk.length ? "all" : "none",
            logitRows: rows,
          };
          const logits = await this.runForward([entry]);
          this.countTokens("prefill", chunk.length);
          rows.forEach((r, k) => byPosition.set(start + r, logits.slice(k * vocab, (k + 1) * vocab)));
        }
      } finally {
        for (const block of blockTable) kv.pool.release(block);
        states.release(slot);
      }
      return positions.map((p) => byPosition.get(p)!);
    });
  }

  /** Aborts every generation. */
  abortAll(): void {
    for (const generation of [...this.generations]) generation.finish("abort");
  }

  /** Stops stepping; the backend is disposed once no step can be running. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    if (!this.running) this.releaseBackend();
  }

  private kick(): void {
    if (this.running || this.closed) return;
    this.running = true;
    setImmediate(() => void this.loop());
  }

  /** Steps while there is work. The native step awaits its promise (the event loop runs meanwhile); the TypeScript forward yields between steps. */
  private async loop(): Promise<void> {
    try {
      while (!this.closed && this.scheduler.hasWork) {
        await this.exclusive(() => this.step());
        if (!this.parts.backend.offThread) await new Promise<void>((resolve) => setImmediate(resolve));
      }
    } catch (error) {
      for (const generation of [...this.generations]) generation.fail(error);
    } finally {
      this.running = false;
      if (this.closed) this.releaseBackend();
      else if (this.scheduler.hasWork) this.kick();
    }
  }

  /** Frees the backend once no step can be running. */
  private releaseBackend(): void {
    void this.exclusive(async () => this.parts.backend.dispose());
  }

  /** One scheduler step: pick chunks, run the batched forward, each generation takes what came back. */
  private async step(): Promise<void> {
    await this.takeDeferred();
    // a constrained sequence that cannot sample now sits this step out, so that the sequences batched with it do
    // not wait: its last step's rules have not come yet, or its next mask would wait behind a compile on its
    // grammar worker (up to seconds for a new schema) or for its matcher's move to a new worker
    const held = new Set<Promise<void>>();
    const chunks = this.scheduler.schedule((generation) => {
      const waits = generation.waitsOn();
      if (waits) held.add(waits);
      return waits !== undefined;
    });
    if (chunks.length === 0 && held.size > 0) {
      // every sequence waits on a grammar worker: step again when one is done, or soon (new requests get in)
      await Promise.race([...held, new Promise<void>((resolve) => setTimeout(resolve, HELD_STEP_RETRY_MS))]);
      return;
    }
    if (chunks.length === 0) {
      // nothing fits: the head of the queue needs more blocks than the whole pool holds
      this.scheduler.waiting[0]?.finish("context");
      return;
    }
    const { drafter, vocab, hiddenWidth: D } = this.parts;
    const entries: StepEntry[] = chunks.map((chunk) => {
      const s = chunk.sequence;
      const known = s.tokens.slice(s.numComputed, s.numComputed + chunk.numTokens);
      const base = { startPos: s.numComputed, blockTable: s.blockTable, stateSlot: s.stateSlot };
      if (chunk.draftTokens > 0) {
        // verification: the known tokens, then the drafts; logits (and hidden states) from the last known row on
        const tokens = [...known, ...s.drafts.slice(0, chunk.draftTokens)];
        const logitRows = Array.from({ length: chunk.draftTokens + 1 }, (_, i) => known.length - 1 + i);
        // the GDN state after the last known token is kept aside: a rejected draft rolls back to it
        return { ...base, tokens, logits: "none", logitRows, snapshotRow: known.length - 1 };
      }
      const media = s.media ? mediaEntryFields(s.media, s.promptLength, s.numComputed, known.length, D) : {};
      return { ...base, ...media, tokens: known, logits: chunk.needsLogits ? "last" : "none", ...(drafter ? { hidden: true } : {}) };
    });
    // the grammar workers compute the next rules while the native step runs; nothing waits for them after it
    const rules = new Map<Generation, PendingRules>();
    for (const chunk of chunks) {
      const pending = chunk.sequence.prepareRules(chunk.needsLogits, chunk.draftTokens);
      if (pending) rules.set(chunk.sequence, pending);
    }
    const logits = await this.runForward(entries);
    // the drafter needs the target's hidden states after the next forward overwrote them
    const hidden = drafter ? this.parts.backend.hiddenRows.slice() : undefined;
    this.counters.steps++;
    const drafterWork: DrafterWork[] = [];
    let row = 0;
    let hiddenRow = 0;
    chunks.forEach((chunk, ci) => {
      const generation = chunk.sequence;
      const entry = entries[ci]!;
      const logitCount = chunk.draftTokens > 0 ? chunk.draftTokens + 1 : chunk.needsLogits ? 1 : 0;
      const rowsLogits = logits.subarray(row * vocab, (row + logitCount) * vocab);
      row += logitCount;
      const keptCount = entry.hidden ? entry.tokens.length : logitCount;
      const keptFirst = entry.hidden ? entry.startPos : entry.startPos + chunk.numTokens - 1;
      const keptHidden = hidden?.subarray(hiddenRow * D, (hiddenRow + keptCount) * D);
      hiddenRow += keptCount;
      // a generation aborted while the step ran has left the scheduler: its results are dropped
      if (!generation.active) return;
      const outcome: StepOutcome = {
        numTokens: chunk.numTokens,
        draftTokens: chunk.draftTokens,
        startPos: entry.startPos,
        logits: rowsLogits,
        keptFirst,
        keptHidden,
        // the target's hidden state at the chunk's last row, for a prefix-cache entry the drafter can resume from
        lastHidden: entry.hidden === true ? keptHidden?.subarray((keptCount - 1) * D, keptCount * D) : undefined,
      };
      const work = generation.take(outcome, rules.get(generation));
      if (work) drafterWork.push(work);
    });
    await this.parts.speculation?.draft(drafterWork);
  }

  /** The outcomes deferred by earlier steps whose rules have come: taken in now, with their drafter work. */
  private async takeDeferred(): Promise<void> {
    const drafterWork: DrafterWork[] = [];
    for (const generation of [...this.generations]) {
      const work = generation.takeDeferred();
      if (work) drafterWork.push(work);
    }
    if (drafterWork.length > 0) await this.parts.speculation?.draft(drafterWork);
  }
}
