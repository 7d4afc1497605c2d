/**
 * What a hostile run found, each as a regression test: early refusals that reset Node clients, the keep-alive
 * timer that reset a request sent as it came due, bodies held open (the budget of bytes in flight, the idle and
 * total body timeouts), /tokenize and /detokenize without bounds, chats of many messages, API keys that could never
 * match, and the drain's answer to a cut non-streamed request. Everything is asserted by order and by counts; no
 * assertion depends on how fast the machine is.
 */
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import http from "node:http";
import net from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { Engine } from "@keepquant/engine";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LINGER_BYTES } from "./body.js";
import { createKeepquantServer } from "./server.js";
import {
  defaultModelFile,
  MiB,
  mixedText,
  startTestServer,
  TEST_ENGINE_OPTIONS,
  type TestServer,
  type TokenizerWatch,
  watchTokenizer,
} from "./test-support.js";

const cacheDir = mkdtempSync(path.join(tmpdir(), "kq-hostile-input-"));
let engine: Engine;

beforeAll(async () => {
  engine = await Engine.load(await defaultModelFile(cacheDir), { ...TEST_ENGINE_OPTIONS });
});

afterAll(() => {
  engine.dispose();
  rmSync(cacheDir, { recursive: true, force: true });
});

const JSON_HEADERS = { "Content-Type": "application/json" };

async function withServer(options: Parameters<typeof startTestServer>[1], body: (serving: TestServer) => Promise<void>): Promise<void> {
  const serving = await startTestServer(engine, options);
  try {
    await body(serving);
  } finally {
    await serving.close();
  }
}

/** A process spinning on a core while `body` runs (the busy neighbour CI machines have). */
async function withBusyNeighbour(body: () => Promise<void>): Promise<void> {
  const neighbour: ChildProcess = spawn(process.execPath, ["-e", "for (;;) {}"], { stdio: "ignore" });
  try {
    await body();
  } finally {
    neighbour.kill("SIGKILL");
  }
}

interface RawAnswer {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
}

/**
 * A POST over node:http that keeps sending `chunk` (up to `chunks` times) until the answer's head arrives, then
 * stops; resolves with the whole answer. Errors of the request after the answer arrived (the server closing a
 * connection the client still writes to) are ignored: the answer is what counts.
 */
function sendUntilAnswered(
  url: string,
  options: { headers: Record<string, string | number>; chunk: Buffer; chunks: number; agent?: http.Agent },
): Promise<RawAnswer> {
  return new Promise((resolve, reject) => {
    let answered = false;
    const request = http.request(
      `${url}/v1/completions`,
      { method: "POST", headers: options.headers, agent: options.agent },
      (response) => {
        answered = true;
        const parts: Buffer[] = [];
        response.on("data", (part: Buffer) => parts.push(part));
        response.on("end", () =>
          resolve({ status: response.statusCode ?? 0, headers: response.headers, body: Buffer.concat(parts).toString("utf8") }),
        );
        response.on("error", reject);
      },
    );
    request.on("error", (error) => {
      if (!answered) reject(error);
    });
    let sent = 0;
    const more = (): void => {
      if (answered || sent === options.chunks) return;
      sent++;
      if (request.write(options.chunk)) setImmediate(more);
      else request.once("drain", more);
    };
    more();
  });
}

/** Runs `body` with a node:http agent that keeps connections alive, then with one that does not. */
async function withEachAgent(body: (agent: http.Agent) => Promise<void>): Promise<void> {
  for (const keepAlive of [true, false]) {
    const agent = new http.Agent({ keepAlive });
    try {
      await body(agent);
    } finally {
      agent.destroy();
    }
  }
}

function expectTooLarge(answer: RawAnswer): void {
  expect(answer.status).toBe(413);
  expect(JSON.parse(answer.body)).toMatchObject({ error: { code: "request_too_large" } });
}

