/**
 * Images over HTTP with a real tiny model: the parity fixture `tied-4l-f32` and the synthetic F32 parity projector
 * (written into a temporary folder, removed after). The engines run the default provider (the native step and the
 * native vision encoder when the addon loads). Images are the committed goldens/vision inputs and bytes built here.
 */
import fs from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import os from "node:os";
import path from "node:path";
import { crc32 } from "node:zlib";
import { Engine } from "@keepquant/engine";
import { writeParityProjector } from "@keepquant/fixtures/projector";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { defaultModelForTests, postJson, REPO_ROOT, startTestServer, TEST_ENGINE_OPTIONS, type TestServer } from "./test-support.js";

const modelFile = defaultModelForTests("kq-vision-model-");
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kq-vision-server-"));
const projectorFile = path.join(dir, "mmproj-parity-f32.gguf");
const inputs = path.join(REPO_ROOT, "goldens", "vision", "inputs");
const PNG = fs.readFileSync(path.join(inputs, "pattern-96x96.png"));
const OTHER_PNG = fs.readFileSync(path.join(inputs, "pattern-100x70.png"));
const GIF_2_FRAMES = fs.readFileSync(path.join(inputs, "pattern-30x20-2frames.gif"));

const dataUrl = (bytes: Uint8Array, type = "image/png"): string => `data:${type};base64,${Buffer.from(bytes).toString("base64")}`;

/** A PNG declaring width x height with a token IDAT (a few bytes): the decoder must refuse it from the header. */
function pngHeader(width: number, height: number): Buffer {
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(width, 0);
  ihdr.writeUInt32BE(height, 4);
  ihdr.set([8, 2, 0, 0, 0], 8);
  const signature = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
  const idat = Buffer.from([0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01]);
  return Buffer.concat([signature, pngChunk("IHDR", ihdr), pngChunk("IDAT", idat), pngChunk("IEND", Buffer.alloc(0))]);
}

/** A PNG chunk: length, type, data, CRC. */
function pngChunk(type: string, data: Buffer): Buffer {
  const head = Buffer.alloc(4);
  head.writeUInt32BE(data.length);
  const body = Buffer.concat([Buffer.from(type, "latin1"), data]);
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(body));
  return Buffer.concat([head, body, crc]);
}

/** The pattern PNG made an APNG: an acTL chunk (2 frames) right after IHDR. */
function animatedPng(): Buffer {
  const actl = Buffer.alloc(8);
  actl.writeUInt32BE(2, 0);
  return Buffer.concat([PNG.subarray(0, 33), pngChunk("acTL", actl), PNG.subarray(33)]);
}

/** A JSON body of an answer: its shape is what the assertions check. */
// biome-ignore lint/suspicious/noExplicitAny: answers are read as the wire format, field by field
type Json = any;

let vision: Engine;
let text: Engine;
let visionServer: TestServer;
let textServer: TestServer;
/** allows image URLs; at most 1 image per request; images up to PNG's size + 1 KiB */
let urlServer: TestServer;
/** a local http server the url tests fetch from */
let origin: http.Server;
let originUrl: string;

beforeAll(async () => {
  await writeParityProjector(projectorFile, "f32");
  vision = await Engine.load(modelFile(), { ...TEST_ENGINE_OPTIONS, projector: projectorFile });
  text = await Engine.load(modelFile(), TEST_ENGINE_OPTIONS);
  visionServer = await startTestServer(vision, { modelName: "vision" });
  textServer = await startTestServer(text, { modelName: "text" });
  urlServer = await startTestServer(vision, {
    modelName: "vision-urls",
    allowImageUrls: true,
    maxImageBytes: PNG.length + 1024,
    imageFetchTimeoutMs: 2_000,
    maxImagesPerRequest: 1,
  });
  origin = http.createServer((req, res) => {
    if (req.url === "/pattern.png") {
      res.writeHead(200, { "Content-Type": "image/png", "Content-Length": PNG.length });
      res.end(PNG);
    } else if (req.url === "/to-file") {
      res.writeHead(302, { Location: "file:///etc/passwd" });
      res.end();
    } else if (req.url === "/redirect") {
      res.writeHead(301, { Location: "/pattern.png" });
      res.end();
    } else if (req.url === "/huge") {
      // no Content-Length: the body is counted while it is read
      res.writeHead(200, { "Content-Type": "image/png" });
      res.end(Buffer.alloc(PNG.length + 4096, 7));
    } else if (req.url === "/never") {
      // headers, then silence: the fetch's time limit ends it
      res.writeHead(200, { "Content-Type": "image/png" });
      res.write(PNG.subarray(0, 16));
    } else {
      res.writeHead(404);
      res.end();
    }
  });
  await new Promise<void>((resolve) => origin.listen(0, "127.0.0.1", resolve));
  originUrl = `http://127.0.0.1:${(origin.address() as AddressInfo).port}`;
}, 120_000);

