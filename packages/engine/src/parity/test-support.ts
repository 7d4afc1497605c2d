/** Test support of the parity tests (not exported from the package). */
import { expect } from "vitest";

/**
 * Fails at the first value whose bits differ between row `p` of `ours` and of `theirs` (rows of equal
 * length), with the message `where(p, index)` gives.
 */
export function expectSameBits(
  ours: readonly Float32Array[],
  theirs: readonly Float32Array[],
  where: (row: number, index: number) => string,
): void {
  for (let p = 0; p < ours.length; p++) {
    const a = new Uint32Array(ours[p]!.buffer, ours[p]!.byteOffset, ours[p]!.length);
    const b = new Uint32Array(theirs[p]!.buffer, theirs[p]!.byteOffset, theirs[p]!.length);
    const at = a.findIndex((bits, i) => bits !== b[i]);
    if (at >= 0) expect.fail(where(p, at));
  }
}
