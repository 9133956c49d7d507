/**
 * Hugging Face tokenizers (Llama, Qwen2, Qwen3 folders): a folder's `tokenizer.json` through the maintained
 * `@huggingface/tokenizers` package (pure JS, no dependencies; the tokenizer classes of transformers.js), its chat
 * template through `@huggingface/jinja`. docs/tokenizers.md says what each method does and why.
 *
 * - `encodeWithSpecials(text)` = transformers' `tok(text, add_special_tokens=False)`: special-token spellings in the
 *   text (`<|im_start|>`, …) are the special tokens; no BOS is added.
 * - `encode(text)` = transformers' `tok(text, add_special_tokens=False, split_special_tokens=True)`: special-token
 *   spellings are plain text, as the Tokenizer interface asks. Done by a second library tokenizer built from the same
 *   tokenizer.json without its special added tokens (made on the first call).
 * - `decode` = `tok.decode(ids, skip_special_tokens=True)`, with ids outside the tokenizer (a model vocab padded past
 *   it) skipped too.
 * - `chatPrompt(user)` = `tok.apply_chat_template([{role: 'user', content: user}], tokenize=False,
 *   add_generation_prompt=True)`.
 * - A LlamaTokenizer(Fast) folder's pipeline is rebuilt as transformers 5 rebuilds it (pipelineAsTransformers), and
 *   byte-fallback runs decode by the Rust rule (byteFallbackChain).
 */
import { Template } from '@huggingface/jinja';
import { ByteFallbackDecoder, SequenceDecoder, Tokenizer as LibTokenizer } from '@huggingface/tokenizers';
import { UserError } from '../../common/errors';
import { displayBytes, utf8Decode, utf8Encode } from './bytes';
import type { Tokenizer } from './types';

/** The files of a model folder that the tokenizer is made from (only tokenizer.json is required). */
export const HF_TOKENIZER_FILES = [
  'tokenizer.json',
  'tokenizer_config.json',
  'generation_config.json',
  'chat_template.jinja',
] as const;

type FileContent = string | Uint8Array;

export interface HfTokenizerFiles {
  /** tokenizer.json: its bytes, its text or the parsed object. */
  tokenizerJson: FileContent | object;
  /** tokenizer_config.json (eos_token, pad_token, bos_token, chat_template, clean_up_tokenization_spaces). */
  tokenizerConfig?: FileContent | object;
  /** generation_config.json (eos_token_id: a number or a list). */
  generationConfig?: FileContent | object;
  /** chat_template.jinja, where newer transformers save the template; it wins over tokenizer_config's. */
  chatTemplate?: FileContent;
  /**
   * Extra template variables, as apply_chat_template's keyword arguments: e.g. `{ enable_thinking: false }` for
   * Qwen3's template (an empty think block, so the model answers at once).
   */
  templateVariables?: Readonly<Record<string, unknown>>;
}

/** End-of-turn tokens of the chat formats in use; each one the vocabulary has is a stop id. */
const END_OF_TURN_TOKENS = ['<|im_end|>', '<|eot_id|>'];

interface AddedTokenJson {
  id: number;
  content: string;
  special?: boolean;
}

interface TokenizerJson {
  model: Record<string, unknown>;
  added_tokens: AddedTokenJson[];
  normalizer: unknown;
  pre_tokenizer: unknown;
  post_processor: unknown;
  decoder: unknown;
  [key: string]: unknown;
}

type JsonObject = Record<string, unknown>;

/** The tokenizer.json model types the library builds (WordLevel is not one). */
const MODEL_TYPES = ['BPE', 'Unigram', 'WordPiece'];

function textOf(content: FileContent): string {
  return typeof content === 'string' ? content : utf8Decode(content);
}

