/**
 * A scalar-head language model (GPT2/Llama/Qwen2/Qwen3ForSequenceClassification with one label): the value and reward models.
 * value = hidden · score.weightᵀ, with `score.weight` [1, n_embd] and no bias, as in Hugging Face.
 * With LoRA (docs/formats.md §6) the value model is `ScalarModel.onSharedBase`: the policy's frozen base with its
 * own adapters and a zero head, so policy, reference and value hold one copy of the base weights.
 */
import * as tf from '@tensorflow/tfjs-core';
import type { LMConfig } from './config';
import type { GPT2Options, TrunkOptions } from './gpt2';
import { lmFromArrays, lmRandom, type CausalLM } from './causal-lm';
import type { WeightData } from './f16-base';
import type { LoraAdapters } from './lora';
import { UserError } from '../../common/errors';
import { gatherRows } from './gather';

export class ScalarModel {
  readonly trunkModel: CausalLM;
  readonly score: tf.Variable; // [1, C]

  constructor(trunkModel: CausalLM, score: tf.Variable) {
    this.trunkModel = trunkModel;
    this.score = score;
  }

  get config(): LMConfig {
    return this.trunkModel.config;
  }

  /** A scalar model on a copy of `trunk`'s weights with a zero head (value init "policy"). */
  static fromTrunk(trunk: CausalLM, trainable: boolean, label = 'value'): ScalarModel {
    const copy = trunk.clone(trainable, label);
    const init = tf.zeros([1, trunk.config.n_embd]);
    const score = tf.variable(init, trainable, `${copy.id}/score.weight`);
    init.dispose();
    return new ScalarModel(copy, score);
  }

  /**
   * A value model over `base`'s weights (shared, never copied) with `adapters` of its own (null: the trunk stays
   * frozen and only the head trains) and a zero-initialised trainable head. Its trainable variables are the
   * adapters' A, B and `score.weight`; dispose() frees those and never the base.
   */
  static onSharedBase(base: CausalLM, adapters: LoraAdapters | null, label = 'value'): ScalarModel {
    const trunk = base.withLora(adapters, label);
    const init = tf.zeros([1, base.config.n_embd]);
    const score = tf.variable(init, true, `${trunk.id}/score.weight`);
    init.dispose();
    return new ScalarModel(trunk, score);
  }

  /** From host arrays; with `opts.baseDtype` "f16" the trunk's large matrices may come packed (folder.ts). */
  static fromArrays(
    config: LMConfig,
    arrays: Map<string, WeightData>,
    trainable: boolean,
    label = 'scalar',
    opts: GPT2Options = {},
  ): ScalarModel {
    return ScalarModel.withHead(
      lmFromArrays(config, arrays, trainable, label, opts),
      arrays.get('score.weight'),
      trainable,
    );
  }

  /**
   * A scalar model of a trunk already made and its head's values (`score.weight`, [1, n_embd]); a missing or
   * mis-sized head disposes the trunk and is refused in words.
   */
  static withHead(trunk: CausalLM, w: WeightData | undefined, trainable: boolean): ScalarModel {
    const n = trunk.config.n_embd;
    if (!(w instanceof Float32Array) || w.length !== n) {
      trunk.dispose();
      throw new UserError(`scalar model: tensor "score.weight" of shape [1, ${n}] is missing or mis-sized.`);
    }
    let score: tf.Variable;
    try {
      score = tf.tidy(() => tf.variable(tf.tensor(w, [1, n]), trainable, `${trunk.id}/score.weight`));
    } catch (e) {
      trunk.dispose();
      throw e;
    }
    return new ScalarModel(trunk, score);
  }

  static random(
    config: LMConfig,
    seed: number,
    trainable = true,
    label = 'scalar',
    opts: GPT2Options = {},
  ): ScalarModel {
    const trunk = lmRandom(config, seed, trainable, label, opts);
    const init = tf.randomNormal([1, config.n_embd], 0, 0.02, 'float32', seed + 7919);
    const score = tf.variable(init, trainable, `${trunk.id}/score.weight`);
    init.dispose();
    return new ScalarModel(trunk, score);
  }

  clone(trainable: boolean, label = 'scalar'): ScalarModel {
    const trunk = this.trunkModel.clone(trainable, label);
    return new ScalarModel(trunk, tf.variable(this.score, trainable, `${trunk.id}/score.weight`));
  }

  trainableVariables(): tf.Variable[] {
    return [...this.trunkModel.trainableVariables(), this.score];
  }

  /** Values at every position: [B, T]. */
  values(ids: tf.Tensor2D, mask: tf.Tensor2D, opts: TrunkOptions = {}): tf.Tensor2D {
    const [B, T] = ids.shape;
    const hidden = this.trunkModel.trunk(ids, mask, undefined, opts); // [B·T, C]
    return tf.reshape(tf.matMul(hidden, this.score, false, true), [B, T]);
  }

  /** Value at the last real token of each row (the last index where mask = 1): [B]. */
  lastTokenValues(ids: tf.Tensor2D, mask: tf.Tensor2D): tf.Tensor1D {
    const T = ids.shape[1];
    const all = this.values(ids, mask);
    const last = lastRealIndex(mask, T);
    return gatherRows(all, last);
  }

  async toArrays(): Promise<Map<string, Float32Array>> {
    const out = await this.trunkModel.toArrays();
    out.set('score.weight', (await this.score.data()) as Float32Array);
    return out;
  }

  dispose(): void {
    this.trunkModel.dispose();
    this.score.dispose();
  }
}

/** Index of the last position with mask = 1 in each row: [B] int32 (0 for an all-zero row). */
export function lastRealIndex(mask: tf.Tensor2D, T: number): tf.Tensor1D {
  return tf.tidy(() => {
    const idx = tf.range(0, T, 1, 'float32');
    return tf.cast(tf.max(tf.mul(tf.cast(mask, 'float32'), idx), 1), 'int32') as tf.Tensor1D;
  });
}
