/**
 * GPT-2 in TensorFlow.js, computing what Hugging Face's GPT2LMHeadModel computes (eval mode, no dropout).
 *
 * Bottom-up like nanoGPT: layer norm → attention → MLP → block → trunk → LM head (the ops in ops.ts). One
 * `block()` serves the full forward and the KV-cache decode step. Every matmul with weights is 2-D
 * ([N, C] · [C, D]) because broadcast matMul gradients are wrong on tfjs WebGPU (tfjs#8721).
 * Parameters are tf.Variables keyed by Hugging Face's GPT2Model names (without `transformer.`).
 *
 * LoRA (docs/formats.md §6): `base.withLora(adapters)` is a view over the same variables that adds PEFT's
 * low-rank term in each adapted Conv1D (ops.ts conv1d); the base itself is the reference.
 * Small binding limits (docs/tfjs.md trap 8): with `maxBindingBytes`, `wte` (and the tied LM head) is held
 * as vocabulary chunks that each fit one binding; names in files stay `wte.weight`.
 */
import { checkBaseDtype } from './f16-base';
import * as tf from '@tensorflow/tfjs-core';
import type { GPT2Config } from './config';
import { paramInit, trunkParamSpecs, type ParamSpec } from './specs';
import { UserError } from '../../common/errors';
import { conv1d, layerNorm, mergedConv1dWeight, type Conv1dEpilogue } from './ops';
import { causalPaddingBias, causalSelfAttention, decodeAttention, keyPaddingBias } from './attention';
import { LoraAdapters, loraModuleShape } from './lora';
import { linearDecodeWebGpu, webGpuLinearDecodeApplies } from '../kernels/webgpu-linear';
import { buildParams, buildParamsFromReader, checkedValues } from './build-params';
import type { LayerKV } from '../kernels/definitions';
import { recomputed, recordingGradients } from './recompute';
import type { LazyTensor } from './safetensors';
import { chunkedLazyTensor, gatherChunked, headChunked } from './vocab-chunks';
import { embeddingChunkRows, nextModelId, type CausalLM, type GPT2Options, type TrunkOptions } from './lm';
import { attendFull, compactInput, shareMaps, shareOfMaps } from './shared-prefix';
import { tensorPieces } from '../kernels/wasm-read';

export { embeddingChunkRows, embeddingChunks, type GPT2Options, type TrunkOptions } from './lm';

/** The variable name of wte's chunk k when `wte` is chunked (its rows are k·rows … (k+1)·rows − 1). */
export function wteChunkName(k: number): string {
  return `wte.weight.chunk${k}`;
}

/** Per-layer keys and values, for model/sampling.ts's KV cache (defined with the kernels, which read the same layout). */
export type { LayerKV };

export class GPT2 implements CausalLM {
  readonly config: GPT2Config;
  /**
   * Trunk parameters by HF name (`wte.weight`, `h.0.attn.c_attn.weight`, …). With a binding limit `wte.weight`
   * is absent and its chunks are here as `wte.weight.chunk{k}` (wteChunkName). A LoRA view shares its base's map.
   */
  readonly params: Map<string, tf.Variable>;
  readonly specs: ParamSpec[];
  /** Unique prefix of this instance's variable names (tfjs registers variables globally by name). */
  readonly id: string;
  /** Rows of `wte` per chunk (vocab_size when it is one tensor). */
  readonly wteChunkRows: number;
  /** The model whose weights this one computes with: itself, or for a LoRA view the shared base. */
  readonly base: GPT2;
  /** The adapters this view applies (null for a plain model). */
  readonly lora: LoraAdapters | null;
  /** wte's chunks in vocabulary order (one chunk: wte itself). */
  private readonly wte: tf.Variable[];

  private constructor(
    config: GPT2Config,
    params: Map<string, tf.Variable>,
    id: string,
    wteChunkRows: number,
    base: GPT2 | null = null,
    lora: LoraAdapters | null = null,
  ) {
    this.config = config;
    this.params = params;
    this.specs = trunkParamSpecs(config);
    this.id = id;
    this.wteChunkRows = wteChunkRows;
    this.base = base ?? this;
    this.lora = lora;
    const n = Math.ceil(config.vocab_size / wteChunkRows);
    this.wte =
      n === 1 ? [this.p('wte.weight')] : Array.from({ length: n }, (_, k) => this.p(wteChunkName(k)));
  }

