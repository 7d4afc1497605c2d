/**
 * An engine's pools, sized from the model description and the options: the paged KV cache (its type
 * as llama.cpp computes it), the GDN state pool, and the prefix cache with its snapshot slots.
 */
import type { ResolvedOptions } from "./engine-options.js";
import type { AllocateStorage, KvType } from "./kv/paged-kv.js";
import { allocateJsStorage, PagedKvCache } from "./kv/paged-kv.js";
import { PrefixCache } from "./kv/prefix-cache.js";
import { GdnStatePool } from "./kv/state-pool.js";
import type { ModelDescription } from "@keepquant/gguf";

export interface EnginePools {
  kv: PagedKvCache;
  states: GdnStatePool;
  prefixCache: PrefixCache | undefined;
  /** bytes of the prefix cache's state snapshots */
  snapshotBytes: number;
}

/** The pools of an engine; `allocate` gives their storage (native with the native step), `diagnostics` says what changed. */
export function createPools(
  description: ModelDescription,
  options: ResolvedOptions,
  allocate: AllocateStorage,
  diagnostics: string[],
): EnginePools {
  const numBlocks = Math.ceil(options.kvCacheTokens / options.blockSize);
  // llama.cpp casts an F32 K/V cache to F16 for flash attention: same numbers, so store f16.
  const kvType: KvType = options.flashAttention ? "f16" : options.kvType;
  if (kvType !== options.kvType) {
    diagnostics.push(
      'kvType "f32" with flash attention computes as f16 (llama.cpp casts K/V to F16 for flash attention); the cache is stored as f16. Pass flashAttention: false for an f32 cache.',
    );
  }
  const mtp = options.speculative?.method === "mtp";
  const kv = PagedKvCache.forModel(description, numBlocks, options.blockSize, kvType, allocate, mtp);
  const states = GdnStatePool.forModel(description, options.maxSequences, allocate);
  if (options.prefixCacheSnapshots === 0) return { kv, states, prefixCache: undefined, snapshotBytes: 0 };
  const snapshots = GdnStatePool.forModel(description, options.prefixCacheSnapshots, allocateJsStorage);
  return { kv, states, prefixCache: new PrefixCache(kv, states, snapshots), snapshotBytes: snapshots.bytes };
}
