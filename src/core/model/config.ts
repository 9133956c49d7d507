import { UserError } from '../../common/errors';
import type { TokenizerConfigFields } from '../tokenizer';
import { isLlamaFamily, llamaConfigToJson, parseLlamaConfig, type LlamaConfig } from './llama-config';

export type { LlamaConfig } from './llama-config';

/** Any model family's config: GPT-2's, or the Llama/Qwen2/Qwen3 one (model/llama-config.ts). */
export type LMConfig = GPT2Config | LlamaConfig;

/** Whether a config is of the Llama architecture (llama, qwen2, qwen3). */
export function isLlamaConfig(c: LMConfig): c is LlamaConfig {
  return isLlamaFamily(c.model_type);
}

/** The tokenizer kind a config names (`hf`: the folder's tokenizer.json). */
export type AnyTokenizerKind = LMConfig['tokenizer'];

/** Validate any supported config.json: model_type picks the family (gpt2 when absent). */
export function parseModelConfig(raw: unknown, file = 'config.json'): LMConfig {
  if (typeof raw === 'object' && raw !== null && !Array.isArray(raw)) {
    const t = (raw as Record<string, unknown>).model_type;
    if (isLlamaFamily(t)) return parseLlamaConfig(raw as Record<string, unknown>, file);
  }
  return parseGPT2Config(raw, file);
}

/** `c` as a GPT-2 config, or a UserError saying that `what` supports GPT-2 models only (so far). */
export function gpt2Only(c: LMConfig, what: string): GPT2Config {
  if (isLlamaConfig(c)) {
    throw new UserError(`${what} supports GPT-2 models only; this is a ${c.model_type} model.`);
  }
  return c;
}

/** The config.json an export writes, for any family. */
export function modelConfigToJson(c: LMConfig): Record<string, unknown> {
  return isLlamaConfig(c) ? llamaConfigToJson(c) : configToJson(c);
}

/** Which tokenizer a model folder uses (docs/formats.md §2). */
export type TokenizerKind = TokenizerConfigFields['tokenizer'];

/**
 * GPT-2 config with Hugging Face's field names (GPT2Config), plus our `tokenizer` field.
 * Only the fields the forward needs are typed; the rest of a config.json is kept in `extra` so an
 * export writes back what an import read.
 */
export interface GPT2Config {
  model_type: 'gpt2';
  vocab_size: number;
  n_positions: number;
  n_embd: number;
  n_layer: number;
  n_head: number;
  layer_norm_epsilon: number;
  activation_function: 'gelu_new';
  bos_token_id: number;
  eos_token_id: number;
  /** Our extension; GPT-2 BPE is assumed when absent and vocab_size is 50257. */
  tokenizer: TokenizerKind;
  /** Padding id used in input tensors. Distinct from EOS for the bytes tokenizer. */
  pad_token_id?: number;
  /** Fields of the source config.json we do not interpret, written back on export. */
  extra?: Record<string, unknown>;
}

export const MAX_REASONABLE = {
  vocab_size: 1_000_000,
  n_positions: 65_536,
  n_embd: 16_384,
  n_layer: 256,
  n_head: 256,
};

function positiveInt(raw: Record<string, unknown>, key: keyof typeof MAX_REASONABLE, file: string): number {
  const v = raw[key];
  const max = MAX_REASONABLE[key];
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 1 || v > max) {
    throw new UserError(`${file}: "${key}" must be an integer from 1 to ${max}, got ${JSON.stringify(v)}.`);
  }
  return v;
}