function parseJsonFile(name: string, content: FileContent | object): JsonObject {
  let value: unknown = content;
  if (typeof content === 'string' || content instanceof Uint8Array) {
    try {
      value = JSON.parse(textOf(content));
    } catch (e) {
      throw new UserError(`${name} is not valid JSON: ${(e as Error).message}`);
    }
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new UserError(
      `${name} must hold a JSON object, got ${Array.isArray(value) ? 'an array' : String(value)}.`,
    );
  }
  return value as JsonObject;
}

/** Checks what the library needs and fills the optional pipeline parts it expects to find as keys. */
function checkTokenizerJson(raw: JsonObject): TokenizerJson {
  const model = raw.model;
  if (model === null || typeof model !== 'object' || Array.isArray(model)) {
    throw new UserError(
      'tokenizer.json: has no "model" object (the BPE/Unigram/WordPiece model with its "type" and "vocab"); ' +
        'is this a Hugging Face tokenizer.json?',
    );
  }
  const m = model as JsonObject;
  if (typeof m.type !== 'string') {
    throw new UserError('tokenizer.json: "model" has no "type" (e.g. "BPE").');
  }
  if (!MODEL_TYPES.includes(m.type)) {
    throw new UserError(
      `tokenizer.json: model type "${m.type}" is not one @huggingface/tokenizers supports (${MODEL_TYPES.join(', ')}).`,
    );
  }
  if (m.vocab === null || typeof m.vocab !== 'object') {
    throw new UserError(`tokenizer.json: the ${m.type} model has no "vocab" (token → id).`);
  }
  if (m.type === 'BPE' && !Array.isArray(m.merges)) {
    throw new UserError('tokenizer.json: the BPE model has no "merges" list.');
  }
  const added = raw.added_tokens ?? [];
  if (!Array.isArray(added)) {
    throw new UserError('tokenizer.json: "added_tokens" must be a list of {id, content, special, …}.');
  }
  added.forEach((t: unknown, i) => {
    const tok = t as Partial<AddedTokenJson> | null;
    if (tok === null || typeof tok !== 'object' || !Number.isInteger(tok.id) || (tok.id as number) < 0) {
      throw new UserError(`tokenizer.json: added_tokens[${i}] has no non-negative integer "id".`);
    }
    if (typeof tok.content !== 'string' || tok.content.length === 0) {
      throw new UserError(`tokenizer.json: added_tokens[${i}] (id ${tok.id}) has no "content" string.`);
    }
  });
  return {
    ...raw,
    model: m,
    added_tokens: added as AddedTokenJson[],
    normalizer: raw.normalizer ?? null,
    pre_tokenizer: raw.pre_tokenizer ?? null,
    post_processor: raw.post_processor ?? null,
    decoder: raw.decoder ?? null,
  };
}

/** SentencePiece's mark for a space (U+2581). */
const SPIECE_SPACE = '\u2581';

/** tokenizer_config.json classes whose pipeline transformers 5 rebuilds differently from their tokenizer.json. */
const LLAMA_SENTENCEPIECE_CLASSES = new Set(['LlamaTokenizer', 'LlamaTokenizerFast']);

/**
 * transformers 5 builds a tokenizer_config.json's model-specific `tokenizer_class` in that class's own code, keeping
 * only tokenizer.json's vocabulary, merges, added tokens and post-processor. For Qwen2Tokenizer (and the classless
 * PreTrainedTokenizerFast of Llama 3) that is the file's pipeline. For LlamaTokenizer(Fast) (Llama 2, TinyLlama,
 * Mistral folders: SentencePiece-style BPE) it is not: no normalizer, a Metaspace pre-tokenizer that prepends "▁" to
 * the first section only (unless "legacy": true, then to every section; "add_prefix_space": false, never), byte
 * fallback, and a decoder that strips the one leading space. Do the same, so the ids are transformers'.
 */