  /**
   * Build from host arrays (e.g. a loaded safetensors file, already name-mapped and shape-checked). With
   * `opts.maxBindingBytes`, wte's chunks are made straight from views of its host array (never a full copy).
   */
  static fromArrays(
    config: GPT2Config,
    arrays: Map<string, Float32Array>,
    trainable: boolean,
    label = 'gpt2',
    opts: GPT2Options = {},
  ): GPT2 {
    checkBaseDtype(opts.baseDtype, { trainable, family: 'gpt2' });
    const id = nextModelId(label);
    const rows = embeddingChunkRows(config, opts.maxBindingBytes);
    const pieces = (spec: ParamSpec) => GPT2.layout(spec, checkedValues(spec, arrays.get(spec.name)), rows);
    return new GPT2(config, buildParams(trunkParamSpecs(config), pieces, id, trainable), id, rows);
  }

  /**
   * fromArrays a weight at a time (model/build-params.ts): `read` gives each spec's values in trunkParamSpecs'
   * order; each becomes variables and, on WebGPU, goes to the device before the next is read.
   */
  static async fromReader(
    config: GPT2Config,
    read: (spec: ParamSpec) => Promise<Float32Array>,
    trainable: boolean,
    label = 'gpt2',
    opts: GPT2Options = {},
  ): Promise<GPT2> {
    checkBaseDtype(opts.baseDtype, { trainable, family: 'gpt2' });
    const id = nextModelId(label);
    const rows = embeddingChunkRows(config, opts.maxBindingBytes);
    const pieces = async (spec: ParamSpec) => GPT2.layout(spec, checkedValues(spec, await read(spec)), rows);
    return new GPT2(
      config,
      await buildParamsFromReader(trunkParamSpecs(config), pieces, id, trainable),
      id,
      rows,
    );
  }

  /** A parameter's in-memory pieces: itself, or for wte under a binding limit its row chunks (subarray views). */
  private static layout(
    spec: ParamSpec,
    data: Float32Array,
    rows: number,
  ): [string, number[], Float32Array][] {
    const [V, C] = spec.shape;
    if (spec.name !== 'wte.weight' || rows >= V) return [[spec.name, spec.shape, data]];
    const out: [string, number[], Float32Array][] = [];
    for (let k = 0, lo = 0; lo < V; k++, lo += rows) {
      const hi = Math.min(V, lo + rows);
      out.push([wteChunkName(k), [hi - lo, C], data.subarray(lo * C, hi * C)]);
    }
    return out;
  }

  /**
   * GPT-2's initialisation: N(0, 0.02), residual projections scaled by 1/√(2·n_layer), LN (1, 0).
   * With a binding limit each wte chunk is drawn on its own (seeds derived from wte's), so a chunked random
   * model's wte differs from an unchunked one of the same seed; every other tensor is the same.
   */
  static random(
    config: GPT2Config,
    seed: number,
    trainable = true,
    label = 'gpt2',
    opts: GPT2Options = {},
  ): GPT2 {
    const id = nextModelId(label);
    const rows = embeddingChunkRows(config, opts.maxBindingBytes);
    const params = new Map<string, tf.Variable>();
    let s = seed;
    for (const spec of trunkParamSpecs(config)) {
      const name = spec.name;
      const rule = paramInit(config, name);
      const draw = (shape: number[], sd: number) =>
        'fill' in rule
          ? (rule.fill ? tf.ones : tf.zeros)(shape) // values made on the host, not by a kernel
          : tf.randomNormal(shape, 0, rule.std, 'float32', sd);
      const sd = s++;
      if (name === 'wte.weight' && rows < config.vocab_size) {
        const [V, C] = spec.shape;
        for (let k = 0, lo = 0; lo < V; k++, lo += rows) {
          const init = draw([Math.min(V, lo + rows) - lo, C], sd * 7919 + k);
          params.set(wteChunkName(k), tf.variable(init, trainable, `${id}/${wteChunkName(k)}`));
          init.dispose();
        }
        continue;
      }
      const init = draw(spec.shape, sd);
      params.set(name, tf.variable(init, trainable, `${id}/${name}`));
      init.dispose();
    }
    return new GPT2(config, params, id, rows);
  }

