import { beforeAll, describe, expect, it } from "vitest";
import { defaultModelInfo } from "@keepquant/default-model";
import { renderChat } from "@keepquant/engine";
import { readGguf } from "@keepquant/gguf";
import { spawnCli, expectBuiltCli, CLI_BIN } from "./test-support.js";

const _bin = CLI_BIN;

beforeAll(() => {
  expectBuiltCli();
});

function cli(input: string, ...args: string[]) {
  return spawnCli(args, { ...process.env, KEEPQUANT_DEBUG: "", CI: "1" }, input);
}

describe("keepquant chat", () => {
  it("answers each stdin line through the chat template, like run on the rendered prompt", async () => {
    const chat = cli("Hello there\n\nSecond question?\n/exit\nnot read\n", "chat", "--max-tokens", "6");
    expect(chat.code, chat.stderr).toBe(0);
    expect(chat.stderr).toMatch(/embedded qwen35 model/);

    // the default model's own template and special tokens
    const metadata = (await readGguf(defaultModelInfo().file)).metadata;
    const tokens = metadata.get("tokenizer.ggml.tokens")!.value as string[];
    const special = (key: string) => {
      const id = metadata.get(key)?.value as number | undefined;
      return id === undefined ? "" : tokens[id]!;
    };
    const rendered = renderChat(
      metadata.get("tokenizer.chat_template")?.value as string | undefined,
      [{ role: "user", content: "Hello there" }],
      {
        bosToken: special("tokenizer.ggml.bos_token_id"),
        eosToken: special("tokenizer.ggml.eos_token_id"),
      },
    );
    const run = cli("", "run", "--prompt", rendered, "--parse-special", "--max-tokens", "6");
    expect(run.code, run.stderr).toBe(0);
    // chat prints answer 1 + "\n" + answer 2 + "\n"; run prints its text + "\n".
    expect(chat.stdout.startsWith(run.stdout)).toBe(true);
    expect(chat.stdout.length).toBeGreaterThan(run.stdout.length);
    expect(chat.stdout.endsWith("\n")).toBe(true);
  });

  it("--speculative mtp answers with the same (greedy) text", () => {
    const input = "Hello there\nSecond question?\n";
    const plain = cli(input, "chat", "--max-tokens", "12");
    const speculative = cli(input, "chat", "--max-tokens", "12", "--speculative", "mtp", "--draft-tokens", "3");
    expect(speculative.code, speculative.stderr).toBe(0);
    expect(speculative.stdout).toBe(plain.stdout);
    expect(cli("", "chat", "--speculative", "mtp", "--draft-tokens", "0").code).toBe(2);
  });

  it("refuses a missing model and bad options", () => {
    expect(cli("", "chat", "/nonexistent.gguf").code).toBe(1);
    expect(cli("", "chat", "--numerics", "int4").code).toBe(2);
  });

  it("outlives its context: drops the oldest turns (keeping the system message), says so once, survives a too-long line", () => {
    const turns = Array.from({ length: 8 }, (_, i) => `Question number ${i}: what comes after the previous answer?`);
    const longLine = "word ".repeat(200).trim();
    const input = [turns[0], turns[1], turns[2], longLine, ...turns.slice(3), ""].join("\n");
    const chat = cli(input, "chat", "--ctx", "96", "--max-tokens", "8", "--ignore-eog", "--system", "You are terse.");
    expect(chat.code, chat.stderr).toBe(0);
    // every question is answered (each answer ends with a newline; answers may contain newlines themselves)
    expect(chat.stdout.split("\n").length - 1).toBeGreaterThanOrEqual(8);
    expect(chat.stderr.split("\n").filter((line) => line.startsWith("error:"))).toHaveLength(1);
    const notes = chat.stderr.split("\n").filter((line) => line.startsWith("note: the conversation is longer than the context"));
    expect(notes).toEqual([
      "note: the conversation is longer than the context (96 tokens): dropping the oldest turns (the system message stays)",
    ]);
    expect(chat.stderr).toMatch(
      /^error: CHAT_MESSAGE_TOO_LONG: this message makes a prompt of \d+ tokens, longer than the context \(96 tokens\): not sent$/m,
    );
  });
});
