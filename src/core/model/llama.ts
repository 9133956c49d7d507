/**
 * The Llama architecture and its Qwen2 / Qwen3 variants in TensorFlow.js, computing what transformers'
 * LlamaForCausalLM, Qwen2ForCausalLM and Qwen3ForCausalLM compute (eval mode). docs/models.md explains each piece.
 *
 * Bottom-up like nanoGPT: RMSNorm → rotary embedding → grouped-query attention → SwiGLU MLP → block → trunk →
 * LM head. Parameters are tf.Variables keyed by Hugging Face's names without the `model.` prefix
 * (`embed_tokens.weight`, `layers.{i}.self_attn.q_proj.weight`, `norm.weight`) plus `lm_head.weight` when the head is
 * not tied. nn.Linear weights stay in the file's layout, W [out, in], and every linear is x · Wᵀ (ops.ts linear),
 * so loading and exporting copy nothing.
 *
 * The same surface as GPT2 (model/causal-lm.ts): the trainer, sampling, the scalar heads, LoRA views and
 * checkpoints work with either. Shared pieces are shared: the attention core and mask (model/attention.ts), the KV
 * cache and sampling (model/sampling.ts: the cache holds the KV heads, [B, n_kv, S, head_dim]), block recompute
 * (model/recompute.ts), vocabulary chunks (model/vocab-chunks.ts).
 */
import * as tf from '@tensorflow/tfjs-core';
import { UserError } from '../../common/errors';
import type { LlamaConfig } from './llama-config';
import { paramInit, type ParamSpec } from './specs';
import { linear, mergedLinearWeight, rmsNorm, swiglu, type LowRank } from './ops';
import {
  causalPaddingBias,
  gqaDecodeAttention,
  gqaSelfAttention,
  keyPaddingBias,
  type RopeRows,
} from './attention';
import type { LayerKV } from '../kernels/definitions';
import {
  linearNtDecodeWebGpu,
  webGpuLinearNtDecodeApplies,
  type LinearNtDecodeOptions,
} from '../kernels/webgpu-linear';
import { gqaDecodeQkvWebGpu, webGpuGqaDecodeQkvApplies, type DecodeQkv } from '../kernels/webgpu-gqa-decode';
import { recomputed, recordingGradients } from './recompute';
import type { LazyTensor } from './safetensors';
import type { LoraAdapters } from './lora';
import { loraModuleShape } from './lora';
import { isPackedF16, packedShape } from '../kernels/webgpu-f16';
import { buildParams, buildParamsFromReader, checkedValues, type WeightPieces } from './build-params';
import {
  asF32Tensor,
  checkBaseDtype,
  f32Values,
  isF16Matrix,
  packedWords,
  weightValues,
  type WeightData,
} from './f16-base';
import { embeddingChunkRows, nextModelId, type CausalLM, type GPT2Options, type TrunkOptions } from './lm';
import { attendFull, compactInput, shareMaps, shareOfMaps } from './shared-prefix';
import { chunkedLazyTensor, chunkRanges, gatherChunked, headChunked } from './vocab-chunks';
import { tensorPieces } from '../kernels/wasm-read';

/** The parameters of a Llama-family model in HF names without `model.` (`lm_head.weight` only when untied). */
export function llamaParamSpecs(c: LlamaConfig): ParamSpec[] {
  const C = c.hidden_size;
  const hd = c.head_dim;
  const q = c.num_attention_heads * hd;
  const kv = c.num_key_value_heads * hd;
  const I = c.intermediate_size;
  const specs: ParamSpec[] = [{ name: 'embed_tokens.weight', shape: [c.vocab_size, C] }];
  for (let i = 0; i < c.num_hidden_layers; i++) {
    const p = `layers.${i}.`;
    specs.push({ name: `${p}input_layernorm.weight`, shape: [C] });
    specs.push({ name: `${p}self_attn.q_proj.weight`, shape: [q, C] });
    if (c.qkv_bias) specs.push({ name: `${p}self_attn.q_proj.bias`, shape: [q] });
    specs.push({ name: `${p}self_attn.k_proj.weight`, shape: [kv, C] });
    if (c.qkv_bias) specs.push({ name: `${p}self_attn.k_proj.bias`, shape: [kv] });
    specs.push({ name: `${p}self_attn.v_proj.weight`, shape: [kv, C] });
    if (c.qkv_bias) specs.push({ name: `${p}self_attn.v_proj.bias`, shape: [kv] });
    specs.push({ name: `${p}self_attn.o_proj.weight`, shape: [C, q] });
    if (c.o_bias) specs.push({ name: `${p}self_attn.o_proj.bias`, shape: [C] });
    if (c.qk_norm) {
      specs.push({ name: `${p}self_attn.q_norm.weight`, shape: [hd] });
      specs.push({ name: `${p}self_attn.k_norm.weight`, shape: [hd] });
    }
    specs.push({ name: `${p}post_attention_layernorm.weight`, shape: [C] });
    for (const [m, shape] of [
      ['gate_proj', [I, C]],
      ['up_proj', [I, C]],
      ['down_proj', [C, I]],
    ] as const) {
      specs.push({ name: `${p}mlp.${m}.weight`, shape: [...shape] });
      if (c.mlp_bias) specs.push({ name: `${p}mlp.${m}.bias`, shape: [shape[0]] });
    }
  }
  specs.push({ name: 'norm.weight', shape: [C] });
  if (!c.tie_word_embeddings) specs.push({ name: 'lm_head.weight', shape: [c.vocab_size, C] });
  return specs;
}