/** Resolves once `condition()` holds, checking between turns of the event loop. */
async function until(condition: () => boolean): Promise<void> {
  while (!condition()) await new Promise((resolve) => setTimeout(resolve, 2));
}

/**
 * `keepquant serve`'s server in a child process (the built package, as CI builds before it tests): a client in
 * the same process as the server shares its event loop, which hides the reset an early close causes.
 */
async function withServerProcess(options: Record<string, unknown>, body: (url: string) => Promise<void>): Promise<void> {
  const source = `
    import { Engine } from "@keepquant/engine";
    import { createKeepquantServer } from ${JSON.stringify(new URL("../dist/index.js", import.meta.url).href)};
    const [model, options] = [process.argv[1], JSON.parse(process.argv[2])];
    const engine = await Engine.load(model, { threads: 1 });
    const server = createKeepquantServer({ engine, ...options });
    const address = await server.listen(0, "127.0.0.1");
    process.stdout.write(address.port + "\\n");
    process.stdin.on("end", async () => { await server.close(0); engine.dispose(); });
    process.stdin.resume();
  `;
  const child = spawn(process.execPath, ["--input-type=module", "-e", source, await defaultModelFile(cacheDir), JSON.stringify(options)], {
    cwd: fileURLToPath(new URL("..", import.meta.url)),
    stdio: ["pipe", "pipe", "inherit"],
  });
  const exited = new Promise((resolve) => child.once("exit", resolve));
  try {
    const port = await new Promise<string>((resolve, reject) => {
      let out = "";
      child.stdout!.on("data", (data: Buffer) => {
        out += data.toString();
        if (out.includes("\n")) resolve(out.trim());
      });
      child.once("exit", (code) => reject(new Error(`the server process exited with ${code}`)));
    });
    await body(`http://127.0.0.1:${port}`);
  } finally {
    child.stdin!.end();
    await exited;
  }
}

/**
 * Polls /health (each answer a 200) until `request` answers; its status and JSON body, and how many /health
 * answers came while the tokenizer was working on it.
 */
async function answerWithHealthPolls<T>(
  url: string,
  watch: TokenizerWatch,
  request: Promise<Response>,
): Promise<{ status: number; body: T; healthDuring: number }> {
  let answered = false;
  const big = request.then(async (response) => {
    answered = true;
    return { status: response.status, body: (await response.json()) as T };
  });
  let healthDuring = 0;
  while (!answered) {
    const sentDuring = watch.active() > 0;
    expect((await fetch(`${url}/health`)).status).toBe(200);
    if (sentDuring && watch.active() > 0) healthDuring++;
  }
  return { ...(await big), healthDuring };
}