function pipelineAsTransformers(json: TokenizerJson, config: JsonObject): TokenizerJson {
  if (!LLAMA_SENTENCEPIECE_CLASSES.has(String(config.tokenizer_class)) || json.model.type !== 'BPE')
    return json;
  const addPrefixSpace = config.add_prefix_space !== false;
  const prependScheme = !addPrefixSpace ? 'never' : config.legacy === true ? 'always' : 'first';
  const decoders: JsonObject[] = [
    { type: 'Replace', pattern: { String: SPIECE_SPACE }, content: ' ' },
    { type: 'ByteFallback' },
    { type: 'Fuse' },
  ];
  if (addPrefixSpace) decoders.push({ type: 'Strip', content: ' ', start: 1, stop: 0 });
  return {
    ...json,
    model: { ...json.model, byte_fallback: true, fuse_unk: true },
    normalizer: null,
    pre_tokenizer: {
      type: 'Metaspace',
      replacement: SPIECE_SPACE,
      prepend_scheme: prependScheme,
      split: false,
    },
    decoder: { type: 'Sequence', decoders },
  };
}

// Core compiles without DOM typings: TextDecoder (in browsers, workers and Node) through globalThis.
const TextDecoderCtor = (
  globalThis as unknown as {
    TextDecoder: new (label: string, options: object) => { decode(bytes: Uint8Array): string };
  }
).TextDecoder;
/** Throws on invalid UTF-8; keeps a leading U+FEFF (no byte-order-mark stripping). */
const strictUtf8 = new TextDecoderCtor('utf-8', { fatal: true, ignoreBOM: true });

/**
 * The Rust ByteFallback decoder (transformers'): each run of `<0xNN>` tokens becomes its UTF-8 text, or, when the
 * run is not valid UTF-8, one U+FFFD per token. The library's keeps valid characters of a broken run and strips a
 * U+FEFF at a run's start.
 */
const BYTE_TOKEN = /^<0x[0-9A-Fa-f]{2}>$/;

function byteFallbackChain(tokens: string[]): string[] {
  const out: string[] = [];
  let run: number[] = [];
  const flush = (): void => {
    if (run.length === 0) return;
    try {
      out.push(strictUtf8.decode(Uint8Array.from(run)));
    } catch {
      out.push('\uFFFD'.repeat(run.length));
    }
    run = [];
  };
  for (const token of tokens) {
    if (BYTE_TOKEN.test(token)) {
      run.push(parseInt(token.slice(3, 5), 16));
    } else {
      flush();
      out.push(token);
    }
  }
  flush();
  return out;
}

function byteFallbackAsTransformers(decoder: unknown): void {
  if (decoder instanceof ByteFallbackDecoder) {
    decoder.decode_chain = byteFallbackChain;
  } else if (decoder instanceof SequenceDecoder) {
    decoder.decoders.forEach(byteFallbackAsTransformers);
  }
}

function buildLibTokenizer(json: TokenizerJson, config: JsonObject): LibTokenizer {
  try {
    const lib = new LibTokenizer(json, config);
    byteFallbackAsTransformers(lib.decoder);
    return lib;
  } catch (e) {
    throw new UserError(
      `tokenizer.json: @huggingface/tokenizers cannot build this tokenizer: ${(e as Error).message}`,
    );
  }
}

/** A token field of tokenizer_config.json: a string, an AddedToken object {content, …}, or absent/null. */
function tokenText(config: JsonObject, key: string): string | undefined {
  const v = config[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v === 'string') return v;
  if (typeof v === 'object' && typeof (v as JsonObject).content === 'string')
    return (v as JsonObject).content as string;
  throw new UserError(`tokenizer_config.json: "${key}" must be a token string, got ${JSON.stringify(v)}.`);
}

function idList(generation: JsonObject, key: string): number[] {
  const v = generation[key];
  if (v === undefined || v === null) return [];
  const list = Array.isArray(v) ? v : [v];
  for (const id of list) {
    if (!Number.isInteger(id) || id < 0) {
      throw new UserError(
        `generation_config.json: "${key}" must be a token id or a list of them, got ${JSON.stringify(v)}.`,
      );
    }
  }
  return list as number[];
}

