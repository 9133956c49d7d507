/**
 * Layer norm's WASM kernels (src/core/kernels/layernorm.wat through kernels/wasm-activations.ts, used by
 * model/ops.ts layerNorm) against the tfjs ops layerNorm runs without them, on the same backend: the value and the
 * gradients of x, g and b bit for bit, at row widths with and without a leftover past 4 lanes, ranks 2 and 3, two
 * epsilons, rows of very different scales; and every parameter gradient of a GPT-2 model (layer norms and
 * gelu_new) the same with all the WASM kernels as without them. The committed bytes are checked against the .wat
 * with the other kernels' in tests/wasm-bmm.test.ts.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { setNodeBackend } from '../src/cli/backend-node';
import {
  activationStats,
  GELU_GRAD_KERNEL,
  GELU_INNER_KERNEL,
  LAYERNORM_BWD_KERNEL,
  LAYERNORM_FWD_KERNEL,
  registerWasmActivations,
} from '../src/core/kernels/wasm-activations';
import { layerNorm } from '../src/core/model/ops';
import { GPT2 } from '../src/core/model/gpt2';
import { parseGPT2Config } from '../src/core/model/config';
import { normals } from './helpers/f16-base';
import { expectSameBits, withoutWasmKernels } from './helpers/wasm-kernels';

/** Rows of different scales (1e-3 to 1e3) and offsets, as activations come. */
function rows(R: number, C: number, seed: number): Float32Array {
  const v = normals(R * C, seed, 1);
  const s = normals(R, seed + 1, 1);
  for (let r = 0; r < R; r++)
    for (let j = 0; j < C; j++) v[r * C + j] = v[r * C + j] * Math.pow(10, Math.round(s[r] * 1.5)) + s[r];
  return v;
}

describe('layer norm on WASM: layernorm.wat = the tfjs ops, bit for bit', () => {
  beforeAll(async () => {
    await setNodeBackend('wasm');
    registerWasmActivations();
  });

  const cases: [number[], number][] = [
    [[448, 160], 1e-5],
    [[3, 5, 7], 1e-5],
    [[1, 768], 1e-5],
    [[13, 4], 1e-6],
    [[9, 1], 1e-5],
  ];
  for (const [shape, eps] of cases) {
    it(`[${shape}], eps ${eps}: the value and the gradients of x, g and b`, () => {
      const C = shape[shape.length - 1];
      const R = shape.reduce((a, b) => a * b, 1) / C;
      const x = tf.tensor(rows(R, C, R + C), shape);
      const g = tf.tensor1d(normals(C, 5, 1));
      const b = tf.tensor1d(normals(C, 6, 1));
      const dy = tf.tensor(rows(R, C, 7), shape);
      const run = () =>
        tf.tidy(() => {
          const f = tf.valueAndGrads((a: tf.Tensor, c: tf.Tensor, d: tf.Tensor) => layerNorm(a, c, d, eps));
          const { value, grads } = f([x, g, b], dy);
          return [value, ...grads];
        });
      activationStats.layerNormFwd = 0;
      activationStats.layerNormBwd = 0;
      const fused = run();
      expect([activationStats.layerNormFwd, activationStats.layerNormBwd]).toEqual([1, 1]);
      const plain = withoutWasmKernels([LAYERNORM_FWD_KERNEL, LAYERNORM_BWD_KERNEL], run);
      expect([activationStats.layerNormFwd, activationStats.layerNormBwd]).toEqual([1, 1]);
      expect(fused.map((t) => t.shape)).toEqual(plain.map((t) => t.shape));
      expectSameBits(fused, plain, ['y', 'dx', 'dg', 'db']);
      tf.dispose([x, g, b, dy, ...fused, ...plain]);
    });
  }

  it('a GPT-2 model: every parameter gradient the same with the WASM kernels as without them', () => {
    const config = parseGPT2Config({
      vocab_size: 97,
      n_positions: 16,
      n_embd: 24,
      n_layer: 2,
      n_head: 3,
      tokenizer: 'gpt2-bpe',
    });
    const model = GPT2.random(config, 12, true, 'ln-gpt2');
    try {
      const ids = tf.tensor2d(
        [
          [1, 5, 9, 13, 17, 3],
          [2, 4, 6, 8, 10, 12],
        ],
        [2, 6],
        'int32',
      );
      const mask = tf.tensor2d(
        [
          [0, 1, 1, 1, 1, 1],
          [1, 1, 1, 1, 1, 1],
        ],
        [2, 6],
        'int32',
      );
      const w = tf.tensor(normals(2 * 6 * 97, 3, 1), [2, 6, 97]);
      const vars = [...model.params.values()];
      const run = () => {
        const { value, grads } = tf.variableGrads(() => tf.sum(tf.mul(model.logits(ids, mask), w)), vars);
        return [value, ...vars.map((v) => grads[v.name])];
      };
      activationStats.layerNormBwd = 0;
      activationStats.geluGrad = 0;
      const fused = run();
      // Two layer norms a layer and the final one; one gelu a layer.
      expect([activationStats.layerNormBwd, activationStats.geluGrad]).toEqual([5, 2]);
      const plain = withoutWasmKernels(
        [LAYERNORM_FWD_KERNEL, LAYERNORM_BWD_KERNEL, GELU_INNER_KERNEL, GELU_GRAD_KERNEL],
        run,
      );
      expect(vars.length).toBeGreaterThan(10);
      expectSameBits(fused, plain);
      tf.dispose([ids, mask, w, ...fused, ...plain]);
    } finally {
      model.dispose();
    }
  });
});