/** The vocabulary matrices (held in chunks under a binding limit): the embedding and an untied head. */
const VOCAB_MATRICES = ['embed_tokens.weight', 'lm_head.weight'];

function chunkName(name: string, k: number): string {
  return `${name}.chunk${k}`;
}

/**
 * The rotary embedding's cos and sin for positions 0 … length−1, [length, head_dim] each, computed on the host as
 * transformers computes them in float32 (inv_freq = 1 / θ^(2j/d), angle = position · inv_freq, emb = [angle, angle]),
 * each step rounded to float32. A table gathered by position ids gives every backend the same values (WGSL's cos of
 * a large angle is not accurate enough to compute them on the device).
 */
export function ropeTable(
  theta: number,
  headDim: number,
  length: number,
): { cos: Float32Array; sin: Float32Array } {
  const half = headDim / 2;
  const inv = new Float32Array(half);
  for (let j = 0; j < half; j++)
    inv[j] = Math.fround(1 / Math.fround(Math.pow(theta, Math.fround((2 * j) / headDim))));
  const cos = new Float32Array(length * headDim);
  const sin = new Float32Array(length * headDim);
  for (let p = 0; p < length; p++) {
    for (let j = 0; j < half; j++) {
      const a = Math.fround(p * inv[j]);
      const c = Math.cos(a);
      const s = Math.sin(a);
      cos[p * headDim + j] = cos[p * headDim + half + j] = c;
      sin[p * headDim + j] = sin[p * headDim + half + j] = s;
    }
  }
  return { cos, sin };
}

// The rotary embedding lives beside the attention that uses it (model/attention.ts).
export { applyRope } from './attention';

/** The rotary table a model gathers from, grown on demand (shared by a base and its LoRA views). */
class RopeCache {
  private cos: tf.Tensor2D | null = null;
  private sin: tf.Tensor2D | null = null;
  /** cos | sin per position, [length, 2·d]: what the fused WebGPU attention reads (model/attention.ts RopeRows). */
  private both: tf.Tensor2D | null = null;
  private length = 0;
  constructor(
    private readonly theta: number,
    private readonly headDim: number,
    private readonly max: number,
  ) {}

  /**
   * cos, sin [N, 1, d] for position ids [N] (every id < `needed`); on WebGPU, unless `both` is false, also
   * cos | sin [N, 2·d] for the fused prefill attention.
   */
  rows(positions: tf.Tensor, needed: number, both = true): RopeRows {
    this.grow(needed);
    const n = positions.size;
    return {
      cos: tf.reshape(tf.gather(this.cos!, positions), [n, 1, this.headDim]),
      sin: tf.reshape(tf.gather(this.sin!, positions), [n, 1, this.headDim]),
      // Gathered only where the fused attention reads it (one more gather per forward, none per layer).
      both: both && tf.getBackend() === 'webgpu' ? tf.gather(this.both!, positions) : undefined,
    };
  }

  /** Make the tables cover positions 0 … needed − 1 (grown to a power of two, at most `max` beyond need). */
  private grow(needed: number): void {
    if (needed > this.length) {
      const length = Math.min(Math.max(this.max, needed), Math.max(64, 2 ** Math.ceil(Math.log2(needed))));
      const t = ropeTable(this.theta, this.headDim, length);
      this.dispose();
      this.cos = tf.keep(tf.tensor2d(t.cos, [length, this.headDim]));
      this.sin = tf.keep(tf.tensor2d(t.sin, [length, this.headDim]));
      const both = new Float32Array(2 * t.cos.length);
      for (let p = 0; p < length; p++) {
        both.set(t.cos.subarray(p * this.headDim, (p + 1) * this.headDim), 2 * p * this.headDim);
        both.set(t.sin.subarray(p * this.headDim, (p + 1) * this.headDim), (2 * p + 1) * this.headDim);
      }
      this.both = tf.keep(tf.tensor2d(both, [length, 2 * this.headDim]));
      this.length = length;
    }
  }

  /**
   * A decode step's rows: on WebGPU cos | sin [N, 2·d] by one gather (what the decode kernels from q|k|v read:
   * `cs`), and `rows()` making cos / sin [N, 1, d] from it by a slice each the first time something asks (the plain
   * path's fallback: call it in the scope the step's tensors live in, not inside a tidy); elsewhere `cs` null and
   * `rows()` the gathers of rows().
   */
  decodeRows(positions: tf.Tensor, needed: number): { cs: tf.Tensor2D | null; rows: () => RopeRows } {
    if (tf.getBackend() !== 'webgpu') {
      const r = this.rows(positions, needed, false);
      return { cs: null, rows: () => r };
    }
    this.grow(needed);
    const cs = tf.gather(this.both!, positions) as tf.Tensor2D;
    const n = positions.size;
    const d = this.headDim;
    let made: RopeRows | null = null;
    return {
      cs,
      rows: () =>
        (made ??= {
          cos: tf.reshape(tf.slice(cs, [0, 0], [n, d]), [n, 1, d]),
          sin: tf.reshape(tf.slice(cs, [0, d], [n, d]), [n, 1, d]),
        }),
    };
  }