afterAll(async () => {
  await visionServer?.close();
  await textServer?.close();
  await urlServer?.close();
  origin?.closeAllConnections();
  await new Promise<void>((resolve) => (origin ? origin.close(() => resolve()) : resolve()));
  vision?.dispose();
  text?.dispose();
  fs.rmSync(dir, { recursive: true, force: true });
});

const QUESTION = "Describe the picture.";
const MAX_TOKENS = 6;

function chatBody(image: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    messages: [
      {
        role: "user",
        content: [
          { type: "text", text: QUESTION },
          { type: "image_url", image_url: { url: image } },
        ],
      },
    ],
    max_tokens: MAX_TOKENS,
    temperature: 0,
    ...extra,
  };
}

function messagesBody(source: Record<string, unknown>, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    model: "any",
    max_tokens: MAX_TOKENS,
    temperature: 0,
    messages: [
      {
        role: "user",
        content: [
          { type: "text", text: QUESTION },
          { type: "image", source },
        ],
      },
    ],
    ...extra,
  };
}

function responsesBody(image: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    model: "any",
    max_output_tokens: MAX_TOKENS,
    temperature: 0,
    store: false,
    input: [
      {
        role: "user",
        content: [
          { type: "input_text", text: QUESTION },
          { type: "input_image", image_url: image },
        ],
      },
    ],
    ...extra,
  };
}

const base64Source = (bytes: Uint8Array) => ({ type: "base64", media_type: "image/png", data: Buffer.from(bytes).toString("base64") });

/** A chat completion's whole output: reasoning and content. */
async function chatOutput(url: string, body: Record<string, unknown>): Promise<{ output: string; promptTokens: number; json: Json }> {
  const response = await postJson(url, "/v1/chat/completions", body);
  const json = (await response.json()) as Json;
  expect(response.status, JSON.stringify(json)).toBe(200);
  const message = json.choices[0].message;
  return { output: `${message.reasoning_content ?? ""}${message.content ?? ""}`, promptTokens: json.usage.prompt_tokens, json };
}

async function refusal(url: string, route: string, body: Record<string, unknown>): Promise<Json> {
  const response = await postJson(url, route, body);
  const json = await response.json();
  expect(response.status, JSON.stringify(json)).toBe(400);
  return json;
}

