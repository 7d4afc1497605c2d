/** Options of createKeepquantServer checked when the server is made, naming the option and its range. */
import type { Engine } from "@keepquant/engine";
import { describe, expect, it } from "vitest";
import { createKeepquantServer, MAX_DRAIN_TIMEOUT_MS } from "./index.js";

const never = new Promise<Engine>(() => undefined);

describe("drainTimeoutMs: a timer duration Node can hold", () => {
  it("is refused beyond 2^31 - 1 ms (Node would fire the timer after 1 ms), below 0, or not finite", () => {
    expect(MAX_DRAIN_TIMEOUT_MS).toBe(2 ** 31 - 1);
    for (const drainTimeoutMs of [1e12, MAX_DRAIN_TIMEOUT_MS + 1, -1, Number.POSITIVE_INFINITY, Number.NaN]) {
      expect(() => createKeepquantServer({ engine: never, drainTimeoutMs, webui: false }), String(drainTimeoutMs)).toThrow(
        new RangeError(`drainTimeoutMs must be a number of ms in [0, 2147483647] (Node's timer maximum), got ${drainTimeoutMs}`),
      );
    }
    for (const drainTimeoutMs of [0, 1, MAX_DRAIN_TIMEOUT_MS]) {
      expect(() => createKeepquantServer({ engine: never, drainTimeoutMs, webui: false })).not.toThrow();
    }
  });

  it("close(timeoutMs) checks its argument the same way", async () => {
    const server = createKeepquantServer({ engine: never, webui: false });
    await expect(server.close(1e12)).rejects.toThrow(/^close\(timeoutMs\) must be a number of ms in \[0, 2147483647\]/);
    await server.close(0);
  });
});
