/**
 * The main thread's mirror of one grammar matcher living on the grammar worker. DecodeGuide's
 * per-token calls are synchronous (`acceptToken`, `rollBack`, `isTerminated`), the matcher is on
 * another thread: the mirror answers them from the bitmasks it knows, which is exact, because
 * xgrammar's bitmask is the matcher's answer (bit set <=> acceptToken succeeds; a stop token is set
 * iff the grammar can end there, and accepting it is exactly when the matcher terminates, with
 * xgrammar's default terminateWithoutStopToken = false).
 *
 * Known masks: the current position's (`mask()` fetches it when unknown), those of the positions
 * accepted before it (`history`, so that a rollback knows the earlier masks again) and those computed
 * ahead along drafts (`redo`: `lookahead`, or a rollback over accepted tokens), so that advancing
 * through the same tokens again needs no round trip. Accepts and rollbacks are posted to the worker
 * (fire-and-forget, in order before any later request); the worker checks that it agrees.
 *
 * A worker ended for another request's grammar (past a bound) takes its matchers with it: the owner
 * `relocate`s the mirror, which is recreated on a new worker and given every token accepted so far (the
 * mirror keeps them); meanwhile its known masks still answer, and what needs the worker waits for the move.
 */
import type { GuideMatcher } from "./guide.js";
import { GrammarWorkerRestart, type GrammarThreadMessage, type GrammarThreadReply, type GrammarThreadRequest } from "./grammar-thread.js";

/**
 * Masks of accepted positions kept for rollbacks (a position's mask is vocabSize / 8 bytes, 31 KB
 * for Qwen3.5). Rollbacks go back at most the drafts of one step (MAX_DRAFT_TOKENS = 8) plus the
 * token sampled after them; a deeper rollback only loses the masks (they are fetched again).
 */
export const MAX_KNOWN_HISTORY = 16;

/** The worker side the mirror talks to (a GrammarThread). */
export interface MatcherChannel {
  request(request: GrammarThreadRequest): Promise<GrammarThreadReply>;
  post(message: GrammarThreadMessage): void;
  /** resolves once the worker compiles nothing (undefined: it compiles nothing now) */
  readonly compiling?: Promise<void> | undefined;
}

/** Whether `mask` allows `token`. */
export function maskAllows(mask: Int32Array, token: number): boolean {
  if (!Number.isInteger(token) || token < 0 || token >= mask.length * 32) return false;
  return ((mask[token >> 5]! >>> (token & 31)) & 1) === 1;
}

interface KnownStep {
  token: number;
  /** history: the mask before `token`; redo: the mask after it (undefined: not known, or the grammar ended) */
  mask: Int32Array | undefined;
}

export class RemoteMatcher implements GuideMatcher {
  private current: Int32Array | undefined;
  private terminated = false;
  private steps = 0;
  /** every token accepted since the matcher was created (a new worker's matcher is brought here by them) */
  private readonly accepted: number[] = [];
  /** set while the matcher moves to a new worker (resolves when it is there, or failed: `failure`) */
  private moving: Promise<void> | undefined;
  private failure: unknown;
  /** bumped by every accept and rollback (a reply computed for an earlier position is refused) */
  private version = 0;
  private readonly history: KnownStep[] = [];
  private redo: KnownStep[] = [];
  private disposed = false;

  /**
   * @param firstMask the mask of the matcher's first position (its creation computes it)
   * @param stopTokens the grammar engine's stop tokens (accepting one ends the grammar)
   */
  constructor(
    private channel: MatcherChannel,
    readonly id: number,
    firstMask: Int32Array,
    private readonly stopTokens: ReadonlySet<number>,
  ) {
    this.current = firstMask;
  }

  /** Whether the current position's mask is known (no round trip needed to accept a token). */
  get knowsMask(): boolean {
    return this.current !== undefined;
  }

  /**
   * What the next mask would wait behind (a compile on the worker), or undefined when it would not
   * wait: the mask is known, or the worker compiles nothing.
   */
  blockedBy(): Promise<void> | undefined {
    if (this.current || this.terminated || this.disposed) return undefined;
    return this.moving ?? this.channel.compiling;
  }

  /**
   * Recreates this matcher on another worker (its own was ended for another request): `recreate` makes a
   * matcher of the same grammar there under this id; the tokens accepted so far follow in one message.
   */
  relocate(recreate: () => Promise<MatcherChannel>): void {
    if (this.disposed || this.failure !== undefined) return;
    const move = async (): Promise<void> => {
      const channel = await recreate();
      if (this.disposed) {
        channel.post({ op: "dispose", matcher: this.id });
        return;
      }
      if (this.accepted.length > 0) {
        channel.post({ op: "accept", matcher: this.id, tokens: [...this.accepted], terminated: this.terminated });
      }
      this.channel = channel;
    };
    this.moving = move().then(
      () => {
        this.moving = undefined;
      },
      (error: unknown) => {
        this.moving = undefined;
        this.failure = error;
      },
    );
  }

  /** The matcher cannot be used any more (its worker was ended for its own grammar): requests fail with `error`. */
  fail(error: unknown): void {
    this.failure ??= error;
  }

