/**
 * Stop strings over a text stream. Text that could be the beginning of a stop string is held
 * back until it is known not to be one, so the caller never shows text it must later retract.
 */

export interface StopMatch {
  /** Text that is safe to emit now. */
  text: string;
  /** The stop string that matched, when one did (text before it is in `text`; nothing after). */
  stop?: string;
}

export class StopStringMatcher {
  private held = "";
  private done = false;
  private readonly stops: readonly string[];

  constructor(stops: readonly string[]) {
    this.stops = stops.filter((s) => s.length > 0);
  }

  get stopped(): boolean {
    return this.done;
  }

  /** Feeds a text delta. */
  push(delta: string): StopMatch {
    if (this.done) return { text: "" };
    const text = this.held + delta;
    if (this.stops.length === 0) {
      this.held = "";
      return { text };
    }
    // Earliest occurrence of any stop string (longest first on the same start).
    let at = -1;
    let matched: string | undefined;
    for (const stop of this.stops) {
      const index = text.indexOf(stop);
      if (index >= 0 && (at < 0 || index < at || (index === at && stop.length > matched!.length))) {
        at = index;
        matched = stop;
      }
    }
    if (matched !== undefined) {
      this.done = true;
      this.held = "";
      return { text: text.slice(0, at), stop: matched };
    }
    // Hold back the longest suffix that is a proper prefix of some stop string.
    let hold = 0;
    for (const stop of this.stops) {
      for (let length = Math.min(stop.length - 1, text.length); length > hold; length--) {
        if (text.endsWith(stop.slice(0, length))) {
          hold = length;
          break;
        }
      }
    }
    // Never split a surrogate pair.
    let cut = text.length - hold;
    if (cut > 0 && cut < text.length) {
      const code = text.charCodeAt(cut - 1);
      if (code >= 0xd800 && code <= 0xdbff) cut--;
    }
    this.held = text.slice(cut);
    return { text: text.slice(0, cut) };
  }

  /** End of stream without a stop string: releases the held text. */
  flush(): string {
    const text = this.done ? "" : this.held;
    this.held = "";
    return text;
  }
}
