import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { renderChat } from "@keepquant/engine";

const bin = fileURLToPath(new URL("../../dist/keepquant.js", import.meta.url));
const repoRoot = fileURLToPath(new URL("../../../../", import.meta.url));
const cache = mkdtempSync(path.join(tmpdir(), "kq-chat-"));

beforeAll(() => {
  if (!existsSync(bin)) throw new Error(`${bin} is missing: run \`pnpm --filter @keepquant/cli build\` first`);
});
afterAll(() => rmSync(cache, { recursive: true, force: true }));

function cli(input: string, ...args: string[]) {
  const result = spawnSync(process.execPath, [bin, ...args], {
    input,
    encoding: "utf8",
    env: { ...process.env, KEEPQUANT_CACHE_DIR: cache, KEEPQUANT_DEBUG: "", CI: "1" },
  });
  return { code: result.status, stdout: result.stdout, stderr: result.stderr };
}

describe("keepquant chat", () => {
  it("answers each stdin line through the chat template, like run on the rendered prompt", () => {
    const chat = cli("Hello there\n\nSecond question?\n/exit\nnot read\n", "chat", "--max-tokens", "6");
    expect(chat.code, chat.stderr).toBe(0);
    expect(chat.stderr).toMatch(/SYNTHETIC/);

    const vocab = JSON.parse(readFileSync(path.join(repoRoot, "goldens", "tokenizer", "vocab.json"), "utf8")) as {
      tokens: string[];
      specials: { bos: number; eos: number };
      chatTemplate: string;
    };
    const rendered = renderChat(vocab.chatTemplate, [{ role: "user", content: "Hello there" }], {
      bosToken: vocab.tokens[vocab.specials.bos]!,
      eosToken: vocab.tokens[vocab.specials.eos]!,
    });
    const run = cli("", "run", "--prompt", rendered, "--parse-special", "--max-tokens", "6");
    expect(run.code, run.stderr).toBe(0);
    // chat prints answer 1 + "\n" + answer 2 + "\n"; run prints its text + "\n".
    expect(chat.stdout.startsWith(run.stdout)).toBe(true);
    expect(chat.stdout.length).toBeGreaterThan(run.stdout.length);
    expect(chat.stdout.endsWith("\n")).toBe(true);
  });

  it("refuses a missing model and bad options", () => {
    expect(cli("", "chat", "/nonexistent.gguf").code).toBe(1);
    expect(cli("", "chat", "--numerics", "int4").code).toBe(2);
  });
});