describe("early refusals stay readable by a client that is still sending", () => {
  it("413 for a 9 MiB body to a 1 MiB server in another process: Node's fetch, node:http with and without keep-alive, and curl read the JSON, with a busy neighbour", async () => {
    await withServerProcess({ maxBodyBytes: MiB }, async (url) => {
      await withBusyNeighbour(async () => {
        const body = JSON.stringify({ prompt: "x".repeat(9 * MiB) });
        for (let i = 0; i < 8; i++) {
          const response = await fetch(`${url}/v1/completions`, { method: "POST", headers: JSON_HEADERS, body });
          expect(response.status).toBe(413);
          expect(((await response.json()) as { error: { code: string } }).error.code).toBe("request_too_large");
        }
        await withEachAgent(async (agent) => {
          for (let i = 0; i < 4; i++) {
            const answer = await sendUntilAnswered(url, {
              headers: { ...JSON_HEADERS, "Content-Length": 9 * MiB },
              chunk: Buffer.alloc(MiB, 0x20),
              chunks: 9,
              agent,
            });
            expectTooLarge(answer);
          }
        });
        const folder = mkdtempSync(path.join(tmpdir(), "kq-curl-"));
        try {
          const file = path.join(folder, "body.json");
          writeFileSync(file, body);
          const run = await promisify(execFile)(
            "curl",
            [
              "-sS",
              "-o",
              "-",
              "-w",
              "\n%{http_code}",
              "-H",
              "Content-Type: application/json",
              "--data-binary",
              `@${file}`,
              `${url}/v1/completions`,
            ],
            { maxBuffer: MiB },
          ).catch((error: NodeJS.ErrnoException) => {
            if (error.code === "ENOENT") return undefined;
            throw error;
          });
          if (run) {
            const [json, status] = run.stdout.split("\n");
            expect(status).toBe("413");
            expect(JSON.parse(json!)).toMatchObject({ error: { code: "request_too_large" } });
          }
        } finally {
          rmSync(folder, { recursive: true, force: true });
        }
      });
    });
  });

  it("a chunked body over the limit and a declared length past the linger bound (another process): the answer, then the connection ends", async () => {
    await withServerProcess({ maxBodyBytes: MiB }, async (url) => {
      await withEachAgent(async (agent) => {
        // no Content-Length: the limit is found while reading
        expectTooLarge(await sendUntilAnswered(url, { headers: JSON_HEADERS, chunk: Buffer.alloc(256 * 1024, 0x20), chunks: 64, agent }));
        // a declared length beyond what the server discards: refused before reading, then half-closed
        const declared = await sendUntilAnswered(url, {
          headers: { ...JSON_HEADERS, "Content-Length": LINGER_BYTES * 4 },
          chunk: Buffer.alloc(MiB, 0x20),
          chunks: 64,
          agent,
        });
        expectTooLarge(declared);
      });
    });
  });

  it("a request sent on a keep-alive connection as its idle timer comes due is answered, not reset", async () => {
    await withServer({}, async ({ url, server }) => {
      // the server's end of the connection, to fire its idle timeout at a chosen moment
      let serverSocket: net.Socket | undefined;
      (server as unknown as { httpServer: http.Server }).httpServer.once("connection", (socket: net.Socket) => (serverSocket = socket));
      const socket = net.connect(Number(new URL(url).port), "127.0.0.1");
      try {
        await new Promise<void>((resolve, reject) => socket.once("connect", resolve).once("error", reject));
        let received = "";
        let failure: Error | undefined;
        socket.on("data", (data: Buffer) => (received += data.toString("latin1")));
        socket.on("error", (error) => (failure = error));
        const ask = "GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n";
        const answers = (): number => received.split("HTTP/1.1 200 OK").length - 1;
        socket.write(ask);
        await until(() => answers() === 1 || failure !== undefined);
        // the next request is written and, in the same turn (its bytes unread), the idle timeout fires: the order a
        // busy event loop gives when the timer comes due just as the client reuses the connection
        socket.write(ask);
        serverSocket!.emit("timeout");
        await until(() => answers() === 2 || failure !== undefined || socket.destroyed);
        expect(failure).toBeUndefined();
        expect(answers()).toBe(2);
      } finally {
        socket.destroy();
      }
    });
  });
});

