/**
 * GPT-2 in TensorFlow.js, computing what Hugging Face's GPT2LMHeadModel computes (eval mode, no dropout).
 *
 * Bottom-up like nanoGPT: layer norm → attention → MLP → block → trunk → LM head. Every matmul with
 * weights is 2-D ([N, C] · [C, D]) because broadcast matMul gradients are wrong on tfjs WebGPU (tfjs#8721).
 * Parameters are tf.Variables keyed by Hugging Face's GPT2Model names (without `transformer.`).
 */
import * as tf from '@tensorflow/tfjs-core';
import type { GPT2Config } from './config';
import { trunkParamSpecs, type ParamSpec } from './specs';
import { UserError } from '../errors';

let modelCounter = 0;

/** Large negative bias for masked attention scores (finite, so fully-masked pad rows stay finite). */
const MASKED = -1e9;

/** Layer norm over the last axis, as autodiff composes it (the reference for `layerNorm`'s gradient). */
export function layerNormPlain(x: tf.Tensor, g: tf.Tensor, b: tf.Tensor, eps: number): tf.Tensor {
  const { mean, variance } = tf.moments(x, -1, true);
  return tf.add(tf.mul(tf.mul(tf.sub(x, mean), tf.rsqrt(tf.add(variance, eps))), g), b);
}

const layerNormByEps = new Map<number, (x: tf.Tensor, g: tf.Tensor, b: tf.Tensor) => tf.Tensor>();

/**
 * Layer norm over the last axis with its gradient written out (about half the kernels of autodiff's, which
 * matters where every kernel is a dispatch): with x̂ = (x − μ)·r, r = 1/√(σ² + ε),
 *   dx = r·(dx̂ − mean(dx̂) − x̂·mean(dx̂·x̂)),  dx̂ = dy·g,  dg = Σ_rows dy·x̂,  db = Σ_rows dy.
 * Same values as layerNormPlain; gradients tested against it (tests/fused-ops.test.ts).
 */
export function layerNorm(x: tf.Tensor, g: tf.Tensor, b: tf.Tensor, eps: number): tf.Tensor {
  let f = layerNormByEps.get(eps);
  if (!f) {
    f = tf.customGrad((...args: (tf.Tensor | tf.GradSaveFunc)[]) => {
      const [xi, gi, bi] = args as tf.Tensor[];
      const save = args[3] as tf.GradSaveFunc;
      const { mean, variance } = tf.moments(xi, -1, true);
      const r = tf.rsqrt(tf.add(variance, eps));
      const xhat = tf.mul(tf.sub(xi, mean), r);
      save([xhat, r, gi]);
      return {
        value: tf.add(tf.mul(xhat, gi), bi),
        gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
          const [xh, rs, gs] = saved;
          const C = xh.shape[xh.shape.length - 1];
          const dxhat = tf.mul(dy, gs);
          const dx = tf.mul(rs, tf.sub(tf.sub(dxhat, tf.mean(dxhat, -1, true)), tf.mul(xh, tf.mean(tf.mul(dxhat, xh), -1, true))));
          const dg = tf.sum(tf.reshape(tf.mul(dy, xh), [-1, C]), 0);
          const db = tf.sum(tf.reshape(dy, [-1, C]), 0);
          return [dx, dg, db];
        },
      };
    }) as (x: tf.Tensor, g: tf.Tensor, b: tf.Tensor) => tf.Tensor;
    layerNormByEps.set(eps, f);
  }
  return f(x, g, b);
}

/**
 * gelu_new: 0.5·x·(1 + tanh(√(2/π)(x + 0.044715x³))), computed as the identical x·σ(2·√(2/π)(x + 0.044715x³)).
 * The sigmoid form takes fewer ops than tanh and pow (pow's gradient goes through log; both were hot in the
 * WASM profile), and sidesteps WGSL's tanh returning NaN for large inputs.
 */
export function geluNewPlain(x: tf.Tensor): tf.Tensor {
  const x3 = tf.mul(tf.mul(x, x), x);
  const inner = tf.mul(GELU_K, tf.add(x, tf.mul(0.044715, x3)));
  return tf.mul(x, tf.sigmoid(inner));
}

const GELU_K = 2 * Math.sqrt(2 / Math.PI);

