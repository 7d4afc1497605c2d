/**
 * The main thread's end of one grammar worker (grammar-worker.ts): requests by id, fire-and-forget
 * messages, and the worker's death. The worker is unref'd while idle (it never keeps a process
 * alive) and ref'd while a reply is awaited (a CLI awaiting a compile must not exit under it). When
 * it dies (a crash, out of memory), every awaited reply fails with CONSTRAINT_ENGINE_UNAVAILABLE and
 * the thread stays dead: its owner starts a new one for the next request.
 *
 * A compile runs within a time budget, timed from the worker's word that it starts (a compile queued
 * behind another is not charged for it): past it, the compile fails with CONSTRAINT_TOO_COMPLEX and the
 * worker is ended (a compile cannot be interrupted otherwise). So is a worker whose request ran past
 * the memory bound or aborted the runtime by its own grammar. Then one request alone was at fault: the
 * others fail with GrammarWorkerRestart, which tells their owner to retry them on a new worker (and the
 * owner moves the matchers that lived on this one), instead of failing them.
 */
import { Worker } from "node:worker_threads";
import { ConstraintError } from "./errors.js";
import {
  GRAMMAR_WORKER_EXIT_ABORTED,
  type GrammarWorkerData,
  type GrammarWorkerReply,
  type GrammarWorkerRequest,
  grammarWorkerSource,
} from "./grammar-worker.js";

/**
 * What a request fails with when its worker was ended for another request's grammar (past a bound):
 * nothing is wrong with it, its owner retries it on a new worker.
 */
export class GrammarWorkerRestart extends ConstraintError {
  constructor(message: string) {
    super("CONSTRAINT_ENGINE_UNAVAILABLE", message, { field: "constraint" });
  }
}

/** How a thread ended, as its owner is told. */
export interface GrammarThreadEnd {
  /** what requests on it fail with from now on */
  error: ConstraintError;
  /** one request alone was at fault (a bound): the matchers that lived on the worker can move to a new one */
  restart: boolean;
  /** the matcher at fault, if the fault was one of its requests (it cannot move), and its error */
  culprit?: { matcher: number; error: ConstraintError };
}

export interface GrammarThreadOptions {
  /** ms a compile may run on the worker (GrammarLimits.compileTimeoutMs), read when a compile starts */
  readonly compileTimeoutMs: number;
}

type Distributive<T> = T extends unknown ? Omit<T, "id"> : never;
/** A request without its id (the thread numbers them). */
export type GrammarThreadRequest = Distributive<Extract<GrammarWorkerRequest, { id: number }>>;
export type GrammarThreadMessage = Exclude<GrammarWorkerRequest, { id: number }>;

/** A successful reply: masks (transferred, one per position) and, for `prepare`, how far it went. */
export interface GrammarThreadReply {
  masks: Int32Array[];
  accepted: number;
  terminated: boolean;
  /** `close`: the closing walk, when one was found */
  plan?: number[];
}

interface Waiter {
  resolve(reply: GrammarThreadReply): void;
  reject(error: Error): void;
  request: GrammarThreadRequest;
  /** a compile of it is timed (a matcher moved from an ended worker recompiles a grammar that compiled before: not timed) */
  budgeted: boolean;
  timer?: ReturnType<typeof setTimeout>;
}

export class GrammarThread {
  private readonly worker: Worker;
  private nextId = 0;
  private readonly pending = new Map<number, Waiter>();
  private death: ConstraintError | undefined;
  /** compiles (and matcher creations) in flight, and what resolves when none is left */
  private compiles = 0;
  private compilesDone: { promise: Promise<void>; resolve: () => void } | undefined;
  private readonly deathListeners: ((end: GrammarThreadEnd) => void)[] = [];

  constructor(
    data: GrammarWorkerData,
    private readonly options: GrammarThreadOptions,
  ) {
    this.worker = new Worker(grammarWorkerSource(), { eval: true, workerData: data });
    this.worker.on("message", (reply: GrammarWorkerReply) => this.settle(reply));
    this.worker.on("error", (error: Error) => this.die(`it crashed: ${error.message}`));
    this.worker.on("exit", (code: number) =>
      this.die(code === GRAMMAR_WORKER_EXIT_ABORTED ? "its WebAssembly runtime aborted" : `it exited with code ${code}`),
    );
    // after the listeners: adding a "message" listener refs the worker again
    this.worker.unref();
  }

  /** Set once the worker is gone (the error its requests failed with). */
  get dead(): ConstraintError | undefined {
    return this.death;
  }

  /** Called once when the worker dies (before the requests waiting on it see their failure). */
  onDeath(listener: (end: GrammarThreadEnd) => void): void {
    this.deathListeners.push(listener);
  }

  /**
   * Resolves once no compile is in flight on the worker (undefined when none is): a mask asked now
   * would wait behind it (the worker handles its messages in order, and a compile takes up to seconds).
   */
  get compiling(): Promise<void> | undefined {
    return this.compilesDone?.promise;
  }