describe("images over HTTP", () => {
  it("/v1/models says whether images are accepted", async () => {
    const withImages = (await (await fetch(`${visionServer.url}/v1/models`)).json()) as Json;
    expect(withImages.data[0].meta).toMatchObject({ vision: true, image_urls: false });
    const urls = (await (await fetch(`${urlServer.url}/v1/models`)).json()) as Json;
    expect(urls.data[0].meta).toMatchObject({ vision: true, image_urls: true });
    const textOnly = (await (await fetch(`${textServer.url}/v1/models`)).json()) as Json;
    expect(textOnly.data[0].meta).toMatchObject({ vision: false, image_urls: false });
  });

  it("the same image gives the same greedy completion through chat completions, Messages and Responses", async () => {
    const chat = await chatOutput(visionServer.url, chatBody(dataUrl(PNG)));
    const messagesResponse = await postJson(visionServer.url, "/v1/messages", messagesBody(base64Source(PNG)));
    const messages = (await messagesResponse.json()) as Json;
    expect(messagesResponse.status, JSON.stringify(messages)).toBe(200);
    const responsesResponse = await postJson(visionServer.url, "/v1/responses", responsesBody(dataUrl(PNG)));
    const responses = (await responsesResponse.json()) as Json;
    expect(responsesResponse.status, JSON.stringify(responses)).toBe(200);

    const messagesOutput = messages.content.map((b: Json) => b.thinking ?? b.text ?? "").join("");
    const responsesOutput = responses.output
      .map((item: Json) =>
        item.type === "reasoning"
          ? item.content.map((c: Json) => c.text).join("")
          : item.type === "message"
            ? item.content.map((c: Json) => c.text).join("")
            : "",
      )
      .join("");
    // the image's tokens are in the prompt: more than the text alone has
    const textOnly = await chatOutput(visionServer.url, {
      messages: [{ role: "user", content: QUESTION }],
      max_tokens: MAX_TOKENS,
      temperature: 0,
    });
    expect(chat.promptTokens).toBeGreaterThan(textOnly.promptTokens + 4);
    expect(messages.usage.input_tokens).toBe(chat.promptTokens);
    expect(responses.usage.input_tokens).toBe(chat.promptTokens);
    expect(chat.json.usage.completion_tokens).toBeGreaterThan(0);
    expect(messagesOutput).toBe(chat.output);
    expect(responsesOutput).toBe(chat.output);

    // count_tokens counts the image's tokens as the answer does
    const count = await postJson(visionServer.url, "/v1/messages/count_tokens", {
      model: "any",
      messages: messagesBody(base64Source(PNG)).messages,
    });
    expect(await count.json()).toEqual({ input_tokens: chat.promptTokens });
  }, 120_000);

  it("a different image changes the answer's logprobs; the same image gives the same", async () => {
    const logprobs = async (image: Uint8Array) =>
      (await chatOutput(visionServer.url, chatBody(dataUrl(image), { logprobs: true, top_logprobs: 3 }))).json.choices[0].logprobs.content;
    const first = await logprobs(PNG);
    const again = await logprobs(PNG);
    const other = await logprobs(OTHER_PNG);
    expect(again).toEqual(first);
    expect(other).not.toEqual(first);
  }, 120_000);

  it("streams an answer to a request with an image: the same text as the whole answer", async () => {
    const whole = await chatOutput(visionServer.url, chatBody(dataUrl(PNG)));
    const response = await postJson(visionServer.url, "/v1/chat/completions", chatBody(dataUrl(PNG), { stream: true }));
    expect(response.status).toBe(200);
    expect(response.headers.get("content-type")).toMatch(/text\/event-stream/);
    const events = (await response.text()).split("\n\n").filter((e) => e.startsWith("data: "));
    expect(events.at(-1)).toBe("data: [DONE]");
    let streamed = "";
    for (const event of events.slice(0, -1)) {
      const chunk = JSON.parse(event.slice(6));
      for (const choice of chunk.choices) streamed += `${choice.delta.reasoning_content ?? ""}${choice.delta.content ?? ""}`;
    }
    expect(streamed).toBe(whole.output);

    const anthropic = await postJson(visionServer.url, "/v1/messages", messagesBody(base64Source(PNG), { stream: true }));
    expect(anthropic.status).toBe(200);
    const body = await anthropic.text();
    expect(body).toMatch(/event: message_stop/);
  }, 120_000);

  it("a model without a projector refuses an image with a 400 naming the part, in each API's format", async () => {
    const chat = await refusal(textServer.url, "/v1/chat/completions", chatBody(dataUrl(PNG)));
    expect(chat.error).toMatchObject({ param: "messages[0].content[1]", code: "images_not_supported", type: "invalid_request_error" });
    expect(chat.error.message).toMatch(/--mmproj/);
    const messages = await refusal(textServer.url, "/v1/messages", messagesBody(base64Source(PNG)));
    expect(messages).toMatchObject({ type: "error", error: { type: "invalid_request_error" } });
    expect(messages.error.message).toMatch(/^messages\[0\]\.content\[1\]: this model takes no images/);
    const responses = await refusal(textServer.url, "/v1/responses", responsesBody(dataUrl(PNG)));
    expect(responses.error).toMatchObject({ param: "input[0].content[1]", code: "images_not_supported" });
    // the text-only path is untouched: with or without a projector, the same prompt tokens and greedy answer
    const plain = { messages: [{ role: "user", content: [{ type: "text", text: QUESTION }] }], max_tokens: MAX_TOKENS, temperature: 0 };
    const withProjector = await chatOutput(visionServer.url, { ...plain, logprobs: true });
    const withoutProjector = await chatOutput(textServer.url, { ...plain, logprobs: true });
    expect(withoutProjector.promptTokens).toBe(withProjector.promptTokens);
    expect(withoutProjector.json.choices[0].logprobs).toEqual(withProjector.json.choices[0].logprobs);
  });

  it("refuses bad images with a 400 naming the part and the reason", async () => {
    const cases: { body: Record<string, unknown>; code: string; message: RegExp }[] = [
      {
        body: chatBody(dataUrl(Buffer.from("not an image at all"))),
        code: "invalid_image",
        message: /content\[1\].*(corrupt|unsupported-format)/,
      },
      { body: chatBody(dataUrl(animatedPng())), code: "invalid_image", message: /content\[1\].*animated/ },
      {
        body: chatBody(dataUrl(pngHeader(100_000, 100_000))),
        code: "invalid_image",
        message: /content\[1\].*(too-large|decompression-bomb)/,
      },
      { body: chatBody(dataUrl(pngHeader(8_000, 8_000))), code: "invalid_image", message: /content\[1\].*(too-large|decompression-bomb)/ },
      { body: chatBody(dataUrl(PNG, "text/plain")), code: "invalid_image", message: /media type "text\/plain" is not supported/ },
      { body: chatBody("data:image/png;base64,@@@@"), code: "invalid_image", message: /not valid base64/ },
      { body: chatBody("data:image/png,rawbytes"), code: "invalid_image", message: /data:<media type>;base64/ },
      { body: chatBody("file:///etc/passwd"), code: "invalid_image", message: /not file:/ },
      { body: chatBody(`${originUrl}/pattern.png`), code: "image_urls_disabled", message: /--allow-image-urls/ },
    ];
    for (const { body, code, message } of cases) {
      const json = await refusal(visionServer.url, "/v1/chat/completions", body);
      expect(json.error.param, JSON.stringify(json)).toBe("messages[0].content[1]");
      expect(json.error.code, JSON.stringify(json)).toBe(code);
      expect(json.error.message).toMatch(message);
    }
    // a GIF's first frame is the image (as llama.cpp's mtmd takes it)
    expect((await postJson(visionServer.url, "/v1/chat/completions", chatBody(dataUrl(GIF_2_FRAMES, "image/gif")))).status).toBe(200);
    // an image in an assistant message
    const assistant = await refusal(visionServer.url, "/v1/chat/completions", {
      messages: [
        { role: "user", content: "hi" },
        { role: "assistant", content: [{ type: "image_url", image_url: { url: dataUrl(PNG) } }] },
        { role: "user", content: "and?" },
      ],
    });
    expect(assistant.error.param).toBe("messages[1].content[0].type");
    // Anthropic: a bad image, an unknown source type; Responses: a file_id
    const anthropic = await refusal(
      visionServer.url,
      "/v1/messages",
      messagesBody({ type: "base64", media_type: "image/png", data: "AAAA" }),
    );
    expect(anthropic.error.message).toMatch(/^messages\[0\]\.content\[1\]: the image was refused/);
    const fileSource = await refusal(visionServer.url, "/v1/messages", messagesBody({ type: "file", file_id: "f" }));
    expect(fileSource.error.message).toMatch(/source\.type "file" is not supported/);
    const fileId = await refusal(visionServer.url, "/v1/responses", {
      ...responsesBody(dataUrl(PNG)),
      input: [{ role: "user", content: [{ type: "input_image", file_id: "file_1" }] }],
    });
    expect(fileId.error.param).toBe("input[0].content[0].file_id");
  }, 120_000);

  it("a stored response with an image is continued with previous_response_id: the image stays in the prompt", async () => {
    const first = await postJson(visionServer.url, "/v1/responses", responsesBody(dataUrl(PNG), { store: true }));
    const stored = (await first.json()) as Json;
    expect(first.status, JSON.stringify(stored)).toBe(200);
    const next = await postJson(visionServer.url, "/v1/responses", {
      model: "any",
      max_output_tokens: 2,
      temperature: 0,
      store: false,
      previous_response_id: stored.id,
      input: "And the colours?",
    });
    const followUp = (await next.json()) as Json;
    expect(next.status, JSON.stringify(followUp)).toBe(200);
    // the whole first turn (its image included) is in the second prompt
    expect(followUp.usage.input_tokens).toBeGreaterThan(stored.usage.input_tokens + stored.usage.output_tokens);
  }, 120_000);

  it("the server is still serving after the refusals", async () => {
    const health = await fetch(`${visionServer.url}/health`);
    expect(health.status).toBe(200);
    expect(visionServer.server.inFlight).toBe(0);
  });
});

