import { describe, expect, it } from "vitest";
import type { ChatMessage } from "./render.js";
import { fitConversation } from "./window.js";

/** One "token" per character of every message: lengths are easy to reason about. */
const encode = (messages: readonly ChatMessage[]): number[] => Array.from(messages.map((m) => m.content).join(""), () => 1);

const conversation: ChatMessage[] = [
  { role: "system", content: "SSSS" },
  { role: "user", content: "u1u1" },
  { role: "assistant", content: "a1a1" },
  { role: "user", content: "u2u2" },
  { role: "assistant", content: "a2a2" },
  { role: "user", content: "u3u3" },
];

describe("fitConversation", () => {
  it("keeps everything that fits", () => {
    const window = fitConversation(conversation, encode, 24);
    expect(window).toMatchObject({ dropped: 0 });
    expect(window!.ids).toHaveLength(24);
  });

  it("drops the oldest whole turns, never the system message or the last message", () => {
    const window = fitConversation(conversation, encode, 20)!;
    expect(window.messages.map((m) => m.content)).toEqual(["SSSS", "u2u2", "a2a2", "u3u3"]);
    expect(window.dropped).toBe(2);
    const tight = fitConversation(conversation, encode, 8)!;
    expect(tight.messages.map((m) => m.content)).toEqual(["SSSS", "u3u3"]);
    expect(tight.dropped).toBe(4);
  });

  it("is undefined when the system message and the last message alone do not fit", () => {
    expect(fitConversation(conversation, encode, 7)).toBeUndefined();
  });
});