/**
 * geluNewPlain with its gradient written out: y = x·s, s = σ(k(x + 0.044715x³)), so
 *   dy/dx = s + x·s·(1 − s)·k·(1 + 3·0.044715·x²)
 * (9 kernels instead of autodiff's ~15). Tested against geluNewPlain's autodiff (tests/fused-ops.test.ts).
 */
export const geluNew = tf.customGrad((...args: (tf.Tensor | tf.GradSaveFunc)[]) => {
  const x = args[0] as tf.Tensor;
  const save = args[1] as tf.GradSaveFunc;
  const s = tf.sigmoid(tf.mul(GELU_K, tf.add(x, tf.mul(0.044715, tf.mul(tf.mul(x, x), x)))));
  save([x, s]);
  return {
    value: tf.mul(x, s),
    gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
      const [xs, ss] = saved;
      const slope = tf.add(GELU_K, tf.mul(3 * 0.044715 * GELU_K, tf.mul(xs, xs)));
      return tf.mul(dy, tf.add(ss, tf.mul(tf.mul(xs, tf.mul(ss, tf.sub(1, ss))), slope)));
    },
  };
}) as (x: tf.Tensor) => tf.Tensor;

/** Per-layer keys and values, each [B, nh, S, hs]. */
export type LayerKV = {
  k: tf.Tensor4D;
  v: tf.Tensor4D;
};

export class GPT2 {
  readonly config: GPT2Config;
  /** Trunk parameters by HF name (`wte.weight`, `h.0.attn.c_attn.weight`, …). */
  readonly params: Map<string, tf.Variable>;
  readonly specs: ParamSpec[];
  /** Unique prefix of this instance's variable names (tfjs registers variables globally by name). */
  readonly id: string;

  private constructor(config: GPT2Config, params: Map<string, tf.Variable>, id: string) {
    this.config = config;
    this.params = params;
    this.specs = trunkParamSpecs(config);
    this.id = id;
  }

  /** Build from host arrays (e.g. a loaded safetensors file, already name-mapped and shape-checked). */
  static fromArrays(config: GPT2Config, arrays: Map<string, Float32Array>, trainable: boolean, label = 'gpt2'): GPT2 {
    const id = `${label}_${modelCounter++}`;
    const params = new Map<string, tf.Variable>();
    for (const spec of trunkParamSpecs(config)) {
      const data = arrays.get(spec.name);
      if (!data) throw new UserError(`model weights: tensor "${spec.name}" of shape [${spec.shape}] is missing.`);
      const size = spec.shape.reduce((a, b) => a * b, 1);
      if (data.length !== size) {
        throw new UserError(`model weights: tensor "${spec.name}" has ${data.length} values, expected shape [${spec.shape}] (${size}).`);
      }
      const init = tf.tensor(data, spec.shape, 'float32');
      params.set(spec.name, tf.variable(init, trainable, `${id}/${spec.name}`));
      init.dispose(); // the variable holds its own reference to the data
    }
    return new GPT2(config, params, id);
  }

  /** GPT-2's initialisation: N(0, 0.02), residual projections scaled by 1/√(2·n_layer), LN (1, 0). */
  static random(config: GPT2Config, seed: number, trainable = true, label = 'gpt2'): GPT2 {
    const id = `${label}_${modelCounter++}`;
    const params = new Map<string, tf.Variable>();
    let s = seed;
    for (const spec of trunkParamSpecs(config)) {
      const name = spec.name;
      const init = tf.tidy(() => {
        if (name.includes('ln_') && name.endsWith('.weight')) return tf.ones(spec.shape);
        if (name.endsWith('.bias')) return tf.zeros(spec.shape);
        const std = name.endsWith('c_proj.weight') ? 0.02 / Math.sqrt(2 * config.n_layer) : 0.02;
        return tf.randomNormal(spec.shape, 0, std, 'float32', s++);
      });
      params.set(name, tf.variable(init, trainable, `${id}/${name}`));
      init.dispose();
    }
    return new GPT2(config, params, id);
  }

  /** A new model with copies of this one's weights (e.g. the frozen reference). */
  clone(trainable: boolean, label = 'gpt2'): GPT2 {
    const id = `${label}_${modelCounter++}`;
    const params = new Map<string, tf.Variable>();
    for (const [name, v] of this.params) params.set(name, tf.variable(v, trainable, `${id}/${name}`));
    return new GPT2(this.config, params, id);
  }