describe("request bodies are bounded in bytes and time", () => {
  it("the bytes of all bodies being read at once have a budget: 503 server_busy past it, and it is released", async () => {
    await withServer({ maxBodyBytes: MiB, maxBodyBytesInFlight: 1.5 * MiB }, async ({ url, server }) => {
      // A sends 900 KiB of a 1 MiB body and holds the rest
      const payload = Buffer.from(JSON.stringify({ prompt: "y".repeat(MiB - 20) }).padEnd(MiB, " "));
      let aAnswer: RawAnswer | undefined;
      const a = http.request(
        `${url}/v1/completions`,
        { method: "POST", headers: { ...JSON_HEADERS, "Content-Length": MiB } },
        (response) => {
          const parts: Buffer[] = [];
          response.on("data", (part: Buffer) => parts.push(part));
          response.on(
            "end",
            () => (aAnswer = { status: response.statusCode ?? 0, headers: response.headers, body: Buffer.concat(parts).toString() }),
          );
        },
      );
      a.on("error", () => undefined);
      a.write(payload.subarray(0, 900 * 1024));
      await until(() => server.bodyBytesInFlight >= 900 * 1024);
      const b = await fetch(`${url}/v1/completions`, {
        method: "POST",
        headers: JSON_HEADERS,
        body: JSON.stringify({ prompt: "z".repeat(900 * 1024) }),
      });
      expect(b.status).toBe(503);
      expect(b.headers.get("retry-after")).toBe("1");
      expect(((await b.json()) as { error: { code: string } }).error.code).toBe("server_busy");
      a.end(payload.subarray(900 * 1024));
      await until(() => aAnswer !== undefined);
      // A was read whole and answered on its merits (its prompt is too long for the context)
      expect(aAnswer!.status).toBe(400);
      expect(server.bodyBytesInFlight).toBe(0);
    });
  });

  it("a body that stops arriving gets 408 after the idle timeout; one trickled byte by byte, after the total timeout", async () => {
    await withServer({ bodyIdleTimeoutMs: 50, bodyTimeoutMs: 60_000 }, async ({ url, server }) => {
      const stalled = await sendUntilAnswered(url, {
        headers: { ...JSON_HEADERS, "Content-Length": 100 },
        chunk: Buffer.from('{"prompt":'),
        chunks: 1,
      });
      expect(stalled.status).toBe(408);
      expect(JSON.parse(stalled.body)).toMatchObject({ error: { code: "request_timeout" } });
      expect(JSON.parse(stalled.body).error.message).toMatch(/no bytes for 50 ms/);
      expect(server.bodyBytesInFlight).toBe(0);
    });
    await withServer({ bodyIdleTimeoutMs: 60_000, bodyTimeoutMs: 100 }, async ({ url, server }) => {
      const trickled = await new Promise<RawAnswer>((resolve, reject) => {
        let answered = false;
        const request = http.request(
          `${url}/v1/completions`,
          { method: "POST", headers: { ...JSON_HEADERS, "Content-Length": 1_000_000 } },
          (response) => {
            answered = true;
            const parts: Buffer[] = [];
            response.on("data", (part: Buffer) => parts.push(part));
            response.on("end", () =>
              resolve({ status: response.statusCode ?? 0, headers: response.headers, body: Buffer.concat(parts).toString() }),
            );
          },
        );
        request.on("error", reject);
        // one byte a turn of the event loop until the answer comes: never idle, never whole
        const drip = (): void => {
          if (answered) return;
          request.write(" ");
          setImmediate(drip);
        };
        drip();
      });
      expect(trickled.status).toBe(408);
      expect(JSON.parse(trickled.body).error.message).toMatch(/not all of it within 100 ms/);
      expect(server.bodyBytesInFlight).toBe(0);
    });
  });
});

