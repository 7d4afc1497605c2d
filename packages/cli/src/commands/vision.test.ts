/**
 * Images from the command line: `run --image` and chat's `/image` with `--mmproj` on the parity fixture model and
 * the parity projector (written by our synthesizer into a temp dir), on the default provider (native when the addon loads),
 * held to llama.cpp's mtmd greedy tokens (goldens/vision); the refusals; `--mmproj hf:` from a mock Hub.
 */
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { parityFixture } from "@keepquant/fixtures";
import { parityFixtureFile, parityFixturesUnavailableReason, REPO_ROOT } from "@keepquant/fixtures/oracle";
import { writeParityProjector } from "@keepquant/fixtures/projector";
import { mockHubEnv, startMockHub } from "@keepquant/hub/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { expectBuiltCli, runCliCollecting, spawnCli } from "./test-support.js";

const GOLDENS = path.join(REPO_ROOT, "goldens", "vision");
const manifest = JSON.parse(fs.readFileSync(path.join(GOLDENS, "encoder-manifest.json"), "utf8")) as {
  cases: { name: string; model: string; prompt: string; greedy: number[]; embeddings: { tokens: number } }[];
};
/** llama.cpp's mtmd-cli on tied-4l-f32 with the F32 projector and pattern-96x96.png, "Describe the picture." */
const GOLDEN = manifest.cases.find((c) => c.name === "f32-96x96")!;
const PROMPT = "Describe the picture.";
const IMAGE = path.join(GOLDENS, "inputs", "pattern-96x96.png");
const OTHER_IMAGE = path.join(GOLDENS, "inputs", "pattern-64x160.png");
/** Greedy as the goldens were made (F32 K/V, flash attention off, no stop at end of generation), on the default provider. */
const FLAGS = ["--kv-type", "f32", "--flash-attn", "off", "--ignore-eog", "--max-tokens", String(GOLDEN.greedy.length)];

const reason = parityFixturesUnavailableReason();
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kq-cli-vision-"));
const mmproj = path.join(dir, "mmproj-f32.gguf");
const notAnImage = path.join(dir, "notes.png");
let model = "";

