/**
 * gelu_new's WASM kernels (src/core/kernels/gelu.wat through kernels/wasm-activations.ts) against the tfjs ops they stand
 * in for, on the same backend: the sigmoid's argument and the gradient bit for bit, at sizes with and without a
 * leftover past a multiple of 4, over values from tiny to large (and zeros, signed), and geluNew's value and
 * gradient with the kernels equal to geluNew's without them. The committed bytes are checked against the .wat with
 * the other kernels' in tests/wasm-bmm.test.ts.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { setNodeBackend } from '../src/cli/backend-node';
import { GELU_K } from '../src/core/kernels/definitions';
import {
  GELU_GRAD_KERNEL,
  GELU_INNER_KERNEL,
  activationStats,
  registerWasmActivations,
  wasmGeluApplies,
} from '../src/core/kernels/wasm-activations';
import { geluNew } from '../src/core/model/ops';
import { bitsDiffering, spreadValues, withoutWasmKernels } from './helpers/wasm-kernels';

const KERNELS = [GELU_INNER_KERNEL, GELU_GRAD_KERNEL];

describe('gelu_new on WASM: gelu.wat = the tfjs ops, bit for bit', () => {
  beforeAll(async () => {
    await setNodeBackend('wasm');
    registerWasmActivations();
  });

  for (const shape of [[1], [3], [4], [7, 5], [448, 640], [16, 3, 641]]) {
    it(`[${shape}]: the sigmoid's argument and the gradient`, () => {
      const n = shape.reduce((a, b) => a * b, 1);
      const x = tf.tensor(spreadValues(n, n), shape);
      const s = tf.sigmoid(tf.tensor(spreadValues(n, n + 7), shape));
      const dy = tf.tensor(spreadValues(n, n + 9), shape);
      expect(wasmGeluApplies(x)).toBe(true);
      const inner = tf.engine().runKernel(GELU_INNER_KERNEL, { x }, {}) as tf.Tensor;
      const grad = tf.engine().runKernel(GELU_GRAD_KERNEL, { dy, x, s }, {}) as tf.Tensor;
      const ops = tf.tidy(() => [
        tf.mul(GELU_K, tf.add(x, tf.mul(0.044715, tf.mul(tf.mul(x, x), x)))),
        tf.mul(
          dy,
          tf.add(
            s,
            tf.mul(
              tf.mul(x, tf.mul(s, tf.sub(1, s))),
              tf.add(GELU_K, tf.mul(3 * 0.044715 * GELU_K, tf.mul(x, x))),
            ),
          ),
        ),
      ]);
      expect(inner.shape).toEqual(shape);
      expect(bitsDiffering(inner.dataSync() as Float32Array, ops[0].dataSync() as Float32Array)).toBe(0);
      expect(bitsDiffering(grad.dataSync() as Float32Array, ops[1].dataSync() as Float32Array)).toBe(0);
      tf.dispose([x, s, dy, inner, grad, ...ops]);
    });
  }

  it("geluNew's value and gradient with the kernels = without them; the kernels ran once each", () => {
    const x = tf.tensor2d(spreadValues(33 * 21, 3), [33, 21]);
    const dy = tf.tensor2d(spreadValues(33 * 21, 4), [33, 21]);
    const run = () =>
      tf.tidy(() => {
        const { value, grads } = tf.valueAndGrads((t: tf.Tensor) => geluNew(t))([x], dy);
        return [value, grads[0]];
      });
    activationStats.geluInner = 0;
    activationStats.geluGrad = 0;
    const [v1, g1] = run();
    expect([activationStats.geluInner, activationStats.geluGrad]).toEqual([1, 1]);
    const [v0, g0] = withoutWasmKernels(KERNELS, run);
    expect([activationStats.geluInner, activationStats.geluGrad]).toEqual([1, 1]);
    expect(bitsDiffering(v1.dataSync() as Float32Array, v0.dataSync() as Float32Array)).toBe(0);
    expect(bitsDiffering(g1.dataSync() as Float32Array, g0.dataSync() as Float32Array)).toBe(0);
    tf.dispose([x, dy, v1, g1, v0, g0]);
  });
});