describe("image URLs (allowImageUrls)", () => {
  it("fetches an http image (also through a redirect): the same answer as its data: URL", async () => {
    const fromData = await chatOutput(visionServer.url, chatBody(dataUrl(PNG)));
    const fromUrl = await chatOutput(urlServer.url, chatBody(`${originUrl}/pattern.png`));
    expect(fromUrl.output).toBe(fromData.output);
    expect(fromUrl.promptTokens).toBe(fromData.promptTokens);
    const redirected = await chatOutput(urlServer.url, chatBody(`${originUrl}/redirect`));
    expect(redirected.output).toBe(fromData.output);
    // Anthropic's url source and the Responses API's URL take the same path
    const anthropic = await postJson(urlServer.url, "/v1/messages", messagesBody({ type: "url", url: `${originUrl}/pattern.png` }));
    expect(anthropic.status).toBe(200);
    const responses = await postJson(urlServer.url, "/v1/responses", responsesBody(`${originUrl}/pattern.png`));
    expect(responses.status).toBe(200);
  }, 120_000);

  it("refuses a redirect to file:, a body over the limit, a fetch that never ends, a 404, and too many images", async () => {
    const cases: { url: string; code: string; message: RegExp }[] = [
      { url: `${originUrl}/to-file`, code: "image_fetch_failed", message: /redirects to a file: URL/ },
      { url: `${originUrl}/huge`, code: "image_too_large", message: /more than/ },
      { url: `${originUrl}/never`, code: "image_fetch_failed", message: /no complete answer within 2000 ms/ },
      { url: `${originUrl}/missing`, code: "image_fetch_failed", message: /HTTP 404/ },
    ];
    for (const { url, code, message } of cases) {
      const json = await refusal(urlServer.url, "/v1/chat/completions", chatBody(url));
      expect(json.error.param, url).toBe("messages[0].content[1]");
      expect(json.error.code, url).toBe(code);
      expect(json.error.message, url).toMatch(message);
    }
    const large = await refusal(urlServer.url, "/v1/chat/completions", chatBody(dataUrl(Buffer.alloc(PNG.length + 2048, 1))));
    expect(large.error.code).toBe("image_too_large");
    const two = await refusal(urlServer.url, "/v1/chat/completions", {
      messages: [
        {
          role: "user",
          content: [
            { type: "image_url", image_url: { url: dataUrl(PNG) } },
            { type: "image_url", image_url: { url: dataUrl(PNG) } },
          ],
        },
      ],
    });
    expect(two.error).toMatchObject({ param: "messages[0].content[1]", code: "too_many_images" });
  }, 120_000);
});

describe("the projector server option", () => {
  it("loads the projector onto the engine before the server is ready", async () => {
    const engine = await Engine.load(modelFile(), { ...TEST_ENGINE_OPTIONS, provider: "ts" });
    const serving = await startTestServer(engine, { projector: projectorFile });
    try {
      for (let i = 0; i < 200 && !serving.server.ready; i++) await new Promise((resolve) => setTimeout(resolve, 25));
      expect(serving.server.ready).toBe(true);
      expect(engine.projector).toBeDefined();
      const models = (await (await fetch(`${serving.url}/v1/models`)).json()) as Json;
      expect(models.data[0].meta.vision).toBe(true);
    } finally {
      await serving.close();
      engine.dispose();
    }
  }, 60_000);
});
