/**
 * Images through the real `ai` package: user image parts on the parity fixture model with the parity projector
 * (written by our synthesizer into a temp dir) on the default provider, held to llama.cpp's mtmd greedy tokens
 * (goldens/vision); the refusals as the AI SDK's typed errors; image URLs only when the settings allow them.
 */
import fs from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import os from "node:os";
import path from "node:path";
import { InvalidPromptError, UnsupportedFunctionalityError } from "@ai-sdk/provider";
import { parityFixture } from "@keepquant/fixtures";
import { parityFixtureFile, parityFixturesUnavailableReason, REPO_ROOT } from "@keepquant/fixtures/oracle";
import { writeParityProjector } from "@keepquant/fixtures/projector";
import { mockHubEnv, startMockHub } from "@keepquant/hub/testing";
import { generateText, streamText } from "ai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createKeepquant } from "./index.js";

const GOLDENS = path.join(REPO_ROOT, "goldens", "vision");
const manifest = JSON.parse(fs.readFileSync(path.join(GOLDENS, "encoder-manifest.json"), "utf8")) as {
  cases: { name: string; model: string; greedy: number[]; embeddings: { tokens: number } }[];
};
/** llama.cpp's mtmd on tied-4l-f32 with the F32 projector and pattern-96x96.png, "Describe the picture." */
const GOLDEN = manifest.cases.find((c) => c.name === "f32-96x96")!;
const PROMPT = "Describe the picture.";
const PNG = new Uint8Array(fs.readFileSync(path.join(GOLDENS, "inputs", "pattern-96x96.png")));
const OTHER_PNG = new Uint8Array(fs.readFileSync(path.join(GOLDENS, "inputs", "pattern-64x160.png")));
/** The goldens' settings (F32 K/V, flash attention off) on the default provider, one thread. */
const SETTINGS = { threads: 1, engine: { kvType: "f32", flashAttention: false } } as const;
const CALL = { maxOutputTokens: GOLDEN.greedy.length, temperature: 0, providerOptions: { keepquant: { ignoreEog: true } } };

const reason = parityFixturesUnavailableReason();
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kq-ai-sdk-vision-"));
const projector = path.join(dir, "mmproj-f32.gguf");
const keepquant = createKeepquant();
let file = "";
let server: http.Server | undefined;
let baseUrl = "";

beforeAll(async () => {
  if (reason) return;
  file = await parityFixtureFile(parityFixture(GOLDEN.model));
  await writeParityProjector(projector, "f32");
  server = http.createServer((request, response) => {
    if (request.url === "/cat.png") response.writeHead(200, { "content-type": "image/png" }).end(PNG);
    else response.writeHead(404).end();
  });
  await new Promise<void>((resolve) => server!.listen(0, "127.0.0.1", resolve));
  baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await keepquant.dispose();
  await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
  fs.rmSync(dir, { recursive: true, force: true });
});

const imageMessage = (image: Uint8Array | string | URL, mediaType = "image/png") => [
  {
    role: "user" as const,
    content: [
      { type: "file" as const, data: image, mediaType },
      { type: "text" as const, text: PROMPT },
    ],
  },
];