/** GPT-2's byte ↔ printable-character table, which every ByteLevel tokenizer.json uses. */
function byteLevelDecoderTable(): Map<string, number> {
  const bytes: number[] = [];
  for (let b = 0x21; b <= 0x7e; b++) bytes.push(b);
  for (let b = 0xa1; b <= 0xac; b++) bytes.push(b);
  for (let b = 0xae; b <= 0xff; b++) bytes.push(b);
  const chars = bytes.slice();
  let n = 0;
  for (let b = 0; b < 256; b++) {
    if (!bytes.includes(b)) {
      bytes.push(b);
      chars.push(256 + n);
      n++;
    }
  }
  const table = new Map<string, number>();
  bytes.forEach((b, i) => table.set(String.fromCharCode(chars[i]), b));
  return table;
}

/** Whether a tokenizer.json decoder, or one in its Sequence, satisfies `test`. */
function decoderHas(decoder: unknown, test: (d: JsonObject) => boolean): boolean {
  if (decoder === null || typeof decoder !== 'object') return false;
  const d = decoder as JsonObject;
  if (test(d)) return true;
  return d.type === 'Sequence' && Array.isArray(d.decoders) && d.decoders.some((x) => decoderHas(x, test));
}

/** The template source and the file it came from (for error messages). */
function chatTemplateSource(
  files: HfTokenizerFiles,
  config: JsonObject,
): { source: string; file: string } | undefined {
  if (files.chatTemplate !== undefined)
    return { source: textOf(files.chatTemplate), file: 'chat_template.jinja' };
  const t = config.chat_template;
  if (t === undefined || t === null) return undefined;
  if (typeof t === 'string') return { source: t, file: 'tokenizer_config.json' };
  if (Array.isArray(t)) {
    // The older list form: [{name, template}, …]; apply_chat_template uses the one named "default".
    const named = t.find((x) => x && typeof x === 'object' && (x as JsonObject).name === 'default') as
      JsonObject | undefined;
    if (named && typeof named.template === 'string')
      return { source: named.template, file: 'tokenizer_config.json' };
    throw new UserError(
      'tokenizer_config.json: "chat_template" is a list with no {"name": "default", "template"}.',
    );
  }
  throw new UserError('tokenizer_config.json: "chat_template" must be a Jinja template string.');
}

export class HfTokenizer implements Tokenizer {
  readonly kind = 'hf' as const;
  readonly vocabSize: number;
  readonly eosId: number;
  readonly padId: number;
  /** The BOS id when tokenizer_config.json names a bos_token (Llama); chat templates write it themselves. */
  readonly bosId: number | undefined;
  readonly stopIds: readonly number[];
  readonly chatPrompt?: (user: string) => string;

  private readonly lib: LibTokenizer;
  private plainLib: LibTokenizer | undefined;
  private readonly json: TokenizerJson;
  private readonly config: JsonObject;
  private readonly addedById = new Map<number, AddedTokenJson>();
  private readonly skipped = new Set<number>();
  private readonly byteTable: Map<string, number> | undefined;
  private readonly cleanUpSpaces: boolean;
  /** SentencePiece style: "▁" marks a space in the vocabulary. */
  private readonly spaceMark: boolean;
  /** Byte-fallback tokens `<0xNN>` stand for one byte. */
  private readonly byteFallback: boolean;

  /** Builds the tokenizer from a folder's files; a UserError names the file and what is wrong. */
  static fromFiles(files: HfTokenizerFiles): HfTokenizer {
    return new HfTokenizer(files);
  }

