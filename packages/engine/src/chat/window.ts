import type { ChatMessage } from "./render.js";

/** A conversation cut to fit a token budget. */
export interface ConversationWindow {
  /** The messages kept: the leading system messages, then the most recent turns. */
  messages: ChatMessage[];
  /** Their rendered, encoded prompt. */
  ids: number[];
  /** How many messages were dropped (oldest first). */
  dropped: number;
}

/**
 * Fits a conversation into `budget` tokens, as a chat that outlives its context must: encodes it
 * and, while it is longer than `budget`, drops the oldest turn after the leading system messages
 * (a message and the answers that followed it, up to the next user message). The last message (the
 * one being answered) is never dropped. Returns undefined when the system messages and the last
 * message alone are longer than `budget`.
 */
export function fitConversation(
  messages: readonly ChatMessage[],
  encode: (messages: readonly ChatMessage[]) => number[],
  budget: number,
): ConversationWindow | undefined {
  let system = 0;
  while (system < messages.length && messages[system]!.role === "system") system++;
  const head = messages.slice(0, system);
  let turns = messages.slice(system);
  let dropped = 0;
  for (;;) {
    const kept = [...head, ...turns];
    const ids = encode(kept);
    if (ids.length <= budget) return { messages: kept, ids, dropped };
    if (turns.length <= 1) return undefined;
    // drop the oldest message and whatever answered it, so the window starts at a user turn
    let cut = 1;
    while (cut < turns.length - 1 && turns[cut]!.role !== "user") cut++;
    turns = turns.slice(cut);
    dropped += cut;
  }
}
