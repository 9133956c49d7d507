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
import { tinyQwen2 } from './helpers/f16-base';
import { bitsDiffering, expectSameBits, spreadValues, withoutWasmKernels } from './helpers/wasm-kernels';

const KERNELS = [SWIGLU_FWD_KERNEL, SWIGLU_BWD_KERNEL];

describe('SwiGLU on WASM: swiglu.wat = swigluPlain and its autodiff, bit for bit', () => {
  beforeAll(async () => {
    await setNodeBackend('wasm');
    registerWasmActivations();
  });

  for (const shape of [[1], [3], [4], [7, 5], [64, 4864], [16, 3, 641]]) {
    it(`[${shape}]: the value and both gradients`, () => {
      const n = shape.reduce((a, b) => a * b, 1);
      const g = tf.tensor(spreadValues(n, n), shape);
      const u = tf.tensor(spreadValues(n, n + 5), shape);
      const dy = tf.tensor(spreadValues(n, n + 9), shape);
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
          bitsDiffering(fused[i].dataSync() as Float32Array, plain[i].dataSync() as Float32Array),
          ['value', 'd gate', 'd up'][i],
        ).toBe(0);
      tf.dispose([g, u, dy, ...fused, ...plain]);
    });
  }

  it('without the kernels registered, swiglu is swigluPlain (and the kernels are not called)', () => {
    const g = tf.tensor2d(spreadValues(12, 1), [3, 4]);
    const u = tf.tensor2d(spreadValues(12, 2), [3, 4]);
    activationStats.swigluFwd = 0;
    const [a, b] = withoutWasmKernels(KERNELS, () => [swiglu(g, u), swigluPlain(g, u)]);
    expect(activationStats.swigluFwd).toBe(0);
    expect(bitsDiffering(a.dataSync() as Float32Array, b.dataSync() as Float32Array)).toBe(0);
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
      const w = tf.tensor(spreadValues(2 * 5 * tinyQwen2.vocab_size, 3), [2, 5, tinyQwen2.vocab_size]);
      const vars = [...model.params.values()].filter((v) => v instanceof tf.Variable) as tf.Variable[];
      const run = () => {
        const { value, grads } = tf.variableGrads(() => tf.sum(tf.mul(model.logits(ids, mask), w)), vars);
        return [value, ...vars.map((v) => grads[v.name])];
      };
      activationStats.swigluBwd = 0;
      const fused = run();
      expect(activationStats.swigluBwd).toBe(tinyQwen2.num_hidden_layers);
      const plain = withoutWasmKernels(KERNELS, run);
      expect(activationStats.swigluBwd).toBe(tinyQwen2.num_hidden_layers);
      expect(vars.length).toBeGreaterThan(10);
      expectSameBits(fused, plain);
      tf.dispose([ids, mask, w, ...fused, ...plain]);
    } finally {
      model.dispose();
    }
  });
});
