/**
 * A new schema never stalls the server (issue 22): while a stream runs, a request with a new
 * response_format json_schema arrives, whose grammar (a 400-property schema) is compiled by the
 * engine's grammar worker; /health keeps answering and the stream keeps streaming meanwhile.
 * Counted, never timed: /health answers and stream chunks that arrive while the engine's grammar worker
 * has the compile in flight (a compile on the server's thread would let none through).
 */
import { Engine } from "@keepquant/engine";
import { describe, expect, it } from "vitest";
import { defaultModelForTests, postJson, startTestServer, TEST_ENGINE_OPTIONS } from "./test-support.js";

/** Whether the engine's grammar worker has a compile in flight (the engine's test hook). */
function workerCompiling(engine: Engine): boolean {
  const guided = (engine as unknown as { guided: { compiler?: { workerForTests?: { compiling?: Promise<void> } } } }).guided;
  return guided.compiler?.workerForTests?.compiling !== undefined;
}

const modelFile = defaultModelForTests("kq-constraint-load-");

/** A JSON Schema with `count` required properties of mixed types. */
function bigSchema(count: number): Record<string, unknown> {
  const properties: Record<string, unknown> = {};
  for (let i = 0; i < count; i++) {
    properties[`field_${i}`] =
      i % 3 === 0
        ? { type: "string", maxLength: 16 }
        : i % 3 === 1
          ? { type: "integer", minimum: 0, maximum: 1000 }
          : { enum: ["a", "b", `c${i}`] };
  }
  return { type: "object", properties, required: Object.keys(properties), additionalProperties: false };
}

describe("a new schema under load", () => {
  it("a new response_format json_schema compiles on the grammar worker while /health answers and a running stream streams", async () => {
    const engine = await Engine.load(modelFile(), { ...TEST_ENGINE_OPTIONS, maxSequences: 2 });
    const serving = await startTestServer(engine, { contextTokens: 4096 });
    const abort = new AbortController();
    try {
      // the grammar engine is running (a first constrained request started it), the big schema is new to it
      const warm = await postJson(serving.url, "/v1/chat/completions", {
        messages: [{ role: "user", content: "hi" }],
        max_tokens: 8,
        response_format: { type: "json_object" },
      });
      expect(warm.status).toBe(200);
      const stream = await postJson(
        serving.url,
        "/v1/completions",
        { prompt: "Once", max_tokens: 3800, ignore_eos: true, stream: true },
        abort.signal,
      );
      expect(stream.status).toBe(200);
      const reader = stream.body!.getReader();
      let compiling = false;
      let chunksDuring = 0;
      let firstChunk!: () => void;
      const started = new Promise<void>((resolve) => (firstChunk = resolve));
      const streaming = (async () => {
        for (;;) {
          const { done } = await reader.read().catch(() => ({ done: true }));
          if (done) return;
          if (compiling && workerCompiling(engine)) {
            chunksDuring++;
          }
          firstChunk();
        }
      })();
      await started;
      compiling = true;
      let answered = false;
      const structured = postJson(serving.url, "/v1/chat/completions", {
        messages: [{ role: "user", content: "Fill the form" }],
        max_tokens: 24,
        thinking_budget: 0,
        response_format: { type: "json_schema", json_schema: { name: "form", schema: bigSchema(400) } },
      }).then((response) => {
        answered = true;
        compiling = false;
        return response;
      });
      let healthChecks = 0;
      while (!answered) {
        const health = await fetch(`${serving.url}/health`);
        expect(health.status).toBe(200);
        await health.arrayBuffer();
        if (!answered && workerCompiling(engine)) {
          healthChecks++;
        }
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
      const response = await structured;
      expect(response.status).toBe(200);
      const body = (await response.json()) as { choices: { finish_reason: string; message: { content: string } }[] };
      // the grammar's canonical layout: the first property first
      expect(body.choices[0]!.message.content).toMatch(/^\{"field_0": "/);
      abort.abort();
      await streaming;
      // answers and chunks arrived while the worker compiled
      const seen = JSON.stringify({ healthChecks, chunksDuring });
      expect(healthChecks, seen).toBeGreaterThan(2);
      expect(chunksDuring, seen).toBeGreaterThan(2);
    } finally {
      abort.abort();
      await serving.close();
      engine.dispose();
    }
  }, 60_000);
});