  p(name: string): tf.Variable {
    const v = this.params.get(name);
    if (!v) throw new Error(`GPT2: no parameter ${name}`);
    return v;
  }

  trainableVariables(): tf.Variable[] {
    return [...this.params.values()];
  }

  async toArrays(): Promise<Map<string, Float32Array>> {
    const out = new Map<string, Float32Array>();
    for (const [name, v] of this.params) out.set(name, (await v.data()) as Float32Array);
    return out;
  }

  dispose(): void {
    for (const v of this.params.values()) v.dispose();
    this.params.clear();
  }

  // ---- building blocks ---------------------------------------------------------------------------

  /** x [N, C_in] · W [C_in, C_out] + b. */
  private linear(x: tf.Tensor2D, w: string, b: string): tf.Tensor2D {
    return tf.add(tf.matMul(x, this.p(w)), this.p(b)) as tf.Tensor2D;
  }

  private mlp(x: tf.Tensor2D, i: number): tf.Tensor2D {
    const h = geluNew(this.linear(x, `h.${i}.mlp.c_fc.weight`, `h.${i}.mlp.c_fc.bias`)) as tf.Tensor2D;
    return this.linear(h, `h.${i}.mlp.c_proj.weight`, `h.${i}.mlp.c_proj.bias`);
  }

  /** [B·T, C] → [B, nh, T, hs] */
  private splitHeads(x: tf.Tensor2D, B: number, T: number): tf.Tensor4D {
    const nh = this.config.n_head;
    const hs = this.config.n_embd / nh;
    return tf.transpose(tf.reshape(x, [B, T, nh, hs]), [0, 2, 1, 3]);
  }

  /**
   * Attention of queries over keys/values with an additive bias.
   * q [B, nh, Tq, hs], k/v [B, nh, Tk, hs], bias broadcastable to [B, 1, Tq, Tk] → [B·Tq, C].
   */
  private attend(q: tf.Tensor4D, k: tf.Tensor4D, v: tf.Tensor4D, bias: tf.Tensor): tf.Tensor2D {
    const [B, nh, Tq, hs] = q.shape;
    const Tk = k.shape[2];
    const q3 = tf.reshape(q, [B * nh, Tq, hs]);
    const k3 = tf.reshape(k, [B * nh, Tk, hs]);
    const v3 = tf.reshape(v, [B * nh, Tk, hs]);
    const scores = tf.mul(tf.matMul(q3, k3, false, true), 1 / Math.sqrt(hs)); // [B·nh, Tq, Tk]
    const masked = tf.add(tf.reshape(scores, [B, nh, Tq, Tk]), bias);
    const att = tf.softmax(masked, -1);
    const y = tf.matMul(tf.reshape(att, [B * nh, Tq, Tk]), v3); // [B·nh, Tq, hs]
    return tf.reshape(tf.transpose(tf.reshape(y, [B, nh, Tq, hs]), [0, 2, 1, 3]), [B * Tq, nh * hs]);
  }

  private embed(ids: tf.Tensor, positions: tf.Tensor): tf.Tensor2D {
    const flatIds = tf.reshape(ids, [-1]);
    const flatPos = tf.reshape(positions, [-1]);
    return tf.add(tf.gather(this.p('wte.weight'), flatIds), tf.gather(this.p('wpe.weight'), flatPos)) as tf.Tensor2D;
  }

  // ---- forward -----------------------------------------------------------------------------------

