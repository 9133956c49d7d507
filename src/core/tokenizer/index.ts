import { UserError } from '../../common/errors';
import { HF_TOKENIZER_FILES, tokenizerFromFolder } from './hf';
import { BYTES_EOS_ID, BYTES_PAD_ID, BYTES_VOCAB_SIZE, BytesTokenizer } from './bytes';
import { GPT2_EOS_ID, GPT2_VOCAB_SIZE, Gpt2BpeTokenizer } from './bpe';
import type { Tokenizer } from './types';

export type { Tokenizer } from './types';
export { BytesTokenizer, BYTES_EOS_ID, BYTES_PAD_ID, BYTES_VOCAB_SIZE } from './bytes';
export { Gpt2BpeTokenizer, GPT2_EOS_ID, GPT2_VOCAB_SIZE } from './bpe';
export { HfTokenizer, HF_TOKENIZER_FILES } from './hf';

/**
 * A prompt's ids: with `chat` and a tokenizer that has a chat template, the text as one user message in the model's
 * own template (add_generation_prompt), its special tokens recognised; otherwise the plain text's ids.
 */
export function encodePrompt(tok: Tokenizer, text: string, chat: boolean): number[] {
  if (chat && tok.chatPrompt) {
    const formatted = tok.chatPrompt(text);
    return tok.encodeWithSpecials ? tok.encodeWithSpecials(formatted) : tok.encode(formatted);
  }
  return tok.encode(text);
}

/** The ids that end a response for a tokenizer: its stop ids (a Hugging Face model may have several), or EOS. */
export function stopIdsOf(tok: Tokenizer): number[] {
  return [...(tok.stopIds ?? [tok.eosId])];
}

/**
 * What choosing a model's tokenizer reads of its config.json (model/config.ts's GPT2Config has these; a Llama
 * family's config has `tokenizer` "hf"). Declared here so the tokenizers need nothing of the model.
 */
export interface TokenizerConfigFields {
  tokenizer: 'gpt2-bpe' | 'bytes';
  vocab_size: number;
  eos_token_id: number;
  pad_token_id?: number;
}

/** What tokenizerForFolder reads a folder through (model/folder.ts's ModelFiles). */
interface FolderReader {
  label: string;
  read(name: string): Promise<Uint8Array | null>;
}

/**
 * The tokenizer of a model folder: GPT-2's built-in ones by config.json's `tokenizer` field (tokenizerFor), or for
 * the Llama families the folder's own tokenizer.json (with tokenizer_config.json's chat template and
 * generation_config.json's stop ids; ./hf.ts). The Hugging Face files are kept by the tokenizer (`files()`), so an
 * exported folder carries them again. Checks that the tokenizer's ids fit the model's vocabulary.
 */
export async function tokenizerForFolder(
  folder: FolderReader,
  config: TokenizerConfigFields | { tokenizer: 'hf'; vocab_size: number },
): Promise<Tokenizer> {
  if (config.tokenizer !== 'hf') return tokenizerFor(config);
  const raw = new Map<string, Uint8Array>();
  for (const name of HF_TOKENIZER_FILES) {
    const bytes = await folder.read(name);
    if (bytes) raw.set(name, bytes);
  }
  let tok;
  try {
    tok = tokenizerFromFolder(Object.fromEntries(raw));
  } catch (e) {
    if (e instanceof UserError) throw new UserError(`${folder.label}: ${e.message}`);
    throw e;
  }
  if (tok.vocabSize > config.vocab_size) {
    throw new UserError(
      `${folder.label}: tokenizer.json has ${tok.vocabSize} ids but config.json's "vocab_size" is ${config.vocab_size}; ` +
        'the model cannot embed ids past its vocabulary (is the tokenizer from another model?).',
    );
  }
  return Object.assign(tok, { files: () => new Map(raw) });
}

let bpeSingleton: Gpt2BpeTokenizer | undefined;
let bytesSingleton: BytesTokenizer | undefined;

/**
 * The tokenizer a model folder's config.json names (docs/formats.md §2: its `tokenizer` field; parseGPT2Config already
 * assumes "gpt2-bpe" for vocab_size 50257 when the field is absent). Checks that the config's sizes and special ids
 * agree with the tokenizer, so a mismatch is an error here rather than garbage text later.
 */
export function tokenizerFor(config: TokenizerConfigFields): Tokenizer {
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