describe.skipIf(reason !== undefined)(`images through the AI SDK${reason ? ` (skipped: ${reason})` : ""}`, () => {
  it("generateText with an image part: llama.cpp's mtmd greedy text; streamText with base64 the same; another image changes it", async () => {
    const model = keepquant(file, { ...SETTINGS, projector });
    const engine = await model.engine();
    const expected = engine.tokenizer!.decode(GOLDEN.greedy);
    const result = await generateText({
      model,
      messages: [
        {
          role: "user",
          content: [
            { type: "image", image: PNG },
            { type: "text", text: PROMPT },
          ],
        },
      ],
      ...CALL,
    });
    // the fixture's template opens <think>: the 8 tokens are reasoning
    expect(result.reasoningText).toBe(expected);
    expect(result.usage.outputTokens).toBe(GOLDEN.greedy.length);
    expect(result.usage.inputTokens).toBe(24 + GOLDEN.embeddings.tokens); // mtmd's 4 + 20 text tokens and the 9 image tokens

    const stream = streamText({ model, messages: imageMessage(Buffer.from(PNG).toString("base64")), ...CALL });
    let streamed = "";
    for await (const part of stream.fullStream) if (part.type === "reasoning-delta") streamed += part.text;
    expect(streamed).toBe(expected);
    const dataUrl = await generateText({
      model,
      messages: imageMessage(`data:image/png;base64,${Buffer.from(PNG).toString("base64")}`),
      ...CALL,
    });
    expect(dataUrl.reasoningText).toBe(expected);

    const other = await generateText({ model, messages: imageMessage(OTHER_PNG), ...CALL });
    expect(other.reasoningText).not.toBe(expected);
    expect(other.usage.outputTokens).toBe(GOLDEN.greedy.length);
    const none = await generateText({ model, prompt: PROMPT, ...CALL });
    expect(none.reasoningText).not.toBe(expected);
    const stats = engine.stats();
    expect(stats.requests).toEqual({ running: 0, waiting: 0 });
    expect(stats.kv.blocksFree).toBe(stats.kv.blocksTotal);
  });

  it("a bad image is InvalidPromptError naming the part; a text-only model is UnsupportedFunctionalityError naming the setting", async () => {
    const model = keepquant(file, { ...SETTINGS, projector });
    const bad = await generateText({
      model,
      messages: imageMessage(new TextEncoder().encode("not a picture"), "image/png"),
      ...CALL,
    }).catch((e: unknown) => e);
    expect(InvalidPromptError.isInstance(bad)).toBe(true);
    expect((bad as Error).message).toMatch(/keepquant: prompt\[0\] \(user\) content\[0\]: unsupported image format/);

    const textOnly = keepquant(file, SETTINGS);
    const refused = await generateText({ model: textOnly, messages: imageMessage(PNG), ...CALL }).catch((e: unknown) => e);
    expect(UnsupportedFunctionalityError.isInstance(refused)).toBe(true);
    expect((refused as Error).message).toMatch(/content\[0\] is an image \(image\/png\), but the model .* takes no images: .*projector/);
  });

  it("image URLs: refused unless imageUrls is set; then fetched within its limits", async () => {
    const url = new URL(`${baseUrl}/cat.png`);
    const model = keepquant(file, { ...SETTINGS, projector });
    expect(model.supportedUrls).toEqual({});
    // a URL that reaches the model (a direct call: generateText downloads URLs the model does not take)
    const refused = await model.doGenerate({ prompt: imageMessage(url), maxOutputTokens: 1 }).catch((e: unknown) => e);
    expect(UnsupportedFunctionalityError.isInstance(refused)).toBe(true);
    expect((refused as Error).message).toMatch(/content\[0\] is an image URL \(http:\/\/127\.0\.0\.1:\d+\/cat\.png\).*imageUrls/);

    const fetching = keepquant(file, { ...SETTINGS, projector, imageUrls: { maxBytes: 1 << 20, timeoutMs: 10_000 } });
    expect(fetching.supportedUrls["image/*"]![0]!.test(url.href)).toBe(true);
    const engine = await fetching.engine();
    const result = await generateText({ model: fetching, messages: imageMessage(url), ...CALL });
    expect(result.reasoningText).toBe(engine.tokenizer!.decode(GOLDEN.greedy));

    const small = keepquant(file, { ...SETTINGS, projector, imageUrls: { maxBytes: 100 } });
    const tooLarge = await small.doGenerate({ prompt: imageMessage(url), maxOutputTokens: 1 }).catch((e: unknown) => e);
    expect(InvalidPromptError.isInstance(tooLarge)).toBe(true);
    expect((tooLarge as Error).message).toMatch(
      /content\[0\]: the image at .*cat\.png is (\d+ bytes, )?more than the imageUrls limit of 100/,
    );
    const missing = await small
      .doGenerate({ prompt: imageMessage(new URL(`${baseUrl}/missing.png`)), maxOutputTokens: 1 })
      .catch((e: unknown) => e);
    expect((missing as Error).message).toMatch(/answered HTTP 404/);
  });

  it("projector: hf:<repo> is that repository's mmproj-*.gguf, fetched alone into the cache", async () => {
    const repo = "test/Vision-GGUF";
    const hub = await startMockHub({
      [repo]: { files: { "vision-F32.gguf": fs.readFileSync(file), "mmproj-F32.gguf": fs.readFileSync(projector) } },
    });
    try {
      const env = mockHubEnv(hub, path.join(dir, "hf"));
      const model = keepquant(file, { ...SETTINGS, projector: `hf:${repo}`, engine: { ...SETTINGS.engine, hub: { env } } });
      const engine = await model.engine();
      expect(engine.projector).toBeDefined();
      const result = await generateText({ model, messages: imageMessage(PNG), ...CALL });
      expect(result.reasoningText).toBe(engine.tokenizer!.decode(GOLDEN.greedy));
      const downloads = hub.requests.filter((q) => q.path.startsWith("/cdn/")).length;
      expect(downloads).toBe(1); // the projector, not the model
    } finally {
      await hub.close();
    }
  });
});
