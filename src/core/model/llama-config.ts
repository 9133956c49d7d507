/**
 * The config.json of the Llama-architecture families (`llama`, `qwen2`, `qwen3`; docs/models.md) with Hugging Face's
 * field names, validated, plus the family-independent fields the rest of the engine reads from every model config
 * (`n_embd`, `n_layer`, `n_head`, `n_positions`, `vocab_size`, the token ids, `tokenizer`), filled in here from the
 * HF names so that code written against GPT-2's config reads the same facts.
 *
 * What the three families differ in (as transformers 5 computes them):
 * - llama: `attention_bias` puts a bias on q/k/v/o, `mlp_bias` on gate/up/down; `head_dim` may be given.
 * - qwen2: q/k/v always have a bias, o_proj never; head_dim = hidden / heads.
 * - qwen3: `attention_bias` (default false) on q/k/v/o, RMSNorm of each head's q and k (q_norm, k_norm) before the
 *   rotary embedding, and `head_dim` (128 for Qwen3-0.6B) independent of hidden / heads.
 */
import { UserError } from '../../common/errors';

export const LLAMA_FAMILIES = ['llama', 'qwen2', 'qwen3'] as const;
export type LlamaFamily = (typeof LLAMA_FAMILIES)[number];

export interface LlamaConfig {
  model_type: LlamaFamily;
  vocab_size: number;
  hidden_size: number;
  intermediate_size: number;
  num_hidden_layers: number;
  num_attention_heads: number;
  num_key_value_heads: number;
  head_dim: number;
  max_position_embeddings: number;
  rms_norm_eps: number;
  rope_theta: number;
  tie_word_embeddings: boolean;
  /** A bias on q_proj, k_proj, v_proj. */
  qkv_bias: boolean;
  /** A bias on o_proj. */
  o_bias: boolean;
  /** A bias on gate_proj, up_proj, down_proj. */
  mlp_bias: boolean;
  /** Qwen3's per-head RMSNorm of q and k (`self_attn.q_norm.weight`, `self_attn.k_norm.weight`, [head_dim]). */
  qk_norm: boolean;
  /** The first of config.json's `eos_token_id` (which may be a list); every one of them is a stop id. */
  eos_token_id: number;
  /** config.json's eos ids as a list (one or more). */
  eos_token_ids: number[];
  bos_token_id: number;
  pad_token_id?: number;
  /** The tokenizer is the folder's tokenizer.json. */
  tokenizer: 'hf';
  // The family-independent names (GPT2Config's) of the same facts.
  n_embd: number;
  n_layer: number;
  n_head: number;
  n_positions: number;
  /** Fields of the source config.json we do not interpret, written back on export. */
  extra?: Record<string, unknown>;
}

export function isLlamaFamily(t: unknown): t is LlamaFamily {
  return (LLAMA_FAMILIES as readonly unknown[]).includes(t);
}

const LIMITS: Record<string, number> = {
  vocab_size: 1_000_000,
  hidden_size: 16_384,
  intermediate_size: 131_072,
  num_hidden_layers: 256,
  num_attention_heads: 256,
  num_key_value_heads: 256,
  head_dim: 1024,
  max_position_embeddings: 1 << 22,
};