  private constructor(files: HfTokenizerFiles) {
    this.config =
      files.tokenizerConfig === undefined
        ? {}
        : parseJsonFile('tokenizer_config.json', files.tokenizerConfig);
    this.json = pipelineAsTransformers(
      checkTokenizerJson(parseJsonFile('tokenizer.json', files.tokenizerJson)),
      this.config,
    );
    const generation =
      files.generationConfig === undefined
        ? {}
        : parseJsonFile('generation_config.json', files.generationConfig);
    this.lib = buildLibTokenizer(this.json, this.config);

    let maxId = -1;
    const vocab = this.json.model.vocab;
    if (Array.isArray(vocab))
      maxId = vocab.length - 1; // Unigram: [[piece, score], …] in id order
    else for (const id of Object.values(vocab as Record<string, number>)) if (id > maxId) maxId = id;
    for (const t of this.json.added_tokens) {
      this.addedById.set(t.id, t);
      if (t.id > maxId) maxId = t.id;
      if (t.special) this.skipped.add(t.id);
    }
    this.vocabSize = maxId + 1;

    const idOf = (token: string, field: string): number => {
      const id = this.lib.token_to_id(token);
      if (id === undefined) {
        throw new UserError(
          `tokenizer_config.json: "${field}" is ${JSON.stringify(token)}, which tokenizer.json lacks.`,
        );
      }
      return id;
    };
    const generationEos = idList(generation, 'eos_token_id');
    const eosText = tokenText(this.config, 'eos_token');
    if (eosText !== undefined) this.eosId = idOf(eosText, 'eos_token');
    else if (generationEos.length > 0) this.eosId = generationEos[0];
    else {
      throw new UserError(
        'The tokenizer has no EOS token: set "eos_token" in tokenizer_config.json or "eos_token_id" in ' +
          'generation_config.json.',
      );
    }
    const padText = tokenText(this.config, 'pad_token');
    this.padId = padText !== undefined ? idOf(padText, 'pad_token') : this.eosId;
    const bosText = tokenText(this.config, 'bos_token');
    this.bosId = bosText !== undefined ? idOf(bosText, 'bos_token') : undefined;
    this.skipped.add(this.eosId);
    this.skipped.add(this.padId);

    const stops = [this.eosId, ...generationEos];
    for (const token of END_OF_TURN_TOKENS) {
      const id = this.lib.token_to_id(token);
      if (id !== undefined) stops.push(id);
    }
    this.stopIds = [...new Set(stops)];

    this.byteTable = decoderHas(this.json.decoder, (d) => d.type === 'ByteLevel')
      ? byteLevelDecoderTable()
      : undefined;
    this.spaceMark = decoderHas(
      this.json.decoder,
      (d) =>
        d.type === 'Metaspace' ||
        (d.type === 'Replace' && (d.pattern as JsonObject)?.String === SPIECE_SPACE),
    );
    this.byteFallback = this.json.model.byte_fallback === true;
    // transformers 5 ignores clean_up_tokenization_spaces for BPE models (it strips real spaces before punctuation)
    // unless clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output is set; Llama 3 sets it true.
    this.cleanUpSpaces =
      this.config.clean_up_tokenization_spaces === true &&
      (this.json.model.type !== 'BPE' ||
        this.config.clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output === true);

    const template = chatTemplateSource(files, this.config);
    if (template !== undefined) {
      let compiled: Template | undefined;
      const context: Record<string, unknown> = {};
      for (const key of ['bos_token', 'eos_token', 'unk_token', 'pad_token']) {
        const text = tokenText(this.config, key);
        if (text !== undefined) context[key] = text;
      }
      Object.assign(context, files.templateVariables, {
        add_generation_prompt: true,
        tools: null,
        documents: null,
      });
      this.chatPrompt = (user: string): string => {
        if (compiled === undefined) {
          try {
            compiled = new Template(template.source);
          } catch (e) {
            throw new UserError(
              `${template.file}: the chat template does not parse: ${(e as Error).message}`,
            );
          }
        }
        try {
          return compiled.render({ ...context, messages: [{ role: 'user', content: user }] });
        } catch (e) {
          throw new UserError(`${template.file}: the chat template fails to render: ${(e as Error).message}`);
        }
      };
    }
  }

  /** The id of a token string (a vocabulary entry or an added token), or undefined. */
  tokenToId(token: string): number | undefined {
    return this.lib.token_to_id(token);
  }

