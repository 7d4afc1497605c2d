/**
 * JSON.parse of large request bodies on a worker thread: an 8 MiB body takes 20-70 ms of CPU to
 * parse, all of it with the event loop stopped, so bodies of at least OFF_THREAD_JSON_BYTES go to one
 * worker (started on first use, unref'd, ended by `close`). The parsed value comes back by structured
 * clone (a copy of its strings and arrays, a few milliseconds for 8 MiB). A body the clone cannot carry
 * (nesting deeper than V8's serializer goes) is parsed on the main thread instead, as smaller bodies are.
 *
 * A body may hold at most MAX_JSON_CONTAINERS objects and arrays, counted where it was parsed: copying a tree of
 * 280,000 small objects back from the worker held the event loop for half a second, and no request the server
 * takes needs a tenth of that many.
 */
import { Worker } from "node:worker_threads";

/** Bodies at least this large are parsed off the main thread. */
export const OFF_THREAD_JSON_BYTES = 1024 * 1024;

/** Most objects and arrays one body may hold (JsonShapeError beyond). */
export const MAX_JSON_CONTAINERS = 100_000;

/** Objects and arrays in `value`, counting stops past `most` (the worker runs the same function, from its source). */
export function countContainers(value: unknown, most: number): number {
  const stack: unknown[] = [value];
  let count = 0;
  while (stack.length > 0) {
    const item = stack.pop();
    if (typeof item !== "object" || item === null) continue;
    if (++count > most) return count;
    if (Array.isArray(item)) {
      for (const element of item) if (typeof element === "object" && element !== null) stack.push(element);
    } else {
      for (const key in item) {
        const element = (item as Record<string, unknown>)[key];
        if (typeof element === "object" && element !== null) stack.push(element);
      }
    }
  }
  return count;
}

const WORKER_SOURCE = `
const { parentPort } = require("node:worker_threads");
const countContainers = ${countContainers.toString()};
parentPort.on("message", ({ id, bytes }) => {
  let value;
  try {
    value = JSON.parse(Buffer.from(bytes).toString("utf8"));
  } catch (error) {
    parentPort.postMessage({ id, syntaxError: error instanceof Error ? error.message : String(error) });
    return;
  }
  const containers = countContainers(value, ${MAX_JSON_CONTAINERS});
  if (containers > ${MAX_JSON_CONTAINERS}) {
    parentPort.postMessage({ id, containers });
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
  /** set when the body holds more than MAX_JSON_CONTAINERS objects and arrays */
  containers?: number;
}

/** A JSON.parse failure, with the parser's message (the caller turns it into a 400). */
export class JsonSyntaxError extends Error {}

/** A body of more than MAX_JSON_CONTAINERS objects and arrays (the caller turns it into a 400). */
export class JsonShapeError extends Error {
  constructor(readonly containers: number) {
    super(`the request body holds more than ${MAX_JSON_CONTAINERS} JSON objects and arrays`);
  }
}

export class JsonParser {
  private worker: Worker | undefined;
  private nextId = 0;
  private readonly pending = new Map<number, { resolve: (reply: Reply) => void; reject: (error: Error) => void }>();

  /** Parses UTF-8 JSON bytes; throws JsonSyntaxError for bad JSON (a copy of large bytes goes to the worker). */
  async parse(bytes: Uint8Array): Promise<unknown> {
    if (bytes.length < OFF_THREAD_JSON_BYTES) return parseHere(bytes);
    const reply = await this.send(bytes);
    if (reply.syntaxError !== undefined) throw new JsonSyntaxError(reply.syntaxError);
    if (reply.containers !== undefined) throw new JsonShapeError(reply.containers);
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
  let value: unknown;
  try {
    value = JSON.parse(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("utf8"));
  } catch (error) {
    throw new JsonSyntaxError((error as Error).message);
  }
  const containers = countContainers(value, MAX_JSON_CONTAINERS);
  if (containers > MAX_JSON_CONTAINERS) throw new JsonShapeError(containers);
  return value;
}

/** Parses off the main thread when large, and falls back to the main thread for what the worker cannot return. */
export async function parseJsonBody(parser: JsonParser, bytes: Uint8Array): Promise<unknown> {
  try {
    return await parser.parse(bytes);
  } catch (error) {
    if (error instanceof JsonSyntaxError || error instanceof JsonShapeError) throw error;
    return parseHere(bytes);
  }
}
