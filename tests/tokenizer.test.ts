import { describe, expect, it } from 'vitest';
import { UserError } from '../src/common/errors';
import { parseGPT2Config, type GPT2Config } from '../src/core/model/config';
import { BytesTokenizer, Gpt2BpeTokenizer, tokenizerFor } from '../src/core/tokenizer/index';

const TEXTS = [
  'Hello world',
  'héllo wörld — ünïcode',
  '日本語のテキスト 😀👍🏽',
  'tabs\tand\nnewlines\r\n',
  '',
  '  leading spaces',
];

function config(over: Partial<GPT2Config> & Record<string, unknown>): GPT2Config {
  return parseGPT2Config({ vocab_size: 258, n_positions: 64, n_embd: 8, n_layer: 1, n_head: 2, ...over });
}

describe('GPT-2 BPE', () => {
  const bpe = new Gpt2BpeTokenizer();

  it('encodes "Hello world" as GPT-2 does', () => {
    expect(bpe.encode('Hello world')).toEqual([15496, 995]);
    expect(bpe.eosId).toBe(50256);
    expect(bpe.padId).toBe(50256);
    expect(bpe.vocabSize).toBe(50257);
  });

  it('round-trips text, unicode included', () => {
    for (const t of TEXTS) expect(bpe.decode(bpe.encode(t))).toBe(t);
  });

  it('encodes <|endoftext|> in user text as plain text, not the special token', () => {
    const ids = bpe.encode('a <|endoftext|> b');
    expect(ids).not.toContain(50256);
    expect(bpe.decode(ids)).toBe('a <|endoftext|> b');
  });

  it('renders EOS as nothing in decode and as <|endoftext|> per token', () => {
    expect(bpe.decode([15496, 50256, 995])).toBe('Hello world');
    expect(bpe.decodeToken(50256)).toBe('<|endoftext|>');
    expect(bpe.decodeToken(15496)).toBe('Hello');
  });

  it('shows a token that is part of a character as \\xNN, and decoding stays stateless', () => {
    const ids = bpe.encode('日本'); // byte-level pieces of multi-byte characters
    const shown = ids.map((id) => bpe.decodeToken(id)).join('');
    expect(shown).toMatch(/\\x[0-9A-F]{2}/);
    // a dangling partial character must not leak into the next decode
    expect(bpe.decode([ids[0]])).toMatch(/\uFFFD/);
    expect(bpe.decode(bpe.encode('Hi'))).toBe('Hi');
  });
});

describe('bytes tokenizer', () => {
  const bytes = new BytesTokenizer();

  it('uses UTF-8 bytes and distinct EOS/PAD', () => {
    expect(bytes.encode('Hi é')).toEqual([72, 105, 32, 0xc3, 0xa9]);
    expect(bytes.eosId).toBe(256);
    expect(bytes.padId).toBe(257);
    expect(bytes.eosId).not.toBe(bytes.padId);
    expect(bytes.vocabSize).toBe(258);
  });

  it('round-trips text, unicode included', () => {
    for (const t of TEXTS) expect(bytes.decode(bytes.encode(t))).toBe(t);
  });

  it('skips EOS and PAD, and replaces invalid UTF-8', () => {
    expect(bytes.decode([72, 256, 105, 257, 257])).toBe('Hi');
    expect(bytes.decode([0xc3])).toBe('\uFFFD');
    expect(bytes.encode('<|endoftext|>')).not.toContain(256);
  });

  it('shows partial characters and control bytes escaped per token', () => {
    expect(bytes.decodeToken(72)).toBe('H');
    expect(bytes.decodeToken(0xc3)).toBe('\\xC3');
    expect(bytes.decodeToken(10)).toBe('\\n');
    expect(bytes.decodeToken(0)).toBe('\\x00');
    expect(bytes.decodeToken(256)).toBe('<|endoftext|>');
    expect(bytes.decodeToken(257)).toBe('<|pad|>');
    expect(() => bytes.decodeToken(258)).toThrow(RangeError);
  });
});

describe('tokenizerFor', () => {
  it('follows the config', () => {
    expect(tokenizerFor(config({ tokenizer: 'bytes', eos_token_id: 256, pad_token_id: 257 })).kind).toBe(
      'bytes',
    );
    expect(tokenizerFor(config({ vocab_size: 50257 })).kind).toBe('gpt2-bpe'); // field absent, vocab 50257
    expect(tokenizerFor(config({ vocab_size: 50304, tokenizer: 'gpt2-bpe', eos_token_id: 50256 })).kind).toBe(
      'gpt2-bpe',
    );
  });

  it('rejects a bytes config with the wrong vocab size or special ids', () => {
    expect(() => tokenizerFor(config({ vocab_size: 300, tokenizer: 'bytes', eos_token_id: 256 }))).toThrow(
      UserError,
    );
    expect(() => tokenizerFor(config({ vocab_size: 300, tokenizer: 'bytes', eos_token_id: 256 }))).toThrow(
      /vocab_size.*258/,
    );
    expect(() => tokenizerFor(config({ tokenizer: 'bytes', eos_token_id: 257 }))).toThrow(
      /eos_token_id": 256/,
    );
    expect(() => tokenizerFor(config({ tokenizer: 'bytes', eos_token_id: 256, pad_token_id: 256 }))).toThrow(
      /pad_token_id/,
    );
  });

  it('rejects a GPT-2 BPE config that is too small', () => {
    expect(() =>
      tokenizerFor(config({ vocab_size: 1000, tokenizer: 'gpt2-bpe', eos_token_id: 999 })),
    ).toThrow(/at least 50257/);
  });
});
