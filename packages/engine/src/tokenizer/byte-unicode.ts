/**
 * GPT-2 byte-level alphabet: every byte 0..255 is shown as one printable code point, so a BPE
 * vocabulary can store arbitrary bytes as text. Printable Latin-1 bytes ("!".."~", "¡".."¬",
 * "®".."ÿ") map to themselves; the other 68 bytes take U+0100, U+0101, ... in byte order.
 */

function buildByteToCodePoint(): Uint16Array {
  const table = new Uint16Array(256);
  const printable = new Array<boolean>(256).fill(false);
  for (let b = 0x21; b <= 0x7e; b++) printable[b] = true;
  for (let b = 0xa1; b <= 0xac; b++) printable[b] = true;
  for (let b = 0xae; b <= 0xff; b++) printable[b] = true;
  let next = 0x100;
  for (let b = 0; b < 256; b++) table[b] = printable[b] ? b : next++;
  return table;
}

/** byte -> code point of its byte-level character */
export const BYTE_TO_CODE_POINT: Uint16Array = buildByteToCodePoint();

/** byte -> its byte-level character as a one-character string */
export const BYTE_TO_CHAR: readonly string[] = Array.from(BYTE_TO_CODE_POINT, (cp) => String.fromCharCode(cp));

/** code point of a byte-level character -> byte, or -1 for code points outside the alphabet (all below 0x144) */
export const CODE_POINT_TO_BYTE: Int16Array = (() => {
  const table = new Int16Array(0x144).fill(-1);
  BYTE_TO_CODE_POINT.forEach((cp, byte) => {
    table[cp] = byte;
  });
  return table;
})();

/** Maps UTF-8 bytes to their byte-level string (one character per byte). */
export function bytesToByteLevel(bytes: Uint8Array, start = 0, end = bytes.length): string {
  let out = "";
  for (let i = start; i < end; i++) out += BYTE_TO_CHAR[bytes[i]!]!;
  return out;
}

/** Byte of a byte-level code point, or -1 when the code point is not in the alphabet. */
export function byteOfCodePoint(cp: number): number {
  return cp < CODE_POINT_TO_BYTE.length ? CODE_POINT_TO_BYTE[cp]! : -1;
}
