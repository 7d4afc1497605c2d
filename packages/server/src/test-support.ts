/**
 * Test support (not exported from the package): the embedded default model (the parity fixture
 * `tied-4l-f32`, generated on first use into a test-owned folder), a scripted tool-calling model,
 * and a server on loopback.
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import {
  bytesToByteLevel,
  type ChatMessage,
  Engine,
  type EngineOptions,
  QWEN35_TEMPLATE,
  Tokenizer,
  vocabFromJson,
} from "@keepquant/engine";
import { ensureFixture, fixtureTokenizerFromJson, parityFixture } from "@keepquant/fixtures";
import { GgmlType, QWEN35_TINY_SHAPE, qwen35SpecLayout, type Qwen35Spec } from "@keepquant/gguf";
import { afterAll, beforeAll } from "vitest";
import { createKeepquantServer, type KeepquantServer, type KeepquantServerOptions } from "./server.js";

export const MiB = 1024 * 1024;

/** Mixed text: words, numbers, punctuation, CJK, emoji, newlines and special-token texts. */
export function mixedText(bytes: number): string {
  const pieces = ["hello", " world", ",", " 123", "\n", " 中文", " émoji 😀", "  ", "foo_bar", "<think>", "'s", "<|im_start|>"];
  const parts: string[] = [];
  for (let i = 0, size = 0; size < bytes; i++) {
    const piece = pieces[(i * 7919) % pieces.length]!;
    parts.push(piece);
    size += Buffer.byteLength(piece);
  }
  return parts.join("");
}

export interface TokenizerWatch {
  /** encodes of long texts (at least `longer` characters) or decodes of long id lists in progress */
  active(): number;
  /** encodes of long texts (and decodes of long id lists) so far */
  longCalls(): number;
  /** every encode and decode so far */
  calls(): number;
  restore(): void;
}

/** Wraps the tokenizer's encodeAsync and decodeAsync, counting calls (and long ones in progress). */
export function watchTokenizer(tokenizer: Tokenizer, longer = MiB / 2): TokenizerWatch {
  const encode = tokenizer.encodeAsync;
  const decode = tokenizer.decodeAsync;
  let active = 0;
  let longCalls = 0;
  let calls = 0;
  async function counted<T>(long: boolean, work: () => Promise<T>): Promise<T> {
    calls++;
    if (long) {
      longCalls++;
      active++;
    }
    try {
      return await work();
    } finally {
      if (long) active--;
    }
  }
  tokenizer.encodeAsync = function (this: Tokenizer, text, options) {
    return counted(text.length >= longer, () => encode.call(this, text, options));
  };
  tokenizer.decodeAsync = function (this: Tokenizer, ids, options) {
    return counted(ids.length >= longer / 8, () => decode.call(this, ids, options));
  };
  return {
    active: () => active,
    longCalls: () => longCalls,
    calls: () => calls,
    restore: () => {
      tokenizer.encodeAsync = encode;
      tokenizer.decodeAsync = decode;
    },
  };
}

/**
 * Engines in tests use one native thread: package test suites run in parallel on small CI machines,
 * and every engine's thread pool competes for the same cores.
 */
export const TEST_ENGINE_OPTIONS: EngineOptions = { threads: 1 };

export const REPO_ROOT = fileURLToPath(new URL("../../../", import.meta.url));
const vocabJson = (): unknown => JSON.parse(fs.readFileSync(path.join(REPO_ROOT, "goldens", "tokenizer", "vocab.json"), "utf8"));

/** The embedded default model file (what `keepquant serve` uses without a model argument). */
export async function defaultModelFile(cacheDir: string): Promise<string> {
  const manifest = JSON.parse(fs.readFileSync(path.join(REPO_ROOT, "goldens", "parity", "manifest.json"), "utf8")) as {
    fixtures: { name: string; sha256: string }[];
  };
  const name = "tied-4l-f32";
  const sha = manifest.fixtures.find((f) => f.name === name)?.sha256;
  return ensureFixture(parityFixture(name), {
    cacheDir,
    tokenizer: fixtureTokenizerFromJson(vocabJson()),
    ...(sha ? { expectedSha256: { [name]: sha } } : {}),
  });
}

/**
 * The default model's file for one test file: fetched into a temporary cache folder (named `prefix`...)
 * before its tests, the folder removed after them. Call the returned function inside a test.
 */
