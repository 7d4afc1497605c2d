/**
 * A schema past the grammar engine's bounds is a clear 400 (issue: no schema, prompt or request can hold
 * the others): refused before compiling from its length bounds, or when its compile runs past the
 * engine's time budget (the compile is then ended with its worker, and the server goes on). The budget
 * is tested far below what the compile needs on any machine; nothing here is timed.
 */
import { Engine } from "@keepquant/engine";
import { describe, expect, it } from "vitest";
import { defaultModelForTests, postJson, startTestServer, TEST_ENGINE_OPTIONS } from "./test-support.js";

const modelFile = defaultModelForTests("kq-grammar-bounds-");

interface ErrorBody {
  error: { message: string; type: string; param: string | null; code: string | null };
}

const chat = (extra: Record<string, unknown>) => ({
  messages: [{ role: "user", content: "Write it down" }],
  max_tokens: 16,
  chat_template_kwargs: { enable_thinking: false },
  ...extra,
});

const jsonSchema = (schema: unknown, strict = true) => ({
  response_format: { type: "json_schema", json_schema: { name: "form", schema, strict } },
});

describe("a schema past the grammar engine's bounds", () => {
  it("a length bound past maxRepetition is a 400 naming the parameter, keyword, path and bound, streamed or not (strict)", async () => {
    const engine = await Engine.load(modelFile(), { ...TEST_ENGINE_OPTIONS, maxSequences: 2 });
    const serving = await startTestServer(engine, { contextTokens: 2048 });
    try {
      const notes = { type: "object", properties: { notes: { type: "string", maxLength: 32767 } }, required: ["notes"] };
      for (const stream of [false, true]) {
        const response = await postJson(serving.url, "/v1/chat/completions", chat({ ...jsonSchema(notes), stream }));
        expect(response.status).toBe(400);
        const { error } = (await response.json()) as ErrorBody;
        expect(error).toMatchObject({
          type: "invalid_request_error",
          param: "response_format.json_schema.schema",
          code: "schema_too_complex",
        });
        expect(error.message).toMatch(/maxLength 32767 at \/properties\/notes is above 256, .*grammarLimits\.maxRepetition/);
      }
      // a forced tool's parameters: the 400 names that tool
      const tools = [
        {
          type: "function",
          function: { name: "save", parameters: { type: "object", properties: { body: { type: "string", maxLength: 4000 } } } },
        },
      ];
      const response = await postJson(serving.url, "/v1/chat/completions", chat({ tools, tool_choice: "required" }));
      expect(response.status).toBe(400);
      const { error } = (await response.json()) as ErrorBody;
      expect(error).toMatchObject({ param: "tools[0].function.parameters", code: "schema_too_complex" });
      expect(error.message).toMatch(/maxLength 4000 at \/properties\/body is above 256/);
      // within the bounds the same schema shape is served
      const fine = { type: "object", properties: { notes: { type: "string", maxLength: 24 } }, required: ["notes"] };
      const ok = await postJson(serving.url, "/v1/chat/completions", chat(jsonSchema(fine)));
      expect(ok.status).toBe(200);
      // not strict: the bound is relaxed, the answer served, and checked against it
      const relaxed = await postJson(serving.url, "/v1/chat/completions", chat({ ...jsonSchema(notes, false), max_tokens: 40 }));
      expect(relaxed.status).toBe(200);
      const body = (await relaxed.json()) as { schema_check?: { relaxed: { path: string; keyword: string }[] } };
      expect(body.schema_check?.relaxed).toEqual([{ path: "/properties/notes", keyword: "maxLength" }]);
    } finally {
      await serving.close();
      engine.dispose();
    }
  });

  it("a compile past the time budget is a 400 naming the budget; the server goes on", async () => {
    const engine = await Engine.load(modelFile(), {
      ...TEST_ENGINE_OPTIONS,
      maxSequences: 2,
      // far below what this schema's compile needs on any machine; its length bounds pass the checks before compiling
      grammarLimits: { compileTimeoutMs: 1, maxRepetitionSum: 100_000 },
    });
    const serving = await startTestServer(engine, { contextTokens: 2048 });
    try {
      const properties: Record<string, unknown> = {};
      for (let i = 0; i < 40; i++) properties[`field_${i}`] = { type: "string", maxLength: 200 + i };
      const response = await postJson(serving.url, "/v1/chat/completions", chat(jsonSchema({ type: "object", properties })));
      expect(response.status).toBe(400);
      const { error } = (await response.json()) as ErrorBody;
      expect(error).toMatchObject({ param: "response_format.json_schema.schema", code: "schema_too_complex" });
      expect(error.message).toMatch(/compiling it ran past 1 ms, the grammar engine's compile budget \(grammarLimits\.compileTimeoutMs\)/);
      const health = await fetch(`${serving.url}/health`);
      expect(health.status).toBe(200);
      await health.arrayBuffer();
      const free = await postJson(serving.url, "/v1/completions", { prompt: "Once", max_tokens: 8, ignore_eos: true });
      expect(free.status).toBe(200);
      expect(((await free.json()) as { usage: { completion_tokens: number } }).usage.completion_tokens).toBe(8);
    } finally {
      await serving.close();
      engine.dispose();
    }
  });
});