  /**
   * A new plain model with copies of the weights this one computes with (e.g. a frozen reference of a full
   * fine-tuning run): for a LoRA view, the merged W + (B·A)ᵀ·scaling. Same wte layout.
   */
  clone(trainable: boolean, label = 'gpt2'): GPT2 {
    const id = nextModelId(label);
    const params = new Map<string, tf.Variable>();
    for (const [name, v] of this.params) {
      const lr = this.lowRankOf(name);
      if (!lr) {
        params.set(name, tf.variable(v, trainable, `${id}/${name}`));
        continue;
      }
      const merged = mergedConv1dWeight(v, lr);
      params.set(name, tf.variable(merged, trainable, `${id}/${name}`));
      merged.dispose();
    }
    return new GPT2(this.config, params, id, this.wteChunkRows);
  }

  /**
   * A view that computes with this model's weights (shared, not copied) plus `adapters` (null: none). The view
   * takes ownership of the adapters (its dispose() frees them, never the base's weights); its trainable
   * variables are the adapters' alone. The base (this) stays the model without adapters: the reference.
   */
  withLora(adapters: LoraAdapters | null, label = 'lora'): GPT2 {
    if (this.base !== this) throw new Error('GPT2.withLora: call it on the base model, not on a LoRA view');
    if (adapters) {
      for (const [key, m] of adapters.modules) {
        const w = this.params.get(`${key}.weight`);
        const want = loraModuleShape(this.config, m.target);
        if (!w || w.shape[0] !== m.in || w.shape[1] !== m.out || want.in !== m.in || want.out !== m.out) {
          throw new UserError(
            `LoRA adapters do not fit this model: ${key} has A [${m.a.shape}] and B [${m.b.shape}], but the ` +
              `model's ${key}.weight is [${w ? w.shape : 'missing'}] (A must be [r, in], B [out, r]).`,
          );
        }
      }
    }
    return new GPT2(this.config, this.params, nextModelId(label), this.wteChunkRows, this, adapters);
  }

  p(name: string): tf.Variable {
    const v = this.params.get(name);
    if (!v) throw new Error(`GPT2: no parameter ${name}`);
    return v;
  }

  /**
   * The variables block i reads that can train: its weights (a plain model), or its adapters' A and B (a LoRA
   * view; the base is frozen). What a recomputed block differentiates (model/recompute.ts).
   */
  blockVariables(i: number): tf.Variable[] {
    const prefix = `h.${i}.`;
    if (this.base !== this)
      return this.lora ? this.lora.variables().filter((v) => v.name.includes(`/${prefix}`)) : [];
    return [...this.params.entries()].filter(([name]) => name.startsWith(prefix)).map(([, v]) => v);
  }

  /** What an optimiser updates: all weights, or for a LoRA view the adapters' A and B alone. */
  trainableVariables(): tf.Variable[] {
    if (this.base !== this) return this.lora ? this.lora.variables() : [];
    return [...this.params.values()];
  }

  /**
   * The weights by HF name (`wte.weight` whole, however it is held), as this model computes with them: for a
   * LoRA view with its adapters on, the merged W + (B·A)ᵀ·scaling, so lmSafetensors/exportLM of a view
   * write the merged policy (docs/formats.md §6).
   */
  async toArrays(): Promise<Map<string, Float32Array>> {
    const out = new Map<string, Float32Array>();
    for (const t of this.lazyArrays()) out.set(t.name, await t.data());
    return out;
  }

