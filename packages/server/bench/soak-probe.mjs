/**
 * Loaded into the `keepquant serve` child of bench/soak.ts (`node --expose-gc --import <this file>`): it
 * answers the soak's IPC messages from inside the server process, so the figures are the server's own.
 *
 *   { type: "sample" }           -> { type: "sample", memory, spaces, heap, resources } after forced full GCs
 *   { type: "snapshot", file }   -> { type: "snapshot", file } once a V8 heap snapshot is written there
 *
 * Plain JavaScript: the child runs without a TypeScript loader (a loader's hook thread would add its own
 * heap and malloc arena to the memory measured). Nothing here is part of the server.
 */
import { setImmediate as nextTurn } from "node:timers/promises";
import v8 from "node:v8";

/** Full collections before a sample: a second one after a turn of the loop collects what finalizers freed. */
async function collect() {
  if (typeof globalThis.gc !== "function") throw new Error("soak-probe: run the server with --expose-gc");
  for (let i = 0; i < 3; i++) {
    globalThis.gc();
    await nextTurn();
  }
}

/** Each V8 heap space's size and the bytes used in it (the young generation is `new_space`). */
function spaces() {
  /** @type {Record<string, { size: number; used: number }>} */
  const bySpace = {};
  for (const space of v8.getHeapSpaceStatistics()) bySpace[space.space_name] = { size: space.space_size, used: space.space_used_size };
  return bySpace;
}

/** Active libuv handles and requests by type (sockets, timers, file handles ...): a leaked one shows here. */
function resources() {
  /** @type {Record<string, number>} */
  const counts = {};
  for (const kind of process.getActiveResourcesInfo()) counts[kind] = (counts[kind] ?? 0) + 1;
  return counts;
}

process.on("message", (message) => {
  void (async () => {
    if (message?.type === "sample") {
      await collect();
      const heap = v8.getHeapStatistics();
      process.send?.({
        type: "sample",
        memory: process.memoryUsage(),
        spaces: spaces(),
        heap: {
          mallocedMemory: heap.malloced_memory,
          peakMallocedMemory: heap.peak_malloced_memory,
          nativeContexts: heap.number_of_native_contexts,
          detachedContexts: heap.number_of_detached_contexts,
        },
        resources: resources(),
      });
    } else if (message?.type === "snapshot") {
      await collect();
      process.send?.({ type: "snapshot", file: v8.writeHeapSnapshot(message.file) });
    }
  })();
});
// the channel must not keep the server alive once the soak lets go of it
process.on("disconnect", () => process.removeAllListeners("message"));
