import { GgufIoError, type GgufByteSource } from "@keepquant/gguf";
import type { HubClient } from "./http.js";

/** Bytes fetched per Range request while reading a header: a GGUF header (vocabulary included) is a few MB. */
export const REMOTE_BLOCK_BYTES = 2 * 1024 * 1024;

/**
 * A GGUF file on the Hub read by HTTP Range requests, block by block, each block fetched once: enough to read
 * the header and plan the model before anything is downloaded. `fetchedBytes` says how much moved.
 */
export class RemoteSource implements GgufByteSource {
  private readonly blocks = new Map<number, Promise<Uint8Array>>();
  fetchedBytes = 0;

  constructor(
    private readonly client: HubClient,
    private readonly repo: string,
    private readonly url: string,
    readonly size: number,
    readonly description: string,
    private readonly signal?: AbortSignal,
  ) {}

  private block(index: number): Promise<Uint8Array> {
    let block = this.blocks.get(index);
    if (!block) {
      block = this.fetchBlock(index);
      this.blocks.set(index, block);
      block.catch(() => this.blocks.delete(index));
    }
    return block;
  }

  private async fetchBlock(index: number): Promise<Uint8Array> {
    const start = index * REMOTE_BLOCK_BYTES;
    const end = Math.min(this.size, start + REMOTE_BLOCK_BYTES);
    const response = await this.client.fetch(this.url, {
      repo: this.repo,
      signal: this.signal,
      headers: { range: `bytes=${start}-${end - 1}`, "accept-encoding": "identity" },
    });
    const bytes = new Uint8Array(await response.arrayBuffer());
    // a server that ignores Range answers 200 with the whole file: keep only the block
    const block = response.status === 200 ? bytes.subarray(start, end) : bytes;
    if (block.byteLength !== end - start) {
      throw new GgufIoError(`${this.description}: a range request for bytes ${start}-${end - 1} returned ${block.byteLength} bytes`, {
        offset: start,
      });
    }
    this.fetchedBytes += block.byteLength;
    return block;
  }

  async read(position: number, length: number): Promise<Uint8Array> {
    if (position < 0 || length < 0 || position + length > this.size) {
      throw new GgufIoError(`read of ${length} bytes at offset ${position} is beyond the end of ${this.description} (${this.size})`, {
        offset: position,
      });
    }
    const out = new Uint8Array(length);
    let done = 0;
    while (done < length) {
      const at = position + done;
      const index = Math.floor(at / REMOTE_BLOCK_BYTES);
      const block = await this.block(index);
      const offset = at - index * REMOTE_BLOCK_BYTES;
      const take = Math.min(length - done, block.byteLength - offset);
      out.set(block.subarray(offset, offset + take), done);
      done += take;
    }
    return out;
  }

  async close(): Promise<void> {
    this.blocks.clear();
  }
}
