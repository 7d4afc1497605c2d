/**
 * The server under hostile load: huge prompts never stall other requests (asserted by order and by what
 * arrives while a prompt is being tokenized, never by milliseconds), and the drain answers every request
 * with an ending: a 503 for one not started, an error event + finish_reason + [DONE] for a cut stream.
 */
import http from "node:http";
import { Engine } from "@keepquant/engine";
import { describe, expect, it } from "vitest";
import { readDataEvents } from "./load.js";
import { defaultModelForTests, postJson, MiB, mixedText, startTestServer, TEST_ENGINE_OPTIONS, watchTokenizer } from "./test-support.js";

const modelFile = defaultModelForTests("kq-hostile-");

/** A POST over node:http: `written` resolves once the whole body is handed to the socket, `answer` with the response. */
function sendWhole(
  url: string,
  route: string,
  body: unknown,
): { written: Promise<void>; answer: Promise<{ status: number; body: string }> } {
  const payload = Buffer.from(JSON.stringify(body));
  let written!: () => void;
  const writtenPromise = new Promise<void>((resolve) => (written = resolve));
  const answer = new Promise<{ status: number; body: string }>((resolve, reject) => {
    const request = http.request(
      `${url}${route}`,
      { method: "POST", headers: { "Content-Type": "application/json", "Content-Length": payload.length } },
      (response) => {
        const chunks: Buffer[] = [];
        response.on("data", (chunk: Buffer) => chunks.push(chunk));
        response.on("end", () => resolve({ status: response.statusCode ?? 0, body: Buffer.concat(chunks).toString("utf8") }));
      },
    );
    request.on("error", reject);
    request.end(payload, () => written());
  });
  return { written: writtenPromise, answer };
}

/** The `data:` payloads of an SSE response, as they arrive; `onEvent` sees each one. */
async function readEvents(response: Response, onEvent: (data: string) => void = () => {}): Promise<string[]> {
  const events: string[] = [];
  await readDataEvents(response.body!, (data) => {
    events.push(data);
    onEvent(data);
    return undefined;
  });
  return events;
}

describe("huge prompts", () => {
  it("8 MiB of spaces (chat) and 8 MiB of mixed text (completions) are refused from their byte length, never tokenized, while a stream runs on", async () => {
    const engine = await Engine.load(modelFile(), { ...TEST_ENGINE_OPTIONS });
    const serving = await startTestServer(engine, { contextTokens: 2048, maxBodyBytes: 20 * MiB });
    const watch = watchTokenizer(engine.tokenizer!);
    try {
      const stream = await postJson(serving.url, "/v1/completions", { prompt: "Once", max_tokens: 400, ignore_eos: true, stream: true });
      let chunks = 0;
      let chunksAfterRefusals = 0;
      let refused = false;
      const streaming = readEvents(stream, () => {
        chunks++;
        if (refused) chunksAfterRefusals++;
      });
      // /health asked once the whole 8 MiB body is written answers before the big request does
      const order: string[] = [];
      const big = sendWhole(serving.url, "/v1/chat/completions", { messages: [{ role: "user", content: " ".repeat(8 * MiB) }] });
      await big.written;
      const health = fetch(`${serving.url}/health`).then((response) => {
        order.push("health");
        return response.status;
      });
      const bigAnswer = big.answer.then((answer) => {
        order.push("big");
        return answer;
      });
      expect(await health).toBe(200);
      const spaces = await bigAnswer;
      expect(order).toEqual(["health", "big"]);
      expect(spaces.status).toBe(400);
      expect(JSON.parse(spaces.body)).toMatchObject({ error: { code: "context_length_exceeded", param: "messages" } });
      const [chat, completion] = await Promise.all([
        postJson(serving.url, "/v1/chat/completions", { messages: [{ role: "user", content: " ".repeat(8 * MiB) }] }),
        postJson(serving.url, "/v1/completions", { prompt: mixedText(8 * MiB) }),
      ]);
      refused = true;
      for (const [response, param] of [
        [chat, "messages"],
        [completion, "prompt"],
      ] as const) {
        expect(response.status).toBe(400);
        const body = (await response.json()) as { error: { code: string; param: string; message: string } };
        expect(body.error).toMatchObject({ code: "context_length_exceeded", param });
        expect(body.error.message).toMatch(/at least \d+ tokens \(\d+ bytes, and one token of this vocabulary covers at most 64 bytes\)/);
      }
      expect(watch.longCalls()).toBe(0);
      const events = await streaming;
      expect(events.at(-1)).toBe("[DONE]");
      expect(chunks).toBeGreaterThan(100);
      expect(chunksAfterRefusals).toBeGreaterThan(0);
    } finally {
      watch.restore();
      await serving.close();
      engine.dispose();
    }
  });

  it("a prompt the context could hold (1 MiB of spaces; 1 MiB of mixed text) is tokenized in slices: /health and a stream are served while it runs", async () => {
    const engine = await Engine.load(modelFile(), { ...TEST_ENGINE_OPTIONS });
    // a context of 2^21 tokens: the byte bound cannot refuse 1 MiB, so the prompt is tokenized (the engine refuses it after)
    const serving = await startTestServer(engine, { contextTokens: 1 << 21, maxBodyBytes: 20 * MiB });
    const watch = watchTokenizer(engine.tokenizer!);
    try {
      for (const [route, body] of [
        ["/v1/completions", { prompt: " ".repeat(MiB) }],
        ["/v1/chat/completions", { messages: [{ role: "user", content: mixedText(MiB) }] }],
      ] as const) {
        const callsBefore = watch.longCalls();
        let answered = false;
        let healthDuring = 0;
        let chunksDuring = 0;
        const big = postJson(serving.url, route, body).then((response) => {
          answered = true;
          return response;
        });
        // streams one after another for as long as the big request is out; count the chunks that arrive mid-tokenization
        const streams = (async () => {
          while (!answered) {
            const stream = await postJson(serving.url, "/v1/completions", {
              prompt: "Once",
              max_tokens: 64,
              ignore_eos: true,
              stream: true,
            });
            await readEvents(stream, () => {
              if (watch.active() > 0) chunksDuring++;
            });
          }
        })();
        while (!answered) {
          const sentDuring = watch.active() > 0;
          const health = await fetch(`${serving.url}/health`);
          expect(health.status).toBe(200);
          if (sentDuring && watch.active() > 0 && !answered) healthDuring++;
          await new Promise((resolve) => setTimeout(resolve, 1));
        }
        const response = await big;
        await streams;
        expect(watch.longCalls()).toBe(callsBefore + 1);
        // the engine's own context refuses the prompt once it is tokenized
        expect(response.status, route).toBe(400);
        expect(healthDuring, route).toBeGreaterThan(0);
        expect(chunksDuring, route).toBeGreaterThan(0);
      }
    } finally {
      watch.restore();
      await serving.close();
      engine.dispose();
    }
  });
});

