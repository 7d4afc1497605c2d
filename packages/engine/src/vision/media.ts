/**
 * A prompt with images in it, as the step loop feeds it to the forward: the token sequence with one
 * placeholder per image token, the image embeddings at those rows, and every row's multimodal
 * rotary position (llama.cpp's mtmd layout for Qwen3.5):
 *
 * - a text token at running position p sits at (p, p, p), then p += 1;
 * - an image of gw x gh merged tokens at running position p puts token (row, col) at
 *   (p, p + row, p + col), in row-major order, then p += max(gw, gh);
 * - tokens after the prompt (generated ones) continue from there: KV index i is at
 *   i + ropeDelta in all three.
 *
 * Placeholders are negative ids derived from the image's content hash and the row, never looked up
 * as tokens: the prefix cache keys on them, so a cached prefix matches only the same image bytes.
 */
import { createHash } from "node:crypto";
import type { StepEntry } from "../model/forward.js";

/** An encoded image: its embedding rows and merged-token grid. */
export interface EncodedImage {
  /** [tokens, width] f32 */
  readonly embeddings: Float32Array;
  readonly tokens: number;
  readonly gridWidth: number;
  readonly gridHeight: number;
  /** The content hash of the image's bytes (hex). */
  readonly hash: string;
}

export interface PromptMedia {
  /** (t, h, w) of every prompt token */
  readonly ropePositions: Int32Array;
  /** Rotary position of KV index i past the prompt: i + ropeDelta. */
  readonly ropeDelta: number;
  /** The image rows of the prompt, ascending. */
  readonly spans: readonly { readonly start: number; readonly rows: number; readonly data: Float32Array }[];
}

/** Hex sha-256 of an image's bytes (the prefix cache's key for its tokens). */
export function imageHash(bytes: Uint8Array): string {
  return createHash("sha256").update(bytes).digest("hex");
}

/** Negative placeholder ids of an image's `count` tokens, derived from its hash. */
export function imagePlaceholders(hash: string, count: number): number[] {
  const seed = Number.parseInt(hash.slice(0, 8), 16) >>> 0;
  return Array.from({ length: count }, (_, i) => -1 - ((Math.imul(seed ^ i, 0x9e3779b1) >>> 1) & 0x3fffffff));
}

/**
 * The tokens and media of a prompt given as pieces: token runs and encoded images, in order.
 * `width` is the language model's embedding length (every image's row width).
 */
export function assemblePrompt(
  pieces: readonly (readonly number[] | EncodedImage)[],
  width: number,
): { tokens: number[]; media: PromptMedia | undefined } {
  const tokens: number[] = [];
  const rope: number[] = [];
  const spans: { start: number; rows: number; data: Float32Array }[] = [];
  let p = 0;
  for (const piece of pieces) {
    if (!isImage(piece)) {
      for (const t of piece) {
        tokens.push(t);
        rope.push(p, p, p);
        p++;
      }
      continue;
    }
    if (piece.embeddings.length !== piece.tokens * width) {
      throw new RangeError(`image embeddings: expected ${piece.tokens} x ${width} values, got ${piece.embeddings.length}`);
    }
    if (piece.gridWidth * piece.gridHeight !== piece.tokens) {
      throw new RangeError(`image grid ${piece.gridWidth}x${piece.gridHeight} does not hold ${piece.tokens} tokens`);
    }
    spans.push({ start: tokens.length, rows: piece.tokens, data: piece.embeddings });
    tokens.push(...imagePlaceholders(piece.hash, piece.tokens));
    for (let i = 0; i < piece.tokens; i++) rope.push(p, p + Math.floor(i / piece.gridWidth), p + (i % piece.gridWidth));
    p += Math.max(piece.gridWidth, piece.gridHeight);
  }
  if (spans.length === 0) return { tokens, media: undefined };
  return { tokens, media: { ropePositions: Int32Array.from(rope), ropeDelta: p - tokens.length, spans } };
}

function isImage(piece: readonly number[] | EncodedImage): piece is EncodedImage {
  return !Array.isArray(piece);
}

/**
 * The step-entry fields of a chunk [start, start + n) of a sequence with media: its image rows and
 * every row's rotary position (prompt rows from the prompt's table, later rows at index + delta).
 */
export function mediaEntryFields(
  media: PromptMedia,
  promptLength: number,
  start: number,
  n: number,
  width: number,
): Pick<StepEntry, "embeddings" | "ropePositions"> {
  const ropePositions = new Int32Array(3 * n);
  for (let i = 0; i < n; i++) {
    const index = start + i;
    if (index < promptLength) ropePositions.set(media.ropePositions.subarray(3 * index, 3 * index + 3), 3 * i);
    else ropePositions.fill(index + media.ropeDelta, 3 * i, 3 * i + 3);
  }
  const rows: number[] = [];
  const parts: Float32Array[] = [];
  for (const span of media.spans) {
    const from = Math.max(span.start, start);
    const to = Math.min(span.start + span.rows, start + n);
    if (from >= to) continue;
    for (let r = from; r < to; r++) rows.push(r - start);
    parts.push(span.data.subarray((from - span.start) * width, (to - span.start) * width));
  }
  if (rows.length === 0) return { ropePositions };
  const data = new Float32Array(rows.length * width);
  let at = 0;
  for (const part of parts) {
    data.set(part, at);
    at += part.length;
  }
  return { ropePositions, embeddings: { rows, data } };
}