  encode(text: string): number[] {
    if (this.plainLib === undefined) {
      const plain = { ...this.json, added_tokens: this.json.added_tokens.filter((t) => !t.special) };
      this.plainLib = buildLibTokenizer(plain, this.config);
    }
    return this.plainLib.encode(text, { add_special_tokens: false }).ids;
  }

  encodeWithSpecials(text: string): number[] {
    return this.lib.encode(text, { add_special_tokens: false }).ids;
  }

  private checkId(id: number): void {
    if (!Number.isInteger(id) || id < 0) {
      throw new RangeError(`token id ${id} is not a valid token id (a non-negative integer).`);
    }
  }

  decode(ids: number[]): string {
    const kept: number[] = [];
    for (const id of ids) {
      this.checkId(id);
      if (id < this.vocabSize && !this.skipped.has(id) && this.lib.id_to_token(id) !== undefined)
        kept.push(id);
    }
    if (kept.length === 0) return '';
    return this.lib.decode(kept, {
      skip_special_tokens: true,
      clean_up_tokenization_spaces: this.cleanUpSpaces,
    });
  }

  decodeToken(id: number): string {
    this.checkId(id);
    const added = this.addedById.get(id);
    if (added !== undefined) return added.content;
    const token = id < this.vocabSize ? this.lib.id_to_token(id) : undefined;
    if (token === undefined) return `<|unk ${id}|>`;
    if (this.byteTable !== undefined) {
      const bytes: number[] = [];
      for (const ch of token) {
        const b = this.byteTable.get(ch);
        if (b === undefined) return displayBytes(utf8Encode(token)); // not a byte-level piece: show it as it is
        bytes.push(b);
      }
      return displayBytes(Uint8Array.from(bytes));
    }
    if (this.byteFallback && BYTE_TOKEN.test(token))
      return displayBytes(Uint8Array.of(parseInt(token.slice(3, 5), 16)));
    // Shown as the piece it is: "▁the" as " the" (decode would strip a leading space).
    if (this.spaceMark) return displayBytes(utf8Encode(token.replaceAll(SPIECE_SPACE, ' ')));
    return displayBytes(utf8Encode(this.lib.decode([id], { clean_up_tokenization_spaces: false })));
  }
}

/**
 * The tokenizer of a Hugging Face model folder, from its files by name (HF_TOKENIZER_FILES; only tokenizer.json is
 * required). A UserError names the file and what is wrong.
 */
export function tokenizerFromFolder(
  files: Readonly<Record<string, FileContent | undefined>>,
  options: Pick<HfTokenizerFiles, 'templateVariables'> = {},
): HfTokenizer {
  const json = files['tokenizer.json'];
  if (json === undefined) {
    throw new UserError(
      'The model folder has no tokenizer.json (a Llama/Qwen folder needs its Hugging Face tokenizer.json).',
    );
  }
  return HfTokenizer.fromFiles({
    tokenizerJson: json,
    tokenizerConfig: files['tokenizer_config.json'],
    generationConfig: files['generation_config.json'],
    chatTemplate: files['chat_template.jinja'],
    templateVariables: options.templateVariables,
  });
}

/** The shape of src/core/model/folder.ts's ModelFiles that reading a tokenizer needs (no import: no cycle). */
export interface TokenizerFolder {
  label: string;
  read(name: string): Promise<Uint8Array | null>;
}

/**
 * Reads HF_TOKENIZER_FILES from a model folder and builds its tokenizer; errors are prefixed with the folder's label
 * (`<label>: tokenizer.json: …`).
 */
export async function readHfTokenizer(
  folder: TokenizerFolder,
  options: Pick<HfTokenizerFiles, 'templateVariables'> = {},
): Promise<HfTokenizer> {
  const files: Record<string, Uint8Array | undefined> = {};
  for (const name of HF_TOKENIZER_FILES) files[name] = (await folder.read(name)) ?? undefined;
  try {
    return tokenizerFromFolder(files, options);
  } catch (e) {
    if (e instanceof UserError) throw new UserError(`${folder.label}: ${e.message}`);
    throw e;
  }
}
