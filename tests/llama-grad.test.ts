/**
 * The Llama-family model's gradients (src/core/model/llama.ts: RMSNorm, rotary embedding, grouped-query attention with
 * repeated KV heads, SwiGLU, biases, q/k norms, tied and untied heads) against central finite differences of its own
 * forward, which tests/parity-llama.test.ts checks against transformers. For the largest-gradient entries of weights
 * in every part of a block: |autodiff − numeric| ≤ 2e-3 relative (float32 differences with a step of 2e-3).
 */
import { beforeAll, describe, expect, it } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { useCpu } from './helpers/backend';
import { loadLM } from '../src/core/model/folder';
import { nodeFiles } from '../src/cli/files-node';

const NAMES = [
  'embed_tokens.weight',
  'layers.0.input_layernorm.weight',
  'layers.0.self_attn.q_proj.weight',
  'layers.0.self_attn.k_proj.weight',
  'layers.0.self_attn.v_proj.weight',
  'layers.0.self_attn.o_proj.weight',
  'layers.0.self_attn.q_proj.bias',
  'layers.1.self_attn.k_proj.bias',
  'layers.0.self_attn.q_norm.weight',
  'layers.1.self_attn.k_norm.weight',
  'layers.1.post_attention_layernorm.weight',
  'layers.1.mlp.gate_proj.weight',
  'layers.1.mlp.up_proj.weight',
  'layers.1.mlp.down_proj.weight',
  'norm.weight',
  'lm_head.weight',
];

beforeAll(useCpu);

describe.each(['llama-tiny', 'qwen2-tiny', 'qwen3-tiny'])('%s gradients', (name) => {
  it('equal central finite differences on the largest entries of each weight', async () => {
    const { model } = await loadLM(nodeFiles(`tests/fixtures/parity-llama/${name}`));
    const ids = tf.tensor2d(
      [
        [510, 12, 300, 7, 99, 45, 2, 33],
        [509, 509, 7, 8, 9, 10, 11, 12],
      ],
      undefined,
      'int32',
    );
    const mask = tf.tensor2d(
      [
        [1, 1, 1, 1, 1, 1, 1, 1],
        [0, 0, 1, 1, 1, 1, 1, 1],
      ],
      undefined,
      'int32',
    );
    // Padded positions carry no loss, as in training: a query with every key masked attends uniformly whatever
    // its scores (the forward is flat there, autodiff's softmax gradient is not), for every family alike.
    const w = tf.tidy(() =>
      tf.mul(
        tf.randomNormal([2, 8, 512], 0, 1, 'float32', 3),
        tf.reshape(tf.cast(mask, 'float32'), [2, 8, 1]),
      ),
    );
    const loss = () => tf.sum(tf.mul(model.logits(ids, mask as tf.Tensor2D), w)) as tf.Scalar;
    const vars = NAMES.map((n) => model.params.get(n)).filter((v): v is tf.Variable => v !== undefined);
    expect(vars.length).toBeGreaterThanOrEqual(12);
    const { value, grads } = tf.variableGrads(loss, vars);
    value.dispose();
    let worst = 0;
    for (const v of vars) {
      const g = (await grads[v.name].data()) as Float32Array;
      const vals = (await v.data()) as Float32Array;
      const top = [...g.keys()].sort((a, b) => Math.abs(g[b]) - Math.abs(g[a])).slice(0, 2);
      for (const i of top) {
        const at = async (x: number) => {
          const c = vals.slice();
          c[i] = x;
          tf.tidy(() => v.assign(tf.tensor(c, v.shape)));
          const l = tf.tidy(loss);
          const r = (await l.data())[0];
          l.dispose();
          return r;
        };
        const eps = 2e-3;
        const numeric = ((await at(vals[i] + eps)) - (await at(vals[i] - eps))) / (2 * eps);
        await at(vals[i]);
        const rel = Math.abs(g[i] - numeric) / Math.max(1, Math.abs(numeric));
        worst = Math.max(worst, rel);
        expect(rel, `${v.name} [${i}]: autodiff ${g[i]}, numeric ${numeric}`).toBeLessThanOrEqual(2e-3);
      }
    }
    tf.dispose([ids, mask, w, ...Object.values(grads)]);
    model.dispose();
    console.log(`${name}: worst relative gradient error ${worst.toExponential(2)}`);
  });
});