describe("/tokenize and /detokenize are bounded and sliced", () => {
  it("512 KiB of mixed text tokenizes whole (over 125,000 tokens) while /health is served; 8 MiB of 'a' is refused from its length, never tokenized", async () => {
    await withServer({ contextTokens: 65_536, maxBodyBytes: 20 * MiB }, async ({ url }) => {
      const watch = watchTokenizer(engine.tokenizer!, 256 * 1024);
      try {
        const text = mixedText(512 * 1024);
        const { healthDuring, ...answer } = await answerWithHealthPolls<{ tokens: number[] }>(
          url,
          watch,
          fetch(`${url}/tokenize`, { method: "POST", headers: JSON_HEADERS, body: JSON.stringify({ content: text }) }),
        );
        expect(answer.status).toBe(200);
        expect(answer.body.tokens).toEqual(engine.tokenizer!.encode(text, { addSpecial: false, parseSpecial: true }));
        expect(answer.body.tokens.length).toBeGreaterThan(125_000);
        expect(healthDuring).toBeGreaterThan(0);
      } finally {
        watch.restore();
      }
    });
    await withServer({ contextTokens: 2048, maxBodyBytes: 20 * MiB }, async ({ url }) => {
      const watch = watchTokenizer(engine.tokenizer!);
      try {
        const response = await fetch(`${url}/tokenize`, {
          method: "POST",
          headers: JSON_HEADERS,
          body: JSON.stringify({ content: "a".repeat(8 * MiB) }),
        });
        expect(response.status).toBe(400);
        const body = (await response.json()) as { error: { code: string; param: string; message: string } };
        expect(body.error).toMatchObject({ code: "too_many_tokens", param: "content" });
        expect(body.error.message).toMatch(/at least 131072 tokens: at most 65536 tokens per request/);
        expect(watch.calls()).toBe(0);
      } finally {
        watch.restore();
      }
    });
  });

  it("a million ids: refused past the bound; within it, detokenized in slices while /health is served", async () => {
    const vocab = engine.tokenizer!.vocabSize;
    const ids = Array.from({ length: 1_000_000 }, (_, i) => (i * 7919) % vocab);
    const body = JSON.stringify({ tokens: ids });
    await withServer({ contextTokens: 2048, maxBodyBytes: 20 * MiB }, async ({ url }) => {
      const response = await fetch(`${url}/detokenize`, { method: "POST", headers: JSON_HEADERS, body });
      expect(response.status).toBe(400);
      expect(((await response.json()) as { error: { code: string; param: string } }).error).toMatchObject({
        code: "too_many_tokens",
        param: "tokens",
      });
    });
    await withServer({ contextTokens: 262_144, maxBodyBytes: 20 * MiB }, async ({ url }) => {
      const watch = watchTokenizer(engine.tokenizer!);
      try {
        const { healthDuring, ...answer } = await answerWithHealthPolls<{ content: string }>(
          url,
          watch,
          fetch(`${url}/detokenize`, { method: "POST", headers: JSON_HEADERS, body }),
        );
        expect(answer.status).toBe(200);
        expect(answer.body.content).toBe(engine.tokenizer!.decode(ids, { special: true }));
        expect(healthDuring).toBeGreaterThan(0);
      } finally {
        watch.restore();
      }
    });
  });
});

