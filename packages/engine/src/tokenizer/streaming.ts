/**
 * Streaming detokenization: token ids in, text deltas out. A UTF-8 character split across tokens
 * is held back until its last byte arrives, so a delta never ends in half a character. Bytes that
 * can never complete a character become U+FFFD, as the final `decode` of the same ids would give.
 */
import type { Tokenizer } from "./tokenizer.js";

export interface StreamingDetokenizerOptions {
  /** Render CONTROL tokens as their text. Default false. */
  special?: boolean;
}

export class StreamingDetokenizer {
  private readonly decoder = new TextDecoder("utf-8", { ignoreBOM: true });
  private readonly special: boolean;
  private emitted = "";

  constructor(
    private readonly tokenizer: Tokenizer,
    options: StreamingDetokenizerOptions = {},
  ) {
    this.special = options.special ?? false;
  }

  /** Adds one token; returns the text that became complete (possibly ""). */
  push(id: number): string {
    const piece = this.tokenizer.tokenToPiece(id, { special: this.special });
    const delta = this.decoder.decode(piece, { stream: true });
    this.emitted += delta;
    return delta;
  }

  /** Adds several tokens; returns the concatenated delta. */
  pushAll(ids: Iterable<number>): string {
    let delta = "";
    for (const id of ids) delta += this.push(id);
    return delta;
  }

  /** Ends the stream: held-back bytes of an unfinished character become U+FFFD. */
  flush(): string {
    const delta = this.decoder.decode();
    this.emitted += delta;
    return delta;
  }

  /** All text emitted so far. */
  get text(): string {
    return this.emitted;
  }
}