  /**
   * Sends a request; its reply (or the worker's death) settles the promise. `budgeted: false`: a compile
   * it causes is not timed (a grammar that compiled within the budget before, recompiled for a moved matcher).
   */
  request(request: GrammarThreadRequest, { budgeted = true }: { budgeted?: boolean } = {}): Promise<GrammarThreadReply> {
    if (this.death) return Promise.reject(this.death);
    const id = this.nextId++;
    const reply = new Promise<GrammarThreadReply>((resolve, reject) => {
      if (this.pending.size === 0) this.worker.ref();
      this.pending.set(id, { resolve, reject, request, budgeted });
      this.worker.postMessage({ ...request, id });
    });
    if (request.op === "compile" || request.op === "create") {
      this.compiles++;
      if (!this.compilesDone) {
        let resolve!: () => void;
        const promise = new Promise<void>((done) => (resolve = done));
        this.compilesDone = { promise, resolve };
      }
      const settled = (): void => {
        if (--this.compiles > 0) return;
        this.compilesDone?.resolve();
        this.compilesDone = undefined;
      };
      reply.then(settled, settled);
    }
    return reply;
  }

  /** Sends a message with no reply (handled in order with the requests); nothing once the worker is dead. */
  post(message: GrammarThreadMessage): void {
    if (!this.death) this.worker.postMessage(message);
  }

  /** Ends the worker; awaited replies fail. */
  async terminate(): Promise<void> {
    this.die("the grammar engine was closed", "closed");
    await this.worker.terminate();
  }

  private settle(reply: GrammarWorkerReply): void {
    if ("compiling" in reply) {
      const waiter = this.pending.get(reply.id);
      if (waiter?.budgeted) {
        const budget = this.options.compileTimeoutMs;
        waiter.timer = setTimeout(() => this.overBudget(reply.id, reply.field, budget), budget);
        waiter.timer.unref();
      }
      return;
    }
    if ("error" in reply && reply.error.fatal) {
      if (reply.error.alone) {
        // this request alone is at fault: it fails with its error, the others move to a new worker
        const { code, message, field } = reply.error;
        const error = new ConstraintError(
          code === "internal" ? "CONSTRAINT_ENGINE_UNAVAILABLE" : code,
          message,
          field === undefined ? {} : { field },
        );
        this.endFor(reply.id, reply.error.matcher, error, "its grammar ran past a bound of the grammar engine");
        return;
      }
      // every request fails with this error, the next constrained request gets a new worker
      this.die(reply.error.message, "fatal");
      void this.worker.terminate();
      return;
    }
    const waiter = this.pending.get(reply.id);
    if (!waiter) return;
    this.pending.delete(reply.id);
    clearTimeout(waiter.timer);
    if (this.pending.size === 0) this.worker.unref();
    if ("error" in reply) {
      const { code, message, field } = reply.error;
      waiter.reject(code === "internal" ? new Error(message) : new ConstraintError(code, message, field === undefined ? {} : { field }));
    } else {
      waiter.resolve(reply);
    }
  }

  /** A compile ran past its time budget: it fails, and the worker (still compiling it) is ended. */
  private overBudget(id: number, field: string, budget: number): void {
    const error = new ConstraintError(
      "CONSTRAINT_TOO_COMPLEX",
      `${field}: compiling it ran past ${budget} ms, the grammar engine's compile budget (grammarLimits.compileTimeoutMs), and was stopped. Simplify it (fewer or shorter length-bounded strings, fewer alternatives)`,
      { field },
    );
    this.endFor(id, undefined, error, "a compile ran past its time budget");
  }

  /**
   * Request `id` (or a fire-and-forget message of `matcher`) alone was at fault: it fails with `error`, the
   * worker is ended, and the other requests fail with GrammarWorkerRestart (their owner retries them).
   */
  private endFor(id: number, matcher: number | undefined, error: ConstraintError, reason: string): void {
    const waiter = this.pending.get(id);
    if (waiter) {
      this.pending.delete(id);
      clearTimeout(waiter.timer);
      waiter.reject(error);
    }
    const request = waiter?.request;
    const culprit = matcher ?? (request && "matcher" in request ? request.matcher : undefined);
    this.die(reason, "restart", culprit === undefined ? undefined : { matcher: culprit, error });
    void this.worker.terminate();
  }

  private die(reason: string, kind: "died" | "closed" | "fatal" | "restart" = "died", culprit?: GrammarThreadEnd["culprit"]): void {
    if (this.death) return;
    const message =
      kind === "died"
        ? `the grammar engine's worker thread died (${reason}); the next constrained request starts a new one`
        : kind === "restart"
          ? `the grammar engine's worker was ended (${reason}); the requests on it move to a new one`
          : reason;
    this.death = new ConstraintError("CONSTRAINT_ENGINE_UNAVAILABLE", message, { field: "constraint" });
    const failure = kind === "restart" ? new GrammarWorkerRestart(message) : this.death;
    const waiters = [...this.pending.values()];
    this.pending.clear();
    this.worker.unref();
    // the owner hears first (it moves the matchers), then the requests waiting on this worker fail
    const end: GrammarThreadEnd = { error: this.death, restart: kind === "restart", ...(culprit ? { culprit } : {}) };
    for (const listener of this.deathListeners) listener(end);
    for (const waiter of waiters) {
      clearTimeout(waiter.timer);
      waiter.reject(failure);
    }
  }

  /** Tests: the worker dies as a crash would kill it, or (`abort`) its WebAssembly runtime aborts. */
  crashForTests(abort = false): void {
    this.post({ op: "crash", abort });
  }

  /**
   * Tests: the worker stops at this message (after the ones before it) until the returned function is
   * called, as a slow mask would hold it: the requests sent meanwhile wait.
   */
  holdForTests(): () => void {
    const flag = new Int32Array(new SharedArrayBuffer(4));
    this.post({ op: "hold", flag });
    return () => {
      Atomics.store(flag, 0, 1);
      Atomics.notify(flag, 0);
    };
  }
}
