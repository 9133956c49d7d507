/**
 * GPT-2 byte-level BPE, kept from the `gpt-tokenizer` package (its r50k_base encoding is GPT-2's vocabulary and
 * merges). Import paths go through the package's `exports` map ("./*" → esm/*.js), which Vite and Node/tsx both
 * resolve; do not import from 'gpt-tokenizer' itself, that pulls in cl100k_base instead.
 *
 * Encoding uses the library. Decoding does not: the library's decode shares one streaming TextDecoder across calls,
 * so a token that ends mid-character leaks its bytes into the next, unrelated decode. We decode from the rank table
 * (id → string or raw bytes) with a fresh, non-streaming decode per call.
 *
 * GPT-2 has no pad token: `padId` = 50256 (= EOS) is used only as a filler at masked positions. Padding is tracked by
 * masks, never by comparing ids with `padId`.
 */
import { encode as r50kEncode } from 'gpt-tokenizer/encoding/r50k_base';
import r50kRanks from 'gpt-tokenizer/bpeRanks/r50k_base';
import type { Tokenizer } from './types';
import { displayBytes, utf8Decode, utf8Encode } from './bytes';

export const GPT2_EOS_ID = 50256;
export const GPT2_VOCAB_SIZE = 50257;
const EOS_TEXT = '<|endoftext|>';

/** An empty set of disallowed specials: special-token spellings in user text are encoded as plain text. */
const PLAIN_TEXT = { disallowedSpecial: new Set<string>() };

export class Gpt2BpeTokenizer implements Tokenizer {
  readonly kind = 'gpt2-bpe' as const;
  readonly vocabSize = GPT2_VOCAB_SIZE;
  readonly eosId = GPT2_EOS_ID;
  readonly padId = GPT2_EOS_ID;
  private readonly tokenBytes = new Map<number, Uint8Array>();

  encode(text: string): number[] {
    return r50kEncode(text, PLAIN_TEXT);
  }

  /** Bytes of one ordinary token; undefined for EOS and for ids past the vocabulary (a padded model vocab). */
  private bytesOf(id: number): Uint8Array | undefined {
    if (!Number.isInteger(id) || id < 0) {
      throw new RangeError(`token id ${id} is not a valid GPT-2 token id (a non-negative integer).`);
    }
    if (id >= GPT2_EOS_ID) return undefined;
    let bytes = this.tokenBytes.get(id);
    if (bytes === undefined) {
      const entry = r50kRanks[id];
      bytes = typeof entry === 'string' ? utf8Encode(entry) : Uint8Array.from(entry);
      this.tokenBytes.set(id, bytes);
    }
    return bytes;
  }

  /** EOS renders as nothing (the response text a reward sees is the text before it); ids ≥ 50257 likewise. */
  decode(ids: number[]): string {
    const parts: Uint8Array[] = [];
    let length = 0;
    for (const id of ids) {
      const b = this.bytesOf(id);
      if (b === undefined) continue;
      parts.push(b);
      length += b.length;
    }
    const all = new Uint8Array(length);
    let offset = 0;
    for (const p of parts) {
      all.set(p, offset);
      offset += p.length;
    }
    return utf8Decode(all);
  }

  decodeToken(id: number): string {
    const bytes = this.bytesOf(id);
    if (bytes !== undefined) return displayBytes(bytes);
    return id === GPT2_EOS_ID ? EOS_TEXT : `<|unk ${id}|>`;
  }
}
