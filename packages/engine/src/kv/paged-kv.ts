import { describeQwen35, type ModelDescription, type Qwen35Config } from "@keepquant/gguf";
import { RefCountedPool } from "./block-pool.js";

export type KvType = "f16" | "f32";

/** Storage for pools: a zeroed buffer of `bytes` (the native model supplies natively owned memory). */
export type AllocateStorage = (bytes: number) => ArrayBuffer;
export const allocateJsStorage: AllocateStorage = (bytes) => new ArrayBuffer(bytes);

/**
 * Paged K/V storage for the full-attention layers. Every layer has one K and one V plane of
 * `[numBlocks, blockSize, Hkv, Dh]`; a sequence addresses its positions through a block table
 * (position p lives in block `table[p / blockSize]`, row `p % blockSize`). f16 planes hold raw
 * half bits (rounded to nearest even on write, as llama.cpp's F16 cache).
 */
export class PagedKvCache {
  readonly pool: RefCountedPool;
  readonly rowStride: number; // Hkv * Dh
  readonly k: (Uint16Array | Float32Array)[];
  readonly v: (Uint16Array | Float32Array)[];

  /**
   * The cache of a model's attention layers: [numBlocks, blockSize, Hkv, Dh] per layer and plane.
   * With `drafter`, one more layer after the trunk's: the MTP drafter block's own KV, addressed
   * through the same block tables (a sequence's position p holds the drafter's K/V of its row p).
   */
  static forModel(
    model: ModelDescription | Qwen35Config,
    numBlocks: number,
    blockSize: number,
    kvType: KvType,
    allocate?: AllocateStorage,
    drafter = false,
  ): PagedKvCache {
    const d = "dims" in model ? model : describeQwen35(model, 0);
    return new PagedKvCache(d.attentionLayers + (drafter ? 1 : 0), numBlocks, blockSize, d.dims.kvDim, kvType, allocate);
  }

  constructor(
    readonly numLayers: number,
    readonly numBlocks: number,
    readonly blockSize: number,
    /** elements of one position's K (or V) row: Hkv Dh (the description's kvDim) */
    rowStride: number,
    readonly kvType: KvType,
    allocate: AllocateStorage = allocateJsStorage,
  ) {
    this.pool = new RefCountedPool(numBlocks, "KV block");
    this.rowStride = rowStride;
    const elements = numBlocks * blockSize * this.rowStride;
    const plane = (): Uint16Array | Float32Array =>
      kvType === "f16" ? new Uint16Array(allocate(elements * 2)) : new Float32Array(allocate(elements * 4));
    this.k = [];
    this.v = [];
    for (let l = 0; l < numLayers; l++) {
      this.k.push(plane());
      this.v.push(plane());
    }
  }

  get bytes(): number {
    return this.numLayers * 2 * this.numBlocks * this.blockSize * this.rowStride * (this.kvType === "f16" ? 2 : 4);
  }

  /** Element offset of (position's row) in a layer plane, given the sequence's block table. */
  rowOffset(blockTable: readonly number[], position: number): number {
    const block = blockTable[Math.floor(position / this.blockSize)];
    if (block === undefined) throw new Error(`position ${position} is outside the block table (${blockTable.length} blocks)`);
    return (block * this.blockSize + (position % this.blockSize)) * this.rowStride;
  }

  /** Blocks needed to hold `tokens` positions. */
  blocksFor(tokens: number): number {
    return Math.ceil(tokens / this.blockSize);
  }
}