/** Validate a parsed Llama/Qwen2/Qwen3 config.json; errors name the file, the field and what would be right. */
export function parseLlamaConfig(r: Record<string, unknown>, file = 'config.json'): LlamaConfig {
  const family = r.model_type;
  if (!isLlamaFamily(family)) {
    throw new UserError(
      `${file}: "model_type" must be one of ${LLAMA_FAMILIES.join(', ')}, got ${JSON.stringify(family)}.`,
    );
  }
  const int = (key: string, dflt?: number): number => {
    const v = r[key] ?? dflt;
    const max = LIMITS[key];
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 1 || v > max) {
      const got = r[key] === undefined ? 'it is missing' : `got ${JSON.stringify(r[key])}`;
      throw new UserError(`${file}: "${key}" must be an integer from 1 to ${max}; ${got}.`);
    }
    return v;
  };
  const vocab_size = int('vocab_size');
  const hidden_size = int('hidden_size');
  const intermediate_size = int('intermediate_size');
  const num_hidden_layers = int('num_hidden_layers');
  const num_attention_heads = int('num_attention_heads');
  const num_key_value_heads = int('num_key_value_heads', num_attention_heads);
  if (num_attention_heads % num_key_value_heads !== 0) {
    throw new UserError(
      `${file}: "num_key_value_heads" (${num_key_value_heads}) must divide "num_attention_heads" (${num_attention_heads}).`,
    );
  }
  let head_dim: number;
  if (r.head_dim == null) {
    if (hidden_size % num_attention_heads !== 0) {
      throw new UserError(
        `${file}: "num_attention_heads" (${num_attention_heads}) must divide "hidden_size" (${hidden_size}) when "head_dim" is not given.`,
      );
    }
    head_dim = hidden_size / num_attention_heads;
  } else head_dim = int('head_dim');
  if (family === 'qwen2' && head_dim * num_attention_heads !== hidden_size) {
    throw new UserError(
      `${file}: a qwen2 model's "head_dim" must be hidden_size / num_attention_heads (${hidden_size / num_attention_heads}), got ${head_dim}.`,
    );
  }
  if (head_dim % 2 !== 0) {
    throw new UserError(`${file}: "head_dim" must be even for the rotary embedding, got ${head_dim}.`);
  }
  const max_position_embeddings = int('max_position_embeddings', 2048);
  const eps = r.rms_norm_eps ?? 1e-6;
  if (typeof eps !== 'number' || !(eps > 0 && eps < 1)) {
    throw new UserError(`${file}: "rms_norm_eps" must be a number in (0, 1), got ${JSON.stringify(eps)}.`);
  }
  const act = r.hidden_act ?? 'silu';
  if (act !== 'silu') {
    throw new UserError(`${file}: "hidden_act" must be "silu" (SwiGLU), got ${JSON.stringify(act)}.`);
  }
  // Rotary embedding: transformers 5 writes rope_parameters {rope_theta, rope_type}; older files rope_theta and
  // rope_scaling. Only the default (unscaled) rotary embedding is implemented.
  const params = (r.rope_parameters ?? null) as Record<string, unknown> | null;
  const scaling = (r.rope_scaling ?? null) as Record<string, unknown> | null;
  for (const [name, p] of [
    ['rope_parameters', params],
    ['rope_scaling', scaling],
  ] as const) {
    if (p === null) continue;
    if (typeof p !== 'object' || Array.isArray(p)) {
      throw new UserError(`${file}: "${name}" must be an object or null, got ${JSON.stringify(p)}.`);
    }
    const kind = p.rope_type ?? p.type ?? 'default';
    if (kind !== 'default') {
      throw new UserError(
        `${file}: "${name}" asks for the "${String(kind)}" rotary scaling, which is not implemented; only the ` +
          'default rotary embedding (rope_type "default", or no rope_scaling) is supported.',
      );
    }
  }
  const theta = params?.rope_theta ?? r.rope_theta ?? 10000;
  if (typeof theta !== 'number' || !(theta > 1)) {
    throw new UserError(`${file}: "rope_theta" must be a number > 1, got ${JSON.stringify(theta)}.`);
  }
  if (r.use_sliding_window === true) {
    throw new UserError(
      `${file}: "use_sliding_window" is true; sliding-window attention is not implemented (set it to false).`,
    );
  }
  if (Array.isArray(r.layer_types) && r.layer_types.some((t) => t !== 'full_attention')) {
    throw new UserError(
      `${file}: "layer_types" lists a layer that is not "full_attention"; only full attention is implemented.`,
    );
  }
  if ((r.pretraining_tp ?? 1) !== 1) {
    throw new UserError(`${file}: "pretraining_tp" must be 1, got ${JSON.stringify(r.pretraining_tp)}.`);
  }
  const bool = (key: string, dflt: boolean): boolean => {
    const v = r[key] ?? dflt;
    if (typeof v !== 'boolean')
      throw new UserError(`${file}: "${key}" must be true or false, got ${JSON.stringify(v)}.`);
    return v;
  };
  // transformers' default for tie_word_embeddings is false for llama/qwen2/qwen3 configs made in Python, but the
  // released Qwen2.5-0.5B, Qwen3-0.6B and SmolLM2 configs all say true; the field decides.
  const tie_word_embeddings = bool('tie_word_embeddings', false);
  const attention_bias = bool('attention_bias', false);
  const mlp_bias = family === 'llama' ? bool('mlp_bias', false) : false;
  const tokenId = (key: string, v: unknown): number => {
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v >= vocab_size) {
      throw new UserError(
        `${file}: "${key}" must be an integer from 0 to ${vocab_size - 1}, got ${JSON.stringify(v)}.`,
      );
    }
    return v;
  };
  const eosRaw = r.eos_token_id;
  if (eosRaw == null) {
    throw new UserError(
      `${file}: "eos_token_id" is missing; set it to the id (or list of ids) that ends a response.`,
    );
  }
  const eos_token_ids = (Array.isArray(eosRaw) ? eosRaw : [eosRaw]).map((v) => tokenId('eos_token_id', v));
  if (eos_token_ids.length === 0) {
    throw new UserError(`${file}: "eos_token_id" is an empty list; give at least one id.`);
  }
  const eos_token_id = eos_token_ids[0];
  const bos_token_id = r.bos_token_id == null ? eos_token_id : tokenId('bos_token_id', r.bos_token_id);
  const pad_token_id = r.pad_token_id == null ? undefined : tokenId('pad_token_id', r.pad_token_id);
  const known = new Set([
    'model_type',
    'vocab_size',
    'hidden_size',
    'intermediate_size',
    'num_hidden_layers',
    'num_attention_heads',
    'num_key_value_heads',
    'head_dim',
    'max_position_embeddings',
    'rms_norm_eps',
    'hidden_act',
    'rope_parameters',
    'rope_theta',
    'rope_scaling',
    'tie_word_embeddings',
    'attention_bias',
    'mlp_bias',
    'eos_token_id',
    'bos_token_id',
    'pad_token_id',
  ]);
  const extra: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(r)) if (!known.has(k)) extra[k] = v;
  return {
    model_type: family,
    vocab_size,
    hidden_size,
    intermediate_size,
    num_hidden_layers,
    num_attention_heads,
    num_key_value_heads,
    head_dim,
    max_position_embeddings,
    rms_norm_eps: eps,
    rope_theta: theta,
    tie_word_embeddings,
    qkv_bias: family === 'qwen2' ? true : attention_bias,
    o_bias: family === 'qwen2' ? false : attention_bias,
    mlp_bias,
    qk_norm: family === 'qwen3',
    eos_token_id,
    eos_token_ids,
    bos_token_id,
    pad_token_id,
    tokenizer: 'hf',
    n_embd: hidden_size,
    n_layer: num_hidden_layers,
    n_head: num_attention_heads,
    n_positions: max_position_embeddings,
    extra,
  };
}