export function defaultModelForTests(prefix: string): () => string {
  const cacheDir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  let file: string | undefined;
  beforeAll(async () => {
    file = await defaultModelFile(cacheDir);
  });
  afterAll(() => fs.rmSync(cacheDir, { recursive: true, force: true }));
  return () => {
    if (file === undefined) throw new Error("the default model is fetched in beforeAll: read it inside a test");
    return file;
  };
}

/** A JSON POST of `body` to `route` of the server at `url`. */
export function postJson(url: string, route: string, body: unknown, signal?: AbortSignal): Promise<Response> {
  return fetch(`${url}${route}`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
    ...(signal ? { signal } : {}),
  });
}

export interface TestServer {
  server: KeepquantServer;
  engine: Engine;
  /** http://127.0.0.1:PORT */
  url: string;
  close(): Promise<void>;
}

export async function startTestServer(engine: Engine, options: Omit<KeepquantServerOptions, "engine"> = {}): Promise<TestServer> {
  const server = createKeepquantServer({ engine, ...options });
  const address = await server.listen(0, "127.0.0.1");
  return {
    server,
    engine,
    url: `http://127.0.0.1:${address.port}`,
    async close() {
      await server.close(1_000);
    },
  };
}

/**
 * The default model served for an API test: `engine` behind the server (prefix cache with 8 snapshots),
 * `reference` the same model on a plain engine (no prefix cache, one request at a time); `close` stops
 * the server, frees both and removes the model's cache folder (named `prefix`...).
 */
export interface ServedDefaultModel {
  modelFile: string;
  engine: Engine;
  reference: Engine;
  serving: TestServer;
  close(): Promise<void>;
}

export async function serveDefaultModel(prefix: string, options: Omit<KeepquantServerOptions, "engine">): Promise<ServedDefaultModel> {
  const cacheDir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  const modelFile = await defaultModelFile(cacheDir);
  const engine = await Engine.load(modelFile, { ...TEST_ENGINE_OPTIONS, prefixCacheSnapshots: 8 });
  const reference = await Engine.load(modelFile, { ...TEST_ENGINE_OPTIONS, maxSequences: 1 });
  const serving = await startTestServer(engine, options);
  return {
    modelFile,
    engine,
    reference,
    serving,
    async close() {
      await serving.close();
      engine.dispose();
      reference.dispose();
      fs.rmSync(cacheDir, { recursive: true, force: true });
    },
  };
}

/** What the scripted model says (see scriptedToolEngine). */
export const SCRIPT = {
  reasoning: "The user asks for the weather, so I call the tool.",
  toolName: "get_weather",
  toolArguments: { city: "Oslo" },
  answer: "It is -3 °C in Oslo.",
} as const;

/**
 * The scripted tool round trip as the server renders it: the weather question, the assistant's call with
 * the script's reasoning (the client sends it back; the Qwen3.5-style template keeps it for the current
 * round of calls), and the tool's `result`.
 */
export function scriptedRoundTrip(callId: string, result: string): ChatMessage[] {
  return [
    { role: "user", content: "What is the weather in Oslo?" },
    {
      role: "assistant",
      content: "",
      reasoning_content: SCRIPT.reasoning,
      tool_calls: [{ type: "function", id: callId, function: { name: SCRIPT.toolName, arguments: SCRIPT.toolArguments } }],
    },
    { role: "tool", content: result, tool_call_id: callId, name: SCRIPT.toolName },
  ];
}

type ModelWeights = Parameters<typeof Engine.fromWeights>[0];
type PackedMatrix = ModelWeights["tokenEmbd"];

/**
 * A qwen35 model whose weights are set by hand (in the shapes of the gguf package's qwen35 layout)
 * so that greedy decoding follows a script: every layer's output
 * projection is zero (the residual stream is the token's embedding), except one attention head
 * that looks for a `<tool_response>` token anywhere in the context and adds a flag direction.
 * Embeddings are one-hot "slots" (plus a constant bias dimension the query reads), and the
 * untied head maps each scripted token's slot to the next token:
 *
 *   no tool result:  "\n" -> REASONING -> </think> -> <tool_call> -> CALL -> </tool_call> -> <|im_end|>
 *   with a result:   "\n" -> REASONING -> </think> -> ANSWER -> <|im_end|>
 *
 * The prompt ends with the template's "<think>\n", so the answer is reasoning, then a tool call
 * (first turn) or a text answer (after the tool result). The vocabulary is the fixture vocabulary
 * plus three tokens whose texts are the reasoning, the call body and the answer.
 *
 * `format` "json" (default) keeps the fixture vocabulary's Qwen3-style template and writes the call
 * as JSON; "xml" gives the tokenizer the built-in Qwen3.5-style template (QWEN35_TEMPLATE) and writes
 * the call in its XML format. `callBody` replaces the text between <tool_call> and </tool_call>; an
 * array of texts makes it that many tokens, generated one after another (a call split across stream chunks).
 */