describe("the drain", () => {
  it("answers 503 to requests not started, ends a cut stream with an error event, finish_reason abort and [DONE]", async () => {
    const engine = await Engine.load(modelFile(), { ...TEST_ENGINE_OPTIONS, maxSequences: 1 });
    const serving = await startTestServer(engine, { contextTokens: 2048 });
    try {
      // one sequence: A runs, B (a stream) and C (not streamed) wait in the engine
      const a = await postJson(serving.url, "/v1/completions", { prompt: "Once", max_tokens: 1900, ignore_eos: true, stream: true });
      expect(a.status).toBe(200);
      const aEvents: string[] = [];
      let firstChunk!: () => void;
      const started = new Promise<void>((resolve) => (firstChunk = resolve));
      const aDone = readEvents(a, (data) => {
        aEvents.push(data);
        firstChunk();
      });
      await started;
      const b = postJson(serving.url, "/v1/chat/completions", { messages: [{ role: "user", content: "hi" }], max_tokens: 5, stream: true });
      const c = postJson(serving.url, "/v1/completions", { prompt: "hi", max_tokens: 5 });
      while (serving.server.inFlight < 3) await new Promise((resolve) => setTimeout(resolve, 2));
      const closing = serving.server.close(0);
      for (const response of [await b, await c]) {
        expect(response.status).toBe(503);
        expect(response.headers.get("retry-after")).toBe("1");
        expect(((await response.json()) as { error: { code: string } }).error.code).toBe("shutting_down");
      }
      await aDone;
      await closing;
      const tail = aEvents.slice(-3);
      expect(tail[2]).toBe("[DONE]");
      expect((JSON.parse(tail[0]!) as { error: { code: string; type: string } }).error).toMatchObject({
        code: "shutting_down",
        type: "unavailable_error",
      });
      expect((JSON.parse(tail[1]!) as { choices: { finish_reason: string }[] }).choices[0]!.finish_reason).toBe("abort");
      // nothing before the cut carried a finish_reason
      const finishes = aEvents.filter(
        (data) => data !== "[DONE]" && (JSON.parse(data) as { choices?: { finish_reason: string | null }[] }).choices?.[0]?.finish_reason,
      );
      expect(finishes).toHaveLength(1);
      const stats = engine.stats();
      expect(stats.kv.blocksFree).toBe(stats.kv.blocksTotal);
      expect(stats.states.slotsFree).toBe(stats.states.slotsTotal);
    } finally {
      await serving.close();
      engine.dispose();
    }
  });
});