beforeAll(async () => {
  expectBuiltCli();
  if (reason) return;
  model = await parityFixtureFile(parityFixture(GOLDEN.model));
  await writeParityProjector(mmproj, "f32");
  fs.writeFileSync(notAnImage, "these are notes, not a picture\n");
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

const env = { ...process.env, KEEPQUANT_DEBUG: "", CI: "1" };
function cli(input: string, ...args: string[]) {
  return spawnCli(args, env, input);
}

interface RunDocument {
  promptTokens: number[];
  images?: { file: string; tokens: number; gridWidth: number; gridHeight: number }[];
  tokens: number[];
  text: string;
  stats: { promptTokens: number };
  providers: Record<string, string>;
}

describe.skipIf(reason !== undefined)(`images from the CLI${reason ? ` (skipped: ${reason})` : ""}`, () => {
  it("run --image: llama.cpp's mtmd greedy tokens; the same image gives the same output, another image or none changes it", () => {
    const r = cli("", "run", model, "--mmproj", mmproj, "--image", IMAGE, "--prompt", PROMPT, ...FLAGS, "--json");
    expect(r.code, r.stderr).toBe(0);
    const doc = JSON.parse(r.stdout) as RunDocument;
    expect(doc.tokens).toEqual(GOLDEN.greedy);
    expect(doc.images).toEqual([{ file: IMAGE, tokens: GOLDEN.embeddings.tokens, gridWidth: 3, gridHeight: 3 }]);
    expect(doc.stats.promptTokens).toBe(doc.promptTokens.length + GOLDEN.embeddings.tokens);
    expect(doc.providers.vision).toMatch(/^(cpu-native-vision-\w+|ts-spec)$/);

    const again = JSON.parse(cli("", "run", model, "--mmproj", mmproj, "--image", IMAGE, "--prompt", PROMPT, ...FLAGS, "--json").stdout);
    expect(again.tokens).toEqual(doc.tokens);
    const other = JSON.parse(
      cli("", "run", model, "--mmproj", mmproj, "--image", OTHER_IMAGE, "--prompt", PROMPT, ...FLAGS, "--json").stdout,
    );
    expect(other.tokens).toHaveLength(GOLDEN.greedy.length);
    expect(other.tokens).not.toEqual(doc.tokens);
    // two images, in order: both in the prompt
    const two = JSON.parse(
      cli("", "run", model, "--mmproj", mmproj, "--image", IMAGE, "--image", OTHER_IMAGE, "--prompt", PROMPT, ...FLAGS, "--json").stdout,
    ) as RunDocument;
    expect(two.images!.map((i) => i.file)).toEqual([IMAGE, OTHER_IMAGE]);
    expect(two.stats.promptTokens).toBe(two.promptTokens.length + two.images!.reduce((sum, i) => sum + i.tokens, 0));
    // the projector alone changes nothing: a prompt without images is the text model's
    const text = cli("", "run", model, "--mmproj", mmproj, "--prompt", PROMPT, ...FLAGS, "--json");
    expect(text.code, text.stderr).toBe(0);
    expect((JSON.parse(text.stdout) as RunDocument).tokens).not.toEqual(doc.tokens);

    // streamed text: the images named on stderr
    const streamed = cli("", "run", model, "--mmproj", mmproj, "--image", IMAGE, "--prompt", PROMPT, ...FLAGS);
    expect(streamed.code, streamed.stderr).toBe(0);
    expect(streamed.stdout).toBe(`${doc.text}\n`);
    expect(streamed.stderr).toContain(`and the projector ${mmproj}`);
    expect(streamed.stderr).toContain(`images: ${IMAGE} (9 tokens)`);
  });

  it("run refuses: --image without --mmproj (usage, exit 2), a bad or missing image (exit 1, no stack), --prompt-ids with --image", () => {
    const noProjector = cli("", "run", model, "--image", IMAGE, "--prompt", PROMPT);
    expect(noProjector.code).toBe(2);
    expect(noProjector.stderr.trim()).toBe(
      "error: USAGE: --image needs a vision projector: pass --mmproj FILE (the model's mmproj-*.gguf) to load one beside the model",
    );
    const bad = cli("", "run", model, "--mmproj", mmproj, "--image", notAnImage, "--prompt", PROMPT, "--provider", "ts");
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(
      new RegExp(`^error: ENGINE_BAD_IMAGE: ${notAnImage.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}: unsupported image format`, "m"),
    );
    expect(bad.stderr).not.toMatch(/\n\s+at /);
    const badJson = cli("", "run", model, "--mmproj", mmproj, "--image", notAnImage, "--prompt", PROMPT, "--provider", "ts", "--json");
    expect(badJson.code).toBe(1);
    expect(JSON.parse(badJson.stdout).error.code).toBe("ENGINE_BAD_IMAGE");
    const missing = cli("", "run", model, "--mmproj", mmproj, "--image", path.join(dir, "nowhere.png"), "--prompt", PROMPT);
    expect(missing.code).toBe(1);
    expect(missing.stderr.trim()).toBe(`error: IMAGE_FILE: image file not found: ${path.join(dir, "nowhere.png")}`);
    expect(cli("", "run", model, "--mmproj", mmproj, "--image", IMAGE, "--prompt-ids", "1,2").code).toBe(2);
    expect(cli("", "run", model, "--mmproj", mmproj, "--image", IMAGE, "--prompt", PROMPT, "--provider", "gpu").stderr).toMatch(
      /^error: USAGE: --provider "gpu": expected auto or ts/,
    );
    const noMmproj = cli("", "run", model, "--mmproj", path.join(dir, "absent.gguf"), "--prompt", PROMPT);
    expect(noMmproj.code).toBe(1);
    expect(noMmproj.stderr).toMatch(/^error: MODEL_NOT_FOUND: --mmproj: file not found: .*absent\.gguf/);
  });

  it("chat: /image attaches to the next message (the answer is run's), errors are said and the session goes on", () => {
    const run = JSON.parse(
      cli("", "run", model, "--mmproj", mmproj, "--image", IMAGE, "--prompt", PROMPT, ...FLAGS, "--json").stdout,
    ) as RunDocument;
    const input = [
      `/image ${IMAGE}`,
      PROMPT,
      `/image ${notAnImage}`,
      `/image ${path.join(dir, "nowhere.png")}`,
      "/image",
      "/exit",
      "",
    ].join("\n");
    const chat = cli(input, "chat", model, "--mmproj", mmproj, ...FLAGS, "--stats");
    expect(chat.code, chat.stderr).toBe(0);
    expect(chat.stdout.startsWith(`${run.text}\n`)).toBe(true);
    expect(chat.stderr).toContain(`attached ${IMAGE} (9 image tokens, a 3 x 3 grid): 1 image(s) go with your next message`);
    expect(chat.stderr).toMatch(/^stats: message 21 characters, 1 lines; prompt 33 tokens; answer 8 tokens$/m);
    expect(chat.stderr).toMatch(/^error: ENGINE_BAD_IMAGE: .*notes\.png: unsupported image format/m);
    expect(chat.stderr).toMatch(/^error: IMAGE_FILE: image file not found: .*nowhere\.png$/m);
    expect(chat.stderr).toMatch(/^error: USAGE: \/image needs a file: \/image FILE$/m);

    // the image goes with one message only: a second question is text
    const twoTurns = cli([`/image ${IMAGE}`, PROMPT, PROMPT, ""].join("\n"), "chat", model, "--mmproj", mmproj, ...FLAGS, "--stats");
    expect(twoTurns.code, twoTurns.stderr).toBe(0);
    expect(twoTurns.stderr.match(/^stats: .*$/gm)).toHaveLength(2);
  });

  it("chat without --mmproj: /image is refused naming --mmproj, and the session goes on", () => {
    const chat = cli(`/image ${IMAGE}\nhello\n`, "chat", model, "--max-tokens", "2");
    expect(chat.code, chat.stderr).toBe(0);
    expect(chat.stderr).toMatch(/^error: USAGE: \/image needs a vision projector: pass --mmproj FILE/m);
    expect(chat.stdout.length).toBeGreaterThan(0); // "hello" was answered
  });

  it("--mmproj hf:<repo>: the repository's mmproj-*.gguf, fetched into the cache without the model's files", async () => {
    const repo = "test/Vision-GGUF";
    const hub = await startMockHub({
      [repo]: { files: { "vision-F32.gguf": fs.readFileSync(model), "mmproj-F32.gguf": fs.readFileSync(mmproj) } },
    });
    try {
      const hubEnv = { ...mockHubEnv(hub, path.join(dir, "hf")), KEEPQUANT_DEBUG: "", CI: "1" };
      const args = ["run", model, "--mmproj", `hf:${repo}`, "--image", IMAGE, "--prompt", PROMPT, ...FLAGS, "--json"];
      const r = await runCliCollecting(args, hubEnv);
      expect(r.code, r.stderr).toBe(0);
      expect((JSON.parse(r.stdout) as RunDocument).tokens).toEqual(GOLDEN.greedy);
      const downloads = hub.requests.filter((q) => q.path.includes("/resolve/")).map((q) => path.basename(q.path));
      expect(new Set(downloads)).toEqual(new Set(["mmproj-F32.gguf"]));
      // a repository without a projector: the hub's error names it
      const none = await runCliCollecting(["run", model, "--mmproj", "hf:test/None-GGUF", "--image", IMAGE, "--prompt", PROMPT], hubEnv);
      expect(none.code).toBe(1);
    } finally {
      await hub.close();
    }
  });
});
