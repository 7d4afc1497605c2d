/**
 * Whether a prompt occurs in a text, as a word sequence: both are lower-cased and every run of
 * characters other than letters, digits and apostrophes becomes one space, so "Before the meeting
 * began," is found in "...BEFORE the\n\tmeeting began." and not in "before the meetings".
 */

/** `text` lower-cased, with each run of non-word characters one space, padded by a space on each side. */
export function wordSequence(text: string): string {
  return ` ${text
    .toLowerCase()
    .replace(/[^a-z0-9']+/g, " ")
    .trim()} `;
}

/** How many times `prompt`'s word sequence occurs in `haystack` (a wordSequence). */
export function occurrences(haystack: string, prompt: string): number {
  const needle = wordSequence(prompt);
  if (needle.trim() === "") return 0;
  let count = 0;
  for (let at = haystack.indexOf(needle); at >= 0; at = haystack.indexOf(needle, at + 1)) count++;
  return count;
}

/**
 * Of the `n`-word windows of `text`, how many occur in `haystack` (a wordSequence of the training
 * text): a measure of how much of a sample is recalled rather than composed.
 */
export function copiedWindows(haystack: string, text: string, n: number): { windows: number; copied: number } {
  const words = wordSequence(text)
    .trim()
    .split(" ")
    .filter((w) => w.length > 0);
  let windows = 0;
  let copied = 0;
  for (let i = 0; i + n <= words.length; i++) {
    windows++;
    if (haystack.includes(` ${words.slice(i, i + n).join(" ")} `)) copied++;
  }
  return { windows, copied };
}