const ARCHITECTURE: Record<LlamaFamily, string> = {
  llama: 'LlamaForCausalLM',
  qwen2: 'Qwen2ForCausalLM',
  qwen3: 'Qwen3ForCausalLM',
};

/** The config.json an export writes: HF fields, then what the import carried. */
export function llamaConfigToJson(c: LlamaConfig): Record<string, unknown> {
  // The weights we write are F32: a carried-over "dtype": "bfloat16" would make transformers 5 (dtype "auto") load
  // them in bfloat16.
  const { torch_dtype: _t, dtype: _d, ...carried } = c.extra ?? {};
  void _t;
  void _d;
  const out: Record<string, unknown> = {
    ...carried,
    dtype: 'float32',
    model_type: c.model_type,
    architectures: [ARCHITECTURE[c.model_type]],
    vocab_size: c.vocab_size,
    hidden_size: c.hidden_size,
    intermediate_size: c.intermediate_size,
    num_hidden_layers: c.num_hidden_layers,
    num_attention_heads: c.num_attention_heads,
    num_key_value_heads: c.num_key_value_heads,
    head_dim: c.head_dim,
    max_position_embeddings: c.max_position_embeddings,
    rms_norm_eps: c.rms_norm_eps,
    hidden_act: 'silu',
    // Both spellings: transformers 5 reads rope_parameters, transformers 4 only rope_theta (and would otherwise
    // silently use 10000, wrong for Qwen's 1e6).
    rope_theta: c.rope_theta,
    rope_parameters: { rope_theta: c.rope_theta, rope_type: 'default' },
    tie_word_embeddings: c.tie_word_embeddings,
    bos_token_id: c.bos_token_id,
    eos_token_id: c.eos_token_ids.length === 1 ? c.eos_token_id : [...c.eos_token_ids],
  };
  if (c.model_type !== 'qwen2') out.attention_bias = c.qkv_bias;
  if (c.model_type === 'llama') out.mlp_bias = c.mlp_bias;
  if (c.pad_token_id !== undefined) out.pad_token_id = c.pad_token_id;
  return out;
}