export async function scriptedToolEngine(
  options: EngineOptions = {},
  script: { answer?: string; format?: "json" | "xml"; callBody?: string | readonly string[] } = {},
): Promise<Engine> {
  const base = vocabFromJson(vocabJson());
  const byteLevel = (text: string): string => bytesToByteLevel(new TextEncoder().encode(text));
  const xml = script.format === "xml";
  const call: string | readonly string[] =
    script.callBody ??
    (xml
      ? `\n<function=${SCRIPT.toolName}>\n${Object.entries(SCRIPT.toolArguments)
          .map(([key, value]) => `<parameter=${key}>\n${value}\n</parameter>\n`)
          .join("")}</function>\n`
      : `\n${JSON.stringify({ name: SCRIPT.toolName, arguments: SCRIPT.toolArguments })}\n`);
  const pieces = typeof call === "string" ? [call] : [...call];
  const extra = [byteLevel(SCRIPT.reasoning), ...pieces.map(byteLevel), byteLevel(script.answer ?? SCRIPT.answer)];
  const vocab = {
    ...base,
    ...(xml ? { chatTemplate: QWEN35_TEMPLATE } : {}),
    tokens: [...base.tokens, ...extra],
    tokenTypes: [...Array.from(base.tokenTypes ?? base.tokens.map(() => 1)), ...extra.map(() => 1)],
  };
  const tokenizer = Tokenizer.fromVocab(vocab);
  const id = (text: string): number => {
    const found = tokenizer.tokenId(text);
    if (found === undefined) throw new Error(`scripted model: no token ${JSON.stringify(text)}`);
    return found;
  };
  const newline = tokenizer.encode("\n", { addSpecial: false });
  if (newline.length !== 1) throw new Error("scripted model: the fixture vocabulary has no single-token newline");
  const V = vocab.tokens.length;
  const reasoning = V - extra.length;
  const callBody = pieces.map((_, i) => reasoning + 1 + i);
  const answer = V - 1;
  const nl = newline[0]!;
  const thinkEnd = id("</think>");
  const toolStart = id("<tool_call>");
  const toolEnd = id("</tool_call>");
  const imEnd = id("<|im_end|>");
  const toolResponse = id("<tool_response>");

  // the gguf package's tiny shape (attention at layer 3) with this vocabulary; hyperparameters and
  // tensor shapes come from its layout
  const spec: Qwen35Spec = { ...QWEN35_TINY_SHAPE, vocab: V, tokenizer: { tokens: [...vocab.tokens] }, tied: false };
  const layout = qwen35SpecLayout(spec);
  const config = layout.config;
  const neOf = new Map(layout.tensors.map((t) => [t.name, t.ne]));
  const D = config.embeddingLength;
  const headDim = config.headDim;
  const DEFAULT_SLOT = 0;
  const BIAS = 1;
  const FLAG = D - 1;
  const slotted = [nl, reasoning, thinkEnd, toolStart, ...callBody, toolEnd, answer, imEnd, toolResponse];
  const slotOf = new Map(slotted.map((token, i) => [token, 2 + i]));
  if (2 + slotted.length > D - 1) throw new Error(`scripted model: ${slotted.length} scripted tokens do not fit ${D - 3} slots`);
  const known = new Set(base.tokens);
  for (const text of extra)
    if (known.has(text)) throw new Error(`scripted model: ${JSON.stringify(text)} is already a token of the fixture vocabulary`);

  /** an F32 matmul weight of the layout's shape for `name`: [ne[1] rows, ne[0] columns] */
  const matrix = (name: string, fill?: (values: Float32Array) => void): PackedMatrix => {
    const [cols, rows] = neOf.get(name)!;
    const values = new Float32Array(rows! * cols!);
    fill?.(values);
    return {
      name,
      type: GgmlType.F32,
      typeName: "F32",
      groups: 1,
      rows: rows!,
      cols: cols!,
      rowBytes: cols! * 4,
      data: new Uint8Array(values.buffer),
    };
  };
  /** an f32 vector of the layout's length for `name` */
  const vector = (name: string, value: number): Float32Array => new Float32Array(neOf.get(name)!.reduce((a, b) => a * b, 1)).fill(value);

  const tokenEmbd = matrix("token_embd.weight", (w) => {
    for (let t = 0; t < V; t++) {
      w[t * D + BIAS] = 1;
      w[t * D + (slotOf.get(t) ?? DEFAULT_SLOT)] = 1;
    }
  });
  // logits: next token after each slot (10), the answer also rides the flag
  const output = matrix("output.weight", (w) => {
    const next = (from: number, to: number, weight = 10): void => {
      w[to * D + slotOf.get(from)!] = weight;
    };
    next(nl, reasoning);
    next(reasoning, thinkEnd);
    next(thinkEnd, toolStart);
    next(toolStart, callBody[0]!);
    for (let i = 1; i < callBody.length; i++) next(callBody[i - 1]!, callBody[i]!);
    next(callBody[callBody.length - 1]!, toolEnd);
    next(toolEnd, imEnd);
    next(answer, imEnd);
    next(thinkEnd, answer, 5);
    w[answer * D + FLAG] = 7.5;
    w[imEnd * D + DEFAULT_SLOT] = 10;
  });

  const hDh = config.headCount * headDim;
  const NOT_ROTATED = 20; // >= ropeDimensionCount: RoPE leaves it alone
  const normScale = Math.sqrt(D / 2); // RMSNorm of a two-hot embedding
  const layers = config.layerKinds.map((kind, il) => {
    const p = `blk.${il}.`;
    const ffn = {
      ffnGate: matrix(`${p}ffn_gate.weight`),
      ffnUp: matrix(`${p}ffn_up.weight`),
      ffnDown: matrix(`${p}ffn_down.weight`),
    };
    if (kind === "gdn") {
      return {
        kind,
        attnNorm: vector(`${p}attn_norm.weight`, 1),
        postAttnNorm: vector(`${p}post_attention_norm.weight`, 1),
        qkv: matrix(`${p}attn_qkv.weight`),
        gate: matrix(`${p}attn_gate.weight`),
        beta: matrix(`${p}ssm_beta.weight`),
        alpha: matrix(`${p}ssm_alpha.weight`),
        conv: vector(`${p}ssm_conv1d.weight`, 0),
        dtBias: vector(`${p}ssm_dt.bias`, 0),
        a: vector(`${p}ssm_a`, -1),
        norm: vector(`${p}ssm_norm.weight`, 1),
        out: matrix(`${p}ssm_out.weight`),
        ...ffn,
      };
    }
    return {
      kind,
      attnNorm: vector(`${p}attn_norm.weight`, 1),
      postAttnNorm: vector(`${p}post_attention_norm.weight`, 1),
      // head 0's query reads the bias dimension: the same query at every position
      q: matrix(`${p}attn_q.weight`, (w) => {
        w[NOT_ROTATED * D + BIAS] = 1;
      }),
      // kv head 0's key is non-zero only for <tool_response>: attention lands there when it exists
      k: matrix(`${p}attn_k.weight`, (w) => {
        w[NOT_ROTATED * D + slotOf.get(toolResponse)!] = 1;
      }),
      // its value is 1 there (0 elsewhere)
      v: matrix(`${p}attn_v.weight`, (w) => {
        w[0 * D + slotOf.get(toolResponse)!] = 1 / normScale;
      }),
      // sigmoid(0) = 0.5 gate, so the flag direction gets 2 * 0.5 = 1
      o: matrix(`${p}attn_output.weight`, (w) => {
        w[FLAG * hDh + 0] = 2;
      }),
      qNorm: vector(`${p}attn_q_norm.weight`, 4),
      kNorm: vector(`${p}attn_k_norm.weight`, 4),
      ...ffn,
    };
  });
  const weights: ModelWeights = {
    config,
    vocab: V,
    tokenEmbd,
    tokenEmbdTwin: undefined,
    outputNorm: vector("output_norm.weight", 1),
    output,
    tied: false,
    layers,
  };
  return Engine.fromWeights(weights, options, { tokenizer });
}
