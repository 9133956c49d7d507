/**
 * SwiGLU's WASM kernels (src/core/kernels/swiglu.wat through kernels/wasm-activations.ts, used by model/ops.ts
 * swiglu) against what they stand in for on the same backend: swigluPlain's value, and autodiff's gradients of it
 * (tfjs's own Multiply and Sigmoid gradients), bit for bit, at sizes with and without a leftover past 4 lanes, over
 * magnitudes from 1e-4 to 1e4 and signed zeros; and a Qwen2 model's every parameter gradient the same with and
 * without them. The committed bytes are checked against the .wat with the other kernels' in tests/wasm-bmm.test.ts.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { setNodeBackend } from '../src/cli/backend-node';
import {
  activationStats,
  registerWasmActivations,
  SWIGLU_BWD_KERNEL,
  SWIGLU_FWD_KERNEL,
  wasmSwigluApplies,
} from '../src/core/kernels/wasm-activations';
import { swiglu, swigluPlain } from '../src/core/model/ops';
import { Llama } from '../src/core/model/llama';
import { normals, tinyQwen2 } from './helpers/f16-base';

/** Elements whose bits differ (NaN equals NaN). */
function differing(a: Float32Array, b: Float32Array): number {
  expect(a.length).toBe(b.length);
  const ua = new Uint32Array(a.buffer, a.byteOffset, a.length);
  const ub = new Uint32Array(b.buffer, b.byteOffset, b.length);
  let n = 0;
  for (let i = 0; i < a.length; i++) if (ua[i] !== ub[i] && !(Number.isNaN(a[i]) && Number.isNaN(b[i]))) n++;
  return n;
}

/** Values over many magnitudes and both signs, with exact zeros. */
function values(n: number, seed: number): Float32Array {
  const v = normals(n, seed, 1);
  const scale = normals(n, seed + 1, 1);
  for (let i = 0; i < n; i++) v[i] *= Math.pow(10, Math.round(scale[i] * 2));
  if (n > 2) {
    v[0] = 0;
    v[1] = -0;
  }
  return v;
}

const withoutKernels = <T>(f: () => T): T => {
  const k = [tf.getKernel(SWIGLU_FWD_KERNEL, 'wasm')!, tf.getKernel(SWIGLU_BWD_KERNEL, 'wasm')!];
  tf.unregisterKernel(SWIGLU_FWD_KERNEL, 'wasm');
  tf.unregisterKernel(SWIGLU_BWD_KERNEL, 'wasm');
  try {
    return f();
  } finally {
    for (const c of k) tf.registerKernel(c);
  }
};

describe('SwiGLU on WASM: swiglu.wat = swigluPlain and its autodiff, bit for bit', () => {
  beforeAll(async () => {
    await setNodeBackend('wasm');
    registerWasmActivations();
  });

  for (const shape of [[1], [3], [4], [7, 5], [64, 4864], [16, 3, 641]]) {
    it(`[${shape}]: the value and both gradients`, () => {
      const n = shape.reduce((a, b) => a * b, 1);
      const g = tf.tensor(values(n, n), shape);
      const u = tf.tensor(values(n, n + 5), shape);
      const dy = tf.tensor(values(n, n + 9), shape);
      expect(wasmSwigluApplies(g, u)).toBe(true);
      const grads = (fn: (a: tf.Tensor, b: tf.Tensor) => tf.Tensor) =>
        tf.tidy(() => {
          const { value, grads: gr } = tf.valueAndGrads((a: tf.Tensor, b: tf.Tensor) => fn(a, b))([g, u], dy);
          return [value, ...gr];
        });
      activationStats.swigluFwd = 0;
      activationStats.swigluBwd = 0;
      const fused = grads(swiglu);
      expect([activationStats.swigluFwd, activationStats.swigluBwd]).toEqual([1, 1]);
      const plain = grads(swigluPlain);
      expect(fused[0].shape).toEqual(shape);
      for (let i = 0; i < 3; i++)
        expect(
          differing(fused[i].dataSync() as Float32Array, plain[i].dataSync() as Float32Array),
          ['value', 'd gate', 'd up'][i],
        ).toBe(0);
      tf.dispose([g, u, dy, ...fused, ...plain]);
    });
  }

  it('without the kernels registered, swiglu is swigluPlain (and the kernels are not called)', () => {
    const g = tf.tensor2d(values(12, 1), [3, 4]);
    const u = tf.tensor2d(values(12, 2), [3, 4]);
    activationStats.swigluFwd = 0;
    const [a, b] = withoutKernels(() => [swiglu(g, u), swigluPlain(g, u)]);
    expect(activationStats.swigluFwd).toBe(0);
    expect(differing(a.dataSync() as Float32Array, b.dataSync() as Float32Array)).toBe(0);
    tf.dispose([g, u, a, b]);
  });

  it("a Qwen2 model: every parameter's gradient of a weighted sum of its logits is the same with and without them", () => {
    const model = Llama.random(tinyQwen2, 11, true, 'swiglu-qwen2');
    try {
      const ids = tf.tensor2d(
        [
          [1, 5, 9, 13, 17],
          [2, 4, 6, 8, 10],
        ],
        [2, 5],
        'int32',
      );
      const mask = tf.ones([2, 5], 'int32') as tf.Tensor2D;
      const w = tf.tensor(values(2 * 5 * tinyQwen2.vocab_size, 3), [2, 5, tinyQwen2.vocab_size]);
      const vars = [...model.params.values()].filter((v) => v instanceof tf.Variable) as tf.Variable[];
      const run = () => {
        const { value, grads } = tf.variableGrads(() => tf.sum(tf.mul(model.logits(ids, mask), w)), vars);
        return [value, ...vars.map((v) => grads[v.name])];
      };
      activationStats.swigluBwd = 0;
      const fused = run();
      expect(activationStats.swigluBwd).toBe(tinyQwen2.num_hidden_layers);
      const plain = withoutKernels(run);
      expect(activationStats.swigluBwd).toBe(tinyQwen2.num_hidden_layers);
      expect(vars.length).toBeGreaterThan(10);
      fused.forEach((t, i) =>
        expect(
          differing(t.dataSync() as Float32Array, plain[i].dataSync() as Float32Array),
          `tensor ${i}`,
        ).toBe(0),
      );
      tf.dispose([ids, mask, w, ...fused, ...plain]);
    } finally {
      model.dispose();
    }
  });
});
