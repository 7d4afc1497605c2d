/**
 * The main thread's end of one grammar worker (grammar-worker.ts): requests by id, fire-and-forget
 * messages, and the worker's death. The worker is unref'd while idle (it never keeps a process
 * alive) and ref'd while a reply is awaited (a CLI awaiting a compile must not exit under it). When
 * it dies (a crash, out of memory), every awaited reply fails with CONSTRAINT_ENGINE_UNAVAILABLE and
 * the thread stays dead: its owner starts a new one for the next request.
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

type Distributive<T> = T extends unknown ? Omit<T, "id"> : never;
/** A request without its id (the thread numbers them). */
export type GrammarThreadRequest = Distributive<Extract<GrammarWorkerRequest, { id: number }>>;
export type GrammarThreadMessage = Exclude<GrammarWorkerRequest, { id: number }>;

/** A successful reply: masks (transferred, one per position) and, for `prepare`, how far it went. */
export interface GrammarThreadReply {
  masks: Int32Array[];
  accepted: number;
  terminated: boolean;
}

interface Waiter {
  resolve(reply: GrammarThreadReply): void;
  reject(error: Error): void;
}

export class GrammarThread {
  private readonly worker: Worker;
  private nextId = 0;
  private readonly pending = new Map<number, Waiter>();
  private death: ConstraintError | undefined;
  /** compiles (and matcher creations) in flight, and what resolves when none is left */
  private compiles = 0;
  private compilesDone: { promise: Promise<void>; resolve: () => void } | undefined;
  private readonly deathListeners: ((error: ConstraintError) => void)[] = [];

  constructor(data: GrammarWorkerData) {
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

  /** Called once when the worker dies. */
  onDeath(listener: (error: ConstraintError) => void): void {
    this.deathListeners.push(listener);
  }

  /**
   * Resolves once no compile is in flight on the worker (undefined when none is): a mask asked now
   * would wait behind it (the worker handles its messages in order, and a compile takes up to seconds).
   */
  get compiling(): Promise<void> | undefined {
    return this.compilesDone?.promise;
  }

  /** Sends a request; its reply (or the worker's death) settles the promise. */
  request(request: GrammarThreadRequest): Promise<GrammarThreadReply> {
    if (this.death) return Promise.reject(this.death);
    const id = this.nextId++;
    const reply = new Promise<GrammarThreadReply>((resolve, reject) => {
      if (this.pending.size === 0) this.worker.ref();
      this.pending.set(id, { resolve, reject });
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
    if ("error" in reply && reply.error.fatal) {
      // every request fails with this error, the next constrained request gets a new worker
      this.die(reply.error.message, "fatal");
      void this.worker.terminate();
      return;
    }
    const waiter = this.pending.get(reply.id);
    if (!waiter) return;
    this.pending.delete(reply.id);
    if (this.pending.size === 0) this.worker.unref();
    if ("error" in reply) {
      const { code, message, field } = reply.error;
      waiter.reject(code === "internal" ? new Error(message) : new ConstraintError(code, message, field === undefined ? {} : { field }));
    } else {
      waiter.resolve(reply);
    }
  }

  private die(reason: string, kind: "died" | "closed" | "fatal" = "died"): void {
    if (this.death) return;
    const message =
      kind === "died" ? `the grammar engine's worker thread died (${reason}); the next constrained request starts a new one` : reason;
    this.death = new ConstraintError("CONSTRAINT_ENGINE_UNAVAILABLE", message, { field: "constraint" });
    for (const waiter of this.pending.values()) waiter.reject(this.death);
    this.pending.clear();
    this.worker.unref();
    for (const listener of this.deathListeners) listener(this.death);
  }

  /** Tests: the worker dies as a crash would kill it, or (`abort`) its WebAssembly runtime aborts. */
  crashForTests(abort = false): void {
    this.post({ op: "crash", abort });
  }
}