  /**
   * toArrays one weight at a time: each entry's `data()` reads (for an adapted weight, merges then reads) that
   * weight when called, so a checkpoint writer holds one weight's values at a time (safetensorsStream).
   */
  lazyArrays(): LazyTensor[] {
    return this.specs.map((spec) => {
      const entry = { name: spec.name, shape: spec.shape.slice() };
      if (spec.name === 'wte.weight') {
        // wte (154 MB for GPT-2, 206 MB for gpt2-medium) also in pieces, for a streamed file.
        return chunkedLazyTensor(spec.name, this.wte, this.wteChunkRows, this.config.vocab_size);
      }
      return {
        ...entry,
        data: async () => {
          const v = this.p(spec.name);
          const lr = this.lowRankOf(spec.name);
          if (!lr) return (await v.data()) as Float32Array;
          const merged = mergedConv1dWeight(v, lr);
          try {
            return (await merged.data()) as Float32Array;
          } finally {
            merged.dispose();
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
    if (!lr) return yield* tensorPieces(v, scratch);
    const merged = mergedConv1dWeight(v, lr);
    try {
      yield* tensorPieces(merged, scratch);
    } finally {
      merged.dispose();
    }
  }

  /** A plain model frees its weights; a LoRA view frees its adapters only (the base is shared). */
  dispose(): void {
    if (this.base !== this) {
      this.lora?.dispose();
      return;
    }
    for (const v of this.params.values()) v.dispose();
    this.params.clear();
  }

  // ---- building blocks ---------------------------------------------------------------------------

  /** The active LoRA pair of the Conv1D whose weight is `weightName` (null: none, or adapters off). */
  private lowRankOf(weightName: string) {
    if (!this.lora || !weightName.endsWith('.weight')) return null;
    return this.lora.lowRank(weightName.slice(0, -'.weight'.length));
  }

  /**
   * Conv1D `module` of block i (`attn.c_attn`, …): x [N, in] · W [in, out] + b, plus LoRA when adapted, then
   * the epilogue (gelu_new, a residual add) when asked.
   */
  private linear(x: tf.Tensor2D, i: number, module: string, epilogue?: Conv1dEpilogue): tf.Tensor2D {
    const key = `h.${i}.${module}`;
    return conv1d(x, this.p(`${key}.weight`), this.p(`${key}.bias`), this.lora?.lowRank(key), epilogue);
  }

  /**
   * Rows of wte for token ids [N] → [N, C]. Chunked: each chunk gathers at the ids it holds (others clipped into
   * range and replaced by exact zeros), and the chunks' results are summed: the same values and gradients as
   * one gather, with no kernel binding more than one chunk.
   */
  private gatherWte(flatIds: tf.Tensor): tf.Tensor2D {
    return gatherChunked(this.wte, this.wteChunkRows, flatIds);
  }

  private embed(ids: tf.Tensor, positions: tf.Tensor): tf.Tensor2D {
    const flatIds = tf.reshape(ids, [-1]);
    const flatPos = tf.reshape(positions, [-1]);
    return tf.add(this.gatherWte(flatIds), tf.gather(this.p('wpe.weight'), flatPos)) as tf.Tensor2D;
  }

  /**
   * Transformer block i on x [N, C]. `attention` maps this block's fused q|k|v projection [N, 3C] to the
   * attended values [N, C]: the full forward attends within the batch (model/attention.ts), the decode step
   * writes k, v into its cache first. The residual adds and gelu_new go through conv1d's epilogue options
   * (ops.ts), so a backend with fused kernels can do them in the matmul's dispatch.
   */
  private block(
    x: tf.Tensor2D,
    i: number,
    attention: (qkv: tf.Tensor2D) => tf.Tensor2D,
    decode = false,
  ): tf.Tensor2D {
    const qkv = this.normLinear(x, i, 'ln_1', 'attn.c_attn', {}, decode);
    const y = attention(qkv); // [N, 3C] → [N, C]
    const x1 = this.normLinear(y, i, null, 'attn.c_proj', { residual: x }, decode);
    const a = this.normLinear(x1, i, 'ln_2', 'mlp.c_fc', { activation: 'gelu_new' }, decode);
    return this.normLinear(a, i, null, 'mlp.c_proj', { residual: x1 }, decode);
  }

  /**
   * Conv1D `module` of block i on layer norm `norm` of x (or on x itself when norm is null), then the epilogue.
   * With `decode` (the KV-cache decode step: no gradient) on WebGPU, kernels/webgpu-linear.ts linearDecodeWebGpu:
   * the norm in the matmul's prologue and a LoRA pair's up-projection in its epilogue (1 dispatch, 2 with a pair:
   * its down-projection, itself on the normalised rows); otherwise layerNorm and conv1d (model/ops.ts).
   */
  private normLinear(
    x: tf.Tensor2D,
    i: number,
    norm: 'ln_1' | 'ln_2' | null,
    module: string,
    epilogue: Conv1dEpilogue,
    decode: boolean,
  ): tf.Tensor2D {
    const eps = this.config.layer_norm_epsilon;
    const key = `h.${i}.${module}`;
    const g = norm ? this.p(`h.${i}.${norm}.weight`) : null;
    const b = norm ? this.p(`h.${i}.${norm}.bias`) : null;
    if (decode) {
      const w = this.p(`${key}.weight`) as tf.Tensor as tf.Tensor2D;
      const bias = this.p(`${key}.bias`) as tf.Tensor as tf.Tensor1D;
      const ln = g && b ? { g: g as tf.Tensor as tf.Tensor1D, b: b as tf.Tensor as tf.Tensor1D, eps } : null;
      const lora = this.lora?.lowRank(key) ?? null;
      if (webGpuLinearDecodeApplies(x, w, bias, { ln, lora, residual: epilogue.residual }))
        return linearDecodeWebGpu(x, w, bias, {
          ln,
          lora,
          gelu: epilogue.activation === 'gelu_new',
          residual: epilogue.residual,
        });
    }
    const h = g && b ? (layerNorm(x, g, b, eps) as tf.Tensor2D) : x;
    return this.linear(h, i, module, epilogue);
  }

  private finalNorm(x: tf.Tensor2D): tf.Tensor2D {
    return layerNorm(
      x,
      this.p('ln_f.weight'),
      this.p('ln_f.bias'),
      this.config.layer_norm_epsilon,
    ) as tf.Tensor2D;
  }

  // ---- forward -----------------------------------------------------------------------------------

  /**
   * The trunk over a [B, T] batch: hidden states after ln_f, [B·T, C] (row b·T + t).
   * mask [B, T] (1 = real token, 0 = padding); positions = cumsum(mask) − 1 (left padding works).
   * With `collectKV`, each layer's keys/values [B, nh, T, hs] are pushed into it (for the KV cache). With
   * `opts.share` the blocks run over the compact rows and the attention over the full layout
   * (model/shared-prefix.ts): the result is [N', C].
   */
  trunk(ids: tf.Tensor2D, mask: tf.Tensor2D, collectKV?: LayerKV[], opts: TrunkOptions = {}): tf.Tensor2D {
    const T = ids.shape[1];
    const c = this.config;
    if (T > c.n_positions) {
      throw new UserError(
        `sequence of ${T} tokens is longer than the model's n_positions (${c.n_positions}).`,
      );
    }
    const share = opts.share;
    if (share && collectKV) throw new Error('GPT2.trunk: a shared prefix does not fill a KV cache.');
    const maskF = tf.cast(mask, 'float32');
    const positions = tf.cast(tf.maximum(tf.sub(tf.cumsum(maskF, 1), 1), 0), 'int32');
    // Causal and key-padding mask as one additive bias [B, 1, T, T].
    // Built on first use only: the fused WebGPU attention makes the mask in its kernel.
    // Without a backward to feed (scoring, a reward model, generation's prefill), each block runs in its own tidy:
    // only its output (and, filling a KV cache, its keys and values) outlives it, so a forward holds one block's
    // activations, not every block's.
    const perBlockTidy = !recordingGradients();
    let built: tf.Tensor4D | null = null;
    const bias = () =>
      (built ??= perBlockTidy
        ? tf.keep(causalPaddingBias(maskF as tf.Tensor2D))
        : causalPaddingBias(maskF as tf.Tensor2D));

    let x = share
      ? this.embed(
          compactInput(tf.reshape(ids, [-1]), share),
          compactInput(tf.reshape(positions, [-1]), share),
        )
      : this.embed(ids, positions);
    if (perBlockTidy) {
      try {
        for (let i = 0; i < c.n_layer; i++) {
          const input = x;
          const [y, k, v] = tf.tidy(() => {
            const kv: LayerKV[] = [];
            const out = this.block(input, i, (qkv) =>
              attendFull(share, [qkv], (qkv) =>
                causalSelfAttention(qkv, maskF as tf.Tensor2D, bias, c.n_head, collectKV && kv),
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
      return this.finalNorm(x);
    }
    for (let i = 0; i < c.n_layer; i++) {
      if (opts.recompute && !collectKV) {
        // Activation recomputation (model/recompute.ts): the block keeps only its input for the backward and
        // runs again inside it. The block builds its own mask bias from the (saved) mask each time it runs.
        // (and the share's index maps, saved with the mask).
        const blockFn = (xi: tf.Tensor, m: tf.Tensor, ...maps: tf.Tensor[]) => {
          let own: tf.Tensor4D | null = null;
          const ownBias = () => (own ??= causalPaddingBias(m as tf.Tensor2D));
          const sh = maps.length ? shareOfMaps(maps) : undefined;
          return this.block(xi as tf.Tensor2D, i, (qkv) =>
            attendFull(sh, [qkv], (qkv) => causalSelfAttention(qkv, m as tf.Tensor2D, ownBias, c.n_head)),
          );
        };
        const context = [maskF, ...(share ? shareMaps(share) : [])];
        x = recomputed(blockFn, x, context, this.blockVariables(i)) as tf.Tensor2D;
        continue;
      }
      x = this.block(x, i, (qkv) =>
        attendFull(share, [qkv], (qkv) =>
          causalSelfAttention(qkv, maskF as tf.Tensor2D, bias, c.n_head, collectKV),
        ),
      );
    }
    return this.finalNorm(x);
  }

  /**
   * Tied LM head: hidden [N, C] → logits [N, V]. Chunked wte: each chunk's logits [N, rows_k], concatenated
   * along the vocabulary (the same dot products as one matmul).
   */
  lmHead(hidden: tf.Tensor2D): tf.Tensor2D {
    return headChunked(this.wte, hidden);
  }

  /**
   * The tied LM head's weight as the blocks it is held in, [rows, C] each in vocabulary order (wte, in chunks under
   * a binding limit): what the vocabulary-chunked log-prob (ppo/chunked-logprob.ts) multiplies by.
   */
  lmHeadBlocks(): tf.Tensor2D[] {
    return this.wte as tf.Tensor[] as tf.Tensor2D[];
  }

  /** Full forward: logits [B, T, V]. */
  logits(ids: tf.Tensor2D, mask: tf.Tensor2D): tf.Tensor3D {
    const [B, T] = ids.shape;
    return tf.reshape(this.lmHead(this.trunk(ids, mask)), [B, T, this.config.vocab_size]);
  }

  /**
   * One decode step over a preallocated cache. ids/positions [B] int32; slot = the cache index this token
   * is written to; keyMask [B, S] must already include the slot. Caches keep their shape [B, nh, S, hs]:
   * the new key/value is added into the (zero) slot, so every step has the same shapes (no reallocation,
   * no shader recompilation, and WebGPU's size-keyed buffer pool reuses the released buffers).
   * Returns the hidden state [B, C] and the new caches (the caller disposes the old ones, and reads them no more:
   * on WebGPU the slots are written into them in place where they hold their data alone, the new caches sharing it).
   * Each layer's attention is `decodeAttention`: on WebGPU 1 fused dispatch (the attention, writing both slots in
   * place); ln_1 and ln_2 run in the prologue of c_attn's and c_fc's matmuls and a LoRA pair's up-projection in
   * each Conv1D's epilogue (normLinear), so a layer is 5 dispatches on WebGPU, 9 under LoRA on all four Conv1Ds
   * (tests/decode-dispatches.test.ts).
   */
  decodeStep(
    ids: tf.Tensor1D,
    positions: tf.Tensor1D,
    slotOneHot: tf.Tensor,
    keyMask: tf.Tensor2D,
    cache: LayerKV[],
  ): { hidden: tf.Tensor2D; cache: LayerKV[] } {
    const c = this.config;
    // The key mask's additive bias, for the plain attention only (made on first use; the fused kernel reads keyMask).
    let built: tf.Tensor | null = null;
    const bias = () => (built ??= keyPaddingBias(keyMask));
    let x = this.embed(ids, positions); // [B, C]
    const next: LayerKV[] = [];
    for (let i = 0; i < c.n_layer; i++) {
      x = this.block(
        x,
        i,
        (qkv) => {
          const out = decodeAttention(qkv, slotOneHot, keyMask, cache[i], c.n_head, bias, { inPlace: true });
          next.push(out.kv);
          return out.y;
        },
        true,
      );
    }
    return { hidden: this.finalNorm(x), cache: next };
  }
}