  dispose(): void {
    this.cos?.dispose();
    this.sin?.dispose();
    this.both?.dispose();
    this.cos = this.sin = this.both = null;
    this.length = 0;
  }
}

export class Llama implements CausalLM {
  readonly config: LlamaConfig;
  /** Parameters by HF name without `model.`; vocabulary matrices under a binding limit as `${name}.chunk{k}`. */
  readonly params: Map<string, tf.Variable>;
  readonly specs: ParamSpec[];
  readonly id: string;
  /** Rows per chunk of the vocabulary matrices (vocab_size when each is one tensor). */
  readonly wteChunkRows: number;
  readonly base: Llama;
  readonly lora: LoraAdapters | null;
  private readonly embedChunks: tf.Variable[];
  private readonly headChunks: tf.Variable[];
  private readonly rope: RopeCache;

  private constructor(
    config: LlamaConfig,
    params: Map<string, tf.Variable>,
    id: string,
    rows: number,
    base: Llama | null = null,
    lora: LoraAdapters | null = null,
  ) {
    this.config = config;
    this.params = params;
    this.specs = llamaParamSpecs(config);
    this.id = id;
    this.wteChunkRows = rows;
    this.base = base ?? this;
    this.lora = lora;
    const chunks = (name: string) => {
      const n = Math.ceil(config.vocab_size / rows);
      return n === 1 ? [this.p(name)] : Array.from({ length: n }, (_, k) => this.p(chunkName(name, k)));
    };
    this.embedChunks = chunks('embed_tokens.weight');
    this.headChunks = config.tie_word_embeddings ? this.embedChunks : chunks('lm_head.weight');
    this.rope = base
      ? base.rope
      : new RopeCache(config.rope_theta, config.head_dim, config.max_position_embeddings);
  }

  /** Build from host arrays by spec name (already name-mapped and shape-checked); views, never copies, of chunks. */
  static fromArrays(
    config: LlamaConfig,
    arrays: Map<string, WeightData>,
    trainable: boolean,
    label = 'llama',
    opts: GPT2Options = {},
  ): Llama {
    checkBaseDtype(opts.baseDtype, { trainable, family: config.model_type });
    const id = nextModelId(label);
    const rows = embeddingChunkRows(config, opts.maxBindingBytes);
    const pieces = (spec: ParamSpec) => Llama.pieces(spec, arrays.get(spec.name), rows, opts);
    return new Llama(config, buildParams(llamaParamSpecs(config), pieces, id, trainable), id, rows);
  }

  /**
   * fromArrays a weight at a time (model/build-params.ts): `read` gives each spec's values (in llamaParamSpecs'
   * order), which become variables and, on WebGPU, go to the device (settleOnDevice) before the next is read.
   * Loading then holds one weight's values on the host besides what the model holds, not a second copy of the whole
   * model (docs/models.md, "Reading a weights file").
   */
  static async fromReader(
    config: LlamaConfig,
    read: (spec: ParamSpec) => Promise<WeightData>,
    trainable: boolean,
    label = 'llama',
    opts: GPT2Options = {},
  ): Promise<Llama> {
    checkBaseDtype(opts.baseDtype, { trainable, family: config.model_type });
    const id = nextModelId(label);
    const rows = embeddingChunkRows(config, opts.maxBindingBytes);
    const pieces = async (spec: ParamSpec) => Llama.pieces(spec, await read(spec), rows, opts);
    return new Llama(
      config,
      await buildParamsFromReader(llamaParamSpecs(config), pieces, id, trainable),
      id,
      rows,
    );
  }

  /**
   * One spec's pieces from its values (checked against its shape): under baseDtype "f16" a large matrix as packed
   * words [rows, cols / 2] (int32), frozen (docs/models.md, "The frozen base in f16"); the vocabulary matrices in
   * row chunks where asked.
   */
  private static pieces(
    spec: ParamSpec,
    data: WeightData | undefined,
    rows: number,
    opts: GPT2Options,
  ): WeightPieces {
    const checked = checkedValues(spec, data);
    const packed = opts.baseDtype === 'f16' && isF16Matrix(spec.name);
    const values: Float32Array | Int32Array = packed ? packedWords(checked) : f32Values(checked);
    return Llama.layout(spec, values, rows, packed);
  }

  private static layout<T extends Float32Array | Int32Array>(
    spec: ParamSpec,
    data: T,
    rows: number,
    packed = false,
  ): [string, number[], T][] {
    const V = spec.shape[0];
    // A packed matrix holds its rows as cols / 2 words.
    const C = packed ? spec.shape[1] / 2 : spec.shape[1];
    const shape = packed ? [V, C] : spec.shape;
    if (!VOCAB_MATRICES.includes(spec.name) || rows >= V) return [[spec.name, shape, data]];
    return chunkRanges(V, rows).map(([lo, hi], k) => [
      chunkName(spec.name, k),
      [hi - lo, C],
      data.subarray(lo * C, hi * C) as T,
    ]);
  }

