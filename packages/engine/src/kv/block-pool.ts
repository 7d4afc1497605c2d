/**
 * A fixed pool of reference-counted ids (KV blocks or GDN state slots). Allocation pops a free id
 * with reference count 1; `release` returns the id to the pool when its count reaches 0.
 */
export class RefCountedPool {
  private readonly refCounts: Int32Array;
  private readonly freeIds: Int32Array;
  private freeTop: number;

  constructor(
    readonly capacity: number,
    private readonly what: string,
  ) {
    this.refCounts = new Int32Array(capacity);
    this.freeIds = new Int32Array(capacity);
    // lowest ids on top of the stack so allocation order is deterministic
    for (let i = 0; i < capacity; i++) this.freeIds[i] = capacity - 1 - i;
    this.freeTop = capacity;
  }

  get freeCount(): number {
    return this.freeTop;
  }

  get usedCount(): number {
    return this.capacity - this.freeTop;
  }

  /** Returns a fresh id with reference count 1, or -1 when the pool is empty. */
  allocate(): number {
    if (this.freeTop === 0) return -1;
    const id = this.freeIds[--this.freeTop]!;
    this.refCounts[id] = 1;
    return id;
  }

  retain(id: number): void {
    if (this.refCounts[id]! <= 0) throw new Error(`${this.what} ${id} retained while free`);
    this.refCounts[id]! += 1;
  }

  /** Drops one reference; returns true when the id went back to the pool. */
  release(id: number): boolean {
    const count = this.refCounts[id]!;
    if (count <= 0) throw new Error(`${this.what} ${id} released while free (double free)`);
    this.refCounts[id] = count - 1;
    if (count === 1) {
      this.freeIds[this.freeTop++] = id;
      return true;
    }
    return false;
  }

  refCount(id: number): number {
    return this.refCounts[id]!;
  }
}
