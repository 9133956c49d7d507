import type { Tokenizer } from './types';

/**
 * Byte-level tokenizer for the tiny models: ids 0–255 are UTF-8 bytes, 256 is EOS, 257 is PAD (distinct from EOS).
 */
export const BYTES_EOS_ID = 256;
export const BYTES_PAD_ID = 257;
export const BYTES_VOCAB_SIZE = 258;

// Core compiles without DOM/WebWorker/Node typings, so TextEncoder/TextDecoder (present in browsers, workers and
// Node) are reached through globalThis with just the shape used here.
interface Utf8DecoderLike {
  decode(bytes: Uint8Array): string;
}
const codecs = globalThis as unknown as {
  TextEncoder: new () => { encode(text: string): Uint8Array };
  TextDecoder: new (label?: string, options?: { fatal?: boolean }) => Utf8DecoderLike;
};
const encoder = new codecs.TextEncoder();
// Not streaming: a decoder in stream mode keeps a partial character between calls and would leak it into the next one.
const lenientDecoder = new codecs.TextDecoder('utf-8');

export function utf8Encode(text: string): Uint8Array {
  return encoder.encode(text);
}

/** UTF-8 bytes to text; invalid sequences become U+FFFD. */
export function utf8Decode(bytes: Uint8Array): string {
  return lenientDecoder.decode(bytes);
}

/** Length of the valid UTF-8 sequence starting at `i`, or 0 when the bytes there are not one. */
function validSequenceLength(bytes: Uint8Array, i: number): number {
  const b0 = bytes[i];
  if (b0 < 0x80) return 1;
  let n: number;
  let min: number;
  if (b0 >= 0xc2 && b0 <= 0xdf) [n, min] = [2, 0x80];
  else if (b0 >= 0xe0 && b0 <= 0xef) [n, min] = [3, 0x800];
  else if (b0 >= 0xf0 && b0 <= 0xf4) [n, min] = [4, 0x10000];
  else return 0;
  if (i + n > bytes.length) return 0;
  let cp = b0 & (0xff >> (n + 1));
  for (let k = 1; k < n; k++) {
    const b = bytes[i + k];
    if ((b & 0xc0) !== 0x80) return 0;
    cp = (cp << 6) | (b & 0x3f);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return n;
}

const hex = (b: number): string => `\\x${b.toString(16).toUpperCase().padStart(2, '0')}`;

/**
 * Bytes for display: whole UTF-8 characters as themselves, stray bytes (a piece of a character) as `\xNN`,
 * control characters escaped (`\n`, `\t`, `\r`, else `\xNN`) so a token chip never shows an invisible glyph.
 */
export function displayBytes(bytes: Uint8Array): string {
  let out = '';
  let i = 0;
  while (i < bytes.length) {
    const n = validSequenceLength(bytes, i);
    if (n === 0) {
      out += hex(bytes[i]);
      i += 1;
      continue;
    }
    if (n === 1) {
      const b = bytes[i];
      if (b === 0x0a) out += '\\n';
      else if (b === 0x09) out += '\\t';
      else if (b === 0x0d) out += '\\r';
      else if (b < 0x20 || b === 0x7f) out += hex(b);
      else out += String.fromCharCode(b);
    } else {
      out += utf8Decode(bytes.subarray(i, i + n));
    }
    i += n;
  }
  return out;
}

function checkId(id: number, vocabSize: number): void {
  if (!Number.isInteger(id) || id < 0 || id >= vocabSize) {
    throw new RangeError(`token id ${id} is outside this tokenizer's vocabulary [0, ${vocabSize}).`);
  }
}

export class BytesTokenizer implements Tokenizer {
  readonly kind = 'bytes' as const;
  readonly vocabSize = BYTES_VOCAB_SIZE;
  readonly eosId = BYTES_EOS_ID;
  readonly padId = BYTES_PAD_ID;

  encode(text: string): number[] {
    return Array.from(utf8Encode(text));
  }

  decode(ids: number[]): string {
    const bytes: number[] = [];
    for (const id of ids) {
      checkId(id, BYTES_VOCAB_SIZE);
      if (id < 256) bytes.push(id); // EOS renders as nothing, PAD is ignored
    }
    return utf8Decode(Uint8Array.from(bytes));
  }

  decodeToken(id: number): string {
    checkId(id, BYTES_VOCAB_SIZE);
    if (id === BYTES_EOS_ID) return '<|endoftext|>';
    if (id === BYTES_PAD_ID) return '<|pad|>';
    return displayBytes(Uint8Array.of(id));
  }
}