/**
 * The published configs (config.json fields) of the instruct models the playground lists: what the memory estimate
 * and the random-weight test folders (scripts/make-random-model.ts --shape) use. Token ids are the real ones.
 */
export const LLAMA_SHAPES = {
  'smollm2-135m': {
    model_type: 'llama',
    vocab_size: 49152,
    hidden_size: 576,
    intermediate_size: 1536,
    num_hidden_layers: 30,
    num_attention_heads: 9,
    num_key_value_heads: 3,
    head_dim: 64,
    max_position_embeddings: 8192,
    rms_norm_eps: 1e-5,
    rope_theta: 100000,
    tie_word_embeddings: true,
    bos_token_id: 1,
    eos_token_id: 2,
    pad_token_id: 2,
  },
  'qwen2.5-0.5b': {
    model_type: 'qwen2',
    vocab_size: 151936,
    hidden_size: 896,
    intermediate_size: 4864,
    num_hidden_layers: 24,
    num_attention_heads: 14,
    num_key_value_heads: 2,
    max_position_embeddings: 32768,
    rms_norm_eps: 1e-6,
    rope_theta: 1000000,
    tie_word_embeddings: true,
    bos_token_id: 151643,
    eos_token_id: 151645,
  },
  'qwen3-0.6b': {
    model_type: 'qwen3',
    vocab_size: 151936,
    hidden_size: 1024,
    intermediate_size: 3072,
    num_hidden_layers: 28,
    num_attention_heads: 16,
    num_key_value_heads: 8,
    head_dim: 128,
    max_position_embeddings: 40960,
    rms_norm_eps: 1e-6,
    rope_theta: 1000000,
    tie_word_embeddings: true,
    bos_token_id: 151643,
    eos_token_id: 151645,
  },
  // Issue #36's targets (Hugging Face's config.json of Qwen/Qwen2.5-1.5B and Qwen/Qwen3-1.7B).
  'qwen2.5-1.5b': {
    model_type: 'qwen2',
    vocab_size: 151936,
    hidden_size: 1536,
    intermediate_size: 8960,
    num_hidden_layers: 28,
    num_attention_heads: 12,
    num_key_value_heads: 2,
    max_position_embeddings: 32768,
    rms_norm_eps: 1e-6,
    rope_theta: 1000000,
    tie_word_embeddings: true,
    bos_token_id: 151643,
    eos_token_id: 151645,
  },
  'qwen3-1.7b': {
    model_type: 'qwen3',
    vocab_size: 151936,
    hidden_size: 2048,
    intermediate_size: 6144,
    num_hidden_layers: 28,
    num_attention_heads: 16,
    num_key_value_heads: 8,
    head_dim: 128,
    max_position_embeddings: 40960,
    rms_norm_eps: 1e-6,
    rope_theta: 1000000,
    tie_word_embeddings: true,
    bos_token_id: 151643,
    eos_token_id: 151645,
  },
} as const;
export type LlamaShapeName = keyof typeof LLAMA_SHAPES;