/** Validate a parsed config.json; errors name the file, the field, and what would be right. */
export function parseGPT2Config(raw: unknown, file = 'config.json'): GPT2Config {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
    throw new UserError(
      `${file}: expected a JSON object with GPT-2 fields, got ${Array.isArray(raw) ? 'an array' : typeof raw}.`,
    );
  }
  const r = raw as Record<string, unknown>;
  const modelType = r.model_type ?? 'gpt2';
  if (modelType !== 'gpt2') {
    throw new UserError(
      `${file}: "model_type" must be "gpt2", "llama", "qwen2" or "qwen3", got ${JSON.stringify(modelType)}.`,
    );
  }
  const vocab_size = positiveInt(r, 'vocab_size', file);
  const n_positions = positiveInt(r, 'n_positions', file);
  const n_embd = positiveInt(r, 'n_embd', file);
  const n_layer = positiveInt(r, 'n_layer', file);
  const n_head = positiveInt(r, 'n_head', file);
  if (n_embd % n_head !== 0) {
    throw new UserError(`${file}: "n_head" (${n_head}) must divide "n_embd" (${n_embd}).`);
  }
  const eps = r.layer_norm_epsilon ?? 1e-5;
  if (typeof eps !== 'number' || !(eps > 0 && eps < 1)) {
    throw new UserError(
      `${file}: "layer_norm_epsilon" must be a number in (0, 1), got ${JSON.stringify(eps)}.`,
    );
  }
  const act = r.activation_function ?? 'gelu_new';
  if (act !== 'gelu_new') {
    throw new UserError(`${file}: "activation_function" must be "gelu_new", got ${JSON.stringify(act)}.`);
  }
  let tokenizer = r.tokenizer as TokenizerKind | undefined;
  if (tokenizer === undefined) {
    if (vocab_size === 50257) tokenizer = 'gpt2-bpe';
    else {
      throw new UserError(
        `${file}: "tokenizer" is missing and vocab_size is ${vocab_size}; set "tokenizer" to "gpt2-bpe" or "bytes".`,
      );
    }
  }
  if (tokenizer !== 'gpt2-bpe' && tokenizer !== 'bytes') {
    throw new UserError(
      `${file}: "tokenizer" must be "gpt2-bpe" or "bytes", got ${JSON.stringify(tokenizer)}.`,
    );
  }
  const tokenId = (key: string, dflt: number): number => {
    const v = r[key] ?? dflt;
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v >= vocab_size) {
      throw new UserError(
        `${file}: "${key}" must be an integer from 0 to ${vocab_size - 1}, got ${JSON.stringify(v)}.`,
      );
    }
    return v;
  };
  const eos_token_id = tokenId('eos_token_id', vocab_size - 1);
  const bos_token_id = tokenId('bos_token_id', eos_token_id);
  const pad_token_id = r.pad_token_id == null ? undefined : tokenId('pad_token_id', eos_token_id);
  const known = new Set([
    'model_type',
    'vocab_size',
    'n_positions',
    'n_embd',
    'n_layer',
    'n_head',
    'layer_norm_epsilon',
    'activation_function',
    'bos_token_id',
    'eos_token_id',
    'tokenizer',
    'pad_token_id',
  ]);
  const extra: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(r)) if (!known.has(k)) extra[k] = v;
  return {
    model_type: 'gpt2',
    vocab_size,
    n_positions,
    n_embd,
    n_layer,
    n_head,
    layer_norm_epsilon: eps,
    activation_function: 'gelu_new',
    bos_token_id,
    eos_token_id,
    tokenizer,
    pad_token_id,
    extra,
  };
}

/** The config.json an export writes (HF fields first, then whatever else the import carried). */
export function configToJson(c: GPT2Config): Record<string, unknown> {
  const out: Record<string, unknown> = {
    ...(c.extra ?? {}),
    model_type: 'gpt2',
    architectures: ['GPT2LMHeadModel'],
    vocab_size: c.vocab_size,
    n_positions: c.n_positions,
    n_ctx: c.n_positions,
    n_embd: c.n_embd,
    n_layer: c.n_layer,
    n_head: c.n_head,
    n_inner: null,
    layer_norm_epsilon: c.layer_norm_epsilon,
    activation_function: 'gelu_new',
    resid_pdrop: 0.0,
    embd_pdrop: 0.0,
    attn_pdrop: 0.0,
    bos_token_id: c.bos_token_id,
    eos_token_id: c.eos_token_id,
    tie_word_embeddings: true,
    tokenizer: c.tokenizer,
  };
  if (c.pad_token_id !== undefined) out.pad_token_id = c.pad_token_id;
  return out;
}
