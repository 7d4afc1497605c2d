/**
 * JSON.parse of large request bodies on a worker thread: an 8 MiB body takes 20-70 ms of CPU to
 * parse, all of it with the event loop stopped, so bodies of at least OFF_THREAD_JSON_BYTES go to one
 * worker (started on first use, unref'd, ended by `close`). The parsed value comes back by structured
 * clone (a copy of its strings and arrays, a few milliseconds for 8 MiB). A body the clone cannot carry
 * (nesting deeper than V8's serializer goes) is parsed on the main thread instead, as smaller bodies are.
 */
import { Worker } from "node:worker_threads";

/** Bodies at least this large are parsed off the main thread. */
export const OFF_THREAD_JSON_BYTES = 1024 * 1024;

const WORKER_SOURCE = `
const { parentPort } = require("node:worker_threads");
parentPort.on("message", ({ id, bytes }) => {
  let value;
  try {
    value = JSON.parse(Buffer.from(bytes).toString("utf8"));
  } catch (error) {
    parentPort.postMessage({ id, syntaxError: error instanceof Error ? error.message : String(error) });
    return;
  }
  try {
    parentPort.postMessage({ id, value });
  } catch {
    parentPort.postMessage({ id, uncloneable: true });
  }
});
`;

interface Reply {
  id: number;
  value?: unknown;
  syntaxError?: string;
  uncloneable?: boolean;
}

/** A JSON.parse failure, with the parser's message (the caller turns it into a 400). */
export class JsonSyntaxError extends Error {}

export class JsonParser {
  private worker: Worker | undefined;
  private nextId = 0;
  private readonly pending = new Map<number, { resolve: (reply: Reply) => void; reject: (error: Error) => void }>();

  /** Parses UTF-8 JSON bytes; throws JsonSyntaxError for bad JSON (a copy of large bytes goes to the worker). */
  async parse(bytes: Uint8Array): Promise<unknown> {
    if (bytes.length < OFF_THREAD_JSON_BYTES) return parseHere(bytes);
    const reply = await this.send(bytes);
    if (reply.syntaxError !== undefined) throw new JsonSyntaxError(reply.syntaxError);
    if (reply.uncloneable) throw new Error("uncloneable");
    return reply.value;
  }

  private send(bytes: Uint8Array): Promise<Reply> {
    const worker = this.start();
    const id = this.nextId++;
    // a private copy to transfer (the caller's buffer may be a view of a shared pool)
    const own = new Uint8Array(bytes.length);
    own.set(bytes);
    return new Promise<Reply>((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      worker.postMessage({ id, bytes: own }, [own.buffer]);
    });
  }

  private start(): Worker {
    if (this.worker) return this.worker;
    const worker = new Worker(WORKER_SOURCE, { eval: true });
    worker.unref();
    worker.on("message", (reply: Reply) => {
      const waiter = this.pending.get(reply.id);
      this.pending.delete(reply.id);
      waiter?.resolve(reply);
    });
    const fail = (error: Error): void => {
      this.worker = undefined;
      for (const waiter of this.pending.values()) waiter.reject(error);
      this.pending.clear();
    };
    worker.on("error", fail);
    worker.on("exit", () => fail(new Error("the JSON worker exited")));
    this.worker = worker;
    return worker;
  }

  /** Ends the worker (pending parses reject). */
  async close(): Promise<void> {
    const worker = this.worker;
    this.worker = undefined;
    if (worker) await worker.terminate();
  }
}

function parseHere(bytes: Uint8Array): unknown {
  try {
    return JSON.parse(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("utf8"));
  } catch (error) {
    throw new JsonSyntaxError((error as Error).message);
  }
}

/** Parses off the main thread when large, and falls back to the main thread for what the worker cannot return. */
export async function parseJsonBody(parser: JsonParser, bytes: Uint8Array): Promise<unknown> {
  try {
    return await parser.parse(bytes);
  } catch (error) {
    if (error instanceof JsonSyntaxError) throw error;
    return parseHere(bytes);
  }
}