  /**
   * The trunk over a [B, T] batch: hidden states after ln_f, [B·T, C] (row b·T + t).
   * mask [B, T] (1 = real token, 0 = padding); positions = cumsum(mask) − 1 (left padding works).
   * With `collectKV`, each layer's keys/values [B, nh, T, hs] are pushed into it (for the KV cache).
   */
  trunk(ids: tf.Tensor2D, mask: tf.Tensor2D, collectKV?: LayerKV[]): tf.Tensor2D {
    const [B, T] = ids.shape;
    const c = this.config;
    if (T > c.n_positions) {
      throw new UserError(`sequence of ${T} tokens is longer than the model's n_positions (${c.n_positions}).`);
    }
    const maskF = tf.cast(mask, 'float32');
    const positions = tf.cast(tf.maximum(tf.sub(tf.cumsum(maskF, 1), 1), 0), 'int32');
    // Causal and key-padding mask as one additive bias [B, 1, T, T].
    const causal = tf.linalg.bandPart(tf.ones([T, T]), -1, 0); // lower triangle incl. diagonal
    const allowed = tf.mul(tf.reshape(causal, [1, 1, T, T]), tf.reshape(maskF, [B, 1, 1, T]));
    const bias = tf.mul(tf.sub(1, allowed), MASKED);

    let x = this.embed(ids, positions);
    for (let i = 0; i < c.n_layer; i++) {
      const h = layerNorm(x, this.p(`h.${i}.ln_1.weight`), this.p(`h.${i}.ln_1.bias`), c.layer_norm_epsilon) as tf.Tensor2D;
      const qkv = this.linear(h, `h.${i}.attn.c_attn.weight`, `h.${i}.attn.c_attn.bias`); // [B·T, 3C]
      const [q, k, v] = tf.split(qkv, 3, 1) as tf.Tensor2D[];
      const q4 = this.splitHeads(q, B, T);
      const k4 = this.splitHeads(k, B, T);
      const v4 = this.splitHeads(v, B, T);
      if (collectKV) collectKV.push({ k: k4, v: v4 });
      const y = this.attend(q4, k4, v4, bias);
      x = tf.add(x, this.linear(y, `h.${i}.attn.c_proj.weight`, `h.${i}.attn.c_proj.bias`));
      const h2 = layerNorm(x, this.p(`h.${i}.ln_2.weight`), this.p(`h.${i}.ln_2.bias`), c.layer_norm_epsilon) as tf.Tensor2D;
      x = tf.add(x, this.mlp(h2, i));
    }
    return layerNorm(x, this.p('ln_f.weight'), this.p('ln_f.bias'), c.layer_norm_epsilon) as tf.Tensor2D;
  }

  /** Tied LM head: hidden [N, C] → logits [N, V]. */
  lmHead(hidden: tf.Tensor2D): tf.Tensor2D {
    return tf.matMul(hidden, this.p('wte.weight'), false, true);
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
   * Returns the hidden state [B, C] and the new caches (the caller disposes the old ones).
   */
  decodeStep(
    ids: tf.Tensor1D,
    positions: tf.Tensor1D,
    slotOneHot: tf.Tensor,
    keyMask: tf.Tensor2D,
    cache: LayerKV[],
  ): { hidden: tf.Tensor2D; cache: LayerKV[] } {
    const c = this.config;
    const B = ids.shape[0];
    const S = keyMask.shape[1];
    const oh = tf.reshape(slotOneHot, [1, 1, S, 1]);
    const bias = tf.reshape(tf.mul(tf.sub(1, keyMask), MASKED), [B, 1, 1, S]);
    let x = this.embed(ids, positions); // [B, C]
    const next: LayerKV[] = [];
    for (let i = 0; i < c.n_layer; i++) {
      const h = layerNorm(x, this.p(`h.${i}.ln_1.weight`), this.p(`h.${i}.ln_1.bias`), c.layer_norm_epsilon) as tf.Tensor2D;
      const qkv = this.linear(h, `h.${i}.attn.c_attn.weight`, `h.${i}.attn.c_attn.bias`); // [B, 3C]
      const [q, k, v] = tf.split(qkv, 3, 1) as tf.Tensor2D[];
      const k4 = tf.add(cache[i].k, tf.mul(this.splitHeads(k, B, 1), oh)) as tf.Tensor4D; // write slot
      const v4 = tf.add(cache[i].v, tf.mul(this.splitHeads(v, B, 1), oh)) as tf.Tensor4D;
      next.push({ k: k4, v: v4 });
      const y = this.attend(this.splitHeads(q, B, 1), k4, v4, bias);
      x = tf.add(x, this.linear(y, `h.${i}.attn.c_proj.weight`, `h.${i}.attn.c_proj.bias`));
      const h2 = layerNorm(x, this.p(`h.${i}.ln_2.weight`), this.p(`h.${i}.ln_2.bias`), c.layer_norm_epsilon) as tf.Tensor2D;
      x = tf.add(x, this.mlp(h2, i));
    }
    const hidden = layerNorm(x, this.p('ln_f.weight'), this.p('ln_f.bias'), c.layer_norm_epsilon) as tf.Tensor2D;
    return { hidden, cache: next };
  }
}