  /** A request to the worker; one the worker's end interrupted is sent again once the matcher moved. */
  private async ask(request: GrammarThreadRequest): Promise<GrammarThreadReply> {
    for (;;) {
      if (this.moving) await this.moving;
      if (this.failure !== undefined) throw this.failure;
      try {
        return await this.channel.request(request);
      } catch (error) {
        if (!(error instanceof GrammarWorkerRestart) || (this.moving === undefined && this.failure === undefined)) throw error;
      }
    }
  }

  /** The current position's bitmask (from the worker when not known). */
  async mask(): Promise<Int32Array> {
    if (this.current) return this.current;
    this.checkUsable("mask");
    if (this.terminated) throw new Error("internal: the grammar has ended, no position follows its stop token");
    const version = this.version;
    const { masks } = await this.ask({ op: "mask", matcher: this.id });
    this.checkVersion(version);
    this.current = masks[0]!;
    return this.current;
  }

  /**
   * Makes the masks along `drafts` known: the current one, and the one after each draft up to the
   * first the grammar refuses or the stop token that ends it. One round trip, none when known.
   */
  async lookahead(drafts: readonly number[]): Promise<void> {
    this.checkUsable("lookahead");
    if (this.terminated || this.knowsAlong(drafts)) return;
    const version = this.version;
    const withCurrent = this.current === undefined;
    const reply = await this.ask({ op: "prepare", matcher: this.id, drafts: [...drafts], withCurrent });
    this.checkVersion(version);
    if (withCurrent) this.current = reply.masks[0]!;
    const after = withCurrent ? reply.masks.slice(1) : reply.masks;
    this.redo = drafts.slice(0, reply.accepted).map((token, i) => ({ token, mask: after[i] }));
  }

  /** The grammar engine's closing walk from the current position (GuideMatcher.close); the matcher does not move. */
  async close(limit: number, closers: readonly (readonly number[])[], maxRepeats: number): Promise<number[] | undefined> {
    this.checkUsable("close");
    if (this.terminated) return [];
    const version = this.version;
    const reply = await this.ask({ op: "close", matcher: this.id, limit, closers: closers.map((c) => [...c]), maxRepeats });
    this.checkVersion(version);
    return reply.plan;
  }

  /** Whether every mask `lookahead(drafts)` would compute is known. */
  private knowsAlong(drafts: readonly number[]): boolean {
    let mask = this.current;
    for (let i = 0; i < drafts.length; i++) {
      if (!mask) return false;
      const token = drafts[i]!;
      if (!maskAllows(mask, token) || this.stopTokens.has(token)) return true;
      const next = this.redo[i];
      if (next?.token !== token) return false;
      mask = next.mask;
    }
    return mask !== undefined;
  }

  /**
   * Accepts `token` if the grammar allows it (synchronous: answered from the known mask). Throws an
   * internal error when the current mask is not known: the caller must `mask()` or `lookahead()` first.
   */
  acceptToken(token: number): boolean {
    this.checkUsable("acceptToken");
    if (this.terminated) return false;
    const mask = this.current;
    if (!mask) {
      throw new Error(
        `internal: the grammar's mask at this position is not known yet (token ${token}): the guide must prepare its rules (mask / lookahead) before it advances`,
      );
    }
    if (!maskAllows(mask, token)) return false;
    this.history.push({ token, mask });
    if (this.history.length > MAX_KNOWN_HISTORY) this.history.shift();
    this.accepted.push(token);
    const next = this.redo[0]?.token === token ? this.redo.shift() : undefined;
    if (!next) this.redo = [];
    this.current = next?.mask;
    this.terminated = this.stopTokens.has(token);
    this.steps++;
    this.version++;
    this.channel.post({ op: "accept", matcher: this.id, tokens: [token], terminated: this.terminated });
    return true;
  }

  isTerminated(): boolean {
    return this.terminated;
  }

  /** Rolls back the last `tokens` accepted tokens; the masks known for them stay known (redo). */
  rollBack(tokens: number): void {
    this.checkUsable("rollBack");
    if (tokens <= 0) return;
    if (tokens > this.steps) throw new Error(`internal: cannot roll back ${tokens} tokens, the matcher accepted ${this.steps}`);
    for (let i = 0; i < tokens; i++) {
      const step = this.history.pop();
      if (step) {
        this.redo.unshift({ token: step.token, mask: this.current });
        this.current = step.mask;
      } else {
        this.current = undefined;
        this.redo = [];
      }
      this.terminated = false;
    }
    this.steps -= tokens;
    this.accepted.length -= tokens;
    this.version++;
    this.channel.post({ op: "rollBack", matcher: this.id, tokens });
  }

  /** Frees the worker's matcher (once). */
  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    this.history.length = 0;
    this.redo = [];
    this.current = undefined;
    this.channel.post({ op: "dispose", matcher: this.id });
  }

  private checkUsable(what: string): void {
    if (this.disposed) throw new Error(`internal: ${what} on a disposed grammar matcher`);
  }

  private checkVersion(version: number): void {
    if (version !== this.version) throw new Error("internal: the grammar matcher moved while the worker computed its mask");
  }
}
