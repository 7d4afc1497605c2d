const THINK_START = "<think>";
const THINK_END = "</think>";

/**
 * Counts the output tokens that belong to the reasoning: every token up to the one that completes `</think>`,
 * when the prompt opened the block or the output opens it itself (as the output parser reads it).
 */
export class ReasoningCounter {
  tokens = 0;
  private state: "reasoning" | "undecided" | "done";
  /** tokens seen while it is undecided whether the output opens `<think>` */
  private undecided = 0;
  private text = "";

  constructor(reasoning: boolean) {
    this.state = reasoning ? "reasoning" : "undecided";
  }

  push(text: string): void {
    if (this.state === "done") return;
    this.text += text;
    if (this.state === "undecided") {
      this.undecided++;
      const lead = this.text.trimStart();
      if (lead === "" || (lead.length < THINK_START.length && THINK_START.startsWith(lead))) return;
      if (!lead.startsWith(THINK_START)) {
        this.state = "done";
        return;
      }
      this.state = "reasoning";
      this.tokens = this.undecided;
      this.text = lead.slice(THINK_START.length);
    } else {
      this.tokens++;
    }
    if (this.text.includes(THINK_END)) this.state = "done";
    // only the tail can complete the tag: keep enough of it
    else this.text = this.text.slice(-THINK_END.length);
  }
}