  /** transformers' initialisation: N(0, 0.02) for linears and embeddings, biases 0, norms 1 (seeded). */
  static random(
    config: LlamaConfig,
    seed: number,
    trainable = true,
    label = 'llama',
    opts: GPT2Options = {},
  ): Llama {
    const arrays = new Map<string, Float32Array>();
    let s = seed;
    for (const spec of llamaParamSpecs(config)) {
      const sd = s++;
      const init = paramInit(config, spec.name);
      const t =
        'fill' in init
          ? (init.fill ? tf.ones : tf.zeros)(spec.shape) // made on the host: dataSync reads no GPU back
          : tf.randomNormal(spec.shape, 0, init.std, 'float32', sd);
      arrays.set(spec.name, t.dataSync() as Float32Array);
      t.dispose();
    }
    return Llama.fromArrays(config, arrays, trainable, label, opts);
  }

  /** A plain model with copies of the weights this one computes with (a LoRA view's merged W + B·A·scaling). */
  clone(trainable: boolean, label = 'llama'): Llama {
    const id = nextModelId(label);
    const params = new Map<string, tf.Variable>();
    for (const [name, v] of this.params) {
      const lr = this.lowRankOf(name);
      // A packed-f16 weight is widened: the clone is a plain f32 model (its values exactly the f16 ones).
      const w = asF32Tensor(v);
      try {
        if (!lr) {
          params.set(name, tf.variable(w, trainable, `${id}/${name}`));
          continue;
        }
        const merged = mergedLinearWeight(w, lr);
        params.set(name, tf.variable(merged, trainable, `${id}/${name}`));
        merged.dispose();
      } finally {
        if (w !== v) w.dispose();
      }
    }
    return new Llama(this.config, params, id, this.wteChunkRows);
  }

  /** A view computing with this model's weights plus `adapters` (GPT2.withLora's contract). */
  withLora(adapters: LoraAdapters | null, label = 'lora'): Llama {
    if (this.base !== this) throw new Error('Llama.withLora: call it on the base model, not on a LoRA view');
    if (adapters) {
      for (const [key, m] of adapters.modules) {
        const v = this.params.get(`${key}.weight`);
        // A packed-f16 weight's logical shape (its tensor holds cols / 2 words per row).
        const w = v ? (isPackedF16(v) ? packedShape(v) : v.shape) : null;
        const want = loraModuleShape(this.config, m.target);
        if (!w || w[1] !== m.in || w[0] !== m.out || want.in !== m.in || want.out !== m.out) {
          throw new UserError(
            `LoRA adapters do not fit this model: ${key} has A [${m.a.shape}] and B [${m.b.shape}], but the ` +
              `model's ${key}.weight is [${w ?? 'missing'}] (nn.Linear [out, in]; A must be [r, in], B [out, r]).`,
          );
        }
      }
    }
    return new Llama(this.config, this.params, nextModelId(label), this.wteChunkRows, this, adapters);
  }

  p(name: string): tf.Variable {
    const v = this.params.get(name);
    if (!v) throw new Error(`Llama: no parameter ${name}`);
    return v;
  }

  private has(name: string): tf.Variable | null {
    return this.params.get(name) ?? null;
  }

  blockVariables(i: number): tf.Variable[] {
    const prefix = `layers.${i}.`;
    if (this.base !== this)
      return this.lora ? this.lora.variables().filter((v) => v.name.includes(`/${prefix}`)) : [];
    return [...this.params.entries()].filter(([name]) => name.startsWith(prefix)).map(([, v]) => v);
  }

  trainableVariables(): tf.Variable[] {
    if (this.base !== this) return this.lora ? this.lora.variables() : [];
    return [...this.params.values()];
  }

  async toArrays(): Promise<Map<string, Float32Array>> {
    const out = new Map<string, Float32Array>();
    for (const t of this.lazyArrays()) out.set(t.name, await t.data());
    return out;
  }

  /** toArrays one weight at a time (a LoRA view's adapted weights merged), vocabulary matrices also in pieces. */
  lazyArrays(): LazyTensor[] {
    return this.specs.map((spec) => {
      const entry = { name: spec.name, shape: spec.shape.slice() };
      if (VOCAB_MATRICES.includes(spec.name)) {
        const chunks = spec.name === 'embed_tokens.weight' ? this.embedChunks : this.headChunks;
        return chunkedLazyTensor(spec.name, chunks, this.wteChunkRows, this.config.vocab_size);
      }
      const stored = this.p(spec.name);
      // A packed weight that no adapter changes: its f16 values as stored, for a stream that keeps them.
      const halfWords =
        isPackedF16(stored) && !this.lowRankOf(spec.name)
          ? async function* (): AsyncGenerator<Int32Array> {
              yield (await stored.data()) as Int32Array;
            }
          : undefined;
      return {
        ...entry,
        ...(halfWords ? { halfWords } : {}),
        data: async () => {
          const v = this.p(spec.name);
          const lr = this.lowRankOf(spec.name);
          if (!lr) return weightValues(v);
          const w = asF32Tensor(v);
          const merged = mergedLinearWeight(w, lr);
          try {
            return (await merged.data()) as Float32Array;
          } finally {
            merged.dispose();
            if (w !== v) w.dispose();
          }
        },
        // The same values through the stream's scratch (kernels/wasm-read.ts): no fresh copy per weight on WASM.
        pieces: (scratch: (n: number) => Float32Array) => this.weightPieces(spec.name, scratch),
      };
    });
  }

