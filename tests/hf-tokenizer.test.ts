/**
 * src/core/tokenizer/hf.ts against transformers: tests/fixtures/hf-tokenizer/ is a 512-id Qwen2-style tokenizer folder,
 * tests/fixtures/hf-tokenizer-llama3/ a 512-id Llama 3 style one, and each expected.json what transformers 5 does with
 * it (scripts/make_hf_tokenizer_fixture.py). No Python needed here.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { UserError } from '../src/common/errors';
import {
  HfTokenizer,
  readHfTokenizer,
  tokenizerFromFolder,
  type HfTokenizerFiles,
} from '../src/core/tokenizer/hf';

const DIR = join(__dirname, 'fixtures', 'hf-tokenizer');
const LLAMA_DIR = join(__dirname, 'fixtures', 'hf-tokenizer-llama3');
const LLAMA2_DIR = join(__dirname, 'fixtures', 'hf-tokenizer-llama2');
const read = (name: string, dir = DIR): string => readFileSync(join(dir, name), 'utf8');

interface Expected {
  vocab_size: number;
  special_ids: Record<string, number>;
  eos_id: number;
  pad_id: number | null;
  bos_id?: number | null;
  encode: { text: string; ids: number[]; plain_ids: number[]; decoded: string; plain_decoded: string }[];
  chat: { user: string; text: string; ids: number[] }[];
  templates: {
    name: string;
    template: string;
    user: string;
    text: string;
    kwargs?: Record<string, unknown>;
  }[];
  prefixes: { text: string; ids: number[]; decoded: string[] };
}
const expected = JSON.parse(read('expected.json')) as Expected;
const FILES: HfTokenizerFiles = {
  tokenizerJson: read('tokenizer.json'),
  tokenizerConfig: read('tokenizer_config.json'),
  generationConfig: read('generation_config.json'),
};
const tok = HfTokenizer.fromFiles(FILES);
const EOT = expected.special_ids['<|endoftext|>'];
const IM_START = expected.special_ids['<|im_start|>'];
const IM_END = expected.special_ids['<|im_end|>'];

function withJson(edit: (json: Record<string, unknown>) => void): HfTokenizerFiles {
  const json = JSON.parse(read('tokenizer.json')) as Record<string, unknown>;
  edit(json);
  return { ...FILES, tokenizerJson: json };
}
function withConfig(edit: (config: Record<string, unknown>) => void): HfTokenizerFiles {
  const config = JSON.parse(read('tokenizer_config.json')) as Record<string, unknown>;
  edit(config);
  return { ...FILES, tokenizerConfig: config };
}
function userError(f: () => unknown): UserError {
  try {
    f();
  } catch (e) {
    expect(e).toBeInstanceOf(UserError);
    return e as UserError;
  }
  throw new Error('expected a UserError, nothing was thrown');
}

describe('HfTokenizer on the fixture folder', () => {
  it('has the folder’s sizes and special ids', () => {
    expect(expected.vocab_size).toBe(512);
    expect([EOT, IM_START, IM_END]).toEqual([509, 510, 511]);
    expect(tok.kind).toBe('hf');
    expect(tok.vocabSize).toBe(expected.vocab_size);
    expect(tok.eosId).toBe(expected.eos_id);
    expect(tok.eosId).toBe(IM_END);
    expect(tok.padId).toBe(expected.pad_id);
    expect(tok.padId).toBe(EOT);
    expect(tok.bosId).toBeUndefined();
  });

  it('has at least 15 cases, some with special-token spellings', () => {
    expect(expected.encode.length).toBeGreaterThanOrEqual(15);
    expect(expected.encode.filter((c) => c.ids.includes(IM_END)).length).toBeGreaterThanOrEqual(2);
  });

  for (const c of expected.encode) {
    it(`encodes and decodes ${JSON.stringify(c.text).slice(0, 48)} as transformers does`, () => {
      expect(tok.encodeWithSpecials(c.text)).toEqual(c.ids);
      expect(tok.encode(c.text)).toEqual(c.plain_ids);
      expect(tok.decode(c.ids)).toBe(c.decoded);
      expect(tok.decode(c.plain_ids)).toBe(c.plain_decoded);
    });
  }

  it('encode keeps special-token spellings as text; encodeWithSpecials makes them the special ids', () => {
    const text = 'a<|im_end|>b';
    expect(tok.encodeWithSpecials(text)).toContain(IM_END);
    const plain = tok.encode(text);
    expect(plain).not.toContain(IM_END);
    expect(plain.every((id) => id < EOT)).toBe(true);
    expect(tok.decode(plain)).toBe(text);
  });

  it('decode drops EOS, PAD, the other specials and ids past the vocabulary; rejects non-ids', () => {
    const hello = tok.encode('Hello');
    expect(tok.decode([...hello, IM_END, EOT, IM_START, 512, 100000])).toBe('Hello');
    expect(tok.decode([])).toBe('');
    expect(tok.decode([IM_END])).toBe('');
    expect(() => tok.decode([-1])).toThrow(RangeError);
    expect(() => tok.decode([1.5])).toThrow(RangeError);
  });

  it('decode ignores clean_up_tokenization_spaces for a BPE model, as transformers 5 does', () => {
    const c = expected.encode.find((e) => e.text.includes(' ... ???'))!;
    const cleanUp = HfTokenizer.fromFiles(withConfig((cfg) => (cfg.clean_up_tokenization_spaces = true)));
    expect(cleanUp.decode(c.ids)).toBe(c.decoded);
    const forced = HfTokenizer.fromFiles(
      withConfig((cfg) => {
        cfg.clean_up_tokenization_spaces = true;
        cfg.clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output = true;
      }),
    );
    // transformers' clean_up_tokenization: " ." → ".", " ?" → "?" (and " !", " ,", " 's", " n't", …).
    expect(forced.decode(c.ids)).toBe('Mixed CASE, punctuation!!!...???');
  });

  it('decode of a piece of a character gives U+FFFD, not a leak into the next call', () => {
    const emoji = tok.encode('🙂');
    expect(emoji.length).toBeGreaterThan(1); // the tiny BPE has no merge for it: one token per byte
    expect(tok.decode(emoji.slice(0, 1))).toBe('\uFFFD');
    expect(tok.decode(tok.encode('ok'))).toBe('ok');
  });

  it('decodeToken shows specials by content, stray bytes as \\xNN, control characters escaped', () => {
    expect(tok.decodeToken(IM_END)).toBe('<|im_end|>');
    expect(tok.decodeToken(EOT)).toBe('<|endoftext|>');
    expect(tok.decodeToken(IM_START)).toBe('<|im_start|>');
    // 🙂 is U+1F642 = UTF-8 F0 9F 99 82, one byte-level token per byte in this vocabulary.
    expect(tok.encode('🙂').map((id) => tok.decodeToken(id))).toEqual(['\\xF0', '\\x9F', '\\x99', '\\x82']);
    expect(tok.encode('\n').map((id) => tok.decodeToken(id))).toEqual(['\\n']);
    expect(tok.encode('\t').map((id) => tok.decodeToken(id))).toEqual(['\\t']);
    const hello = tok.encode('Hello world');
    expect(hello.length).toBeGreaterThan(1);
    expect(hello.map((id) => tok.decodeToken(id)).join('')).toBe('Hello world');
    expect(tok.decodeToken(600)).toBe('<|unk 600|>');
    expect(() => tok.decodeToken(-2)).toThrow(RangeError);
  });

  it('stop ids: EOS first, then generation_config’s list and <|im_end|>, deduplicated', () => {
    const generation = JSON.parse(read('generation_config.json')) as { eos_token_id: number[] };
    expect(generation.eos_token_id).toEqual([IM_END, EOT]);
    expect(tok.stopIds).toEqual([IM_END, EOT]);
  });

  for (const c of expected.chat) {
    it(`chatPrompt(${JSON.stringify(c.user).slice(0, 40)}) is transformers’ apply_chat_template text and ids`, () => {
      const text = tok.chatPrompt!(c.user);
      expect(text).toBe(c.text);
      expect(tok.encodeWithSpecials(text)).toEqual(c.ids);
    });
  }
});

describe('HfTokenizer: other folder layouts', () => {
  it('has Llama 3 style, Qwen3 style and block-line templates to render', () => {
    expect(new Set(expected.templates.map((t) => t.name)).size).toBe(3);
  });

  it('passes extra template variables (Qwen3’s enable_thinking)', () => {
    expect(expected.templates.filter((t) => t.kwargs?.enable_thinking === false).length).toBe(1);
  });

  for (const t of expected.templates) {
    const extra = t.kwargs ? ` with ${JSON.stringify(t.kwargs)}` : '';
    it(`renders the ${t.name} template${extra} for ${JSON.stringify(t.user).slice(0, 30)} as transformers does`, () => {
      const withTemplate = HfTokenizer.fromFiles({
        ...FILES,
        chatTemplate: t.template,
        templateVariables: t.kwargs,
      });
      expect(withTemplate.chatPrompt!(t.user)).toBe(t.text);
    });
  }

  it('uses chat_template.jinja over tokenizer_config’s template, and passes the special tokens and tools=None', () => {
    const t = HfTokenizer.fromFiles({
      ...FILES,
      chatTemplate:
        '{{ eos_token }}|{{ pad_token }}|{% if bos_token is defined %}B{% endif %}|' +
        '{% if tools is not none %}T{% endif %}|{% for m in messages %}{{ m.role }}:{{ m.content }}{% endfor %}' +
        '{% if add_generation_prompt %}>{% endif %}',
    });
    expect(t.chatPrompt!('hi')).toBe('<|im_end|>|<|endoftext|>|||user:hi>');
  });

  it('has no chatPrompt without a template; PAD falls back to EOS; EOS from generation_config', () => {
    const t = HfTokenizer.fromFiles({
      tokenizerJson: FILES.tokenizerJson,
      generationConfig: JSON.stringify({ eos_token_id: EOT }),
    });
    expect(t.chatPrompt).toBeUndefined();
    expect(t.eosId).toBe(EOT);
    expect(t.padId).toBe(EOT);
    expect(t.stopIds).toEqual([EOT, IM_END]);
  });

  it('reads tokenizer_config’s AddedToken objects and the old list form of chat_template', () => {
    const t = HfTokenizer.fromFiles(
      withConfig((c) => {
        c.eos_token = { content: '<|endoftext|>', __type: 'AddedToken' };
        c.bos_token = { content: '<|im_start|>', __type: 'AddedToken' };
        c.chat_template = [
          { name: 'tool_use', template: 'tools' },
          { name: 'default', template: '{{ bos_token }}{{ messages[0].content }}' },
        ];
      }),
    );
    expect(t.eosId).toBe(EOT);
    expect(t.bosId).toBe(IM_START);
    expect(t.chatPrompt!('x')).toBe('<|im_start|>x');
  });

  it('adds a Llama 3 style <|eot_id|> to the stop ids', () => {
    const t = HfTokenizer.fromFiles(
      withJson((j) => {
        (j.added_tokens as object[]).push({
          id: 512,
          content: '<|eot_id|>',
          special: true,
          normalized: false,
        });
      }),
    );
    expect(t.vocabSize).toBe(513);
    expect(t.stopIds).toEqual([IM_END, EOT, 512]);
    expect(t.encodeWithSpecials('a<|eot_id|>')).toEqual([...tok.encode('a'), 512]);
  });

  it('tokenizerFromFolder takes the files by name, as bytes', () => {
    const bytes = (name: string) => new Uint8Array(readFileSync(join(DIR, name)));
    const t = tokenizerFromFolder({
      'tokenizer.json': bytes('tokenizer.json'),
      'tokenizer_config.json': bytes('tokenizer_config.json'),
      'generation_config.json': bytes('generation_config.json'),
    });
    expect(t.encodeWithSpecials(expected.chat[0].text)).toEqual(expected.chat[0].ids);
    expect(t.stopIds).toEqual(tok.stopIds);
    const qwen3 = expected.templates.find((x) => x.kwargs)!;
    const withVars = tokenizerFromFolder(
      {
        'tokenizer.json': bytes('tokenizer.json'),
        'generation_config.json': bytes('generation_config.json'),
        'chat_template.jinja': qwen3.template,
      },
      { templateVariables: qwen3.kwargs },
    );
    expect(withVars.chatPrompt!(qwen3.user)).toBe(qwen3.text);
  });

  it('readHfTokenizer reads the files from a ModelFiles-shaped folder and prefixes errors with its label', async () => {
    const read = async (name: string) =>
      name === 'chat_template.jinja' ? null : new Uint8Array(readFileSync(join(DIR, name)));
    const t = await readHfTokenizer({ label: 'fixtures/hf-tokenizer', read });
    expect(t.chatPrompt!(expected.chat[1].user)).toBe(expected.chat[1].text);
    expect(t.stopIds).toEqual(tok.stopIds);
    await expect(readHfTokenizer({ label: 'my-model', read: async () => null })).rejects.toThrow(
      /^my-model: The model folder has no tokenizer\.json/,
    );
  });
});

describe('HfTokenizer on the Llama 3 style fixture folder', () => {
  const llamaExpected = JSON.parse(read('expected.json', LLAMA_DIR)) as Expected;
  const llama = tokenizerFromFolder({
    'tokenizer.json': read('tokenizer.json', LLAMA_DIR),
    'tokenizer_config.json': read('tokenizer_config.json', LLAMA_DIR),
    'generation_config.json': read('generation_config.json', LLAMA_DIR),
  });
  const ids = llamaExpected.special_ids;

  it('has BOS, EOS <|eot_id|>, PAD = EOS (no pad_token) and stop ids [<|eot_id|>, <|end_of_text|>]', () => {
    expect(llamaExpected.vocab_size).toBe(512);
    expect(llama.vocabSize).toBe(512);
    expect(llama.bosId).toBe(llamaExpected.bos_id);
    expect(llama.bosId).toBe(ids['<|begin_of_text|>']);
    expect(llama.eosId).toBe(llamaExpected.eos_id);
    expect(llama.eosId).toBe(ids['<|eot_id|>']);
    expect(llamaExpected.pad_id).toBeNull();
    expect(llama.padId).toBe(llama.eosId);
    expect(llama.stopIds).toEqual([ids['<|eot_id|>'], ids['<|end_of_text|>']]);
  });

  for (const c of llamaExpected.encode) {
    it(`encodes and decodes ${JSON.stringify(c.text).slice(0, 48)} as transformers does`, () => {
      expect(llama.encodeWithSpecials(c.text)).toEqual(c.ids);
      expect(llama.encode(c.text)).toEqual(c.plain_ids);
      expect(llama.decode(c.ids)).toBe(c.decoded);
      expect(llama.decode(c.plain_ids)).toBe(c.plain_decoded);
    });
  }

  it('adds no BOS: the post-processor’s <|begin_of_text|> comes only from the template', () => {
    expect(llama.encode('Hello')).not.toContain(ids['<|begin_of_text|>']);
    expect(llama.encodeWithSpecials('Hello')).not.toContain(ids['<|begin_of_text|>']);
    expect(llamaExpected.chat[0].ids[0]).toBe(ids['<|begin_of_text|>']);
  });

  for (const c of llamaExpected.chat) {
    it(`chatPrompt(${JSON.stringify(c.user).slice(0, 40)}) is transformers’ text and ids, BOS included`, () => {
      const text = llama.chatPrompt!(c.user);
      expect(text).toBe(c.text);
      expect(llama.encodeWithSpecials(text)).toEqual(c.ids);
    });
  }
});

describe('HfTokenizer on the Llama 2 style (SentencePiece BPE, LlamaTokenizerFast) fixture folder', () => {
  const l2Expected = JSON.parse(read('expected.json', LLAMA2_DIR)) as Expected;
  const l2Files = (edit?: (config: Record<string, unknown>) => void): HfTokenizerFiles => {
    const config = JSON.parse(read('tokenizer_config.json', LLAMA2_DIR)) as Record<string, unknown>;
    edit?.(config);
    return {
      tokenizerJson: read('tokenizer.json', LLAMA2_DIR),
      tokenizerConfig: config,
      generationConfig: read('generation_config.json', LLAMA2_DIR),
    };
  };
  const l2 = HfTokenizer.fromFiles(l2Files());

  it('has <unk> 0, BOS <s> 1, EOS </s> 2, PAD = EOS, stop ids [2]', () => {
    expect(l2Expected.special_ids).toEqual({ '<unk>': 0, '<s>': 1, '</s>': 2 });
    expect(l2.vocabSize).toBe(512);
    expect(l2Expected.vocab_size).toBe(512);
    expect([l2.bosId, l2.eosId, l2.padId]).toEqual([1, 2, 2]);
    expect(l2.stopIds).toEqual([2]);
  });

  for (const c of l2Expected.encode) {
    it(`encodes and decodes ${JSON.stringify(c.text).slice(0, 48)} as transformers does`, () => {
      expect(l2.encodeWithSpecials(c.text)).toEqual(c.ids);
      expect(l2.encode(c.text)).toEqual(c.plain_ids);
      expect(l2.decode(c.ids)).toBe(c.decoded);
      expect(l2.decode(c.plain_ids)).toBe(c.plain_decoded);
    });
  }

  it('builds the pipeline as transformers 5 builds LlamaTokenizerFast, not as the tokenizer.json says', () => {
    // The file's own normalizer prepends "▁" to every section, so after a special token its ids differ.
    const asFile = HfTokenizer.fromFiles(l2Files((c) => (c.tokenizer_class = 'PreTrainedTokenizerFast')));
    const c = l2Expected.encode.find((e) => e.text === '</s> after')!;
    expect(asFile.encodeWithSpecials(c.text)).not.toEqual(c.ids);
    expect(l2.encodeWithSpecials(c.text)).toEqual(c.ids);
  });

  for (const c of l2Expected.chat) {
    it(`chatPrompt(${JSON.stringify(c.user).slice(0, 40)}) is transformers’ text and ids`, () => {
      const text = l2.chatPrompt!(c.user);
      expect(text).toBe(c.text);
      expect(l2.encodeWithSpecials(text)).toEqual(c.ids);
    });
  }

  it('decodeToken shows "▁" as a space and byte-fallback tokens as bytes', () => {
    const hello = l2.encode('Hello world');
    expect(hello.map((id) => l2.decodeToken(id)).join('')).toBe(' Hello world');
    // 🙂 = F0 9F 99 82, not in the trained alphabet: four <0xNN> byte-fallback tokens.
    expect(l2.encode('🙂').map((id) => l2.decodeToken(id))).toEqual([
      ' ',
      '\\xF0',
      '\\x9F',
      '\\x99',
      '\\x82',
    ]);
    expect(l2.decodeToken(2)).toBe('</s>');
  });
});

describe('HfTokenizer: decoding pieces of characters, as transformers', () => {
  const folders = {
    'hf-tokenizer': DIR,
    'hf-tokenizer-llama3': LLAMA_DIR,
    'hf-tokenizer-llama2': LLAMA2_DIR,
  };
  for (const [name, dir] of Object.entries(folders)) {
    it(`${name}: decode of every prefix of ${JSON.stringify(JSON.parse(read('expected.json', dir)).prefixes.text)}`, () => {
      const e = JSON.parse(read('expected.json', dir)) as Expected;
      const t = tokenizerFromFolder({
        'tokenizer.json': read('tokenizer.json', dir),
        'tokenizer_config.json': read('tokenizer_config.json', dir),
      });
      expect(e.prefixes.decoded.length).toBe(e.prefixes.ids.length + 1);
      expect(e.prefixes.decoded.some((d) => d.includes('\uFFFD'))).toBe(true);
      const got = e.prefixes.decoded.map((_, k) => t.decode(e.prefixes.ids.slice(0, k)));
      expect(got).toEqual(e.prefixes.decoded);
    });
  }
});

describe('HfTokenizer: clear errors', () => {
  it('names tokenizer.json when it is not JSON or not a tokenizer', () => {
    expect(userError(() => HfTokenizer.fromFiles({ tokenizerJson: '{"model": ' })).message).toMatch(
      /^tokenizer\.json is not valid JSON/,
    );
    expect(userError(() => HfTokenizer.fromFiles({ tokenizerJson: '[1, 2]' })).message).toMatch(
      /^tokenizer\.json must hold a JSON object, got an array/,
    );
    expect(userError(() => HfTokenizer.fromFiles(withJson((j) => delete j.model))).message).toMatch(
      /^tokenizer\.json: has no "model" object/,
    );
    expect(
      userError(() =>
        HfTokenizer.fromFiles(withJson((j) => delete (j.model as Record<string, unknown>).merges)),
      ).message,
    ).toBe('tokenizer.json: the BPE model has no "merges" list.');
    expect(
      userError(() =>
        HfTokenizer.fromFiles(withJson((j) => delete (j.model as Record<string, unknown>).vocab)),
      ).message,
    ).toBe('tokenizer.json: the BPE model has no "vocab" (token → id).');
    expect(
      userError(() =>
        HfTokenizer.fromFiles(withJson((j) => ((j.added_tokens as { id: unknown }[])[1].id = '510'))),
      ).message,
    ).toBe('tokenizer.json: added_tokens[1] has no non-negative integer "id".');
    expect(
      userError(() =>
        HfTokenizer.fromFiles(withJson((j) => ((j.model as Record<string, unknown>).type = 'Nope'))),
      ).message,
    ).toBe(
      'tokenizer.json: model type "Nope" is not one @huggingface/tokenizers supports (BPE, Unigram, WordPiece).',
    );
    expect(
      userError(() => HfTokenizer.fromFiles(withJson((j) => (j.pre_tokenizer = { type: 'Nope' })))).message,
    ).toMatch(/^tokenizer\.json: @huggingface\/tokenizers cannot build this tokenizer: .*Nope/);
  });

  it('names tokenizer_config.json / generation_config.json for tokens that are not there', () => {
    expect(userError(() => HfTokenizer.fromFiles(withConfig((c) => (c.eos_token = '</s>')))).message).toBe(
      'tokenizer_config.json: "eos_token" is "</s>", which tokenizer.json lacks.',
    );
    expect(
      userError(() => HfTokenizer.fromFiles({ ...FILES, generationConfig: '{"eos_token_id": ["x"]}' }))
        .message,
    ).toMatch(/^generation_config\.json: "eos_token_id" must be a token id or a list of them/);
    expect(userError(() => HfTokenizer.fromFiles({ tokenizerJson: FILES.tokenizerJson })).message).toMatch(
      /no EOS token/,
    );
    expect(userError(() => tokenizerFromFolder({})).message).toMatch(/no tokenizer\.json/);
  });

  it('names the file when the chat template does not parse or fails to render', () => {
    const broken = HfTokenizer.fromFiles(
      withConfig((c) => (c.chat_template = '{% for m in messages %}{{ m.content }')),
    );
    expect(userError(() => broken.chatPrompt!('hi')).message).toMatch(
      /^tokenizer_config\.json: the chat template does not parse: /,
    );
    const raising = HfTokenizer.fromFiles({
      ...FILES,
      chatTemplate: "{{ raise_exception('no system role') }}",
    });
    expect(userError(() => raising.chatPrompt!('hi')).message).toMatch(
      /^chat_template\.jinja: the chat template fails to render: .*no system role/,
    );
  });
});
