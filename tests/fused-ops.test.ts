/**
 * The hand-written gradients of layer norm and gelu_new (src/core/model/ops.ts) against autodiff of the plain
 * compositions (layerNormPlain, geluNewPlain) on the CPU backend: values and every gradient, on inputs with a wide
 * range (large |x| where σ saturates, rows with tiny variance), and no tensors left behind in or out of a tape.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { useCpu } from './helpers/backend';
import { maxDiffOf } from './helpers/diff';
import { geluNew, geluNewPlain, layerNorm, layerNormPlain } from '../src/core/model/ops';

describe('hand-written gradients equal autodiff of the plain ops', () => {
  beforeAll(useCpu);

  it('gelu_new: values and dx, x from −12 to 12', async () => {
    const x = tf.tidy(() =>
      tf.concat([tf.linspace(-12, 12, 481), tf.randomNormal([300], 0, 2, 'float32', 5)]),
    );
    const dy = tf.randomNormal(x.shape, 0, 1, 'float32', 6);
    const before = tf.memory().numTensors;
    const [v1, v2] = [tf.tidy(() => geluNew(x)), tf.tidy(() => geluNewPlain(x))];
    const g1 = tf.grad((t: tf.Tensor) => tf.sum(tf.mul(geluNew(t), dy)))(x);
    const g2 = tf.grad((t: tf.Tensor) => tf.sum(tf.mul(geluNewPlain(t), dy)))(x);
    expect((await maxDiffOf(v1, v2)).abs).toBeLessThan(1e-6);
    const d = await maxDiffOf(g1, g2);
    expect(d.abs).toBeLessThan(1e-5 * Math.max(1, d.scale));
    // A point checked by hand: gelu_new'(0) = 0.5.
    const at0 = tf.grad((t: tf.Tensor) => tf.sum(geluNew(t)))(tf.tensor1d([0]));
    expect((await at0.data())[0]).toBeCloseTo(0.5, 6);
    tf.dispose([v1, v2, g1, g2, at0]);
    expect(tf.memory().numTensors).toBe(before + 1); // the tensor1d([0]) literal
    tf.dispose([x, dy]);
  });

  for (const [name, shape, spread] of [
    ['2-D rows', [7, 24], 3],
    ['3-D, tiny variance', [2, 5, 16], 1e-3],
  ] as const) {
    it(`layer norm (${name}): values and dx, dg, db`, async () => {
      const x = tf.tidy(() => tf.add(tf.randomNormal([...shape], 0, spread, 'float32', 1), 4));
      const C = shape[shape.length - 1];
      const g = tf.randomNormal([C], 1, 0.3, 'float32', 2);
      const b = tf.randomNormal([C], 0, 0.3, 'float32', 3);
      const dy = tf.randomNormal([...shape], 0, 1, 'float32', 4);
      const eps = 1e-5;
      const before = tf.memory().numTensors;
      const v1 = tf.tidy(() => layerNorm(x, g, b, eps));
      const v2 = tf.tidy(() => layerNormPlain(x, g, b, eps));
      const d0 = await maxDiffOf(v1, v2);
      expect(d0.abs).toBeLessThan(1e-5 * Math.max(1, d0.scale));
      const grads = (f: typeof layerNorm) =>
        tf.grads((a: tf.Tensor, c: tf.Tensor, e: tf.Tensor) => tf.sum(tf.mul(f(a, c, e, eps), dy)))([
          x,
          g,
          b,
        ]);
      const mine = grads(layerNorm);
      const ref = grads(layerNormPlain);
      for (let i = 0; i < 3; i++) {
        const d = await maxDiffOf(mine[i], ref[i]);
        expect(d.abs, ['dx', 'dg', 'db'][i]).toBeLessThan(2e-5 * Math.max(1, d.scale));
      }
      tf.dispose([v1, v2, ...mine, ...ref]);
      expect(tf.memory().numTensors).toBe(before);
      tf.dispose([x, g, b, dy]);
    });
  }

  it('used outside a gradient tape (inference) they keep nothing alive', () => {
    const x = tf.randomNormal([4, 8]);
    const g = tf.ones([8]);
    const b = tf.zeros([8]);
    const before = tf.memory().numTensors;
    for (let i = 0; i < 3; i++) tf.dispose(tf.tidy(() => tf.add(geluNew(x), layerNorm(x, g, b, 1e-5))));
    tf.dispose(tf.tidy(() => [geluNew(x), layerNorm(x, g, b, 1e-5)]));
    expect(tf.memory().numTensors).toBe(before);
    tf.dispose([x, g, b]);
  });
});