  /** A weight's values as lazyArrays reads them (an adapted weight merged), in pieces (kernels/wasm-read.ts). */
  private async *weightPieces(
    name: string,
    scratch: (n: number) => Float32Array,
  ): AsyncGenerator<Float32Array> {
    const v = this.p(name);
    const lr = this.lowRankOf(name);
    if (!lr) {
      if (isPackedF16(v)) yield await weightValues(v);
      else yield* tensorPieces(v, scratch);
      return;
    }
    const w = asF32Tensor(v);
    const merged = mergedLinearWeight(w, lr);
    try {
      yield* tensorPieces(merged, scratch);
    } finally {
      merged.dispose();
      if (w !== v) w.dispose();
    }
  }

  dispose(): void {
    if (this.base !== this) {
      this.lora?.dispose();
      return;
    }
    for (const v of this.params.values()) v.dispose();
    this.params.clear();
    this.rope.dispose();
  }

  // ---- building blocks ---------------------------------------------------------------------------

  private lowRankOf(weightName: string): LowRank | null {
    if (!this.lora || !weightName.endsWith('.weight')) return null;
    return this.lora.lowRank(weightName.slice(0, -'.weight'.length));
  }

  /** nn.Linear `module` of block i (`self_attn.q_proj`, …): x [N, in] · Wᵀ (+ b) (+ LoRA). */
  private proj(x: tf.Tensor2D, i: number, module: string): tf.Tensor2D {
    const key = `layers.${i}.${module}`;
    return linear(x, this.p(`${key}.weight`), this.has(`${key}.bias`), this.lora?.lowRank(key));
  }

  private norm(x: tf.Tensor, name: string): tf.Tensor {
    return rmsNorm(x, this.p(name), this.config.rms_norm_eps);
  }

  /**
   * Block i's attention input side: q [N, nh·d] and k [N, n_kv·d] with q_norm/k_norm (Qwen3), before the rotary
   * embedding (the attention applies it: model/attention.ts, inside the fused kernels on WebGPU), v [N, n_kv·d].
   */
  private qkv(h: tf.Tensor2D, i: number): { q: tf.Tensor2D; k: tf.Tensor2D; v: tf.Tensor2D } {
    const c = this.config;
    const N = h.shape[0];
    const d = c.head_dim;
    let q: tf.Tensor = tf.reshape(this.proj(h, i, 'self_attn.q_proj'), [N, c.num_attention_heads, d]);
    let k: tf.Tensor = tf.reshape(this.proj(h, i, 'self_attn.k_proj'), [N, c.num_key_value_heads, d]);
    if (c.qk_norm) {
      q = this.norm(q, `layers.${i}.self_attn.q_norm.weight`);
      k = this.norm(k, `layers.${i}.self_attn.k_norm.weight`);
    }
    return {
      q: tf.reshape(q, [N, c.num_attention_heads * d]),
      k: tf.reshape(k, [N, c.num_key_value_heads * d]),
      v: this.proj(h, i, 'self_attn.v_proj'),
    };
  }

  /**
   * Block i on x [N, C]: x + o_proj(attention(norm(x))), then + down(silu(gate(·)) · up(·)) of its norm.
   * `attention` maps q [N, nh·d], k, v [N, n_kv·d] (q and k not yet rotated) to the attended values [N, nh·d].
   */
  private block(
    x: tf.Tensor2D,
    i: number,
    attention: (q: tf.Tensor2D, k: tf.Tensor2D, v: tf.Tensor2D) => tf.Tensor2D,
  ): tf.Tensor2D {
    const h = this.norm(x, `layers.${i}.input_layernorm.weight`) as tf.Tensor2D;
    const { q, k, v } = this.qkv(h, i);
    const x1 = tf.add(x, this.proj(attention(q, k, v), i, 'self_attn.o_proj')) as tf.Tensor2D;
    const h2 = this.norm(x1, `layers.${i}.post_attention_layernorm.weight`) as tf.Tensor2D;
    const a = swiglu(this.proj(h2, i, 'mlp.gate_proj'), this.proj(h2, i, 'mlp.up_proj')) as tf.Tensor2D;
    return tf.add(x1, this.proj(a, i, 'mlp.down_proj')) as tf.Tensor2D;
  }

