/**
 * Vision against llama.cpp's mtmd (goldens/vision/encoder-manifest.json; how they were made: the
 * README beside it). Per case, a parity fixture model, the parity projector written by our
 * synthesizer (F32, or quantized by llama.cpp's ggml_quantize_chunk), and a pattern PNG:
 * - the prompt's tokens (text runs around the vision markers) equal mtmd's chunks;
 * - the encoder's embeddings (our decode, resize and normalization, then the encoder) are within
 *   2e-4 of the output scale of mtmd's (measured: 5.5e-5 with the F32 projector, whose f32 sums run
 *   in another order; 0 and 1e-7 with the quantized ones);
 * - fed mtmd's embeddings and evaluated chunk by chunk as mtmd does, the language model's logits at
 *   8 steps after the image are within 1e-4 of llama.cpp's on its top 64 (measured: 1.3e-5 on F32,
 *   0 on Q8_0, 3.8e-6 on Q4_K_M; without the (t, h, w) positions they move by 0.08);
 * - the engine, end to end from the image bytes, generates llama.cpp's 8 greedy tokens.
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { createHash } from "node:crypto";
import { parityFixture } from "@keepquant/fixtures";
import { parityFixtureFile, parityFixturesUnavailableReason, REPO_ROOT } from "@keepquant/fixtures/oracle";
import { type ProjectorFixtureType, writeParityProjector } from "@keepquant/fixtures/projector";
import { oracleUnavailableReason } from "@keepquant/oracle";
import * as native from "@keepquant/tt-native";
import { afterAll, describe, expect, it } from "vitest";
import { encodeMultimodalChat } from "../chat/encode.js";
import { buildLoadPlan, readGguf } from "@keepquant/gguf";
import { Engine } from "../engine.js";
import { allocateJsStorage, PagedKvCache } from "../kv/paged-kv.js";
import { GdnStatePool } from "../kv/state-pool.js";
import { Qwen35Forward, type StepEntry } from "../model/forward.js";
import { loadQwen35Weights, readTensorSource } from "../model/load.js";
import { createNativeMatmulProviders } from "../model/native-provider.js";
import { quantDequantizeRow, selectProviders, typescriptProviders } from "../model/providers.js";
import { fixtureTokenizer } from "../tokenizer/test-support.js";

interface Chunk {
  type: "text" | "image";
  tokens?: number[];
  nTokens?: number;
  nPos?: number;
  positions?: [number, number, number, number][];
}

interface VisionCase {
  name: string;
  model: string;
  projector: { type: ProjectorFixtureType; sha256: string };
  image: { file: string; sha256: string };
  chunks: Chunk[];
  embeddings: { file: string; tokens: number; width: number };
  greedy: number[];
  topLogits: [number, number][][];
}

const GOLDENS = path.join(REPO_ROOT, "goldens", "vision");
const manifest = JSON.parse(fs.readFileSync(path.join(GOLDENS, "encoder-manifest.json"), "utf8")) as { cases: VisionCase[] };
const reason = parityFixturesUnavailableReason() ?? oracleUnavailableReason();
const sha256 = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex");
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "kq-vision-"));
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));

function relativeError(ours: Float32Array, theirs: Float32Array): number {
  let worst = 0;
  let scale = 0;
  for (let i = 0; i < theirs.length; i++) {
    worst = Math.max(worst, Math.abs(ours[i]! - theirs[i]!));
    scale = Math.max(scale, Math.abs(theirs[i]!));
  }
  return worst / scale;
}

describe.skipIf(reason !== undefined)(`vision against llama.cpp's mtmd${reason ? ` (skipped: ${reason})` : ""}`, () => {
  for (const c of manifest.cases) {
    describe(c.name, () => {
      const setup = (async () => {
        const model = await parityFixtureFile(parityFixture(c.model));
        const projector = path.join(tmp, `${c.name}.mmproj.gguf`);
        await writeParityProjector(projector, c.projector.type);
        const png = new Uint8Array(fs.readFileSync(path.join(GOLDENS, c.image.file)));
        // a copy of exactly the file's bytes (a Buffer may be a view into a larger, shared ArrayBuffer)
        const golden = new Float32Array(new Uint8Array(fs.readFileSync(path.join(GOLDENS, c.embeddings.file))).buffer);
        return { model, projector, png, golden };
      })();

      it("the fixtures are the ones the goldens were made from", async () => {
        const { projector, png } = await setup;
        expect(sha256(fs.readFileSync(projector))).toBe(c.projector.sha256);
        expect(sha256(png)).toBe(c.image.sha256);
      });

      it("the chat prompt's tokens are mtmd's", async () => {
        const { png } = await setup;
        const chat = encodeMultimodalChat(fixtureTokenizer(), [
          {
            role: "user",
            content: [
              { type: "image", image: png },
              { type: "text", text: "Describe the picture." },
            ],
          },
        ]);
        const ours = chat.pieces.map((p) => (Array.isArray(p) ? p : "image"));
        const theirs = c.chunks.map((k) => (k.type === "text" ? k.tokens! : "image"));
        expect(ours.flat()).toEqual(theirs.flat());
      });

      it.each(["ts", "auto"] as const)(
        "provider %s: the encoder's embeddings match mtmd's, and the engine generates llama.cpp's greedy tokens",
        async (provider) => {
          const { model, projector, png, golden } = await setup;
          const engine = await Engine.load(model, { projector, provider, kvType: "f32", flashAttention: false });
          try {
            expect(engine.stats().providers.vision).toBe(
              provider === "ts" || !native.nativeAddon() ? "ts-spec" : `cpu-native-vision-${native.getNativeIsa()}`,
            );
            const image = await engine.encodeImage(png);
            expect(image.tokens).toBe(c.embeddings.tokens);
            expect(relativeError(image.embeddings, golden)).toBeLessThan(2e-4);
            const chat = encodeMultimodalChat(engine.tokenizer!, [
              {
                role: "user",
                content: [
                  { type: "image", image: png },
                  { type: "text", text: "Describe the picture." },
                ],
              },
            ]);
            const pieces = chat.pieces.map((p) => (Array.isArray(p) ? p : image));
            const result = await engine.generateToEnd({ pieces }, { maxTokens: c.greedy.length, temperature: 0, ignoreEog: true });
            expect(result.tokens).toEqual(c.greedy);
          } finally {
            engine.dispose();
          }
        },
      );

      it("fed mtmd's embeddings, the logits after the image are llama.cpp's (teacher-forced)", async () => {
        const { model, golden } = await setup;
        const plan = buildLoadPlan(await readGguf(model));
        const { weights } = await loadQwen35Weights(plan, readTensorSource(model), "llama");
        const kv = PagedKvCache.forModel(weights.config, 16, 8, "f32", allocateJsStorage);
        const states = GdnStatePool.forModel(weights.config, 1, allocateJsStorage);
        const providers = [...(await createNativeMatmulProviders("llama", undefined, [])), ...typescriptProviders("llama", [])];
        const selection = selectProviders(weights, providers, "llama");
        const forward = new Qwen35Forward(weights, kv, states, selection.byWeight, "llama", quantDequantizeRow, 256, false);
        const tokens: number[] = [];
        const rope: number[] = [];
        const rows: number[] = [];
        let p = 0;
        for (const k of c.chunks) {
          if (k.type === "text") {
            for (const t of k.tokens!) {
              tokens.push(t);
              rope.push(p, p, p);
              p++;
            }
          } else {
            for (const [t, y, x] of k.positions!) {
              rows.push(tokens.length);
              tokens.push(0);
              rope.push(t, y, x);
            }
            p += k.nPos!;
          }
        }
        const blockTable = Array.from({ length: 8 }, () => kv.pool.allocate());
        const stateSlot = states.allocate();
        const base = { blockTable, stateSlot };
        // as mtmd evaluates it: each chunk (text run, image) in a decode of its own
        let start = 0;
        let logits = new Float32Array(0);
        for (const k of c.chunks) {
          const n = k.type === "text" ? k.tokens!.length : k.nTokens!;
          const chunkRows = rows.filter((r) => r >= start && r < start + n).map((r) => r - start);
          const embeddings = chunkRows.length > 0 ? { rows: chunkRows, data: golden } : undefined;
          logits = forward
            .forward([
              {
                ...base,
                tokens: tokens.slice(start, start + n),
                startPos: start,
                logits: "last",
                ropePositions: Int32Array.from(rope.slice(3 * start, 3 * (start + n))),
                ...(embeddings ? { embeddings } : {}),
              },
            ])
            .slice();
          start += n;
        }
        let worst = 0;
        for (let s = 0; s < c.greedy.length; s++) {
          for (const [id, value] of c.topLogits[s]!) worst = Math.max(worst, Math.abs(logits[id]! - value));
          const entry: StepEntry = {
            ...base,
            tokens: [c.greedy[s]!],
            startPos: start,
            logits: "last",
            ropePositions: Int32Array.from([p, p, p]),
          };
          logits = forward.forward([entry]).slice();
          start++;
          p++;
        }
        expect(worst).toBeLessThan(1e-4);
      });
    });
  }
});