describe("chats are bounded before the template runs", () => {
  it("280,000 empty messages are refused by the body's shape, 5,000 by their count, 1,000 messages of 8 KiB by their text's length; none is rendered nor tokenized", async () => {
    await withServer({ contextTokens: 2048, maxBodyBytes: 20 * MiB }, async ({ url }) => {
      const watch = watchTokenizer(engine.tokenizer!);
      try {
        const chat = (count: number): Promise<Response> =>
          fetch(`${url}/v1/chat/completions`, {
            method: "POST",
            headers: JSON_HEADERS,
            body: JSON.stringify({ messages: Array.from({ length: count }, () => ({ role: "user", content: "" })) }),
          });
        const huge = await chat(280_000);
        expect(huge.status).toBe(400);
        expect(((await huge.json()) as { error: { code: string; message: string } }).error).toMatchObject({
          code: "too_complex",
          message: "the request body holds more than 100000 JSON objects and arrays",
        });
        const many = await chat(5_000);
        expect(many.status).toBe(400);
        const manyBody = (await many.json()) as { error: { code: string; param: string; message: string } };
        expect(manyBody.error).toMatchObject({ code: "too_many_messages", param: "messages" });
        expect(manyBody.error.message).toMatch(/5000 messages; this server takes at most 4096/);
        const long = await fetch(`${url}/v1/chat/completions`, {
          method: "POST",
          headers: JSON_HEADERS,
          body: JSON.stringify({
            messages: Array.from({ length: 1000 }, (_, i) => ({ role: i % 2 ? "assistant" : "user", content: "w ".repeat(4096) })),
          }),
        });
        expect(long.status).toBe(400);
        const longBody = (await long.json()) as { error: { code: string; message: string } };
        expect(longBody.error.code).toBe("context_length_exceeded");
        // the user messages' 500 x 8 KiB alone (the assistant turns are not counted)
        expect(longBody.error.message).toMatch(/the text of the messages alone has at least 64000 tokens \(4096000 bytes/);
        expect(watch.calls()).toBe(0);
      } finally {
        watch.restore();
      }
    });
    await withServer({ maxMessages: 3 }, async ({ url }) => {
      const messages = Array.from({ length: 4 }, () => ({ role: "user", content: "hi" }));
      const response = await fetch(`${url}/v1/chat/completions`, {
        method: "POST",
        headers: JSON_HEADERS,
        body: JSON.stringify({ messages }),
      });
      expect(response.status).toBe(400);
      expect(((await response.json()) as { error: { message: string } }).error.message).toMatch(/at most 3$/);
    });
  });
});

describe("what a request leaves behind", () => {
  it("no signal of a finished request stays with the server (Node 20 kept one WeakRef per request on the drain's signal)", async () => {
    await withServer({ contextTokens: 2048 }, async ({ url, server }) => {
      const messages = [
        { role: "system", content: "You are terse." },
        { role: "user", content: "hi" },
      ];
      for (let i = 0; i < 20; i++) {
        const routes: [string, unknown][] = [
          ["/v1/chat/completions", { messages, max_tokens: 2 }],
          ["/v1/completions", { prompt: "Once", max_tokens: 2 }],
          ["/tokenize", { content: "hello world" }],
        ];
        for (const [route, body] of routes) {
          const response = await fetch(`${url}${route}`, { method: "POST", headers: JSON_HEADERS, body: JSON.stringify(body) });
          expect(response.status).toBe(200);
          await response.arrayBuffer();
        }
      }
      await until(() => server.requestsBeforeEngine === 0);
      expect(server.requestsBeforeEngine).toBe(0);
    });
  });
});

describe("API keys", () => {
  it("a key no client could send (outside Latin-1, white space at an end) is refused when the server is made; a Latin-1 key works", async () => {
    expect(() => createKeepquantServer({ engine, apiKey: " secret" })).toThrow(/apiKey must not begin or end with white space/);
    expect(() => createKeepquantServer({ engine, apiKey: "sec\nret" })).toThrow(/without control characters/);
    expect(() => createKeepquantServer({ engine, apiKey: "secret\n" })).toThrow(TypeError);
    expect(() => createKeepquantServer({ engine, apiKey: "ключ" })).toThrow(/apiKey must be Latin-1 text without control characters/);
    await withServer({ apiKey: "clé-1" }, async ({ url }) => {
      const ok = await fetch(`${url}/v1/models`, { headers: { Authorization: "Bearer clé-1" } });
      expect(ok.status).toBe(200);
      const wrong = await fetch(`${url}/v1/models`, { headers: { Authorization: "Bearer cle-1" } });
      expect(wrong.status).toBe(401);
    });
  });
});

describe("the drain", () => {
  it("a non-streamed request cut at the drain timeout after it started gets a 503 that says so (not 'nothing was started')", async () => {
    const single = await Engine.load(await defaultModelFile(cacheDir), { ...TEST_ENGINE_OPTIONS, maxSequences: 1 });
    const serving = await startTestServer(single, { contextTokens: 2048 });
    try {
      const decodedBefore = single.stats().counters.decodeTokens;
      const answer = fetch(`${serving.url}/v1/completions`, {
        method: "POST",
        headers: JSON_HEADERS,
        body: JSON.stringify({ prompt: "Once", max_tokens: 1900, ignore_eos: true }),
      });
      await until(() => single.stats().counters.decodeTokens > decodedBefore);
      await serving.server.close(0);
      const response = await answer;
      expect(response.status).toBe(503);
      const body = (await response.json()) as { error: { code: string; message: string } };
      expect(body.error.code).toBe("shutting_down");
      expect(body.error.message).toMatch(/cut at the drain timeout after generation had started/);
      expect(body.error.message).not.toMatch(/nothing was started/);
    } finally {
      await serving.close();
      single.dispose();
    }
  });
});