  /**
   * Causal self-attention of a [B, T] batch with grouped-query heads and the rotary embedding (the KV heads are
   * collected rotated, never repeated): model/attention.ts's gqaSelfAttention, the fused kernels on WebGPU.
   */
  private selfAttention(
    q: tf.Tensor2D,
    k: tf.Tensor2D,
    v: tf.Tensor2D,
    rope: RopeRows,
    maskF: tf.Tensor2D,
    bias: () => tf.Tensor4D,
    collect?: LayerKV[],
  ): tf.Tensor2D {
    const c = this.config;
    return gqaSelfAttention(
      q,
      k,
      v,
      rope,
      maskF,
      bias,
      c.num_attention_heads,
      c.num_key_value_heads,
      collect,
    );
  }

  // ---- forward -----------------------------------------------------------------------------------

  /**
   * GPT2.trunk's contract: hidden states after the final norm, [B·T, C]; positions = cumsum(mask) − 1. With
   * `opts.share` the blocks run over the compact rows and the attention over the full layout
   * (model/shared-prefix.ts): the result is [N', C].
   */
  trunk(ids: tf.Tensor2D, mask: tf.Tensor2D, collectKV?: LayerKV[], opts: TrunkOptions = {}): tf.Tensor2D {
    const T = ids.shape[1];
    const c = this.config;
    if (T > c.n_positions) {
      throw new UserError(
        `sequence of ${T} tokens is longer than the model's max_position_embeddings (${c.n_positions}).`,
      );
    }
    const share = opts.share;
    if (share && collectKV) throw new Error('Llama.trunk: a shared prefix does not fill a KV cache.');
    const maskF = tf.cast(mask, 'float32') as tf.Tensor2D;
    const positions = tf.reshape(tf.cast(tf.maximum(tf.sub(tf.cumsum(maskF, 1), 1), 0), 'int32'), [-1]);
    const rope = this.rope.rows(positions, T);
    // As GPT2.trunk: each block in its own tidy unless a backward will read its activations (filling a KV cache,
    // its keys and values outlive it too).
    const perBlockTidy = !recordingGradients();
    let built: tf.Tensor4D | null = null;
    const bias = () =>
      (built ??= perBlockTidy ? tf.keep(causalPaddingBias(maskF)) : causalPaddingBias(maskF));
    const flatIds = tf.reshape(ids, [-1]);
    let x = gatherChunked(
      this.embedChunks,
      this.wteChunkRows,
      share ? compactInput(flatIds as tf.Tensor1D, share) : flatIds,
    );
    if (perBlockTidy) {
      try {
        for (let i = 0; i < c.num_hidden_layers; i++) {
          const input = x;
          const [y, k, v] = tf.tidy(() => {
            const kv: LayerKV[] = [];
            const out = this.block(input, i, (q, k, v) =>
              attendFull(share, [q, k, v], (q, k, v) =>
                this.selfAttention(q, k, v, rope, maskF, bias, collectKV && kv),
              ),
            );
            return collectKV ? [out, kv[0].k, kv[0].v] : [out];
          });
          if (collectKV) collectKV.push({ k: k as tf.Tensor4D, v: v as tf.Tensor4D });
          x = y as tf.Tensor2D;
          input.dispose();
        }
      } finally {
        (built as tf.Tensor4D | null)?.dispose();
      }
      return this.norm(x, 'norm.weight') as tf.Tensor2D;
    }
    for (let i = 0; i < c.num_hidden_layers; i++) {
      if (opts.recompute && !collectKV) {
        // The context the block reads, saved for its recomputation: the mask, the rope rows (cos, sin, and both
        // where made) and the share's index maps.
        const hasBoth = !!rope.both;
        const blockFn = (xi: tf.Tensor, ...ctx: tf.Tensor[]) => {
          const [m, cs, sn] = ctx;
          const both = hasBoth ? ctx[3] : undefined;
          const at = hasBoth ? 4 : 3;
          const sh = share ? shareOfMaps(ctx.slice(at)) : undefined;
          let own: tf.Tensor4D | null = null;
          const ownBias = () => (own ??= causalPaddingBias(m as tf.Tensor2D));
          return this.block(xi as tf.Tensor2D, i, (q, k, v) =>
            attendFull(sh, [q, k, v], (q, k, v) =>
              this.selfAttention(q, k, v, { cos: cs, sin: sn, both }, m as tf.Tensor2D, ownBias),
            ),
          );
        };
        const context = [
          maskF,
          rope.cos,
          rope.sin,
          ...(rope.both ? [rope.both] : []),
          ...(share ? shareMaps(share) : []),
        ];
        x = recomputed(blockFn, x, context, this.blockVariables(i)) as tf.Tensor2D;
        continue;
      }
      x = this.block(x, i, (q, k, v) =>
        attendFull(share, [q, k, v], (q, k, v) => this.selfAttention(q, k, v, rope, maskF, bias, collectKV)),
      );
    }
    return this.norm(x, 'norm.weight') as tf.Tensor2D;
  }

  /** LM head: hidden [N, C] → logits [N, V] (tied: the embedding; chunked under a binding limit). */
  lmHead(hidden: tf.Tensor2D): tf.Tensor2D {
    return headChunked(this.headChunks, hidden);
  }

  /** The LM head's weight as the [rows, C] blocks it is held in (ppo/chunked-logprob.ts). */
  lmHeadBlocks(): tf.Tensor2D[] {
    return this.headChunks as tf.Tensor[] as tf.Tensor2D[];
  }

