import { describe, expect, it } from "vitest";
import { JsonParser, JsonShapeError, JsonSyntaxError, MAX_JSON_CONTAINERS, OFF_THREAD_JSON_BYTES, parseJsonBody } from "./json-worker.js";

const bytesOf = (value: unknown): Uint8Array => Buffer.from(JSON.stringify(value));

describe("large JSON bodies parsed on a worker thread", () => {
  it("give JSON.parse's value, while the event loop goes on turning", async () => {
    const parser = new JsonParser();
    try {
      const value = { messages: [{ role: "user", content: `${" ".repeat(4 * OFF_THREAD_JSON_BYTES)}中文 😀` }], n: [1, 2.5, null, true] };
      const bytes = bytesOf(value);
      let turns = 0;
      let parsed = false;
      const tick = (): void => {
        turns++;
        if (!parsed) setImmediate(tick);
      };
      setImmediate(tick);
      const result = await parseJsonBody(parser, bytes);
      parsed = true;
      expect(result).toEqual(value);
      // the parse did not hold the thread: immediates ran before it answered (a main-thread parse answers first)
      expect(turns).toBeGreaterThan(0);
      // and a small body is parsed at once, on this thread
      expect(await parseJsonBody(parser, bytesOf({ small: true }))).toEqual({ small: true });
    } finally {
      await parser.close();
    }
  });

  it("refuse a body of more than MAX_JSON_CONTAINERS objects and arrays, on either side of the size limit (nested or flat)", async () => {
    const parser = new JsonParser();
    try {
      const flat = { messages: Array.from({ length: MAX_JSON_CONTAINERS }, () => ({})) };
      const padded = { ...flat, pad: " ".repeat(OFF_THREAD_JSON_BYTES) };
      const nested = `${"[".repeat(MAX_JSON_CONTAINERS + 1)}${"]".repeat(MAX_JSON_CONTAINERS + 1)}`;
      for (const bytes of [bytesOf(flat), bytesOf(padded), Buffer.from(nested), Buffer.from(nested.padEnd(OFF_THREAD_JSON_BYTES, " "))]) {
        const error = await parseJsonBody(parser, bytes).catch((e: unknown) => e);
        expect(error).toBeInstanceOf(JsonShapeError);
        expect((error as JsonShapeError).containers).toBe(MAX_JSON_CONTAINERS + 1);
      }
      // exactly at the bound (the outer object and one fewer inner ones) is taken, on both sides
      const most = { messages: Array.from({ length: MAX_JSON_CONTAINERS - 2 }, () => ({})) };
      expect(await parseJsonBody(parser, bytesOf(most))).toEqual(most);
      const mostPadded = { ...most, pad: " ".repeat(OFF_THREAD_JSON_BYTES) };
      expect(await parseJsonBody(parser, bytesOf(mostPadded))).toEqual(mostPadded);
    } finally {
      await parser.close();
    }
  });

  it("report bad JSON with the parser's message, on either side of the size limit", async () => {
    const parser = new JsonParser();
    try {
      for (const text of [`{"a": ${" ".repeat(OFF_THREAD_JSON_BYTES)}`, '{"a": ']) {
        const error = await parseJsonBody(parser, Buffer.from(text)).catch((e: unknown) => e);
        expect(error).toBeInstanceOf(JsonSyntaxError);
        expect((error as Error).message).toMatch(/JSON/);
      }
    } finally {
      await parser.close();
    }
  });

  it("a value nested 100,000 deep (the most containers a body may hold) still gives JSON.parse's value (parsed on the main thread if the worker's reply cannot carry it)", async () => {
    const parser = new JsonParser();
    try {
      const depth = MAX_JSON_CONTAINERS;
      const text = `${"[".repeat(depth)}${"]".repeat(depth)}`.padEnd(OFF_THREAD_JSON_BYTES, " ");
      const expected = (() => {
        try {
          return { value: JSON.parse(text) as unknown };
        } catch (error) {
          return { error };
        }
      })();
      const result = await parseJsonBody(parser, Buffer.from(text)).then(
        (value) => ({ value }),
        (error: unknown) => ({ error }),
      );
      if ("error" in expected) expect("error" in result).toBe(true);
      else {
        let inner: unknown = (result as { value: unknown }).value;
        let levels = 0;
        while (Array.isArray(inner) && inner.length > 0) {
          inner = inner[0];
          levels++;
        }
        expect(levels + 1).toBe(depth);
      }
    } finally {
      await parser.close();
    }
  });
});
