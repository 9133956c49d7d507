/**
 * Greedy decoding on WebGPU through the fused sampling kernel at temperature 0 (src/core/model/sample-op.ts
 * greedyTokensWebGpu, used by generate()'s chooseTokens and its replayed decode): per row the argmax (ties to the
 * lowest index, as the CPU backend's tf.argMax) and log softmax(logits) at it, in 4 dispatches where pickTokens' tfjs ops take more. On WebGPU
 * in Node (SwiftShader): the rows' values against a float64 loop, ties and the dispatch counts; generate() against
 * the CPU backend, recorded and not: tests/generate-device-sampling.test.ts.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import '@tensorflow/tfjs-backend-cpu';
import { skipWithoutAdapter, useNodeWebGpu, webGpuAdapter, webGpuErrors } from './helpers/webgpu-node';
import { greedyTokensWebGpu } from '../src/core/model/sample-op';
import { pickTokens } from '../src/core/model/sampling';
import { countDispatches } from '../src/core/kernels/webgpu-count';
import { seeded } from './helpers/f16-base';

const adapter = await webGpuAdapter();

describe('greedyTokensWebGpu', () => {
  it('off WebGPU: null (pickTokens then)', async () => {
    await tf.setBackend('cpu');
    const x = tf.zeros([2, 5]) as tf.Tensor2D;
    expect(greedyTokensWebGpu(x)).toBeNull();
    x.dispose();
  });

  describe('on Node WebGPU', () => {
    if (!adapter) return skipWithoutAdapter();
    beforeAll(useNodeWebGpu);

    it('the argmax (ties to the lowest index) and log softmax at it, as a float64 loop; 4 dispatches', async () => {
      const B = 5;
      const V = 1000;
      const v = seeded(B * V, 3, 4);
      v[2 * V + 10] = 9;
      v[2 * V + 500] = 9; // row 2: a tie, index 10 wins
      v[4 * V + 999] = 7; // row 4: the last index
      const x = tf.tensor2d(v, [B, V]);
      const c = await countDispatches(() => greedyTokensWebGpu(x));
      const g = c.result!;
      expect(c.dispatches).toBe(4);
      const tokens = Array.from(await g.tokens.data());
      const lp = await g.logprobs.data();
      const plain = await countDispatches(() => pickTokens(x, 0, 0, 1, null));
      expect(plain.dispatches).toBeGreaterThan(c.dispatches);
      // pickTokens' tf.argMax agrees off ties; at row 2's tie tfjs's WebGPU argMax (4.22) is not bound to the lowest
      // index (it gave 500 here), where the CPU backend's and the kernel's are.
      const plainTokens = Array.from(await plain.result!.tokens.data());
      for (const b of [0, 1, 3, 4]) expect(plainTokens[b], `row ${b}`).toBe(tokens[b]);
      for (let b = 0; b < B; b++) {
        const row = Array.from(v.subarray(b * V, (b + 1) * V));
        const max = Math.max(...row);
        const arg = row.indexOf(max);
        const lse = max + Math.log(row.reduce((s, z) => s + Math.exp(z - max), 0));
        expect(tokens[b], `row ${b}`).toBe(arg);
        expect(Math.abs(lp[b] - (row[arg] - lse)), `row ${b}`).toBeLessThan(1e-6);
      }
      expect(tokens[2]).toBe(10);
      expect(tokens[4]).toBe(999);
      tf.dispose([x, g.tokens, g.logprobs, plain.result!.tokens, plain.result!.logprobs]);
      expect(await webGpuErrors()).toEqual([]);
    });
  });
});