  logits(ids: tf.Tensor2D, mask: tf.Tensor2D): tf.Tensor3D {
    const [B, T] = ids.shape;
    return tf.reshape(this.lmHead(this.trunk(ids, mask)), [B, T, this.config.vocab_size]);
  }

  /**
   * GPT2.decodeStep's contract over a cache of the KV heads, [B, n_kv, S, d] per layer: the new key (rotated) and
   * value are added into the zero slot, then the query attends over the cache with each KV head serving its group of
   * query heads (model/attention.ts's gqaDecodeAttention, the fused kernels on WebGPU). On WebGPU each block runs the
   * decode programs (decodeBlock: 5 dispatches per layer), elsewhere `block`'s ops. There the new key and value are
   * written into `cache`'s own tensors where each holds its data alone (gqaDecodeQkvWebGpu's `inPlace`: by the
   * attention's own dispatch where the device's storage buffers allow), and the returned cache shares their data: the
   * cache given is spent (CausalLM.decodeStep).
   */
  decodeStep(
    ids: tf.Tensor1D,
    positions: tf.Tensor1D,
    slotOneHot: tf.Tensor,
    keyMask: tf.Tensor2D,
    cache: LayerKV[],
  ): { hidden: tf.Tensor2D; cache: LayerKV[] } {
    const c = this.config;
    const S = keyMask.shape[1];
    let built: tf.Tensor | null = null;
    const bias = () => (built ??= keyPaddingBias(keyMask));
    // cos | sin by one gather on WebGPU (the decode kernels' one binding); cos and sin apart only for the plain path.
    const rope = this.rope.decodeRows(positions, S);
    let x = gatherChunked(this.embedChunks, this.wteChunkRows, ids);
    const next: LayerKV[] = [];
    for (let i = 0; i < c.num_hidden_layers; i++) {
      const attention = (q: tf.Tensor2D, k: tf.Tensor2D, v: tf.Tensor2D) => {
        const out = gqaDecodeAttention(
          q,
          k,
          v,
          rope.rows(),
          slotOneHot,
          keyMask,
          cache[i],
          c.num_attention_heads,
          bias,
        );
        next.push(out.kv);
        return out.y;
      };
      x = this.decodeBlock(x, i, attention, (src) => {
        const cs = rope.cs ? { cs: rope.cs } : null;
        if (!cs || !webGpuGqaDecodeQkvApplies(src, cs, slotOneHot, keyMask, cache[i], c.num_attention_heads))
          return null;
        const out = gqaDecodeQkvWebGpu(src, cs, slotOneHot, keyMask, cache[i], c.num_attention_heads, {
          inPlace: true,
        });
        next.push(out.kv);
        return out.y;
      });
    }
    return { hidden: this.norm(x, 'norm.weight') as tf.Tensor2D, cache: next };
  }

  /** Module `key`'s nn.Linear as the decode programs take it: its weight, bias and LoRA pair (or null). */
  private linearParts(key: string): { w: tf.Tensor2D; bias: tf.Tensor1D | null; lora: LowRank | null } {
    return {
      w: this.p(`${key}.weight`) as tf.Tensor as tf.Tensor2D,
      bias: this.has(`${key}.bias`) as tf.Tensor1D | null,
      lora: this.lora?.lowRank(key) ?? null,
    };
  }

