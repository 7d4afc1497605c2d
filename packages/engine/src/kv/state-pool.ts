import { describeQwen35, type ModelDescription, type Qwen35Config } from "@keepquant/gguf";
import { RefCountedPool } from "./block-pool.js";
import { allocateJsStorage, type AllocateStorage } from "./paged-kv.js";

/**
 * Per-sequence Gated DeltaNet state, f32 (as llama.cpp's recurrent cache): for every GDN layer a
 * conv plane `[slots, conv_dim, K-1]` (last K-1 raw inputs per channel, oldest first) and a
 * recurrent plane `[slots, Hv, Dv, Dk]`. A slot is zeroed when allocated.
 */
export class GdnStatePool {
  readonly pool: RefCountedPool;
  readonly convStride: number;
  readonly ssmStride: number;
  readonly conv: Float32Array[];
  readonly ssm: Float32Array[];

  /**
   * The state of a model's GDN layers: conv [slots, conv_dim, K-1] and recurrent [slots, Hv, Dv, Dk] per
   * layer, sized by its description (a config alone is described here).
   */
  static forModel(model: ModelDescription | Qwen35Config, numSlots: number, allocate?: AllocateStorage): GdnStatePool {
    const d = "dims" in model ? model : describeQwen35(model, 0);
    return new GdnStatePool(d.gdnLayers, numSlots, d.dims.convStateElements, d.dims.ssmStateElements, allocate);
  }

  constructor(
    readonly numLayers: number,
    readonly numSlots: number,
    /** elements of one slot's conv state (the description's convStateElements) */
    convStride: number,
    /** elements of one slot's recurrent state (ssmStateElements) */
    ssmStride: number,
    allocate: AllocateStorage = allocateJsStorage,
  ) {
    this.pool = new RefCountedPool(numSlots, "GDN state slot");
    this.convStride = convStride;
    this.ssmStride = ssmStride;
    this.conv = [];
    this.ssm = [];
    for (let l = 0; l < numLayers; l++) {
      this.conv.push(new Float32Array(allocate(Math.max(1, numSlots * this.convStride) * 4)));
      this.ssm.push(new Float32Array(allocate(Math.max(1, numSlots * this.ssmStride) * 4)));
    }
  }

  get bytes(): number {
    return this.numLayers * this.numSlots * (this.convStride + this.ssmStride) * 4;
  }

  /** A zeroed slot, or -1 when none is free. */
  allocate(): number {
    const slot = this.pool.allocate();
    if (slot >= 0) this.reset(slot);
    return slot;
  }

  reset(slot: number): void {
    for (let l = 0; l < this.numLayers; l++) {
      this.conv[l]!.fill(0, slot * this.convStride, (slot + 1) * this.convStride);
      this.ssm[l]!.fill(0, slot * this.ssmStride, (slot + 1) * this.ssmStride);
    }
  }

  release(slot: number): void {
    this.pool.release(slot);
  }
}
