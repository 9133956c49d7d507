import { UserError } from '../errors';
import type { GPT2Config } from '../model/config';
import { BYTES_EOS_ID, BYTES_PAD_ID, BYTES_VOCAB_SIZE, BytesTokenizer } from './bytes';
import { GPT2_EOS_ID, GPT2_VOCAB_SIZE, Gpt2BpeTokenizer } from './bpe';
import type { Tokenizer } from './types';

export type { Tokenizer } from './types';
export { BytesTokenizer, BYTES_EOS_ID, BYTES_PAD_ID, BYTES_VOCAB_SIZE } from './bytes';
export { Gpt2BpeTokenizer, GPT2_EOS_ID, GPT2_VOCAB_SIZE } from './bpe';

let bpeSingleton: Gpt2BpeTokenizer | undefined;
let bytesSingleton: BytesTokenizer | undefined;

/**
 * The tokenizer a model folder's config.json names (docs/formats.md §2: its `tokenizer` field; parseGPT2Config already
 * assumes "gpt2-bpe" for vocab_size 50257 when the field is absent). Checks that the config's sizes and special ids
 * agree with the tokenizer, so a mismatch is an error here rather than garbage text later.
 */
export function tokenizerFor(config: GPT2Config): Tokenizer {
  if (config.tokenizer === 'bytes') {
    if (config.vocab_size !== BYTES_VOCAB_SIZE) {
      throw new UserError(
        `config.json: "tokenizer" is "bytes", which needs "vocab_size": ${BYTES_VOCAB_SIZE} ` +
          `(256 bytes + EOS ${BYTES_EOS_ID} + PAD ${BYTES_PAD_ID}), got ${config.vocab_size}.`,
      );
    }
    if (config.eos_token_id !== BYTES_EOS_ID) {
      throw new UserError(
        `config.json: the bytes tokenizer's EOS id is ${BYTES_EOS_ID}; set "eos_token_id": ${BYTES_EOS_ID} ` +
          `(got ${config.eos_token_id}).`,
      );
    }
    if (config.pad_token_id !== undefined && config.pad_token_id !== BYTES_PAD_ID) {
      throw new UserError(
        `config.json: the bytes tokenizer's PAD id is ${BYTES_PAD_ID}; set "pad_token_id": ${BYTES_PAD_ID} ` +
          `or leave it out (got ${config.pad_token_id}).`,
      );
    }
    return (bytesSingleton ??= new BytesTokenizer());
  }
  if (config.tokenizer === 'gpt2-bpe') {
    if (config.vocab_size < GPT2_VOCAB_SIZE) {
      throw new UserError(
        `config.json: "tokenizer" is "gpt2-bpe", which needs "vocab_size" of at least ${GPT2_VOCAB_SIZE}, ` +
          `got ${config.vocab_size}.`,
      );
    }
    if (config.eos_token_id !== GPT2_EOS_ID) {
      throw new UserError(
        `config.json: GPT-2 BPE's EOS id is ${GPT2_EOS_ID} (<|endoftext|>); set "eos_token_id": ${GPT2_EOS_ID} ` +
          `(got ${config.eos_token_id}).`,
      );
    }
    return (bpeSingleton ??= new Gpt2BpeTokenizer());
  }
  throw new UserError(
    `config.json: "tokenizer" must be "gpt2-bpe" or "bytes", got ${JSON.stringify((config as { tokenizer: unknown }).tokenizer)}.`,
  );
}