  /**
   * Block i of the KV-cache decode step (forward only, rows = batch, one token each) through the fused decode programs
   * where they apply (docs/tfjs.md, dispatch counts; issue #22): input_layernorm in the prologue of ONE matmul over
   * q_proj | k_proj | v_proj (kernels/webgpu-linear.ts linearNtDecodeWebGpu, the weights read in place), the attention
   * reading q, k, v from it (`fused`: kernels/webgpu-gqa-decode.ts gqaDecodeQkvWebGpu, the biases, q_norm / k_norm and
   * the rotary embedding applied there; it writes the new key and value into the cache itself where the device's
   * storage buffers allow, else 1 dispatch of both writes before it), o_proj + the residual, gate_proj | up_proj as
   * ONE program (`pair`: post_attention_layernorm in its prologue, both products per output and SwiGLU of the two in
   * its epilogue; gate_proj's program then up_proj's with SwiGLU in its epilogue where a bias or more than 64 rows
   * rule the pair out), down_proj + the residual: 5 dispatches (6 where the attention does not write the slot), plus
   * one down-projection per LoRA pair, gate's and up's sharing one (and one concat of q|k|v's B's where the device
   * offers fewer than 10 storage buffers a program). Each piece falls back to `block`'s ops on its own when its
   * program does not apply (another backend, shapes over the limits, LoRA on some of q/k/v only, more storage buffers
   * than the device offers); `attention` is that path's.
   */
  private decodeBlock(
    x: tf.Tensor2D,
    i: number,
    attention: (q: tf.Tensor2D, k: tf.Tensor2D, v: tf.Tensor2D) => tf.Tensor2D,
    fused: (src: DecodeQkv) => tf.Tensor2D | null,
  ): tf.Tensor2D {
    const c = this.config;
    const eps = c.rms_norm_eps;
    const at = `layers.${i}.`;
    const d = c.head_dim;
    const nh = c.num_attention_heads;
    const nkv = c.num_key_value_heads;
    const lin = (input: tf.Tensor2D, o: LinearNtDecodeOptions): tf.Tensor2D | null =>
      webGpuLinearNtDecodeApplies(input, o) ? linearNtDecodeWebGpu(input, o) : null;
    const pairs = (ps: { lora: LowRank | null }[]) =>
      ps.every((p) => p.lora) ? ps.map((p) => p.lora!) : null;

    // Attention: q|k|v in one matmul (biases left to the attention), then the cache writes and the attention.
    const qkvParts = ['q_proj', 'k_proj', 'v_proj'].map((m) => this.linearParts(`${at}self_attn.${m}`));
    const mixedLora = qkvParts.some((p) => p.lora) && !qkvParts.every((p) => p.lora);
    const ln1 = { g: this.p(`${at}input_layernorm.weight`) as tf.Tensor as tf.Tensor1D, eps };
    const qkv = mixedLora ? null : lin(x, { w: qkvParts.map((p) => p.w), rms: ln1, lora: pairs(qkvParts) });
    let y: tf.Tensor2D | null = null;
    if (qkv) {
      const [qp, kp, vp] = qkvParts;
      const src: DecodeQkv = {
        qkv,
        bias: qp.bias && kp.bias && vp.bias ? { q: qp.bias, k: kp.bias, v: vp.bias } : null,
        norm: c.qk_norm
          ? {
              q: this.p(`${at}self_attn.q_norm.weight`) as tf.Tensor as tf.Tensor1D,
              k: this.p(`${at}self_attn.k_norm.weight`) as tf.Tensor as tf.Tensor1D,
              eps,
            }
          : null,
      };
      // Only all three biases or none (the family's configs); otherwise the split below adds each.
      const oneBiasMissing = !src.bias && qkvParts.some((p) => p.bias);
      y = oneBiasMissing ? null : fused(src);
      if (!y) {
        // The program reading q|k|v does not apply: split it and run the unfused attention.
        const N = x.shape[0];
        const cut = (p: number, lo: number, n: number) => {
          const t = tf.slice(qkv, [0, lo], [N, n]) as tf.Tensor2D;
          return qkvParts[p].bias ? (tf.add(t, qkvParts[p].bias!) as tf.Tensor2D) : t;
        };
        let q: tf.Tensor = cut(0, 0, nh * d);
        let k: tf.Tensor = cut(1, nh * d, nkv * d);
        const v = cut(2, (nh + nkv) * d, nkv * d);
        if (c.qk_norm) {
          q = tf.reshape(this.norm(tf.reshape(q, [N, nh, d]), `${at}self_attn.q_norm.weight`), [N, nh * d]);
          k = tf.reshape(this.norm(tf.reshape(k, [N, nkv, d]), `${at}self_attn.k_norm.weight`), [N, nkv * d]);
        }
        y = attention(q as tf.Tensor2D, k as tf.Tensor2D, v);
      }
    } else {
      const h = this.norm(x, `${at}input_layernorm.weight`) as tf.Tensor2D;
      const { q, k, v } = this.qkv(h, i);
      y = attention(q, k, v);
    }
    const o = this.linearParts(`${at}self_attn.o_proj`);
    const x1 =
      lin(y, { w: [o.w], bias: o.bias, lora: pairs([o]), residual: x }) ??
      (tf.add(x, this.proj(y, i, 'self_attn.o_proj')) as tf.Tensor2D);

    // MLP: the norm in gate_proj's and up_proj's prologue, SwiGLU in up_proj's epilogue, down_proj + residual.
    const ln2 = { g: this.p(`${at}post_attention_layernorm.weight`) as tf.Tensor as tf.Tensor1D, eps };
    const [g, u, dn] = ['gate_proj', 'up_proj', 'down_proj'].map((m) => this.linearParts(`${at}mlp.${m}`));
    // gate_proj and up_proj as one program where it applies (no biases, few rows), else gate then up.
    const mixedMlpLora = !!g.lora !== !!u.lora;
    let a =
      g.bias || u.bias || mixedMlpLora
        ? null
        : lin(x1, { w: [g.w, u.w], rms: ln2, lora: pairs([g, u]), pair: true });
    const gate = a ? null : lin(x1, { w: [g.w], bias: g.bias, rms: ln2, lora: pairs([g]) });
    if (gate) a = lin(x1, { w: [u.w], bias: u.bias, rms: ln2, lora: pairs([u]), gate });
    if (!a) {
      const h2 = this.norm(x1, `${at}post_attention_layernorm.weight`) as tf.Tensor2D;
      a = swiglu(gate ?? this.proj(h2, i, 'mlp.gate_proj'), this.proj(h2, i, 'mlp.up_proj')) as tf.Tensor2D;
    }
    return (
      lin(a, { w: [dn.w], bias: dn.bias, lora: pairs([dn]), residual: x1 }) ??
      (tf.add(x1, this.proj(a, i, 'mlp.down_proj')) as tf.Tensor2D)
    );
  }
}
